"""On a real PostgreSQL: the native half of the db-error fault (chaos.faults.db_error, the trigger of
NativeNemesis.install_fault_triggers). While a table's fault is on, an insert into it fails inside the application's
transaction with the error the reference treats as the database being unavailable, and the whole transaction rolls
back; when the fault is off, the same transaction commits. CI's native scenarios no longer include T2 (nightly runs
it), so this is where CI sees the trigger on the real server."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from chaos.native import NativeNemesis
from reference.copilot.api import db_unavailable
from reference.copilot.models import DeadLetter, ProcessedEvent
from systems.copilot.faults import FAULT_TABLES, FAULTS

MakeDb = Callable[[str], Any]
Engines = Callable[[str], Engine]


def _write_both(session: Session, event_id: uuid.UUID) -> None:
    """One transaction writing a table with the trigger (processed_event) and one without (dead_letter)."""
    session.add(DeadLetter(consumer="dispatcher", event_id=event_id, event_type="task_created", payload={},
                           error_code="POISON", error_message="bad", attempts=1, history=[],
                           created_at=datetime.now(UTC)))
    session.flush()
    session.add(ProcessedEvent(consumer="dispatcher", event_id=event_id))


def _count(engine: Engine, model: Any, event_id: uuid.UUID) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(model).where(model.event_id == event_id)).scalar_one())


def test_db_error_refuses_inserts_and_rolls_the_transaction_back(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("sortie_fault_trigger")
    admin, app = engines(db.owner_url), engines(db.app_url)
    nemesis = NativeNemesis(SimpleNamespace(endpoints=None), admin, 1.0, FAULTS)  # installs the triggers
    refused, committed = uuid.uuid4(), uuid.uuid4()

    nemesis.apply("db-error", {"tables": ["processed_event"]}, on=True)
    with pytest.raises(sa_exc.DBAPIError) as raised, sessionmaker(app).begin() as session:
        _write_both(session, refused)
    assert db_unavailable(raised.value), raised.value  # the reference retries it as an outage, not a bad request
    assert "injected fault: insert into processed_event refused" in str(raised.value.orig)
    # nothing half-written: neither the row before the refused insert nor the refused one
    assert (_count(admin, DeadLetter, refused), _count(admin, ProcessedEvent, refused)) == (0, 0)

    nemesis.apply("db-error", {"tables": ["processed_event"]}, on=False)
    with sessionmaker(app).begin() as session:
        _write_both(session, committed)
    assert (_count(admin, DeadLetter, committed), _count(admin, ProcessedEvent, committed)) == (1, 1)


def test_every_native_fault_table_has_its_trigger(migrated_database: MakeDb, engines: Engines) -> None:
    admin = engines(migrated_database("sortie_fault_trigger").owner_url)
    NativeNemesis(SimpleNamespace(endpoints=None), admin, 1.0, FAULTS)
    with admin.connect() as conn:
        triggered = set(conn.execute(text(
            "SELECT event_object_table FROM information_schema.triggers WHERE trigger_name LIKE :name"),
            {"name": "sortie_fault_%"}).scalars())
    assert triggered == set(FAULT_TABLES)
