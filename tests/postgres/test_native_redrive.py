"""On a real PostgreSQL: the native half of redrive-dead-letters (systems/copilot/faults.py) re-drives every dead letter
through the reference's own service and records each outcome in the history, stamped by the nemesis's clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from chaos.native import NativeNemesis
from harness.history import FAIL, INVOKE, History
from reference.copilot.models import DeadLetter
from systems.copilot.faults import FAULTS

MakeDb = Callable[[str], Any]
Engines = Callable[[str], Engine]


def test_redrive_dead_letters_records_each_outcome(migrated_database: MakeDb, engines: Engines) -> None:
    admin = engines(migrated_database("sortie_redrive").owner_url)
    with sessionmaker(admin).begin() as session:  # a dead letter whose event is no longer in the outbox
        session.add(DeadLetter(consumer="dispatcher", event_id=uuid.uuid4(), event_type="task_created", payload={},
                               error_code="POISON", error_message="bad", attempts=6, history=[],
                               created_at=datetime.now(UTC)))
    nemesis = NativeNemesis(SimpleNamespace(endpoints=None), admin, 1.0, FAULTS)
    history = History()
    nemesis.attach(history, lambda: 7.0)
    nemesis.apply("redrive-dead-letters", {}, on=True)
    nemesis.apply("redrive-dead-letters", {}, on=False)  # a one-shot: the end of its window does nothing
    assert [(op.time, op.process, op.type, op.f, op.value.get("code")) for op in history.ops] == [
        (7.0, "operator", INVOKE, "redrive", None), (7.0, "operator", FAIL, "redrive", "EVENT_NOT_IN_OUTBOX")]
