"""reference.copilot.db.ping_when_idle: a pooled connection is pinged only after sitting idle, and a dead one is
replaced
before a transaction gets it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import QueuePool

from reference.copilot import db


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(db.time, "monotonic", lambda: now[0])
    return now


def _engine(tmp_path: Any) -> tuple[Any, list[Any], list[bool]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'p.db'}", poolclass=QueuePool, pool_size=1, max_overflow=0)
    pinged: list[Any] = []
    dead: list[bool] = [False]

    def do_ping(dbapi: Any) -> bool:
        pinged.append(dbapi)
        if dead[0]:
            dead[0] = False  # only the stale connection is dead: its replacement answers
            raise OSError("server closed the connection unexpectedly")
        return True

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign]
    return db.ping_when_idle(engine, after_s=1.0), pinged, dead


def _use(engine: Any) -> Any:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        return conn.connection.dbapi_connection


def test_a_connection_used_within_the_idle_bound_is_not_pinged_one_idle_longer_is(tmp_path: Any,
                                                                                    clock: list[float]) -> None:
    engine, pinged, _ = _engine(tmp_path)
    first = _use(engine)
    assert pinged == [first]  # a new connection has no idle time: pinged once
    clock[0] += 0.5
    assert _use(engine) is first and len(pinged) == 1  # busy pool: no round trip
    clock[0] += 1.0
    assert _use(engine) is first and len(pinged) == 2  # idle for 1 s: pinged


def test_a_connection_that_died_while_idle_is_replaced_before_the_transaction_sees_it(tmp_path: Any,
                                                                                      clock: list[float]) -> None:
    engine, pinged, dead = _engine(tmp_path)
    first = _use(engine)
    clock[0] += 5.0
    dead[0] = True
    second = _use(engine)  # no error reaches the caller
    assert second is not first and len(pinged) == 3  # the stale one's failed ping, then the new one's
