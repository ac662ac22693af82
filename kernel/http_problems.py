"""What every system's Flask API answers a refusal with (problem+json, kernel.problems) and the error handlers that
turn each kind of refusal into one: a ``Problem`` the handlers raise, a body the JSON reader refused, a bearer token
refused, an HTTP error of the framework (404, 405 with ``Allow``), and an unhandled error answered without its text
(the log has it, under the ``error_id`` the answer carries)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from kernel import jsonbody, problems
from kernel.tokens import TokenRefused


class Problem(Exception):
    """A refusal a handler raises: answered as problem+json with ``status``, ``code``, ``detail`` and ``extra``."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra


def problem(status: int, code: str, detail: str, extra: dict[str, Any] | None = None,
            headers: dict[str, str] | None = None) -> Response:
    resp = Response(json.dumps(problems.body(status, code, detail, extra), default=str), status=status,
                    mimetype=problems.MEDIA_TYPE)
    resp.headers.update(headers or {})
    if status == 401:
        resp.headers.setdefault("WWW-Authenticate", "Bearer")
    return resp


def install_error_handlers(app: Flask, log: logging.Logger) -> None:
    """Every refusal as problem+json with a stable code; an unhandled error without its text (``log`` has it)."""

    @app.errorhandler(Problem)
    def _problem(p: Problem) -> Response:
        return problem(p.status, p.code, p.detail, p.extra)

    @app.errorhandler(jsonbody.BodyRefused)
    def _body_refused(err: jsonbody.BodyRefused) -> Response:
        return problem(err.status, err.code, err.detail, err.extra)

    @app.errorhandler(TokenRefused)
    def _token_refused(err: TokenRefused) -> Response:
        return problem(401, err.code, err.message)

    @app.errorhandler(HTTPException)
    def _http(err: HTTPException) -> Response:
        status = err.code or 500
        allowed = getattr(err, "valid_methods", None)
        headers = {"Allow": ", ".join(sorted(allowed))} if status == 405 and allowed else {}
        code = (err.name or "error").upper().replace(" ", "_").replace("'", "")
        return problem(status, code, err.description or err.name or "", headers=headers)

    @app.errorhandler(Exception)
    def _internal(err: Exception) -> Response:
        error_id = uuid.uuid4().hex
        log.error("unhandled error %s", error_id, exc_info=err)
        return problem(500, "INTERNAL_ERROR", "an internal error occurred", {"error_id": error_id})
