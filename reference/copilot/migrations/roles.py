"""The Copilot's application role (kernel.roles says what such a role is; deployment, not schema: run after
``upgrade`` as the schema owner).

The role may read and write every application table except the audit and security logs, which are append-only
(docs/systems/copilot.md, seed 000 §7.3): on ``task_audit_log`` and ``security_log`` it gets SELECT and INSERT
only, and it can only read ``alembic_version``.
"""

from __future__ import annotations

from sqlalchemy import Connection

from kernel.roles import ALL, APPEND_ONLY, READ_ONLY, drop_app_role, grant_app_role
from reference.copilot.models import Base, SecurityEvent, TaskAuditLog

APPEND_ONLY_TABLES = frozenset({TaskAuditLog.__tablename__, SecurityEvent.__tablename__})
READ_ONLY_TABLES = frozenset({"alembic_version"})


def privileges() -> dict[str, str]:
    tables = {t: (APPEND_ONLY if t in APPEND_ONLY_TABLES else ALL) for t in Base.metadata.tables}
    return {**tables, **dict.fromkeys(READ_ONLY_TABLES, READ_ONLY)}


def create_app_role(conn: Connection, role: str, password: str | None, schema: str = "public") -> None:
    """Create (or update) a LOGIN role with the application's privileges. Idempotent; the caller commits."""
    grant_app_role(conn, role, password, privileges(), schema)


__all__ = ["APPEND_ONLY_TABLES", "READ_ONLY_TABLES", "create_app_role", "drop_app_role", "privileges"]
