"""On a real PostgreSQL: concurrent re-drives of one dead item take effect once (seed 000 §5.5: a dead item is
re-driven by a person, audited). Each re-drive locks the item's row and reads it afresh, so of two operators who
click at once one re-drives it and the other is told it is no longer dead (409 NOT_DEAD). SQLite serialises whole
transactions, so only a server with row locks can judge the lock: the mutation campaign's survivors
``with_for_update=False`` in consumer.redrive, dlq.redrive_to_broker and ops.redrive (a DEAD outbox row) are killed
here (each shown by applying it).

The race is deterministic without sleeps: the test holds the row's lock until every racer waits on a lock
(pg_stat_activity), then lets them run into each other. Nightly: it starts a PostgreSQL cluster."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import sessionmaker

from kernel.effects import Message
from reference.copilot.errors import Conflict
from reference.copilot.models import DeadLetter, DroneTask, SiteArea, TaskAuditLog, TaskEventOutbox, UserAreaPermission
from reference.copilot.runtime import Runtime
from reference.copilot.services import ops
from reference.copilot.services.consumer import redrive
from reference.copilot.services.dlq import redrive_to_broker

pytestmark = pytest.mark.nightly

RACERS = 4
SUPERVISOR, AREA = "supervisor-1", "SITE-RACE"
RACER_APP = "sortie-redrive-racer"  # application_name of the racers' sessions: the ones counted as waiting
DEADLINE_S = 60.0

MakeDb = Callable[[str], Any]
Engines = Callable[[str], Engine]


class RecordingBroker:
    """What redrive_to_broker needs of a broker: publish, recorded (thread-safe: list.append)."""

    def __init__(self) -> None:
        self.published: list[Message] = []

    def publish(self, message: Message) -> None:
        self.published.append(message)


@pytest.fixture(scope="module")
def owner(migrated_database: MakeDb, engines: Engines) -> Engine:
    return engines(migrated_database("sortie_concurrent_redrive").owner_url)


@pytest.fixture(scope="module")
def runtime(migrated_database: MakeDb) -> Iterator[Runtime]:
    """The reference's runtime as the application role, its sessions named so the test can count them."""
    url = migrated_database("sortie_concurrent_redrive").app_url
    engine = create_engine(url, pool_size=RACERS, connect_args={"application_name": RACER_APP})
    yield Runtime(sessionmaker(engine, expire_on_commit=False))
    engine.dispose()


def _dead_letter(owner: Engine) -> tuple[int, uuid.UUID, uuid.UUID]:
    """A consumer's dead letter of a TaskCreated whose outbox row the publisher sent: (id, event id, task id)."""
    task_id, now = uuid.uuid4(), datetime.now(UTC)
    message = Message(str(uuid.uuid4()), "TaskCreated", str(task_id), 0, {"user_id": "operator-001"})
    with sessionmaker(owner).begin() as session:
        session.add(TaskEventOutbox(id=uuid.UUID(message.event_id), task_id=task_id, event_type=message.event_type,
                                    task_version=0, payload=message.as_json(), status="SENT", attempts=1,
                                    available_at=now, sent_at=now))
        letter = DeadLetter(consumer="dispatcher", event_id=uuid.UUID(message.event_id), task_id=task_id,
                            event_type=message.event_type, payload=message.as_json(), error_code="TASK_NOT_FOUND",
                            error_message="gone", attempts=3, history=[], created_at=now)
        session.add(letter)
        session.flush()
        return letter.id, uuid.UUID(message.event_id), task_id


def _waiting(owner: Engine) -> int:
    with owner.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND application_name = :app"), {"app": RACER_APP}).scalar_one())


def _race(owner: Engine, lock: str, redrive_once: Callable[[], str]) -> list[str]:
    """RACERS re-drives at once: each is let go only when all wait on the row lock the test holds (``lock``, a
    SELECT ... FOR UPDATE). Each answers what it re-drove, or the code of its refusal."""
    def attempt() -> str:
        try:
            return redrive_once()
        except Conflict as refused:
            return refused.code

    with owner.connect() as holder, ThreadPoolExecutor(RACERS) as pool:
        tx = holder.begin()
        holder.execute(text(lock))
        racers: list[Future[str]] = [pool.submit(attempt) for _ in range(RACERS)]
        deadline = time.monotonic() + DEADLINE_S
        while _waiting(owner) < RACERS:
            assert time.monotonic() < deadline, f"{_waiting(owner)} of {RACERS} re-drives wait on the lock"
            assert not any(r.done() for r in racers), [r.result() for r in racers if r.done()]
            time.sleep(0.01)
        tx.commit()
        return sorted(r.result() for r in racers)


