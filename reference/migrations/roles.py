"""The application's database role (deployment, not schema: run after ``upgrade`` as the schema owner).

The role may read and write every application table except the audit and security logs, which are append-only
(DESIGN.md §4, seed 000 §7.3): on ``task_audit_log`` and ``security_log`` it gets SELECT and INSERT only, so an
UPDATE or DELETE by the application fails with ``permission denied`` (psycopg ``InsufficientPrivilege``). It
never owns tables (an owner could re-grant itself anything), cannot create objects, and can only read
``alembic_version``. Re-run after every migration that adds tables: grants are per existing table.
"""

from __future__ import annotations

from sqlalchemy import Connection, String, text

from reference.models import Base, SecurityEvent, TaskAuditLog

APPEND_ONLY_TABLES = frozenset({TaskAuditLog.__tablename__, SecurityEvent.__tablename__})
READ_ONLY_TABLES = frozenset({"alembic_version"})


def _literal(conn: Connection, value: str) -> str:
    if "\x00" in value:
        raise ValueError("a role password cannot contain NUL")
    process = String().literal_processor(dialect=conn.dialect)
    assert process is not None
    return str(process(value))


def create_app_role(conn: Connection, role: str, password: str | None, schema: str = "public") -> None:
    """Create (or update) a LOGIN role with the application's privileges. Idempotent.

    ``conn`` is a SQLAlchemy connection as a role allowed to create roles and grant on the schema's
    tables (the owner or a superuser); the caller commits (``engine.begin()``)."""
    if conn.dialect.name != "postgresql":
        raise RuntimeError("database roles exist on PostgreSQL only")
    q = conn.dialect.identifier_preparer.quote
    r, s = q(role), q(schema)
    exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is not None
    attrs = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
    pw = f" PASSWORD {_literal(conn, password)}" if password is not None else ""
    conn.execute(text(f"{'ALTER' if exists else 'CREATE'} ROLE {r} {attrs}{pw}"))
    database = conn.execute(text("SELECT current_database()")).scalar_one()
    conn.execute(text(f"GRANT CONNECT ON DATABASE {q(database)} TO {r}"))
    conn.execute(text(f"GRANT USAGE ON SCHEMA {s} TO {r}"))
    conn.execute(text(f"REVOKE CREATE ON SCHEMA {s} FROM {r}"))

    present = set(conn.execute(
        text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}).scalars())
    for table in sorted(present & (set(Base.metadata.tables) | READ_ONLY_TABLES)):
        name = f"{s}.{q(table)}"
        conn.execute(text(f"REVOKE ALL ON TABLE {name} FROM {r}"))  # start clean on re-runs
        if table in APPEND_ONLY_TABLES:
            privileges = "SELECT, INSERT"
        elif table in READ_ONLY_TABLES:
            privileges = "SELECT"
        else:
            privileges = "SELECT, INSERT, UPDATE, DELETE"
        conn.execute(text(f"GRANT {privileges} ON TABLE {name} TO {r}"))
    # BIGSERIAL keys: INSERT needs nextval() on the owned sequences (USAGE; never UPDATE/setval).
    conn.execute(text(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}"))


def drop_app_role(conn: Connection, role: str) -> None:
    """Remove the role and its grants in the current database (other databases keep theirs)."""
    q = conn.dialect.identifier_preparer.quote
    if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is None:
        return
    conn.execute(text(f"DROP OWNED BY {q(role)}"))
    conn.execute(text(f"DROP ROLE {q(role)}"))
