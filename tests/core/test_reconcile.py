"""reconcile_task (seed 000 §7.2, docs/systems/copilot.md, Rules), branch by branch, on a real SQLite database.

Tasks are made the way production makes them (create_draft, an approval, confirm_draft) and brought to the
status under test by the real dispatcher where the code can leave a task there: a dispatcher killed at its
create_flight call leaves DISPATCHING with a PENDING attempt (R2), an accepted create leaves EXECUTING with the
flight's id. Statuses the code never leaves at rest (DISPATCH_FAILED, EXECUTING without a flight id) are
written with transition(). The platform is a scripted fake that records every call; transactions run on the
runtime. Each test checks the answer, the task row, the audit rows and outbox events written, the dispatch
attempts, and the exact platform calls."""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from core_db_support import SMALL_FLEET, Db, TickingClock, make_db
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import event as sa_event
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from reference.copilot import platform as p
from reference.copilot.db import as_utc, sqlite_engine
from reference.copilot.effects import CallPlatform, Jitter, Message, PutObject, Sleep, Transact, run_sync
from reference.copilot.errors import Conflict
from reference.copilot.models import DispatchAttempt, DroneTask
from reference.copilot.policy import Policy
from reference.copilot.runtime import Runtime
from reference.copilot.services.cancel import request_cancel
from reference.copilot.services.confirm import ConfirmDraft, TaskCreated, confirm_draft
from reference.copilot.services.consumer import on_task_completed, on_task_created
from reference.copilot.services.dispatch import after_dispatch_failed, dispatch_task
from reference.copilot.services.drafts import create_draft, decide_approval
from reference.copilot.services.outbox import mark_sent
from reference.copilot.services.reconcile import reconcile_task
from reference.copilot.services.settle import close_attempt, settle
from reference.copilot.states import TERMINAL, TaskStatus, is_legal
from reference.copilot.tasks import TaskView, fresh, transition
from systems.copilot.workload import random_plan, seed_fleet

S = TaskStatus
POLICY = Policy()
MAX_ATTEMPTS = POLICY.max_dispatch_attempts
KEY_AND_QUERY = p.PlatformCapabilities(idempotency_key=True, query_by_request_id=True)
KEY_ONLY = p.PlatformCapabilities(idempotency_key=True, query_by_request_id=False)
QUERY_ONLY = p.PlatformCapabilities(idempotency_key=False, query_by_request_id=True)
NEITHER = p.PlatformCapabilities(idempotency_key=False, query_by_request_id=False)
PLAN_SEEDS = itertools.count()
FLIGHT_STATUSES = [p.FLIGHT_ACCEPTED, p.FLIGHT_EXECUTING, p.FLIGHT_COMPLETED, p.FLIGHT_FAILED, p.FLIGHT_CANCELLED]


# ---------------------------------------------------------------------------------------------- the fake platform


class Killed(Exception):
    """The worker died at this effect (the simulation's SIGKILL): nothing in the core catches it."""


def accept(request: p.CreateFlight) -> p.FlightInfo:
    return p.FlightInfo(f"FL-{request.request_id}", request.request_id, request.device_id, p.FLIGHT_ACCEPTED,
                        request.reference)


def online(device_id: str) -> p.DeviceState:
    return p.DeviceState(device_id, online=True, battery=90.0)


class FakePlatform:
    """Performs a worker's effects: CallPlatform from a script, Transact on the database, Sleep and Jitter as
    no-ops. A script entry is a value, an exception instance (raised) or a callable of the call's arguments;
    a list is answered in order, its last entry repeating. An unscripted method fails the test.

    ``before`` holds concurrent writes to run just before a named Transact: another worker that commits
    between two of the reconciler's effects (where the simulation shell interleaves processes)."""

    def __init__(self, db: Db, *, caps: p.PlatformCapabilities = KEY_AND_QUERY, **script: Any) -> None:
        self.db = db
        self.script: dict[str, Any] = {"capabilities": caps, "get_device": online, "create_flight": accept,
                                       **script}
        self.calls: list[CallPlatform] = []
        self.before: dict[str, Callable[[], None]] = {}
        self.transactions: list[str] = []

    def perform(self, effect: Any) -> Any:
        if isinstance(effect, CallPlatform):
            self.calls.append(effect)
            if effect.method not in self.script:
                raise AssertionError(f"unscripted platform call {effect.method}{effect.args}")
            answer = self.script[effect.method]
            if isinstance(answer, list):
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            if isinstance(answer, BaseException):
                raise answer
            return answer(*effect.args) if callable(answer) else answer
        if isinstance(effect, Sleep):
            return None
        if isinstance(effect, Jitter):
            return 0.0
        assert isinstance(effect, Transact), effect
        self.transactions.append(effect.name)
        concurrent = self.before.pop(effect.name, None)
        if concurrent is not None:
            concurrent()
        return self.db.runtime.perform(effect)

    def run(self, work: Any) -> Any:
        return run_sync(work, self.perform)

    def methods(self) -> list[str]:
        return [c.method for c in self.calls]

    def sent(self, method: str) -> list[tuple[Any, ...]]:
        return [c.args for c in self.calls if c.method == method]

    def creates(self) -> list[p.CreateFlight]:
        return [c.args[0] for c in self.calls if c.method == "create_flight"]


def reconcile(task_id: uuid.UUID, fake: FakePlatform) -> str:
    return str(fake.run(reconcile_task(task_id, POLICY)))


# ---------------------------------------------------------------------------------------------- tasks


@dataclass
class Task:
    id: uuid.UUID
    user: str
    request: p.CreateFlight | None = None  # the create the dispatcher sent for the latest attempt
    external_id: str | None = None

    def rid(self, attempt: int) -> str:
        return f"{self.id}:{attempt}"


def new_task(db: Db) -> Task:
    """CREATED v0 with its TaskCreated event PENDING in the outbox, as confirm_draft leaves it."""
    assert db.fleet is not None
    user, area = db.fleet.operators[0]
    plan = random_plan(random.Random(next(PLAN_SEEDS)), db.fleet, area)

    def draft(tx: Any) -> str:
        d = create_draft(tx, user, "inspect", area, plan)
        decide_approval(tx, "approver-1", d.id, d.version, approve=True)
        return str(d.id)

    draft_id = db.runtime.transact(draft)
    created = db.runtime.run(confirm_draft(ConfirmDraft(user, draft_id, 1, f"key-{draft_id}")))
    return Task(uuid.UUID(created.task_id), user)


def publish(db: Db, task: Task) -> None:
    """The outbox publisher sent TaskCreated and marked it SENT."""
    (row,) = [o for o in db.outbox(task.id) if o["event_type"] == "TaskCreated"]
    db.runtime.transact(lambda tx: mark_sent(tx, [str(row["id"])]))


def move(db: Db, task: Task, to: S, **kw: Any) -> None:
    db.runtime.transact(lambda tx: transition(tx, fresh(tx, task.id), to, actor="setup", action="SETUP", **kw))


def queued(db: Db) -> Task:
    """QUEUED v1: the event was published and a consumer queued the task."""
    task = new_task(db)
    publish(db, task)
    move(db, task, S.QUEUED)
    return task


