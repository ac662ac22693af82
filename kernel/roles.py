"""A system's application role on PostgreSQL (deployment, not schema: run as the schema owner after the tables
exist). The role logs in, owns nothing (an owner could re-grant itself anything), cannot create objects, and gets
on each table only the privileges its system names: an append-only log gets SELECT and INSERT, so an UPDATE or
DELETE by the application fails with ``permission denied`` (psycopg ``InsufficientPrivilege``). Re-run after a
migration that adds tables: grants are per existing table."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, String, text

ALL = "SELECT, INSERT, UPDATE, DELETE"
APPEND_ONLY = "SELECT, INSERT"
READ_ONLY = "SELECT"


def _literal(conn: Connection, value: str) -> str:
    if "\x00" in value:
        raise ValueError("a role password cannot contain NUL")
    process = String().literal_processor(dialect=conn.dialect)  # type: ignore[no-untyped-call]  # (untyped upstream)
    assert process is not None
    return str(process(value))


def grant_app_role(conn: Connection, role: str, password: str | None, privileges: Mapping[str, str],
                   schema: str = "public") -> None:
    """Create (or update) a LOGIN role holding ``privileges`` (table -> privilege list) on the tables of ``schema``
    that exist. Idempotent. ``conn`` is a SQLAlchemy connection as a role allowed to create roles and grant on the
    schema's tables (the owner or a superuser); the caller commits (``engine.begin()``)."""
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
    for table in sorted(present & set(privileges)):
        name = f"{s}.{q(table)}"
        conn.execute(text(f"REVOKE ALL ON TABLE {name} FROM {r}"))  # start clean on re-runs
        conn.execute(text(f"GRANT {privileges[table]} ON TABLE {name} TO {r}"))
    # BIGSERIAL and identity keys: INSERT needs nextval() on the owned sequences (USAGE; never UPDATE/setval).
    conn.execute(text(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}"))


def drop_app_role(conn: Connection, role: str) -> None:
    """Remove the role and its grants in the current database (other databases keep theirs)."""
    q = conn.dialect.identifier_preparer.quote
    if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is None:
        return
    conn.execute(text(f"DROP OWNED BY {q(role)}"))
    conn.execute(text(f"DROP ROLE {q(role)}"))
