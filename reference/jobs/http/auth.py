"""The job API's roles and its bearer tokens (kernel.tokens: JWT HS256 with ``sub``, ``role`` and ``exp``)."""

from __future__ import annotations

from datetime import datetime

from kernel import tokens

ENQUEUER, READER, OPERATOR = "enqueuer", "reader", "operator"
ROLES = (ENQUEUER, READER, OPERATOR)  # enqueues and reads its own jobs; reads any job; reads, cancels, re-drives


def issue_token(secret: str, user_id: str, role: str = ENQUEUER, ttl_s: float = 3600,
                now: float | datetime | None = None) -> str:
    """A signed token for ``user_id`` in ``role``; ``now`` (epoch seconds or an aware datetime) defaults to now."""
    return tokens.issue_token(secret, user_id, role, ROLES, ttl_s, now)