def dispatching(db: Db, attempt: int = 1) -> Task:
    """DISPATCHING with ``attempt`` PENDING: the dispatcher was killed at its create_flight call (whether the
    platform acted is the platform's secret). Earlier attempts ended NOT_CREATED and were re-queued."""
    task = queued(db)
    for n in range(1, attempt + 1):
        if n > 1:
            move(db, task, S.DISPATCH_FAILED, set_values={"last_error_code": "NOT_CREATED"})

            def requeue(tx: Any, done: int = n - 1) -> None:
                close_attempt(tx, task.id, done, "NOT_CREATED", "NOT_CREATED")
                assert after_dispatch_failed(tx, task.id, policy=POLICY, actor="setup") == S.QUEUED

            db.runtime.transact(requeue)
        fake = FakePlatform(db, create_flight=Killed("dispatcher killed at create_flight"))
        with pytest.raises(Killed):
            fake.run(dispatch_task(task.id, POLICY))
        (task.request,) = fake.creates()
    assert task.request is not None and task.request.request_id == task.rid(attempt)
    view = read(db, task)
    assert (view.status, view.dispatch_attempts) == (S.DISPATCHING, attempt)
    return task


def executing(db: Db) -> Task:
    """EXECUTING with the flight's id: the dispatcher's create was accepted and written back."""
    task = queued(db)
    fake = FakePlatform(db)
    assert fake.run(dispatch_task(task.id, POLICY)) == S.EXECUTING
    (task.request,) = fake.creates()
    task.external_id = read(db, task).external_task_id
    assert task.external_id == f"FL-{task.rid(1)}"
    return task


def cancel_pending(db: Db) -> Task:
    task = executing(db)
    assert db.runtime.transact(lambda tx: request_cancel(tx, str(task.id), task.user)).status == S.CANCEL_PENDING
    return task


def dispatch_failed(db: Db, code: str, attempts: int) -> Task:
    """DISPATCH_FAILED at rest (the code always decides it in the same transaction; a hand-made row here)."""
    task = dispatching(db, attempts)
    move(db, task, S.DISPATCH_FAILED, set_values={"last_error_code": code})
    db.runtime.transact(lambda tx: close_attempt(tx, task.id, attempts, "FAILED", code))
    return task


def flight(task: Task, status: str, attempt: int = 1) -> p.FlightInfo:
    assert task.request is not None
    return p.FlightInfo(task.external_id or f"FL-{task.rid(attempt)}", task.rid(attempt), task.request.device_id,
                        status, str(task.id))


# ---------------------------------------------------------------------------------------------- reads


def read(db: Db, task: Task | uuid.UUID) -> TaskView:
    tid = task.id if isinstance(task, Task) else task
    view = db.runtime.transact(lambda tx: fresh(tx, tid))
    assert view is not None
    return view


def attempts(db: Db, task: Task) -> list[tuple[int, str, str, str | None, str | None]]:
    with db.runtime.sessions() as s:
        rows = s.scalars(select(DispatchAttempt).where(DispatchAttempt.task_id == task.id)
                         .order_by(DispatchAttempt.attempt))
        return [(a.attempt, a.request_id, a.outcome, a.external_task_id, a.error_code) for a in rows]


def everything(db: Db, task: Task) -> tuple[Any, ...]:
    """All the database says about the task (and the table counts), to compare before/after."""
    return (read(db, task), db.audit(task.id), db.outbox(task.id), attempts(db, task), db.report(task.id),
            db.counts())


def moves_since(db: Db, task: Task, mark: int) -> list[tuple[str, str, str, str]]:
    """The audited moves after the first ``mark`` audit rows: (actor, action, from, to)."""
    return [(a["actor"], a["action"], a["from"], a["to"]) for a in db.audit(task.id)[mark:]]


def check_chain(db: Db, task: Task) -> None:
    """Every audited move is legal and continuous, each has its outbox event, and the row agrees with the
    last audit row (docs/systems/copilot.md: the change, its audit row and its event in one transaction)."""
    audit = db.audit(task.id)
    assert audit[0]["action"] == "TASK_CREATED" and audit[0]["to_version"] == 0
    status, version = S.CREATED.value, 0
    for a in audit[1:]:
        assert (a["from"], a["from_version"]) == (status, version), a
        assert a["to_version"] == version + 1 and is_legal(a["from"], a["to"]), a
        status, version = a["to"], a["to_version"]
    assert sorted(o["task_version"] for o in db.outbox(task.id)) == list(range(version + 1))
    view = read(db, task)
    assert (view.status.value, view.version) == (status, version)
    assert (db.report(task.id) is not None) == (view.status == S.COMPLETED)


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def db() -> Iterator[Db]:
    """One seeded database for the module (building it costs as much as a test): every test makes its own
    tasks and looks only at them, so tests cannot see each other's rows."""
    made = make_db()
    yield made
    made.dispose()


# ------------------------------------------------------------------------------------------- missing, CREATED, QUEUED


def test_missing_task(db: Db) -> None:
    before = db.counts()
    fake = FakePlatform(db)
    assert reconcile(uuid.uuid4(), fake) == "missing"
    assert fake.calls == [] and db.counts() == before


def test_created_with_unpublished_event_waits_for_the_outbox(db: Db) -> None:
    task = new_task(db)
    before = everything(db, task)
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == "waiting-for-outbox"
    assert fake.calls == []
    assert everything(db, task) == before
    assert [o["status"] for o in db.outbox(task.id)] == ["PENDING"]


def test_created_with_published_event_is_queued_and_dispatched(db: Db) -> None:
    task = new_task(db)
    publish(db, task)
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == S.EXECUTING
    assert moves_since(db, task, 1) == [
        ("reconciler", "QUEUED_BY_RECONCILER", "CREATED", "QUEUED"),
        ("dispatcher", "PRECHECK_STARTED", "QUEUED", "VALIDATING"),
        ("dispatcher", "DISPATCH_STARTED", "VALIDATING", "DISPATCHING"),
        ("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING"),
    ]
    assert fake.methods() == ["capabilities", "get_device", "create_flight"]
    assert [r.request_id for r in fake.creates()] == [task.rid(1)]
    view = read(db, task)
    assert (view.version, view.dispatch_attempts, view.external_task_id) == (4, 1, f"FL-{task.rid(1)}")
    assert attempts(db, task) == [(1, task.rid(1), "ACCEPTED", f"FL-{task.rid(1)}", None)]
    check_chain(db, task)


def test_a_redelivered_task_created_ends_at_its_dedup_and_leaves_the_task_to_the_reconciler(db: Db) -> None:
    """A dispatcher died after its consume committed (QUEUED, processed_event) and before it dispatched: the broker
    delivers the event again, and the dedup ends the handling (seed 000 §6.4: a conflict ends the handling) with no
    platform call; the QUEUED task is the reconciler's (test_queued_is_dispatched)."""
    task = new_task(db)
    publish(db, task)
    (row,) = [o for o in db.outbox(task.id) if o["event_type"] == "TaskCreated"]
    msg = Message(str(row["id"]), row["event_type"], str(task.id), row["task_version"], row["payload"],
                  row["at"].isoformat())
    died = FakePlatform(db, capabilities=Killed("dispatcher killed after its consume committed"))
    with pytest.raises(Killed):
        died.run(on_task_created(msg, POLICY))
    assert read(db, task).status == S.QUEUED
    again = FakePlatform(db)
    assert again.run(on_task_created(msg, POLICY)) == "duplicate"
    assert again.methods() == [] and read(db, task).status == S.QUEUED


