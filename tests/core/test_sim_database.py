"""The simulation's database (scenarios.sim.db) keeps a transaction atomic whatever its first statement is: a
savepoint opened before any write (the job system's idempotent enqueue) must not commit what it released when the
transaction later rolls back. pysqlite begins a transaction only at the first INSERT/UPDATE/DELETE, and SQLite's
RELEASE of a savepoint opened outside a transaction commits; found by `sortie explore --system jobs` (a job row
without its log row after a database outage)."""

from __future__ import annotations

import pytest
import simpy
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select

from scenarios.sim.db import SimDatabase

META = MetaData()
ITEM = Table("item", META, Column("id", Integer, primary_key=True), Column("key", String, unique=True))
NOTE = Table("note", META, Column("id", Integer, primary_key=True), Column("item_id", Integer))


def _db() -> tuple[simpy.Environment, SimDatabase]:
    env = simpy.Environment()
    return env, SimDatabase(env, lambda: 0.001, metadata=META, ddl=())


def _counts(db: SimDatabase) -> tuple[int, int]:
    return db.transact_now(lambda c: (c.execute(select(func.count()).select_from(ITEM)).scalar_one(),
                                      c.execute(select(func.count()).select_from(NOTE)).scalar_one()))


class Boom(Exception):
    pass


def _savepoint_then_fail(conn) -> None:
    with conn.begin_nested():
        item_id = conn.execute(insert(ITEM).values(key="k").returning(ITEM.c.id)).scalar_one()
    conn.execute(insert(NOTE).values(item_id=item_id))
    raise Boom("the link went down after the savepoint")


@pytest.mark.parametrize("in_time", [True, False], ids=["simulated-transaction", "transact-now"])
def test_a_rolled_back_transaction_leaves_nothing_its_released_savepoint_wrote(in_time: bool) -> None:
    env, db = _db()
    if in_time:
        def proc():
            with pytest.raises(Boom):
                yield from db.transact(_savepoint_then_fail)
        env.process(proc())
        env.run()
    else:
        with pytest.raises(Boom):
            db.transact_now(_savepoint_then_fail)
    assert _counts(db) == (0, 0)
    db.close()


def test_a_committed_transaction_keeps_its_savepoint_and_what_followed() -> None:
    env, db = _db()

    def work(conn) -> None:
        with conn.begin_nested():
            item_id = conn.execute(insert(ITEM).values(key="k").returning(ITEM.c.id)).scalar_one()
        conn.execute(insert(NOTE).values(item_id=item_id))

    def proc():
        yield from db.transact(work)
    env.process(proc())
    env.run()
    assert _counts(db) == (1, 1)
    db.close()
