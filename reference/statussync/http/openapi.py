"""The status API's OpenAPI document: ``openapi.yaml`` beside this module is the canonical copy; the app serves it as
JSON at ``GET /openapi.json`` and validates request bodies from it, and ``docs/openapi/statussync-api.json`` is
generated from it (kernel.openapi.Document):

    python -m reference.statussync.http.openapi docs/openapi/statussync-api.json
"""

from __future__ import annotations

from kernel import openapi

DOC = openapi.Document("reference.statussync.http", "openapi.yaml", "docs/openapi/statussync-api.json")
DOCS_PATH, REGENERATE = DOC.docs_path, DOC.regenerate
document, document_json, request_bodies = DOC.document, DOC.document_json, DOC.request_bodies

if __name__ == "__main__":
    raise SystemExit(DOC.main())
