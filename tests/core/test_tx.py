"""kernel.effects.Tx in both shells: the simulation builds it on the transaction's connection (its ORM session opened on
first use), the stack's runtime on a session. Either way, ORM objects still pending are written with the transaction,
and an after-rollback callback fires once right after its own transaction rolls back, never after one that committed.

The simulation once reused one ORM session per connection across transactions: a listener registered in a transaction
that committed stayed on it and fired when a later transaction on that connection rolled back. The injected
audit-outside-tx bug then wrote committed transactions' audit rows a second time, and C1 "caught" the bug through
that leak, not through the rolled-back confirm it is about (found 2026-12-04)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.orm import sessionmaker

from kernel.effects import Tx
from reference.copilot.db import sqlite_engine
from reference.copilot.models import SecurityEvent
from reference.copilot.runtime import Runtime
from systems.copilot.sim import CopilotWorld

_EVENTS = SecurityEvent.__table__
NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Boom(Exception):
    pass


def _event(actor: str) -> dict[str, Any]:
    return {"at": NOW, "actor": actor, "action": "CONFIRM", "code": "TEST", "draft_id": None, "detail": {}}


@pytest.fixture(params=["simulation", "runtime"])
def transact(request: pytest.FixtureRequest) -> Callable[[Callable[[Tx], Any]], Any]:
    if request.param == "simulation":
        world = CopilotWorld(1)
        request.addfinalizer(world.close)
        return world.transact
    return Runtime(sessionmaker(sqlite_engine(), expire_on_commit=False)).transact


def _actors(transact: Callable[[Callable[[Tx], Any]], Any]) -> list[str]:
    return transact(lambda tx: sorted(tx.conn.execute(select(_EVENTS.c.actor)).scalars()))


def test_pending_orm_objects_are_written_with_the_transaction(transact: Callable[..., Any]) -> None:
    def work(tx: Tx) -> None:
        tx.session.add(SecurityEvent(**_event("orm")))
        tx.conn.execute(insert(_EVENTS), _event("core"))

    transact(work)
    assert _actors(transact) == ["core", "orm"]


def test_flushed_lets_a_core_statement_see_pending_orm_objects(transact: Callable[..., Any]) -> None:
    def work(tx: Tx) -> int:
        tx.session.add(SecurityEvent(**_event("orm")))
        return tx.flushed().execute(select(func.count()).select_from(_EVENTS)).scalar_one()

    assert transact(work) == 1


def test_a_rolled_back_transaction_writes_nothing_of_its_own(transact: Callable[..., Any]) -> None:
    def work(tx: Tx) -> None:
        tx.session.add(SecurityEvent(**_event("orm")))
        tx.conn.execute(insert(_EVENTS), _event("core"))
        raise Boom

    with pytest.raises(Boom):
        transact(work)
    assert _actors(transact) == []


def test_after_rollback_fires_once_after_its_own_transaction_rolled_back(transact: Callable[..., Any]) -> None:
    seen: list[list[str]] = []

    def work(tx: Tx) -> None:
        tx.conn.execute(insert(_EVENTS), _event("rolled-back"))
        engine = tx.conn.engine

        def after() -> None:  # runs after the rollback: a fresh transaction no longer sees the row
            with engine.begin() as own:
                seen.append(sorted(own.execute(select(_EVENTS.c.actor)).scalars()))
                own.execute(insert(_EVENTS), _event("survivor"))

        tx.after_rollback(after)
        raise Boom

    with pytest.raises(Boom):
        transact(work)
    assert seen == [[]]
    assert _actors(transact) == ["survivor"]
    with pytest.raises(Boom):  # a later rollback does not fire it again
        transact(lambda tx: (_ for _ in ()).throw(Boom()))
    assert seen == [[]]


def test_after_rollback_never_fires_for_a_transaction_that_committed(transact: Callable[..., Any]) -> None:
    fired: list[str] = []
    transact(lambda tx: tx.after_rollback(lambda: fired.append("committed one")))
    for _ in range(3):  # later transactions on the same connection roll back
        with pytest.raises(Boom):
            transact(lambda tx: (_ for _ in ()).throw(Boom()))
    assert fired == []
