"""An HTTP API's OpenAPI document as the API itself uses it: loaded once from the YAML beside its app (the canonical
copy), served as JSON, and the source of the API's request validation: each operation's JSON body is checked
against the schema the document gives it (JSON Schema 2020-12, OpenAPI 3.1's dialect, by jsonschema-rs), so what
the document says and what the API refuses cannot drift apart."""

from __future__ import annotations

import copy
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema_rs
import yaml

from kernel.jsonbody import BodyRefused

MAX_ERRORS = 10  # a refusal lists at most this many of the body's errors


def load(package: str, resource: str) -> dict[str, Any]:
    """The OpenAPI 3 document ``resource`` of ``package``; ValueError when it is not one."""
    text = resources.files(package).joinpath(resource).read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3."):
        raise ValueError(f"{package}/{resource} is not an OpenAPI 3 document")
    return doc


def as_json(doc: dict[str, Any]) -> str:
    """The document as an API serves it at ``/openapi.json`` (stable key order, a final newline)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


class RequestBodies:
    """The request-body schema of each operation of ``doc`` (by ``operationId``), compiled once."""

    def __init__(self, doc: dict[str, Any]) -> None:
        components = doc.get("components", {})
        self._validators: dict[str, Any] = {}
        for item in doc.get("paths", {}).values():
            for op in item.values():
                schema = (((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {}) \
                    .get("schema") if isinstance(op, dict) else None
                if schema is not None:
                    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": components,
                            **schema}
                    self._validators[op["operationId"]] = jsonschema_rs.Draft202012Validator(root)

    def check(self, operation_id: str, body: Any) -> None:
        """Nothing when ``body`` is what the document asks of the operation; else BodyRefused 400
        INVALID_REQUEST with each error (its JSON path and what is wrong, at most MAX_ERRORS)."""
        found = zip(range(MAX_ERRORS), self._validators[operation_id].iter_errors(body), strict=False)
        errors = [f"{_where(e.instance_path)}: {e.message}"[:300] for _, e in found]
        if errors:
            raise BodyRefused("; ".join(errors)[:2000], 400, "INVALID_REQUEST", errors=errors)


def _where(path: Any) -> str:
    return "/" + "/".join(map(str, path)) if path else "the body"


class Document:
    """One API's document, loaded once from ``resource`` beside its ``package`` (the canonical copy): as the API
    serves it, as its request validation, and as published under ``docs_path`` (``python -m PACKAGE.openapi PATH``
    regenerates that copy; a test compares them)."""

    def __init__(self, package: str, resource: str, docs_path: str) -> None:
        self.package, self.resource, self.docs_path = package, resource, docs_path
        self.regenerate = f"python -m {package}.openapi {docs_path}"
        self._parsed: dict[str, Any] | None = None
        self._json: str | None = None
        self._bodies: RequestBodies | None = None

    def parsed(self) -> dict[str, Any]:
        if self._parsed is None:
            self._parsed = load(self.package, self.resource)
        return self._parsed

    def document(self) -> dict[str, Any]:
        """The document (a copy, so no caller can change what the API serves)."""
        return copy.deepcopy(self.parsed())

    def document_json(self) -> str:
        """As served at ``/openapi.json`` and published in docs/ (stable key order, a final newline)."""
        if self._json is None:
            self._json = as_json(self.parsed())
        return self._json

    def request_bodies(self) -> RequestBodies:
        if self._bodies is None:
            self._bodies = RequestBodies(self.parsed())
        return self._bodies

    def main(self, argv: list[str] | None = None) -> int:
        """``python -m PACKAGE.openapi PATH``: writes the published copy to PATH."""
        args = sys.argv[1:] if argv is None else argv
        if len(args) != 1:
            print(f"usage: {self.regenerate}", file=sys.stderr)
            return 2
        out = Path(args[0])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.document_json(), encoding="utf-8")
        print(f"wrote {out}")
        return 0
