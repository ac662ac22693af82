"""Seed 000 §5.5 (rules row 22): the Copilot's database access has its own timeouts. No history judges them (the
simulation runs its statements in virtual time, a native run's statements end long before), so this proves them on
the reference's own engine (reference.copilot.settings.database_engine): on a real PostgreSQL a statement longer than
the statement timeout is cancelled by the server (57014) and a lock waited for longer than the lock timeout is given
up (55P03); a server that accepts the connection and never answers is given up by libpq at the connect timeout.
Without a timeout each call would wait for ever: each is run in a thread the test waits on with a generous bound,
so a missing timeout fails the test (never hangs it). Nightly: it waits out the timeouts (about 11 s)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from reference.copilot.settings import DB_SESSION_TIMEOUTS_MS, Settings, database_engine

pytestmark = pytest.mark.nightly

STATEMENT_S = DB_SESSION_TIMEOUTS_MS["statement_timeout"] / 1000
LOCK_S = DB_SESSION_TIMEOUTS_MS["lock_timeout"] / 1000
BOUND_S = 60.0  # how long the test waits for a call to give up: far above every timeout
NEVER_S = 2 * BOUND_S  # what a call without its timeout would still be waiting for when the test gives up on it


def _gives_up(call: Callable[[], Any]) -> OperationalError:
    """The error ``call`` ends with; fails the test if it returns, or is still waiting after BOUND_S (a daemon
    thread: a call with no timeout is left waiting, not waited for)."""
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # the error is the test's to judge
            ended.append(exc)
        else:
            ended.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if not ended:
        pytest.fail(f"the call was still waiting after {BOUND_S:g}s: it has no timeout")
    error = ended[0]
    assert isinstance(error, OperationalError), f"the call ended with {error!r}, not the database's timeout"
    return error


@pytest.fixture(scope="module")
def engine(migrated_database: Callable[[str], Any]) -> Iterator[Engine]:
    engine = database_engine(Settings(database_url=migrated_database("copilot_db_timeouts").app_url))
    yield engine
    engine.dispose()


def test_the_sessions_carry_the_settings_timeouts(engine: Engine) -> None:
    with engine.connect() as conn:
        shown = {name: conn.execute(text(f"SHOW {name}")).scalar_one() for name in DB_SESSION_TIMEOUTS_MS}
    assert shown == {name: f"{ms // 1000}s" for name, ms in DB_SESSION_TIMEOUTS_MS.items()}


def test_a_statement_longer_than_the_statement_timeout_is_cancelled(engine: Engine) -> None:
    def slow() -> None:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_sleep(:s)"), {"s": NEVER_S})

    error = _gives_up(slow)
    assert getattr(error.orig, "sqlstate", None) == "57014", error  # query_canceled: the statement timeout


def test_a_lock_waited_for_longer_than_the_lock_timeout_is_given_up(engine: Engine) -> None:
    key = 54_022  # an advisory lock of this test's own
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})

        def waits() -> None:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})

        error = _gives_up(waits)
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    assert getattr(error.orig, "sqlstate", None) == "55P03", error  # lock_not_available: the lock timeout


def test_a_server_that_never_answers_is_given_up_at_the_connect_timeout() -> None:
    """A listener that takes the TCP connection and never speaks: only libpq's connect timeout ends the wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        engine = database_engine(Settings(database_url=f"postgresql+psycopg://nobody@127.0.0.1:{port}/none"))
        try:
            error = _gives_up(lambda: engine.connect().close())
        finally:
            engine.dispose()
    assert "timeout" in str(error.orig).lower(), error
