"""The simulation's database (scenarios.sim.db): PostgreSQL READ COMMITTED's conflict semantics between simulated
transactions (the module docstring's claims, each tested directly below: visibility, a blocked conditional update
re-evaluated, a duplicate key after the winner's commit, a killed transaction rolled back).

It also keeps a transaction atomic whatever its first statement is: a
savepoint opened before any write (the job system's idempotent enqueue) must not commit what it released when the
transaction later rolls back. pysqlite begins a transaction only at the first INSERT/UPDATE/DELETE, and SQLite's
RELEASE of a savepoint opened outside a transaction commits; found by `sortie explore --system jobs` (a job row
without its log row after a database outage)."""

from __future__ import annotations

import pytest
import simpy
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select, update
from sqlalchemy.exc import IntegrityError

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


# ---------------------------------------------------------------------------------------------------------------------
# READ COMMITTED as the module docstring claims it: two simulated transactions, statement by statement, in virtual time

VERSIONED = Table("versioned", META, Column("id", Integer, primary_key=True), Column("version", Integer),
                  Column("owner", String))


def _seeded() -> tuple[simpy.Environment, SimDatabase]:
    env, db = _db()
    db.transact_now(lambda c: c.execute(insert(VERSIONED).values(id=1, version=0, owner="nobody")))
    return env, db


def _row(conn) -> tuple[int, str]:
    return tuple(conn.execute(select(VERSIONED.c.version, VERSIONED.c.owner).where(VERSIONED.c.id == 1)).one())


def _claim(conn, owner: str, seen_version: int) -> int:
    return conn.execute(update(VERSIONED).where(VERSIONED.c.id == 1, VERSIONED.c.version == seen_version)
                        .values(version=seen_version + 1, owner=owner)).rowcount


def test_a_reader_sees_what_was_committed_before_each_of_its_statements_never_uncommitted_writes() -> None:
    env, db = _seeded()
    seen: list[tuple[int, str]] = []

    def writer(conn) -> None:
        _claim(conn, "writer", 0)
        for _ in range(3):  # still open: three more statements, three more switches to simpy
            _row(conn)

    def reader(conn) -> None:
        for _ in range(6):
            seen.append(_row(conn))

    def run(fn, delay):
        yield env.timeout(delay)
        yield from db.transact(fn)

    env.process(run(writer, 0.0))
    env.process(run(reader, 0.0005))
    env.run()
    assert seen[0] == (0, "nobody")  # the writer's update was made, not committed
    assert seen[-1] == (1, "writer")  # committed before the reader's last statements
    assert seen == sorted(seen)  # never back, never anything in between
    db.close()


def test_a_blocked_conditional_update_waits_then_re_evaluates_its_where_against_the_committed_row() -> None:
    env, db = _seeded()
    claimed: dict[str, int] = {}

    def racer(owner: str):
        def work(conn) -> None:
            version, _ = _row(conn)  # both read version 0 before either writes
            claimed[owner] = _claim(conn, owner, version)
            _row(conn)  # the first writer holds the lock across this statement too
        return work

    env.process(db.transact(racer("first")))
    env.process(db.transact(racer("second")))
    env.run()
    assert claimed == {"first": 1, "second": 0}  # the second's WHERE version = 0 no longer matches
    assert db.stats["lock_waits"] == 1
    assert db.transact_now(_row) == (1, "first")
    db.close()


def test_a_duplicate_key_fails_once_the_winner_commits_and_the_loser_leaves_nothing() -> None:
    env, db = _db()
    outcome: dict[str, str] = {}

    def insert_key(conn) -> None:
        conn.execute(insert(ITEM).values(key="same"))
        conn.execute(insert(NOTE).values(item_id=0))  # a second statement: the other one waits meanwhile

    def run(name: str):
        try:
            yield from db.transact(insert_key)
            outcome[name] = "committed"
        except IntegrityError:
            outcome[name] = "duplicate"

    env.process(run("winner"))
    env.process(run("loser"))
    env.run()
    assert outcome == {"winner": "committed", "loser": "duplicate"}
    assert _counts(db) == (1, 1)
    db.close()


def test_a_killed_transaction_rolls_back_and_hands_the_lock_on() -> None:
    env, db = _seeded()

    def slow_writer(conn) -> None:
        _claim(conn, "killed", 0)
        for _ in range(10):
            _row(conn)

    victim = env.process(db.transact(slow_writer))

    def killer():
        yield env.timeout(0.0035)  # mid-transaction: it holds the write lock
        victim.interrupt("kill -9")

    def next_writer():
        yield env.timeout(0.002)
        yield from db.transact(lambda conn: _claim(conn, "next", 0))  # waits for the lock, then finds version 0

    def guarded():
        with pytest.raises(simpy.Interrupt):
            yield victim

    env.process(killer())
    env.process(guarded())
    env.process(next_writer())
    env.run()
    assert db.transact_now(_row) == (1, "next")
    db.close()

