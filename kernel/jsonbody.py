"""The one strict reading of a JSON request body every system's HTTP API shares: what a database can store and every
parser reads alike. Refused (``BadJson``, its message fit for the caller): invalid UTF-8 or JSON, a key given twice in
one object (parsers disagree on which one wins), NaN and Infinity (not JSON; Python's parser takes them), a number
too large for a float, a string (or key) with NUL or a lone surrogate (neither PostgreSQL nor UTF-8 stores them),
and arrays or objects nested deeper than ``max_depth`` (a stored value is serialised again on a deeper stack than
its parse had: a body that parsed could fail there, a 500)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from werkzeug import Request

MAX_JSON_DEPTH = 64
log = logging.getLogger("sortie.jsonbody")

try:  # the server's own errors for a malformed body
    from gunicorn.http.errors import ParseException as _GunicornParseError

    _SERVER_BODY_ERRORS: tuple[type[Exception], ...] = (_GunicornParseError,)
except ImportError:  # pragma: no cover - served by another WSGI server
    _SERVER_BODY_ERRORS = ()
_UNREADABLE: tuple[type[Exception], ...] = (OSError, ValueError, *_SERVER_BODY_ERRORS)


class BodyRefused(ValueError):
    """A request body this API does not take: its HTTP status, a stable code, what the caller is told, and facts
    (``extra``) the answer may carry."""

    status, code = 400, "MALFORMED_JSON"

    def __init__(self, detail: str, status: int | None = None, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail, self.extra = detail, extra
        self.status, self.code = status or self.status, code or self.code


class BadJson(BodyRefused):
    """The body is not JSON this API takes (400 MALFORMED_JSON); ``str(err)`` says why."""


class UnstorableString(BadJson):
    """A string (or key) with NUL or a lone surrogate: valid JSON no database stores. A BadJson (400 MALFORMED_JSON)
    unless an API names it apart (the Copilot's UNSTORABLE_STRING: its document says JSON Schema cannot exclude it)."""


class DuplicateKey(ValueError):
    """A JSON object naming a key twice (parsers disagree on which value wins: refused, not interpreted)."""


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {literal[:40]}")
    return value


def _reject_constant(literal: str) -> Any:
    raise ValueError(f"{literal} is not valid JSON")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, or DuplicateKey."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def clean_text(value: str) -> bool:
    """Encodable as UTF-8 (no lone surrogate) and free of NUL: storable in any database."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def check_value(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Every string (keys too) clean text, arrays and objects nested at most ``max_depth`` levels; else BadJson."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not clean_text(item):
                raise UnstorableString("strings must be valid UTF-8 text without NUL characters")
        elif isinstance(item, list | dict):
            if depth > max_depth:
                raise BadJson(f"arrays and objects may nest at most {max_depth} levels")
            stack.extend((child, depth + 1) for child in (item if isinstance(item, list) else [*item, *item.values()]))


def parse(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` (UTF-8, a leading BOM allowed) as a JSON value, strictly (the module's rules); else BadJson."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
        value = json.loads(text, parse_float=_finite_float, parse_constant=_reject_constant,
                           object_pairs_hook=unique_keys)
    except DuplicateKey as dup:
        raise BadJson(f"the key {str(dup)[:100]!r} appears twice in one object") from None
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadJson("the body is not valid JSON") from None
    check_value(value, max_depth)
    return value


def json_media_type(mimetype: str) -> bool:
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def _read(request: Request, size: int) -> bytes:
    """At most ``size`` bytes of the body. One that stops arriving (the server's socket timeout: the Copilot's
    gunicorn worker sets one) is a 408 REQUEST_TIMEOUT; one whose framing is malformed (a chunk size such as ``zz`` or
    ``-2``: gunicorn raises its parser's error from the read, not an OSError) a 400 BAD_REQUEST."""
    try:
        return bytes(request.stream.read(size))
    except TimeoutError:
        raise BodyRefused("the body did not arrive in time", 408, "REQUEST_TIMEOUT") from None
    except _UNREADABLE as exc:
        log.info("unreadable request body: %s", type(exc).__name__)
        raise BodyRefused("the body's framing is malformed (Content-Length or chunked encoding)", 400,
                          "BAD_REQUEST") from None


def read_request(request: Request, limit: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request's body as JSON: 413 PAYLOAD_TOO_LARGE above ``limit`` bytes, 400 MALFORMED_JSON when it is empty,
    415 UNSUPPORTED_MEDIA_TYPE unless sent as JSON, then ``parse``'s refusals; each a BodyRefused."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyRefused(f"the body exceeds {limit} bytes", 413, "PAYLOAD_TOO_LARGE", limit=limit)
    data = _read(request, limit + 1)
    if len(data) > limit:
        raise BodyRefused(f"the body exceeds {limit} bytes", 413, "PAYLOAD_TOO_LARGE", limit=limit)
    if not data.strip():
        raise BadJson("the body is empty; a JSON document is required")
    if not json_media_type(request.mimetype):
        raise BodyRefused("the body must be sent as Content-Type: application/json", 415, "UNSUPPORTED_MEDIA_TYPE",
                          content_type=request.mimetype or None)
    return parse(data, max_depth)