@pytest.mark.parametrize("moved_to", [S.QUEUED, S.CANCELLED])
def test_a_first_task_created_for_a_task_that_moved_on_dispatches_only_a_queued_one(db: Db, moved_to: S) -> None:
    """The dispatcher's first TaskCreated finds the task moved on: queued by the reconciler meanwhile (it still
    wants a dispatch: the consumer dispatches it now) or cancelled by its user (nothing is sent to the platform)."""
    task = new_task(db)
    publish(db, task)
    move(db, task, moved_to)
    (row,) = [o for o in db.outbox(task.id) if o["event_type"] == "TaskCreated"]
    msg = Message(str(row["id"]), row["event_type"], str(task.id), row["task_version"], row["payload"],
                  row["at"].isoformat())
    fake = FakePlatform(db)
    answer = fake.run(on_task_created(msg, POLICY))
    if moved_to == S.QUEUED:
        assert answer == S.EXECUTING and [c.request_id for c in fake.creates()] == [task.rid(1)]
    else:
        assert answer == "duplicate" and fake.methods() == [] and read(db, task).status == S.CANCELLED


def test_a_task_completed_uploads_its_report_at_its_first_delivery_only(db: Db) -> None:
    """The report worker's TaskCompleted (seed 000 §4.1 step 12): the first delivery builds and uploads the report,
    a redelivery ends at the dedup (no second upload)."""
    task = executing(db)
    db.runtime.transact(lambda tx: settle(tx, task.id, p.FLIGHT_COMPLETED, task.external_id or "", actor="events",
                                          reason="event"))
    (row,) = [o for o in db.outbox(task.id) if o["event_type"] == "TaskCompleted"]
    msg = Message(str(row["id"]), row["event_type"], str(task.id), row["task_version"], row["payload"],
                  row["at"].isoformat())
    puts: list[str] = []

    class Store(FakePlatform):
        def perform(self, effect: Any) -> Any:
            return puts.append(effect.key) if isinstance(effect, PutObject) else super().perform(effect)

    assert Store(db).run(on_task_completed(msg, POLICY)) == "uploaded"
    assert Store(db).run(on_task_completed(msg, POLICY)) == "duplicate"
    report = db.report(task.id)
    assert report is not None and (report["status"], puts) == ("UPLOADED", [report["object_key"]])


@pytest.mark.parametrize("cause", ["FL-7#12", None], ids=["an-event", "no-cause"])
def test_a_settled_move_audits_the_platforms_word_and_its_cause(db: Db, cause: str | None) -> None:
    """The audit row of a move the platform's word made (seed 000 §6.2) says what it said, why, and which event
    caused it when one did (an event's flight and seq)."""
    task = executing(db)
    db.runtime.transact(lambda tx: settle(tx, task.id, p.FLIGHT_COMPLETED, task.external_id or "", actor="events",
                                          reason="completed event", cause=cause))
    detail = db.audit(task.id)[-1]["detail"]
    assert detail == {"platform_status": p.FLIGHT_COMPLETED, "external_task_id": task.external_id,
                      "reason": "completed event", **({"cause": cause} if cause else {})}


def test_queued_is_dispatched(db: Db) -> None:
    task = queued(db)
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == S.EXECUTING
    assert moves_since(db, task, 2) == [
        ("dispatcher", "PRECHECK_STARTED", "QUEUED", "VALIDATING"),
        ("dispatcher", "DISPATCH_STARTED", "VALIDATING", "DISPATCHING"),
        ("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING"),
    ]
    assert fake.methods() == ["capabilities", "get_device", "create_flight"]
    assert fake.creates()[0].request_id == task.rid(1) and fake.creates()[0].reference == str(task.id)
    assert (read(db, task).version, read(db, task).external_task_id) == (4, f"FL-{task.rid(1)}")
    check_chain(db, task)


# ---------------------------------------------------------------------------------------------- DISPATCH_FAILED


def test_dispatch_failed_not_created_with_attempts_left_is_redispatched(db: Db) -> None:
    task = dispatch_failed(db, "NOT_CREATED", attempts=1)
    mark = len(db.audit(task.id))
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == S.EXECUTING
    assert moves_since(db, task, mark) == [
        ("reconciler", "REDISPATCH_QUEUED", "DISPATCH_FAILED", "QUEUED"),
        ("dispatcher", "PRECHECK_STARTED", "QUEUED", "VALIDATING"),
        ("dispatcher", "DISPATCH_STARTED", "VALIDATING", "DISPATCHING"),
        ("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING"),
    ]
    assert fake.methods() == ["capabilities", "get_device", "create_flight"]
    assert [r.request_id for r in fake.creates()] == [task.rid(2)]  # a new attempt, a new key
    assert attempts(db, task) == [(1, task.rid(1), "FAILED", None, "NOT_CREATED"),
                                  (2, task.rid(2), "ACCEPTED", f"FL-{task.rid(2)}", None)]
    assert read(db, task).dispatch_attempts == 2
    check_chain(db, task)


def test_dispatch_failed_requeued_meanwhile_by_another_reconciler_is_dispatched(db: Db) -> None:
    """Another reconciler re-queued the task between this one's read and its decision, and died before dispatching
    it: this one finds it QUEUED and dispatches it now, not a scan later (seed 000 §5.5, compensation from what
    really happened)."""
    task = dispatch_failed(db, "NOT_CREATED", attempts=1)
    mark = len(db.audit(task.id))
    fake = FakePlatform(db)
    fake.before["reconcile.dispatch_failed"] = lambda: db.runtime.transact(
        lambda tx: after_dispatch_failed(tx, task.id, policy=POLICY, actor="reconciler-2"))
    assert reconcile(task.id, fake) == S.EXECUTING
    assert not fake.before  # the other reconciler did re-queue it there
    assert moves_since(db, task, mark) == [
        ("reconciler-2", "REDISPATCH_QUEUED", "DISPATCH_FAILED", "QUEUED"),
        ("dispatcher", "PRECHECK_STARTED", "QUEUED", "VALIDATING"),
        ("dispatcher", "DISPATCH_STARTED", "VALIDATING", "DISPATCHING"),
        ("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING"),
    ]
    check_chain(db, task)


@pytest.mark.parametrize(("code", "attempts_made"), [
    ("NOT_CREATED", MAX_ATTEMPTS),  # attempts exhausted
    ("PLATFORM_REJECTED", 1),  # a definite rejection is never resent automatically (T3)
    ("DEVICE_OFFLINE", 1),
], ids=["not-created-attempts-exhausted", "platform-rejected", "other-code"])
def test_dispatch_failed_is_abandoned(db: Db, code: str, attempts_made: int) -> None:
    task = dispatch_failed(db, code, attempts=attempts_made)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == S.FAILED
    assert moves_since(db, task, mark) == [("reconciler", "DISPATCH_ABANDONED", "DISPATCH_FAILED", "FAILED")]
    assert db.audit(task.id)[-1]["detail"] == {"code": code, "attempts": attempts_made}
    assert fake.calls == []
    view = read(db, task)
    assert (view.version, view.dispatch_attempts, view.last_error_code) == (version + 1, attempts_made, code)
    assert len(attempts(db, task)) == attempts_made
    check_chain(db, task)


