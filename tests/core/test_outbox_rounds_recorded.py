"""The real shell records an outbox publisher's round as the simulation does (I36 and I37 read them): each of its
transactions (claim, mark-sent, release) as invoke then ok, a claim's ok naming the rows it took in its order, or fail
when it raised. A real SQLite database, the real publisher round (services.outbox.publish_batch), the real OpRecorder,
a broker that accepts the first message and refuses the rest. The simulation's recording is judged by the catalogue
(test_reference_holds_the_newer_invariants: I36 in B2, C2 and R11)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from kernel.runtime import PUBLISH
from reference.copilot.db import sqlite_engine
from reference.copilot.effects import BrokerUnavailable, Message
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy
from reference.copilot.runtime import OpRecorder, Runtime
from reference.copilot.services.outbox import CLAIM, MARK_SENT, RELEASE, publish_batch


class FirstOnlyBroker:
    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, message: Message) -> None:
        if self.published:
            raise BrokerUnavailable("the broker is away")
        self.published.append(message.event_id)


def _runtime(tmp_path: Path, broker: Any) -> Runtime:
    rt = Runtime(sessionmaker(sqlite_engine(), expire_on_commit=False), broker=broker)
    rt.recorder = OpRecorder(str(tmp_path / "publisher-1.jsonl"), "publisher-1")
    return rt


def _rows(rt: Runtime, n: int) -> list[str]:
    ids = sorted(uuid.uuid4() for _ in range(n))
    created = datetime.now(UTC) - timedelta(seconds=10)
    with rt.sessions.begin() as session:
        for i, row in enumerate(ids):
            session.add(TaskEventOutbox(id=row, task_id=uuid.uuid4(), event_type="TaskCreated", task_version=1,
                                        payload={}, available_at=created, created_at=created + timedelta(seconds=i)))
    return [str(r) for r in ids]


def _ops(rt: Runtime) -> list[tuple[str, str, dict[str, Any]]]:
    assert rt.recorder is not None
    lines = Path(rt.recorder.path).read_text().splitlines()
    return [(o["type"], o["f"], o["value"]) for o in map(json.loads, lines)]


def test_a_refused_round_is_recorded_transaction_by_transaction(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, FirstOnlyBroker())
    first, second = _rows(rt, 2)
    assert rt.run(publish_batch(Policy())) == (1, False)
    assert [(t, f) for t, f, _ in _ops(rt)] == [
        ("invoke", CLAIM), ("ok", CLAIM),
        ("invoke", PUBLISH), ("ok", PUBLISH), ("invoke", PUBLISH), ("fail", PUBLISH),
        ("invoke", MARK_SENT), ("ok", MARK_SENT), ("invoke", RELEASE), ("ok", RELEASE)]
    ops = _ops(rt)
    assert ops[1][2] == {"ids": [first, second]}  # the claim's rows, in its order
    assert [v for t, f, v in ops if f in (MARK_SENT, RELEASE)] == [{}, {}, {}, {}]


def test_an_empty_claim_is_recorded_and_a_failed_one_says_so(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, FirstOnlyBroker())
    assert rt.run(publish_batch(Policy())) == (0, True)
    assert _ops(rt) == [("invoke", CLAIM, {}), ("ok", CLAIM, {"ids": []})]
    with rt.sessions.begin() as session:
        TaskEventOutbox.__table__.drop(session.connection())  # the claim's table is gone: it raises
    with pytest.raises(Exception):  # noqa: B017 - whichever error the driver raises
        rt.run(publish_batch(Policy()))
    assert _ops(rt)[2:] == [("invoke", CLAIM, {}), ("fail", CLAIM, {"error": "OperationalError"})]