def _redriven(owner: Engine, dead_letter_id: int, task_id: uuid.UUID) -> tuple[int, int]:
    """(the dead letter's redrive_count, the task's DEAD_LETTER_REDRIVEN audit rows)."""
    with sessionmaker(owner)() as session:
        letter = session.get(DeadLetter, dead_letter_id)
        assert letter is not None and letter.redriven_at is not None
        audits = session.scalars(select(TaskAuditLog).where(TaskAuditLog.task_id == task_id,
                                                            TaskAuditLog.action == "DEAD_LETTER_REDRIVEN")).all()
        return letter.redrive_count, len(audits)


def test_concurrent_redrives_through_the_outbox_take_effect_once(owner: Engine, runtime: Runtime) -> None:
    dead_letter_id, event_id, task_id = _dead_letter(owner)
    answers = _race(owner, f"SELECT 1 FROM dead_letter WHERE id = {dead_letter_id} FOR UPDATE",
                    lambda: runtime.transact(lambda tx: redrive(tx, dead_letter_id, SUPERVISOR, "fixed")))
    assert answers == sorted([str(event_id)] + ["NOT_DEAD"] * (RACERS - 1))
    assert _redriven(owner, dead_letter_id, task_id) == (1, 1)
    with sessionmaker(owner)() as session:
        row = session.get(TaskEventOutbox, event_id)
        assert row is not None and (row.status, row.attempts) == ("PENDING", 0)  # sent again, with a fresh budget


def test_concurrent_redrives_to_the_broker_are_marked_once(owner: Engine, runtime: Runtime) -> None:
    """Each racer may publish before it finds the mark (consumers dedupe on the event id); one marks and audits."""
    dead_letter_id, event_id, task_id = _dead_letter(owner)
    broker = RecordingBroker()
    answers = _race(owner, f"SELECT 1 FROM dead_letter WHERE id = {dead_letter_id} FOR UPDATE",
                    lambda: redrive_to_broker(broker, runtime.transact, dead_letter_id, SUPERVISOR))
    assert answers == sorted([str(event_id)] + ["NOT_DEAD"] * (RACERS - 1))
    assert _redriven(owner, dead_letter_id, task_id) == (1, 1)
    assert 1 <= len(broker.published) <= RACERS
    assert {m.event_id for m in broker.published} == {str(event_id)}


def _dead_outbox_row(owner: Engine) -> tuple[uuid.UUID, uuid.UUID]:
    """A DEAD outbox row of a task on the supervisor's area: (event id, task id)."""
    task_id, event_id, now = uuid.uuid4(), uuid.uuid4(), datetime.now(UTC)
    with sessionmaker(owner).begin() as session:
        if session.get(SiteArea, AREA) is None:
            session.add(SiteArea(id=AREA, name="race", polygon=[[0.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
            session.flush()
            session.add(UserAreaPermission(user_id=SUPERVISOR, area_id=AREA))
        session.add(DroneTask(id=task_id, draft_id=uuid.uuid4(), draft_version=1, user_id="operator-001",
                              device_id="DRONE-0001", route_id=uuid.uuid4(), status="CREATED", version=0,
                              idempotency_key=f"key-{task_id}", dispatch_attempts=0, created_at=now, updated_at=now,
                              area_id=AREA, route_version=1, snapshot={}, request_hash="0" * 64,
                              last_telemetry_seq=0, alert_count=0))
        session.add(TaskEventOutbox(id=event_id, task_id=task_id, event_type="TaskCreated", task_version=0,
                                    payload={}, status="DEAD", attempts=3, available_at=now, dead_at=now))
    return event_id, task_id


def test_concurrent_redrives_of_a_dead_outbox_row_take_effect_once(owner: Engine, runtime: Runtime) -> None:
    event_id, task_id = _dead_outbox_row(owner)
    answers = _race(owner, f"SELECT 1 FROM task_event_outbox WHERE id = '{event_id}' FOR UPDATE",
                    lambda: runtime.transact(lambda tx: ops.redrive(tx, "outbox", str(event_id), SUPERVISOR,
                                                                     "the broker is back"))["status"])
    assert answers == sorted(["PENDING"] + ["NOT_DEAD"] * (RACERS - 1))
    with sessionmaker(owner)() as session:
        row = session.get(TaskEventOutbox, event_id)
        assert row is not None and (row.status, row.attempts, row.redrive_count) == ("PENDING", 0, 1)
        audits = session.scalars(select(TaskAuditLog).where(TaskAuditLog.task_id == task_id,
                                                            TaskAuditLog.action == "OUTBOX_REDRIVEN")).all()
        assert len(audits) == 1