def test_a_rejected_dispatch_keeps_the_first_2000_characters_of_the_platforms_message(db: Db) -> None:
    """A platform's refusal can be long (a validator lists every bad waypoint): the task row keeps a bounded
    prefix for the person reading it, its code decides."""
    task = queued(db)
    long_message = "".join(f"{i:05d}" for i in range(500))  # 2,500 characters, each prefix distinct
    rejection = p.PlatformRejected("INVALID_ROUTE", long_message)
    fake = FakePlatform(db, create_flight=rejection)
    assert reconcile(task.id, fake) == S.FAILED
    with db.runtime.sessions() as s:
        row = s.get(DroneTask, task.id)
        assert row is not None
        assert (row.last_error_code, row.last_error_message) == ("PLATFORM_REJECTED", str(rejection)[:2000])
    check_chain(db, task)


@pytest.mark.parametrize(("caps", "answer", "asked", "attempt"), [
    (QUERY_ONLY, "unknown", ["capabilities", "get_device", "create_flight", "find_by_request_id"],
     ("PENDING", None)),
    (NEITHER, S.MANUAL_REVIEW, ["capabilities", "get_device", "create_flight"], ("UNKNOWN", "NO_KEY_NO_QUERY")),
], ids=["query-failing", "no-key-no-query"])
def test_a_dispatchers_timed_out_create_without_a_key_is_not_resent(db: Db, caps: p.PlatformCapabilities, answer: str,
                                                                    asked: list[str],
                                                                    attempt: tuple[str, str | None]) -> None:
    """Seed 000 §5.5, §6.4: a timeout means the dispatcher does not know. Without a key the create is never resent:
    a platform that can be asked but does not answer leaves the task DISPATCHING for the reconciler (a person only
    after the silence, I46); one that cannot be asked hands it to a person at once."""
    task = queued(db)
    fake = FakePlatform(db, caps=caps, create_flight=p.PlatformTimeout("READ_TIMEOUT"),
                        find_by_request_id=p.PlatformUnavailable("HTTP_503"))
    assert fake.run(dispatch_task(task.id, POLICY)) == answer
    assert fake.methods() == asked
    view = read(db, task)
    assert view.status == (S.DISPATCHING if answer == "unknown" else S.MANUAL_REVIEW)
    assert [(a[2], a[4]) for a in attempts(db, task)] == [attempt]
    check_chain(db, task)


def test_a_dispatchers_write_back_fenced_by_a_newer_dispatch_writes_nothing(db: Db) -> None:
    """The platform accepted the create, but before the write-back the task was re-dispatched (a newer version of
    DISPATCHING owns it): the stale write-back is fenced and writes nothing (seed 000 §5.3: a stale read never
    overwrites a newer state)."""
    task = queued(db)
    fake = FakePlatform(db)

    def newer_dispatch() -> None:
        for to in (S.DISPATCH_FAILED, S.QUEUED, S.VALIDATING, S.DISPATCHING):
            move(db, task, to)
    fake.before["dispatch.write_back"] = newer_dispatch
    assert fake.run(dispatch_task(task.id, POLICY)) == "fenced"
    assert not fake.before  # the newer dispatch did land before the write-back
    view = read(db, task)
    assert (view.status, view.external_task_id) == (S.DISPATCHING, None)
    assert [a[2] for a in attempts(db, task)] == ["PENDING"]  # the fenced write-back closed nothing
    check_chain(db, task)


# ---------------------------------------------------------------------------------------------- DISPATCHING


