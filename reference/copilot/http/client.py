"""The API's commands (reference.copilot.api) as HTTP requests, and HTTP answers as replies: the inverse of the routes
in
reference.copilot.http.app, for clients that speak HTTP (the stack's users, Locust)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from reference.copilot import api


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # with the ids filled in
    name: str  # the route, for per-endpoint statistics
    body: Any = None
    key: str | None = None  # the Idempotency-Key header
    query: dict[str, str] | None = None
    request_id: str | None = None  # the X-Request-Id header: the caller's correlation id for this request


REQUEST_ID_HEADER = "X-Request-Id"


def http_request(cmd: api.Command) -> HttpRequest:
    """The request of ``cmd``, with the correlation id its caller carries."""
    req = _route(cmd)
    request_id = getattr(getattr(cmd, "caller", None), "request_id", None)
    return req if request_id is None else replace(req, request_id=request_id)


def _route(cmd: api.Command) -> HttpRequest:
    if isinstance(cmd, api.CreateDraft):
        return HttpRequest("POST", "/v1/drafts", "POST /v1/drafts", cmd.body, key=cmd.key)
    if isinstance(cmd, api.ReadDraft):
        return HttpRequest("GET", f"/v1/drafts/{cmd.draft_id}", "GET /v1/drafts/{id}")
    if isinstance(cmd, api.ReviseDraft):
        return HttpRequest("PATCH", f"/v1/drafts/{cmd.draft_id}", "PATCH /v1/drafts/{id}", cmd.body)
    if isinstance(cmd, api.Approve):
        return HttpRequest("POST", f"/v1/drafts/{cmd.draft_id}/approvals", "POST /v1/drafts/{id}/approvals", cmd.body)
    if isinstance(cmd, api.Confirm):
        return HttpRequest("POST", f"/v1/drafts/{cmd.draft_id}/confirm", "POST /v1/drafts/{id}/confirm", cmd.body,
                           key=cmd.key)
    if isinstance(cmd, api.ReadTask):
        return HttpRequest("GET", f"/v1/tasks/{cmd.task_id}", "GET /v1/tasks/{id}")
    if isinstance(cmd, api.ReadTaskEvents):
        return HttpRequest("GET", f"/v1/tasks/{cmd.task_id}/events", "GET /v1/tasks/{id}/events",
                           query={"after_version": cmd.after_version})
    if isinstance(cmd, api.Cancel):
        return HttpRequest("POST", f"/v1/tasks/{cmd.task_id}/cancel", "POST /v1/tasks/{id}/cancel", {})
    if isinstance(cmd, api.ResolveReview):
        return HttpRequest("POST", f"/v1/tasks/{cmd.task_id}/review", "POST /v1/tasks/{id}/review", cmd.body)
    if isinstance(cmd, api.ListDead):
        return HttpRequest("GET", "/v1/ops/dead", "GET /v1/ops/dead")
    if isinstance(cmd, api.Redrive):
        return HttpRequest("POST", f"/v1/ops/dead/{cmd.kind}/{cmd.item_id}/redrive",
                           "POST /v1/ops/dead/{kind}/{id}/redrive", cmd.body)
    if isinstance(cmd, api.IngestEvents):
        return HttpRequest("POST", "/v1/platform/events", "POST /v1/platform/events", cmd.body)
    raise TypeError(f"not an API command: {cmd!r}")


def headers_for(req: HttpRequest, token: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if req.key is not None:
        headers["Idempotency-Key"] = req.key
    if req.request_id is not None:
        headers[REQUEST_ID_HEADER] = req.request_id
    return headers


def reply_of(status: int, headers: Any, text: str) -> api.Reply:
    """An HTTP answer as a Reply: a JSON object body as is; anything else kept as ``{"text": ...}`` (so a leaked
    stack trace stays visible)."""
    body: dict[str, Any]
    try:
        value = json.loads(text) if text else {}
        body = value if isinstance(value, dict) else {"value": value}
    except ValueError:
        body = {"text": text[:4000]}
    return api.Reply(status, body, {"Content-Type": headers.get("Content-Type", "")})
