"""SQLite as a transactional store for a reference that also runs in process (its tests, `sortie fuzz --in-process`).

pysqlite opens no transaction before a SAVEPOINT, so the RELEASE of a savepoint opened first in a transaction commits
what was written before it, and a later rollback cannot take it back: a request refused half-way would leave half of
its rows. SQLAlchemy's documented recipe ("Serializable isolation / Savepoints / Transactional DDL" for pysqlite):
the driver's own transaction handling off, and BEGIN emitted by the engine when a transaction starts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event


def real_transactions(engine: Engine) -> Engine:
    """``engine`` (a SQLite one) with transactions that hold savepoints; another dialect's engine is left as it is."""
    if engine.dialect.name != "sqlite":
        return engine

    def no_driver_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    def begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    event.listen(engine, "connect", no_driver_transactions)
    event.listen(engine, "begin", begin)
    return engine
