"""The Copilot API's OpenAPI document: ``openapi.yaml`` beside this module is the canonical copy; the app serves it
as JSON at ``GET /openapi.json`` and ``docs/openapi/copilot-api.json`` is generated from it:

    python -m reference.copilot.http.openapi docs/openapi/copilot-api.json
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

from kernel import openapi

RESOURCE = "openapi.yaml"
DOCS_PATH = "docs/openapi/copilot-api.json"
REGENERATE = f"python -m reference.copilot.http.openapi {DOCS_PATH}"


@functools.cache
def _parsed() -> dict[str, Any]:
    return openapi.load(__package__ or "reference.copilot.http", RESOURCE)


def document() -> dict[str, Any]:
    """The document (parsed once; a copy, so no caller can change what the app serves)."""
    return copy.deepcopy(_parsed())


@functools.cache
def document_json() -> str:
    """The document as served at ``/openapi.json`` and published in docs/ (stable key order, a final newline)."""
    return openapi.as_json(_parsed())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: {REGENERATE}", file=sys.stderr)
        return 2
    out = Path(args[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document_json(), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
