"""The platform simulator's OpenAPI document: ``simulator/openapi.yaml`` (the canonical text, shipped in the
package) as the JSON that ``GET /openapi.json`` serves and ``docs/openapi/platform-simulator.json`` holds.

``python -m simulator.openapi docs/openapi/platform-simulator.json`` rewrites the docs copy (with no path it
prints the document); tests/simulator/test_openapi.py fails while the docs copy differs.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DOCS_PATH = "docs/openapi/platform-simulator.json"
REGENERATE = f"python -m simulator.openapi {DOCS_PATH}"


@functools.cache
def document_json() -> str:
    """The document as pretty-printed JSON (keys in the YAML's order), computed once per process."""
    text = resources.files("simulator").joinpath("openapi.yaml").read_text(encoding="utf-8")
    return json.dumps(yaml.safe_load(text), indent=2, ensure_ascii=False) + "\n"


def document() -> dict[str, Any]:
    """The document as a fresh dict (callers may change it)."""
    return json.loads(document_json())


def write(path: str | Path) -> Path:
    """Write the document to ``path`` (its directory is created); return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document_json(), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.openapi", description=__doc__)
    parser.add_argument("path", nargs="?", help=f"where to write the JSON document (e.g. {DOCS_PATH}); "
                                                "default: print it")
    args = parser.parse_args(argv)
    if args.path is None:
        sys.stdout.write(document_json())
    else:
        print(f"wrote {write(args.path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
