"""Small database helpers shared by the services: dialect-portable insert-if-absent, engines, schema."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from reference.models import Base


def autoflushed(session: Session) -> Connection:
    """The session's connection for a Core statement, after writing the ORM objects this transaction holds pending
    (what the ORM's own execute does first), so the statement sees and follows what the transaction did."""
    if session.new or session.dirty:
        session.flush()
    return session.connection()


def insert_ignore(session: Session, model: type[Base], values: dict[str, Any], index: list[str]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when the row was new. Never aborts the transaction,
    unlike catching an IntegrityError (which poisons a PostgreSQL transaction)."""
    conn = autoflushed(session)
    stmt = _insert_ignore(model.__table__, conn.dialect.name, tuple(index))
    return conn.execute(stmt, values).rowcount == 1


@functools.cache
def _insert_ignore(table: Any, dialect: str, index: tuple[str, ...]) -> Any:
    """Built once per table, dialect and conflict target (a consumer runs one per delivery); the values are bound
    parameters."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    # preserve_rowcount: SQLAlchemy memoizes rowcount only for UPDATE/DELETE; psycopg 3 reports -1 for
    # an INSERT once its cursor is closed, which made every insert look like a duplicate on PostgreSQL.
    return insert(table).on_conflict_do_nothing(index_elements=list(index)).execution_options(preserve_rowcount=True)


def sqlite_engine(path: str = ":memory:") -> Engine:
    """The simulation's database: one connection, foreign keys on, schema created from the models."""
    from sqlalchemy.pool import StaticPool

    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False},
        poolclass=StaticPool,
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=MEMORY")
        cur.execute("PRAGMA synchronous=OFF")
        cur.close()

    Base.metadata.create_all(engine)
    return engine


def as_utc(t: datetime) -> datetime:
    """A timestamp column's value, timezone-aware: SQLite hands ``timezone=True`` columns back naive, and they were
    written in UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
