"""Execution tokens (§3.3): the status service signs, for each step attempt (and for the coordinator's task-level
events), the fields a producer may report with and the event types it may send. HMAC-SHA256 over canonical JSON; the
service compares every claim with the request and with the step definition in the database (the token is the
authority, the request's fields must match it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

CLAIMS = ("taskId", "taskAttempt", "stepId", "stepAttempt", "operationCode", "producerId")


class BadToken(Exception):
    """The token is not one the service signed."""


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def issue(secret: str, claims: dict[str, Any]) -> str:
    body = base64.urlsafe_b64encode(canonical(claims)).decode()
    mac = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    return f"{body}.{mac}"


def verify(secret: str, token: str) -> dict[str, Any]:
    """The token's claims; BadToken for anything the service did not sign (garbage included)."""
    body, _, mac = token.rpartition(".")
    try:
        signed = hmac.compare_digest(mac, hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest())
        claims = json.loads(base64.urlsafe_b64decode(body.encode())) if body and signed else None
    except (ValueError, UnicodeError, TypeError):  # not text, not base64, not JSON
        raise BadToken("malformed") from None
    if not isinstance(claims, dict):
        raise BadToken("signature" if claims is None else "claims")
    return claims
