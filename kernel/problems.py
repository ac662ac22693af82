"""The body of an HTTP API's refusal, the one shape every system answers with: RFC 9457 problem details with a stable
``code`` (what a client branches on), its title the code in words, and facts of the refusal (``extra``) that never
replace a standard member."""

from __future__ import annotations

from typing import Any

MEDIA_TYPE = "application/problem+json"
RESERVED = frozenset({"type", "title", "status", "code", "detail", "instance"})


def body(status: int, code: str, detail: str, extra: dict[str, Any] | None = None,
         type_: str = "about:blank") -> dict[str, Any]:
    """A problem's members; ``type_`` is the system's URI for the code (RFC 9457's default: about:blank)."""
    out: dict[str, Any] = {"type": type_, "title": code.replace("_", " ").capitalize(), "status": status,
                           "code": code, "detail": detail}
    out.update({k: v for k, v in (extra or {}).items() if k not in RESERVED})
    return out
