"""The status API's callers (kernel.tokens: JWT HS256 with ``sub``, ``role`` and ``exp``): a ``user`` (subject
``tenant/user``, from the product's login session) reads their tasks and asks for Centrifugo tokens; the task
``coordinator`` creates tasks; an ``admin`` (subject ``tenant/operator``) corrects a task's result (§4.2). Producers
report with the execution token the service signed (reference.statussync.tokens), not with these."""

from __future__ import annotations

from datetime import datetime

from kernel import tokens

USER, COORDINATOR_ROLE, ADMIN_ROLE = "user", "coordinator", "admin"
ROLES = (USER, COORDINATOR_ROLE, ADMIN_ROLE)


def issue_token(secret: str, subject: str, role: str = USER, ttl_s: float = 3600,
                now: float | datetime | None = None) -> str:
    """A signed token for ``subject`` (``tenant/user`` for a user) in ``role``."""
    return tokens.issue_token(secret, subject, role, ROLES, ttl_s, now)
