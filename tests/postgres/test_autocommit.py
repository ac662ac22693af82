"""Transact(..., autocommit=True) on a real PostgreSQL (kernel.runtime.autocommit_sessions): each
statement is its
own transaction, so psycopg sends no BEGIN and no COMMIT; an ordinary Transact is still one transaction; and a second
write in an autocommit transaction is refused before it reaches the database (the first is already committed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, exc, text
from sqlalchemy.orm import sessionmaker

from kernel.runtime import SecondWriteInAutocommit, autocommit_sessions
from reference.copilot.runtime import Runtime

# now() is the transaction's start; clock_timestamp() moves: two statements of one transaction see the same now().
_NOW = text("SELECT now() AS now, pg_sleep(0.01)")


@pytest.fixture
def runtime(migrated_database: Callable[[str], Any], engines: Callable[[str], Engine]) -> Runtime:
    engine = engines(migrated_database("sortie_autocommit").owner_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS ac_note (id serial PRIMARY KEY, note text)")
        conn.exec_driver_sql("TRUNCATE ac_note")
    return Runtime(sessionmaker(engine, expire_on_commit=False), autocommit_sessions=autocommit_sessions(engine))


def _two_nows(tx: Any) -> tuple[Any, Any]:
    conn = tx.conn
    return conn.execute(_NOW).one().now, conn.execute(_NOW).one().now




def test_each_statement_of_an_autocommit_transaction_is_its_own_and_an_ordinary_one_is_one(runtime: Runtime) -> None:
    first, second = runtime.transact(_two_nows, "reads", autocommit=True)
    assert first < second  # two transactions
    first, second = runtime.transact(_two_nows, "reads")
    assert first == second  # one transaction


def test_no_begin_and_no_commit_reach_the_server_in_autocommit(runtime: Runtime) -> None:
    """psycopg's own view: the connection is idle (not in a transaction) after each statement."""
    def states(tx: Any) -> list[str]:
        conn = tx.conn
        dbapi = conn.connection.dbapi_connection
        out = []
        for _ in range(2):
            conn.execute(text("SELECT 1"))
            out.append(dbapi.info.transaction_status.name)
        return out

    assert runtime.transact(states, "reads", autocommit=True) == ["IDLE", "IDLE"]
    assert runtime.transact(states, "reads") == ["INTRANS", "INTRANS"]


def test_one_write_commits_and_a_second_write_is_refused_before_it_runs(runtime: Runtime) -> None:
    def one(tx: Any) -> None:
        tx.conn.execute(text("INSERT INTO ac_note (note) VALUES ('one')"))

    def two(tx: Any) -> None:
        conn = tx.conn
        conn.execute(text("INSERT INTO ac_note (note) VALUES ('first')"))
        conn.execute(text("INSERT INTO ac_note (note) VALUES ('second')"))

    runtime.transact(one, "one", autocommit=True)
    with pytest.raises(SecondWriteInAutocommit, match="'two' wrote a second statement"):
        runtime.transact(two, "two", autocommit=True)
    notes = runtime.transact(lambda tx: [r.note for r in tx.conn.execute(
        text("SELECT note FROM ac_note ORDER BY id"))], "read")
    # 'first' was committed on its own (why a second write is refused); 'second' never reached the database.
    assert notes == ["one", "first"]
    # In an ordinary transaction the same function writes both.
    runtime.transact(two, "two")
    assert runtime.transact(lambda tx: tx.conn.execute(
        text("SELECT count(*) FROM ac_note")).scalar_one(), "count") == 4


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transaction"])
def test_after_rollback_callbacks_run_outside_the_failed_transaction_in_either_mode(runtime: Runtime,
                                                                                     autocommit: bool) -> None:
    """The shell runs them once the transaction is over (kernel.effects.Tx.rolled_back). As a Session after_rollback
    event they ran inside it: in an autocommit transaction the callback's own write counted as the failed
    transaction's second write and was refused (SecondWriteInAutocommit), so the injected audit-outside-tx bug was
    never emulated for the API's confirm on the stack (C1 did not catch it there)."""
    fired: list[str] = []

    def fails(tx: Any) -> None:
        engine = tx.conn.engine

        def after() -> None:
            with engine.begin() as own:
                own.execute(text("INSERT INTO ac_note (note) VALUES ('written after the rollback')"))
            fired.append("after")

        tx.after_rollback(after)
        tx.conn.execute(text("INSERT INTO ac_note (id, note) VALUES (1, 'a'), (1, 'duplicate key')"))

    with pytest.raises(exc.IntegrityError):
        runtime.transact(fails, "fails", autocommit=autocommit)
    assert fired == ["after"]
    assert runtime.transact(lambda tx: [r.note for r in tx.conn.execute(text("SELECT note FROM ac_note"))],
                            "read") == ["written after the rollback"]
    runtime.transact(lambda tx: tx.after_rollback(lambda: fired.append("committed")), "commits", autocommit=autocommit)
    assert fired == ["after"]


def test_the_ab_benchmark_runs_both_modes_and_reports_cpu_and_wall(pg: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """systems.copilot.autocommit_ab (the figures in docs/results.md) runs end to end on its own cluster."""
    from systems.copilot.autocommit_ab import main

    assert main(["--requests", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["confirm", "CPU"], ["confirm", "wall"], ["read", "CPU"],
                                                     ["read", "wall"]]
    assert all("transaction" in line and "autocommit/transaction" in line for line in lines)
