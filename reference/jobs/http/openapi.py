"""The job API's OpenAPI document: ``openapi.yaml`` beside this module is the canonical copy; the app serves it as
JSON at ``GET /openapi.json`` and validates request bodies from it, and ``docs/openapi/jobs-api.json`` is generated
from it:

    python -m reference.jobs.http.openapi docs/openapi/jobs-api.json
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

from kernel import openapi

RESOURCE = "openapi.yaml"
DOCS_PATH = "docs/openapi/jobs-api.json"
REGENERATE = f"python -m reference.jobs.http.openapi {DOCS_PATH}"


@functools.cache
def _parsed() -> dict[str, Any]:
    return openapi.load(__package__ or "reference.jobs.http", RESOURCE)


def document() -> dict[str, Any]:
    """The document (parsed once; a copy, so no caller can change what the app serves)."""
    return copy.deepcopy(_parsed())


@functools.cache
def document_json() -> str:
    return openapi.as_json(_parsed())


@functools.cache
def request_bodies() -> openapi.RequestBodies:
    return openapi.RequestBodies(_parsed())


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
