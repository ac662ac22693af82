"""Small database helpers shared by the services: dialect-portable insert-if-absent, engines, schema."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, create_engine, event, insert
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.schema import ScalarElementColumnDefault

from reference.copilot.models import Base

# A pooled connection idle this long is pinged before use; one used more recently is not (see ping_when_idle).
PING_AFTER_IDLE_S = 1.0


def ping_when_idle(engine: Engine, after_s: float = PING_AFTER_IDLE_S) -> Engine:
    """Pessimistic disconnect handling for connections that sat idle in the pool: at checkout, one that was
    checked in ``after_s`` or more ago is pinged first, and a dead one is replaced before the transaction sees it
    (SQLAlchemy retries the checkout). ``pool_pre_ping`` pings at *every* checkout: a round trip per transaction
    (5.6% of the confirm route's CPU, py-spy on the stack). What skipping it for a connection that answered within
    the last ``after_s`` costs: if the database or its link died since and is still down, nothing (the transaction
    fails, as the ping's replacement would have); if it died and came back within ``after_s``, the first statement
    on such a connection fails (a 503 the client retries with the same key), and SQLAlchemy then invalidates the
    pool's older connections, so one failure per pool, where ``pool_pre_ping`` would have had none."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is not None and time.monotonic() - since < after_s:
            return
        try:
            engine.dialect.do_ping(dbapi)
        except Exception as exc:  # a dead connection: the pool drops it and checks out another
            raise sa_exc.DisconnectionError(f"ping after {after_s:g} s idle failed: {exc}") from exc

    return engine


def insert_together(conn: Connection, rows: list[tuple[Table, dict[str, Any]]]) -> None:
    """Insert one row into each table, all or none, in one round trip on PostgreSQL: one statement whose
    data-modifying CTEs write every row but the last (they all see the same snapshot, and the foreign keys between
    them are checked at the statement's end), so a confirm pays one statement, not three. Elsewhere (SQLite has no
    data-modifying CTEs) one statement per row, in order; the caller's transaction makes them all or none too."""
    if conn.dialect.name != "postgresql" or len(rows) < 2:
        for table, row in rows:
            conn.execute(_plain_insert(table), row)
        return
    statement = _insert_together_pg(tuple((table, tuple(row)) for table, row in rows))
    conn.execute(statement, {f"r{i}_{key}": value for i, (_, row) in enumerate(rows) for key, value in row.items()})


@functools.cache
def _plain_insert(table: Table) -> Any:
    return insert(table)


@functools.cache
def _insert_together_pg(shape: tuple[tuple[Table, tuple[str, ...]], ...]) -> Any:
    """Built once per shape (tables and the columns given): the values are bound parameters ``r<i>_<column>``. A
    column not given takes its scalar Python default here (SQLAlchemy fills those for a plain INSERT, not inside a
    CTE) or its server default; one with a callable Python default must be given."""
    inserts = []
    for i, (table, keys) in enumerate(shape):
        values = {key: bindparam(f"r{i}_{key}", type_=table.c[key].type) for key in keys}
        for column in table.c:
            default = column.default
            if column.name in values or default is None:
                continue
            if not isinstance(default, ScalarElementColumnDefault):
                raise ValueError(f"insert_together: give {table.name}.{column.name} (its default is not a constant)")
            values[column.name] = bindparam(f"r{i}_{column.name}", value=default.arg, type_=column.type)
        inserts.append(insert(table).values(values))
    *first, last = inserts
    return last.add_cte(*(stmt.cte(f"r{i}") for i, stmt in enumerate(first)))


def insert_ignore(conn: Connection, model: type[Base], values: dict[str, Any], index: list[str]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when the row was new. Never aborts the transaction,
    unlike catching an IntegrityError (which poisons a PostgreSQL transaction)."""
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