@pytest.mark.parametrize(("flight_status", "path"), [
    (p.FLIGHT_ACCEPTED, [S.EXECUTING]),
    (p.FLIGHT_EXECUTING, [S.EXECUTING]),
    (p.FLIGHT_COMPLETED, [S.EXECUTING, S.COMPLETED]),
    (p.FLIGHT_FAILED, [S.EXECUTING, S.FAILED]),
    (p.FLIGHT_CANCELLED, [S.EXECUTING, S.FAILED]),
])
def test_dispatching_found_by_query_is_settled_from_the_flight(db: Db, flight_status: str, path: list[S]) -> None:
    task = dispatching(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    found = flight(task, flight_status)
    fake = FakePlatform(db, find_by_request_id=found)
    assert reconcile(task.id, fake) == path[-1]
    # The platform is asked about the stale attempt's request id first; nothing is created.
    assert fake.methods() == ["capabilities", "find_by_request_id"]
    assert fake.sent("find_by_request_id") == [(task.rid(1),)]
    moves = moves_since(db, task, mark)
    assert [m[3] for m in moves] == path and {m[0] for m in moves} == {"reconciler"}
    assert moves[0][1] == "FLIGHT_CONFIRMED"
    view = read(db, task)
    assert (view.status, view.version, view.external_task_id) == (path[-1], version + len(path), found.external_id)
    assert view.dispatch_attempts == 1
    assert attempts(db, task) == [(1, task.rid(1), "ACCEPTED", found.external_id, None)]
    if path[-1] == S.COMPLETED:
        assert db.report(task.id)["status"] == "PENDING"  # type: ignore[index]
    check_chain(db, task)


@pytest.mark.parametrize(("caps", "query_answer", "asked"), [
    (KEY_AND_QUERY, None, ["find_by_request_id"]),
    (KEY_AND_QUERY, p.PlatformUnavailable("HTTP_503"), ["find_by_request_id"]),
    (KEY_AND_QUERY, p.PlatformTimeout("READ_TIMEOUT"), ["find_by_request_id"]),
    (KEY_ONLY, None, []),
], ids=["not-found", "query-unavailable", "query-timeout", "no-query"])
def test_dispatching_with_key_resends_the_same_request(db: Db, caps: p.PlatformCapabilities, query_answer: Any,
                                                       asked: list[str]) -> None:
    task = dispatching(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, caps=caps, find_by_request_id=query_answer)
    assert reconcile(task.id, fake) == S.EXECUTING
    assert fake.methods() == ["capabilities", *asked, "create_flight"]
    # The same request under the same key: the platform dedupes it against the dispatcher's (maybe late) one.
    assert fake.creates() == [task.request]
    assert moves_since(db, task, mark) == [("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING")]
    view = read(db, task)
    assert (view.version, view.dispatch_attempts, view.external_task_id) == (version + 1, 1, f"FL-{task.rid(1)}")
    assert attempts(db, task) == [(1, task.rid(1), "ACCEPTED", f"FL-{task.rid(1)}", None)]  # no new attempt
    check_chain(db, task)


@pytest.mark.parametrize("error", [p.PlatformUnavailable("HTTP_503"), p.PlatformTimeout("READ_TIMEOUT")],
                         ids=["unavailable", "timeout"])
@pytest.mark.parametrize("escalate_after_s", [0.0, POLICY.escalate_after_s], ids=["past-the-bound", "within"])
def test_dispatching_with_key_and_a_silent_platform_escalates_past_the_bound(db: Db, error: p.PlatformError,
                                                                             escalate_after_s: float) -> None:
    """Seed 000 §7.2 ("如果无法确认，就转入人工核查"): the query and every resend under the key unanswered, the task
    goes to MANUAL_REVIEW after Policy.escalate_after_s of quiet, as without a key; DISPATCHING before that. It
    stayed DISPATCHING for as long as the platform was silent."""
    import dataclasses

    task = dispatching(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, caps=KEY_AND_QUERY, find_by_request_id=error, create_flight=error)
    policy = dataclasses.replace(POLICY, escalate_after_s=escalate_after_s)
    result = str(fake.run(reconcile_task(task.id, policy)))
    assert fake.creates() == [task.request] * POLICY.platform_retry.attempts  # the same request, every try
    if escalate_after_s:
        assert result == "unknown"
        assert moves_since(db, task, mark) == []
        assert attempts(db, task) == [(1, task.rid(1), "PENDING", None, None)]
        return
    assert result == S.MANUAL_REVIEW
    assert moves_since(db, task, mark) == [("reconciler", "OUTCOME_UNKNOWN", "DISPATCHING", "MANUAL_REVIEW")]
    view = read(db, task)
    assert (view.status, view.version, view.last_error_code) == (S.MANUAL_REVIEW, version + 1, "PLATFORM_SILENT")
    assert attempts(db, task) == [(1, task.rid(1), "UNKNOWN", None, "PLATFORM_SILENT")]
    check_chain(db, task)


def test_dispatching_without_key_not_found_is_redispatched_under_the_next_attempt(db: Db) -> None:
    task = dispatching(db)
    mark = len(db.audit(task.id))
    fake = FakePlatform(db, caps=QUERY_ONLY, find_by_request_id=None)
    assert reconcile(task.id, fake) == S.EXECUTING
    assert fake.methods() == ["capabilities", "find_by_request_id", "capabilities", "get_device", "create_flight"]
    assert fake.sent("find_by_request_id") == [(task.rid(1),)]
    assert [r.request_id for r in fake.creates()] == [task.rid(2)]
    assert moves_since(db, task, mark) == [
        ("reconciler", "DISPATCH_NOT_CREATED", "DISPATCHING", "DISPATCH_FAILED"),
        ("reconciler", "REDISPATCH_QUEUED", "DISPATCH_FAILED", "QUEUED"),
        ("dispatcher", "PRECHECK_STARTED", "QUEUED", "VALIDATING"),
        ("dispatcher", "DISPATCH_STARTED", "VALIDATING", "DISPATCHING"),
        ("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING"),
    ]
    assert attempts(db, task) == [(1, task.rid(1), "NOT_CREATED", None, "NOT_CREATED"),
                                  (2, task.rid(2), "ACCEPTED", f"FL-{task.rid(2)}", None)]
    view = read(db, task)
    assert (view.dispatch_attempts, view.last_error_code) == (2, "NOT_CREATED")
    check_chain(db, task)


def test_dispatching_without_key_not_found_on_the_last_attempt_fails(db: Db) -> None:
    task = dispatching(db, attempt=MAX_ATTEMPTS)
    mark = len(db.audit(task.id))
    fake = FakePlatform(db, caps=QUERY_ONLY, find_by_request_id=None)
    assert reconcile(task.id, fake) == S.FAILED
    assert fake.methods() == ["capabilities", "find_by_request_id"]
    assert fake.sent("find_by_request_id") == [(task.rid(MAX_ATTEMPTS),)]
    assert moves_since(db, task, mark) == [
        ("reconciler", "DISPATCH_NOT_CREATED", "DISPATCHING", "DISPATCH_FAILED"),
        ("reconciler", "DISPATCH_ABANDONED", "DISPATCH_FAILED", "FAILED"),
    ]
    assert attempts(db, task)[-1] == (MAX_ATTEMPTS, task.rid(MAX_ATTEMPTS), "NOT_CREATED", None, "NOT_CREATED")
    check_chain(db, task)


def test_dispatching_without_key_or_query_goes_to_manual_review(db: Db) -> None:
    task = dispatching(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, caps=NEITHER)
    assert reconcile(task.id, fake) == S.MANUAL_REVIEW
    assert fake.methods() == ["capabilities"]  # nothing to ask, and a resend could make a second flight
    assert moves_since(db, task, mark) == [("reconciler", "OUTCOME_UNKNOWN", "DISPATCHING", "MANUAL_REVIEW")]
    assert db.audit(task.id)[-1]["detail"] == {"code": "NO_KEY_NO_QUERY"}
    view = read(db, task)
    assert (view.version, view.last_error_code, view.dispatch_attempts) == (version + 1, "NO_KEY_NO_QUERY", 1)
    # Closed as the dispatcher closes an attempt it gives up on (I21: PENDING only while DISPATCHING). Found by T4's
    # dispatcher killed before its create (2026-12-05): the reconciler had left it PENDING.
    assert attempts(db, task) == [(1, task.rid(1), "UNKNOWN", None, "NO_KEY_NO_QUERY")]
    check_chain(db, task)


@pytest.mark.parametrize("error", [p.PlatformUnavailable("HTTP_503"), p.PlatformTimeout("READ_TIMEOUT")],
                         ids=["unavailable", "timeout"])
def test_dispatching_without_key_query_failing_is_unknown(db: Db, error: p.PlatformError) -> None:
    task = dispatching(db)
    before = everything(db, task)
    fake = FakePlatform(db, caps=QUERY_ONLY, find_by_request_id=error)
    assert reconcile(task.id, fake) == "unknown"
    assert fake.methods() == ["capabilities", "find_by_request_id"]  # no create_flight: the next scan asks again
    assert everything(db, task) == before


# ---------------------------------------------------------------------------------------------- EXECUTING


@pytest.mark.parametrize(("flight_status", "to", "action", "error_code"), [
    (p.FLIGHT_COMPLETED, S.COMPLETED, "FLIGHT_COMPLETED", None),
    (p.FLIGHT_FAILED, S.FAILED, "FLIGHT_FAILED", "FLIGHT_FAILED"),
    (p.FLIGHT_CANCELLED, S.FAILED, "FLIGHT_CANCELLED_EXTERNALLY", "FLIGHT_CANCELLED_EXTERNALLY"),
])
def test_executing_is_settled_by_get_flight(db: Db, flight_status: str, to: S, action: str,
                                            error_code: str | None) -> None:
    task = executing(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, get_flight=flight(task, flight_status))
    assert reconcile(task.id, fake) == to
    assert fake.methods() == ["get_flight"] and fake.sent("get_flight") == [(task.external_id,)]
    assert moves_since(db, task, mark) == [("reconciler", action, "EXECUTING", to.value)]
    view = read(db, task)
    assert (view.status, view.version, view.last_error_code) == (to, version + 1, error_code)
    if to == S.COMPLETED:
        assert db.report(task.id)["status"] == "PENDING"  # type: ignore[index]
        assert db.outbox(task.id)[-1]["event_type"] == "TaskCompleted"
    check_chain(db, task)


@pytest.mark.parametrize("flight_status", [p.FLIGHT_ACCEPTED, p.FLIGHT_EXECUTING])
def test_executing_still_flying_is_unchanged(db: Db, flight_status: str) -> None:
    task = executing(db)
    before = everything(db, task)
    fake = FakePlatform(db, get_flight=flight(task, flight_status))
    assert reconcile(task.id, fake) == "unchanged"
    assert fake.methods() == ["get_flight"]
    assert everything(db, task) == before


@pytest.mark.parametrize("status", [S.EXECUTING, S.CANCEL_PENDING])
@pytest.mark.parametrize("error", [p.PlatformUnavailable("HTTP_503"), p.PlatformTimeout("READ_TIMEOUT"),
                                   p.PlatformNotFound("FLIGHT_NOT_FOUND")], ids=["unavailable", "timeout", "404"])
def test_get_flight_failing_is_unknown(db: Db, status: S, error: p.PlatformError) -> None:
    task = executing(db) if status == S.EXECUTING else cancel_pending(db)
    before = everything(db, task)
    fake = FakePlatform(db, get_flight=error)
    assert reconcile(task.id, fake) == "unknown"
    assert fake.methods() == ["get_flight"]  # a CANCEL_PENDING task is not re-cancelled blind either
    assert everything(db, task) == before


@pytest.mark.parametrize("status", [S.EXECUTING, S.CANCEL_PENDING, S.DISPATCHING])
def test_a_platform_silent_past_the_bound_sends_the_task_to_manual_review(db: Db, status: S) -> None:
    """Seed 000 §7.2: what cannot be confirmed goes to manual review, after Policy.escalate_after_s of quiet."""
    import dataclasses

    task = {S.EXECUTING: executing, S.CANCEL_PENDING: cancel_pending, S.DISPATCHING: dispatching}[status](db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    error = p.PlatformUnavailable("HTTP_503")
    fake = (FakePlatform(db, caps=QUERY_ONLY, find_by_request_id=error) if status == S.DISPATCHING
            else FakePlatform(db, get_flight=error))
    quiet = dataclasses.replace(POLICY, escalate_after_s=0.0)
    assert str(fake.run(reconcile_task(task.id, quiet))) == S.MANUAL_REVIEW
    assert "create_flight" not in fake.methods() and "cancel_flight" not in fake.methods()  # no guess
    assert moves_since(db, task, mark) == [("reconciler", "OUTCOME_UNKNOWN", status.value, "MANUAL_REVIEW")]
    assert db.audit(task.id)[-1]["detail"]["code"] == "PLATFORM_SILENT"
    view = read(db, task)
    assert (view.status, view.version, view.last_error_code) == (S.MANUAL_REVIEW, version + 1, "PLATFORM_SILENT")
    if status == S.DISPATCHING:  # the attempt in flight closes UNKNOWN with the task's review
        assert attempts(db, task)[-1][2:] == ("UNKNOWN", None, "PLATFORM_SILENT")
    check_chain(db, task)


@pytest.mark.parametrize(("past_the_bound_ms", "result"),
                         [(-1, "unknown"), (0, S.MANUAL_REVIEW), (60, S.MANUAL_REVIEW)],
                         ids=["a-millisecond-before", "at-the-bound", "past-it"])
def test_a_platform_silent_for_exactly_the_bound_escalates_and_audits_the_quiet_time(db: Db, past_the_bound_ms: int,
                                                                                     result: str) -> None:
    """Seed 000 §7.2, Policy.escalate_after_s: a task the platform is silent about stays as it is while it has been
    quiet for less than the bound and goes to MANUAL_REVIEW once quiet for the bound itself (the clock of the
    reconciler's escalating transaction set to the millisecond); the audit says how long, to a tenth of a second."""
    task = executing(db)
    updated_at = db.runtime.transact(lambda tx: as_utc(tx.session.get(DroneTask, task.id).updated_at))
    before = everything(db, task)
    quiet = timedelta(seconds=POLICY.escalate_after_s, milliseconds=past_the_bound_ms)
    fake = FakePlatform(db, get_flight=p.PlatformUnavailable("HTTP_503"))
    clock = db.runtime.clock
    assert isinstance(clock, TickingClock)
    # The clock ticks a millisecond before it answers: the escalating transaction reads updated_at + quiet.
    fake.before["reconcile.escalate"] = lambda: setattr(clock, "now", updated_at + quiet - timedelta(milliseconds=1))
    assert str(fake.run(reconcile_task(task.id, POLICY))) == result
    if result == "unknown":
        assert everything(db, task) == before
        return
    detail = db.audit(task.id)[-1]["detail"]
    assert (detail["code"], detail["from"]) == ("PLATFORM_SILENT", S.EXECUTING)
    assert detail["quiet_s"] == round(quiet.total_seconds(), 1)  # 1800.06 s of quiet is audited as 1800.1
    check_chain(db, task)


def test_executing_without_external_id_has_nothing_to_do(db: Db) -> None:
    task = queued(db)
    for to in (S.VALIDATING, S.DISPATCHING, S.EXECUTING):
        move(db, task, to)
    before = everything(db, task)
    assert before[0].external_task_id is None
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == "nothing-to-do"
    assert fake.calls == []
    assert everything(db, task) == before


# ---------------------------------------------------------------------------------------------- CANCEL_PENDING


@pytest.mark.parametrize(("flight_status", "to", "action"), [
    (p.FLIGHT_CANCELLED, S.CANCELLED, "CANCEL_CONFIRMED"),
    (p.FLIGHT_COMPLETED, S.COMPLETED, "FLIGHT_COMPLETED"),
    (p.FLIGHT_FAILED, S.MANUAL_REVIEW, "FLIGHT_FAILED_DURING_CANCEL"),
])
def test_cancel_pending_is_settled_by_get_flight(db: Db, flight_status: str, to: S, action: str) -> None:
    task = cancel_pending(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, get_flight=flight(task, flight_status))
    assert reconcile(task.id, fake) == to
    assert fake.methods() == ["get_flight"]  # an ended flight is not cancelled again
    assert moves_since(db, task, mark) == [("reconciler", action, "CANCEL_PENDING", to.value)]
    assert (read(db, task).status, read(db, task).version) == (to, version + 1)
    check_chain(db, task)


@pytest.mark.parametrize(("answer", "result", "moves"), [
    (p.CancelResult(accepted=True, status=p.FLIGHT_EXECUTING), "accepted", []),
    (p.PlatformTimeout("READ_TIMEOUT"), "unknown", []),
    (p.CancelResult(accepted=True, status=p.FLIGHT_CANCELLED), S.CANCELLED,
     [("dispatcher", "CANCEL_CONFIRMED", "CANCEL_PENDING", "CANCELLED")]),
    (p.CancelResult(accepted=False, status=p.FLIGHT_EXECUTING), S.EXECUTING,
     [("dispatcher", "CANCEL_REFUSED", "CANCEL_PENDING", "EXECUTING")]),
], ids=["accepted-returning-home", "cancel-timeout", "cancelled-at-once", "refused"])
def test_cancel_pending_still_flying_resends_the_cancel(db: Db, answer: Any, result: str,
                                                        moves: list[tuple[str, str, str, str]]) -> None:
    task = cancel_pending(db)
    mark, version = len(db.audit(task.id)), read(db, task).version
    fake = FakePlatform(db, get_flight=flight(task, p.FLIGHT_EXECUTING), cancel_flight=answer)
    assert reconcile(task.id, fake) == result
    assert fake.methods() == ["get_flight", "cancel_flight"]
    assert fake.sent("cancel_flight") == [(task.external_id,)]
    assert moves_since(db, task, mark) == moves
    view = read(db, task)
    # CANCELLED only on the platform's word (I7): an accepted or timed-out request keeps CANCEL_PENDING.
    assert (view.status, view.version) == ((S(moves[-1][3]), version + 1) if moves else (S.CANCEL_PENDING, version))
    check_chain(db, task)



@pytest.mark.parametrize(("ended", "answer", "move"), [
    (p.FLIGHT_CANCELLED, p.CancelResult(accepted=True, status=p.FLIGHT_CANCELLED), ("CANCEL_CONFIRMED", "CANCELLED")),
    (p.FLIGHT_COMPLETED, p.CancelResult(accepted=False, status=p.FLIGHT_COMPLETED), ("FLIGHT_COMPLETED", "COMPLETED")),
], ids=["cancelled-then-accepted", "completed-then-refused"])
def test_a_cancel_answered_after_the_task_settled_moves_nothing(db: Db, ended: str, answer: p.CancelResult,
                                                                 move: tuple[str, str]) -> None:
    """The platform's event settled the task while the re-sent cancel was on the wire: the cancel's answer, written
    after it, moves nothing and raises nothing (a terminal task never changes)."""
    task = cancel_pending(db)
    fake = FakePlatform(db, get_flight=flight(task, p.FLIGHT_EXECUTING), cancel_flight=answer)
    fake.before["cancel.answer"] = lambda: db.runtime.transact(
        lambda tx: settle(tx, task.id, ended, task.external_id or "", actor="events", reason="event"))
    mark = len(db.audit(task.id))
    fake.run(reconcile_task(task.id, POLICY))
    assert moves_since(db, task, mark) == [("events", move[0], "CANCEL_PENDING", move[1])]
    check_chain(db, task)


# ---------------------------------------------------------------------------------------------- nothing to do


@pytest.mark.parametrize("end", [S.COMPLETED, S.FAILED, S.CANCELLED, S.MANUAL_REVIEW])
def test_terminal_and_manual_review_tasks_are_left_alone(db: Db, end: S) -> None:
    if end == S.CANCELLED:
        task = new_task(db)
        db.runtime.transact(lambda tx: request_cancel(tx, str(task.id), task.user))
    else:
        task = executing(db)
        status = {S.COMPLETED: p.FLIGHT_COMPLETED, S.FAILED: p.FLIGHT_FAILED}.get(end)
        if status is None:
            move(db, task, S.CANCEL_PENDING)
            status = p.FLIGHT_FAILED  # a flight failed during a cancel: MANUAL_REVIEW
        assert task.external_id is not None
        db.runtime.transact(lambda tx: settle(tx, task.id, status, task.external_id, actor="setup", reason="setup"))
    assert read(db, task).status == end
    before = everything(db, task)
    fake = FakePlatform(db)
    assert reconcile(task.id, fake) == "nothing-to-do"
    assert fake.calls == []
    assert everything(db, task) == before


# ---------------------------------------------------------------------------------------------- concurrent moves


def dispatcher_writes_back(db: Db, task: Task) -> Callable[[], None]:
    """The slow dispatcher's write-back lands: the platform did make the flight of the latest attempt."""
    def late() -> None:
        assert task.request is not None
        path = db.runtime.transact(lambda tx: settle(tx, task.id, p.FLIGHT_ACCEPTED, f"FL-{task.request.request_id}",
                                                     actor="dispatcher", reason="accepted"))
        assert path == [S.EXECUTING]
    return late


@pytest.mark.parametrize(("caps", "find", "at"), [
    (KEY_AND_QUERY, None, "reconcile.read_attempt"),
    (KEY_AND_QUERY, p.FLIGHT_EXECUTING, "reconcile.settle"),
    (QUERY_ONLY, None, "reconcile.not_created"),
    (NEITHER, None, "reconcile.manual"),
], ids=["before-reading-the-attempt", "before-settling-a-found-flight", "before-not-created",
        "before-manual-review"])
def test_dispatching_task_moved_between_effects(db: Db, caps: p.PlatformCapabilities, find: str | None,
                                                at: str) -> None:
    task = dispatching(db)
    mark = len(db.audit(task.id))
    fake = FakePlatform(db, caps=caps, find_by_request_id=flight(task, find) if find else None)
    fake.before[at] = dispatcher_writes_back(db, task)
    assert reconcile(task.id, fake) == "moved"
    assert at in fake.transactions and not fake.before  # the concurrent write did land there
    assert "create_flight" not in fake.methods()
    if at == "reconcile.read_attempt":
        assert fake.calls == []
    # Only the dispatcher's write-back: the reconciler's stale view wrote nothing.
    assert moves_since(db, task, mark) == [("dispatcher", "FLIGHT_CONFIRMED", "DISPATCHING", "EXECUTING")]
    assert [a[2] for a in attempts(db, task)] == ["ACCEPTED"]
    check_chain(db, task)


@pytest.fixture
def two_connections(tmp_path: Path) -> Iterator[tuple[Db, Runtime]]:
    """One SQLite file, two connections: the reconciler's and another worker's, which commits on its own (the
    in-memory database has one connection, so nothing can commit inside the reconciler's transaction). pysqlite
    opens a transaction at the first write, so the reconciler's reads hold no lock and the other connection
    can commit between them and its UPDATE, as READ COMMITTED lets another transaction do on PostgreSQL."""
    path = str(tmp_path / "race.sqlite")
    engine = sqlite_engine(path)
    clock = TickingClock()
    runtime = Runtime(sessions=sessionmaker(engine, expire_on_commit=False), clock=clock, new_id=uuid.uuid4)
    fleet = runtime.transact(lambda tx: seed_fleet(tx, SMALL_FLEET))
    other_engine = sqlite_engine(path)
    other = Runtime(sessions=sessionmaker(other_engine, expire_on_commit=False), clock=clock, new_id=uuid.uuid4)
    yield Db(engine, runtime, fleet), other
    other_engine.dispose()
    engine.dispose()


@pytest.mark.parametrize("case", ["created-cancelled-by-user", "executing-cancel-requested"])
def test_stale_write_inside_a_reconcile_transaction_is_moved(two_connections: tuple[Db, Runtime], case: str) -> None:
    """A user's cancel commits on another connection after the reconciler read the task and before its
    conditional UPDATE (READ COMMITTED): the UPDATE matches no row, StaleWrite, and reconcile answers "moved"."""
    db, other = two_connections
    if case == "created-cancelled-by-user":
        task = new_task(db)
        publish(db, task)
        fake, expected = FakePlatform(db), (S.CREATED, "CANCELLED_BEFORE_DISPATCH", S.CANCELLED, 1)
    else:
        task = executing(db)
        fake = FakePlatform(db, get_flight=flight(task, p.FLIGHT_COMPLETED))
        expected = (S.EXECUTING, "CANCEL_REQUESTED", S.CANCEL_PENDING, read(db, task).version + 1)
    mark = len(db.audit(task.id))
    fired: list[str] = []

    def user_cancels_first(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("UPDATE drone_task") and not fired:
            fired.append(statement)
            other.transact(lambda tx: request_cancel(tx, str(task.id), task.user))

    sa_event.listen(db.engine, "before_cursor_execute", user_cancels_first)
    try:
        assert reconcile(task.id, fake) == "moved"
    finally:
        sa_event.remove(db.engine, "before_cursor_execute", user_cancels_first)
    assert fired, "the race never happened"
    frm, action, to, version = expected
    # Only the user's move: the reconciler's QUEUED_BY_RECONCILER / FLIGHT_COMPLETED rolled back with its UPDATE.
    assert moves_since(db, task, mark) == [(task.user, action, frm.value, to.value)]
    assert (read(db, task).status, read(db, task).version) == (to, version)
    assert "create_flight" not in fake.methods() and db.report(task.id) is None
    check_chain(db, task)


# ---------------------------------------------------------------------------------------------- property


QUERY_ANSWERS = st.one_of(st.none(), st.sampled_from(FLIGHT_STATUSES), st.sampled_from(["unavailable", "timeout"]))
CREATE_ANSWERS = st.sampled_from(["accept", "timeout", "unavailable", "throttled", "rejected"])
RESULTS = {"unknown", "moved", "retries-exhausted", "fenced", *(s.value for s in S)}


def _query_answer(task: Task, a: str | None) -> Any:
    if a is None:
        return None
    if a == "unavailable":
        return p.PlatformUnavailable("HTTP_503")
    if a == "timeout":
        return p.PlatformTimeout("READ_TIMEOUT")

    def found(rid: str) -> p.FlightInfo:
        return p.FlightInfo(f"FL-{rid}", rid, task.request.device_id if task.request else "", a, str(task.id))
    return found


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attempt=st.integers(1, MAX_ATTEMPTS), key=st.booleans(), query=st.booleans(),
       finds=st.lists(QUERY_ANSWERS, min_size=1, max_size=4), creates=st.lists(CREATE_ANSWERS, min_size=1, max_size=6))
def test_property_dispatching_creates_only_under_the_latest_attempt(
        db: Db, attempt: int, key: bool, query: bool, finds: list[str | None], creates: list[str]) -> None:
    """Whatever the platform answers, reconciling a DISPATCHING task sends create_flight only while the task is
    DISPATCHING and only under its latest attempt's request id; a new attempt (a new key) only after the
    platform said "not found" and has no key to dedupe on; every move is legal; and once the task is terminal
    another reconcile changes nothing and calls nothing."""
    task = dispatching(db, attempt)
    errors = {"timeout": p.PlatformTimeout("READ_TIMEOUT"), "unavailable": p.PlatformUnavailable("HTTP_503"),
              "throttled": p.PlatformThrottled("HTTP_429"), "rejected": p.PlatformRejected("NO_FLY_ZONE")}

    def checked(answer: str) -> Callable[[p.CreateFlight], p.FlightInfo]:
        def create(request: p.CreateFlight) -> p.FlightInfo:
            view = read(db, task)
            latest = attempts(db, task)[-1]
            assert view.status == S.DISPATCHING, view.status
            assert request.request_id == latest[1] == task.rid(view.dispatch_attempts) and latest[2] == "PENDING"
            if answer == "accept":
                return accept(request)
            raise errors[answer]
        return create

    caps = p.PlatformCapabilities(idempotency_key=key, query_by_request_id=query)
    fake = FakePlatform(db, caps=caps, find_by_request_id=[_query_answer(task, a) for a in finds],
                        create_flight=[checked(a) for a in creates])
    result = reconcile(task.id, fake)
    assert result in RESULTS
    event(f"result: {result}")

    new_attempt = int(not key and query and finds[0] is None and attempt < MAX_ATTEMPTS)
    rids = [r.request_id for r in fake.creates()]
    assert len(attempts(db, task)) == attempt + new_attempt
    assert set(rids) <= {task.rid(attempt + new_attempt)}
    if not key and not new_attempt:
        assert rids == []  # no key: nothing is sent again unless the platform said the first never arrived
    if query:
        assert fake.calls[1].method == "find_by_request_id" and fake.calls[1].args == (task.rid(attempt),)
    else:
        assert "find_by_request_id" not in fake.methods()
    check_chain(db, task)
    if not key and not query:
        assert (result, read(db, task).status) == (S.MANUAL_REVIEW, S.MANUAL_REVIEW)

    view = read(db, task)
    if view.status in TERMINAL:
        before = everything(db, task)
        again = FakePlatform(db, caps=caps, get_flight=p.FlightInfo("FL-x", None, view.device_id, p.FLIGHT_EXECUTING))
        assert reconcile(task.id, again) == "nothing-to-do"
        assert again.calls == [] and everything(db, task) == before


def _approved_draft(db: Db, user: str, area: str) -> str:
    """A new draft of ``user``'s in ``area``, approved, committed: what a confirm takes."""
    assert db.fleet is not None
    fleet = db.fleet

    def approve(tx: Any) -> str:
        d = create_draft(tx, user, "inspect", area, random_plan(random.Random(next(PLAN_SEEDS)), fleet, area))
        decide_approval(tx, "approver-1", d.id, d.version, approve=True)
        return str(d.id)
    return str(db.runtime.transact(approve))


@pytest.mark.parametrize("race", ["same-version-another-key", "same-key-another-draft"])
def test_a_confirm_that_loses_its_insert_to_a_concurrent_one_answers_as_a_retry_would(
        two_connections: tuple[Db, Runtime], race: str) -> None:
    """Seed 000 §6.1, §8.1 (one draft version makes one task; a key answers with its task or refuses a new payload):
    another confirm commits on another connection after this one read (no task yet) and before its insert, which then
    breaks a unique key. This confirm answers as it would have, had it come second: the winner's task as a replay
    (same draft version), or IDEMPOTENCY_KEY_REUSED (same key, another draft); never the database's error."""
    db, other = two_connections
    assert db.fleet is not None
    user, area = db.fleet.operators[0]

    first, second = _approved_draft(db, user, area), _approved_draft(db, user, area)
    winner_cmd = ConfirmDraft(user, first, 1, "key-winner")
    loser_cmd = (ConfirmDraft(user, first, 1, "key-loser") if race == "same-version-another-key"
                 else ConfirmDraft(user, second, 1, "key-winner"))
    won: list[Any] = []

    def the_other_confirms_first(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO drone_task") and not won:
            won.append(other.run(confirm_draft(winner_cmd)))

    sa_event.listen(db.engine, "before_cursor_execute", the_other_confirms_first)
    try:
        if race == "same-version-another-key":
            answer = db.runtime.run(confirm_draft(loser_cmd))
        else:
            with pytest.raises(Conflict) as refused:
                db.runtime.run(confirm_draft(loser_cmd))
    finally:
        sa_event.remove(db.engine, "before_cursor_execute", the_other_confirms_first)
    assert won, "the race never happened"
    (winner,) = won
    if race == "same-version-another-key":
        assert answer == TaskCreated(winner.task_id, winner.status, winner.version, replayed=True)
    else:
        assert refused.value.code == "IDEMPOTENCY_KEY_REUSED"
    assert db.counts()["drone_task"] == 1  # one task, the winner's


def test_a_key_used_before_is_judged_before_the_new_requests_draft(db: Db) -> None:
    """Seed 000 §6.1: the key's task answers first; a reused key refuses another payload (IDEMPOTENCY_KEY_REUSED)
    whatever that payload names, even a draft that does not exist (not DRAFT_NOT_FOUND: the key is what was reused)."""
    assert db.fleet is not None
    user, area = db.fleet.operators[0]

    made = db.runtime.run(confirm_draft(ConfirmDraft(user, _approved_draft(db, user, area), 1, "key-once")))
    before = db.counts()
    with pytest.raises(Conflict) as refused:
        db.runtime.run(confirm_draft(ConfirmDraft(user, str(uuid.uuid4()), 1, "key-once")))
    assert (refused.value.code, refused.value.detail.get("task_id")) == ("IDEMPOTENCY_KEY_REUSED", made.task_id)
    assert db.counts() == before
