"""Bounded retries end in DEAD (seed 000 §5.5): an outbox row after the publisher's attempts, a report after the
upload attempts, each with an audit row and an alert; a supervisor lists what waits on their areas and re-drives
it with a reason, which gives it a fresh budget and is audited; what is not waiting cannot be re-driven twice."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from core_db_support import Db, TickingClock, make_db

from reference.copilot.db import as_utc
from reference.copilot.effects import (
    BrokerUnavailable,
    Jitter,
    ObjectStoreError,
    Publish,
    PutObject,
    Transact,
    run_sync,
)
from reference.copilot.errors import Conflict, NotFound, ValidationFailed
from reference.copilot.models import (
    DeadLetter,
    PlatformEventRow,
    TaskEventOutbox,
    TaskReport,
    UserAreaPermission,
)
from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.services import ops
from reference.copilot.services.outbox import publish_batch, release
from reference.copilot.services.reports import due_reports, upload_report
from reference.copilot.tasks import TASK_CREATED, add_audit, add_pending_report
from systems.copilot.workload import SUPERVISOR_ID

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "copilot-api.json"
POLICY = Policy(outbox_retry=RetryPolicy(attempts=3, base_s=1.0, cap_s=2.0),
                report_retry=RetryPolicy(attempts=2, base_s=1.0, cap_s=2.0))


def _drive(db: Db, work, *, fail: type[Exception] | None = None):
    """Run a Work generator against the database (reference.copilot.effects.run_sync), every Publish and PutObject
    failing with ``fail`` (or succeeding), jitter drawing 0."""

    def perform(effect):
        if isinstance(effect, Transact):
            return db.runtime.transact(effect.fn)
        if isinstance(effect, (Publish, PutObject)) and fail is not None:
            raise fail("down")
        return 0.0 if isinstance(effect, Jitter) else None

    return run_sync(work, perform)


def _outbox_row(db: Db, task_id: uuid.UUID) -> uuid.UUID:
    event_id = uuid.uuid4()

    def add(tx) -> None:
        tx.session.add(TaskEventOutbox(id=event_id, task_id=task_id, event_type=TASK_CREATED, task_version=0,
                                       payload={}, status="PENDING", attempts=0, available_at=tx.now,
                                       created_at=tx.now))
    db.runtime.transact(add)
    return event_id


def _make_due(db: Db, model: type, key: uuid.UUID) -> None:
    def due(tx) -> None:
        row = tx.session.get(model, key)
        if model is TaskEventOutbox:
            row.available_at = tx.now - timedelta(seconds=1)
        else:
            row.next_attempt_at = tx.now - timedelta(seconds=1)
    db.runtime.transact(due)


def _actions(db: Db, task_id: uuid.UUID) -> list[str]:
    return [a["action"] for a in db.audit(task_id)]


def test_an_outbox_row_goes_dead_after_the_policys_attempts_and_a_supervisor_redrives_it(caplog) -> None:
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    event_id = _outbox_row(db, task_id)
    with caplog.at_level(logging.ERROR, logger="reference.copilot.alerts"):
        for attempt in range(1, 4):
            _make_due(db, TaskEventOutbox, event_id)
            sent, ok = _drive(db, publish_batch(POLICY), fail=BrokerUnavailable)
            assert (sent, ok) == (0, False)
            status = db.runtime.transact(lambda tx: tx.session.get(TaskEventOutbox, event_id).status)
            assert status == ("DEAD" if attempt == 3 else "PENDING"), attempt
    assert [r.alert for r in caplog.records] == ["OUTBOX_DEAD"]  # one alert, when it went DEAD
    assert _actions(db, task_id) == ["OUTBOX_DEAD"]
    _make_due(db, TaskEventOutbox, event_id)
    assert _drive(db, publish_batch(POLICY)) == (0, True)  # a DEAD row is not claimed again

    waiting = db.runtime.transact(lambda tx: ops.dead_items(tx, SUPERVISOR_ID))
    assert [o["event_id"] for o in waiting["outbox"]] == [str(event_id)]
    assert waiting["outbox"][0]["attempts"] == 3 and waiting["outbox"][0]["last_error"] == "down"
    assert db.runtime.transact(lambda tx: ops.dead_items(tx, "operator-002"))["outbox"] == []  # not their area

    done = db.runtime.transact(lambda tx: ops.redrive(tx, "outbox", str(event_id), SUPERVISOR_ID, "broker is back"))
    assert done == {"kind": "outbox", "id": str(event_id), "status": "PENDING", "redrive_count": 1}
    audit = db.audit(task_id)[-1]
    assert audit["action"] == "OUTBOX_REDRIVEN" and audit["actor"] == f"operator:{SUPERVISOR_ID}"
    assert audit["detail"]["reason"] == "broker is back" and audit["detail"]["attempts_spent"] == 3
    with pytest.raises(Conflict) as err:  # a double click re-drives once
        db.runtime.transact(lambda tx: ops.redrive(tx, "outbox", str(event_id), SUPERVISOR_ID, "again"))
    assert err.value.code == "NOT_DEAD"
    assert db.runtime.transact(lambda tx: tx.session.get(TaskEventOutbox, event_id).attempts) == 0  # a fresh budget
    assert _drive(db, publish_batch(POLICY)) == (1, True)  # published at once
    assert db.outbox(task_id)[0]["status"] == "SENT"


def test_a_dead_outbox_row_keeps_a_bounded_prefix_of_the_brokers_error() -> None:
    """A broker's error can be long (a client quotes its whole response): the row keeps its first 2,000 characters
    for the supervisor who reads it (while it backs off, and DEAD), the OUTBOX_DEAD audit row its first 200."""
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    event_id = _outbox_row(db, task_id)
    long_error = "".join(f"{i:05d}" for i in range(500))  # 2,500 characters, each prefix distinct
    for claims in (POLICY.outbox_retry.attempts - 1, POLICY.outbox_retry.attempts):  # budget left, then spent
        db.runtime.transact(lambda tx, n=claims: setattr(tx.session.get(TaskEventOutbox, event_id), "attempts", n))
        dead = db.runtime.transact(lambda tx: release(tx, [str(event_id)], 0.0, long_error, POLICY.outbox_retry))
        last_error = db.runtime.transact(lambda tx: tx.session.get(TaskEventOutbox, event_id).last_error)
        assert last_error == long_error[:2000], claims
    assert dead == [str(event_id)]
    (audit,) = db.audit(task_id)
    assert (audit["action"], audit["detail"]["error"]) == ("OUTBOX_DEAD", long_error[:200])


def test_a_report_goes_dead_after_the_upload_attempts_and_is_uploaded_after_a_redrive(caplog) -> None:
    db = make_db()
    task_id = db.insert_task("COMPLETED", 5)
    db.runtime.transact(lambda tx: add_pending_report(tx, task_id))
    with caplog.at_level(logging.ERROR, logger="reference.copilot.alerts"):
        assert _drive(db, upload_report(task_id, POLICY), fail=ObjectStoreError) == "upload-failed"
        assert _drive(db, upload_report(task_id, POLICY), fail=ObjectStoreError) == "dead"
    assert [r.alert for r in caplog.records] == ["REPORT_DEAD"]
    assert db.report(task_id)["status"] == "DEAD"
    assert _actions(db, task_id) == ["REPORT_DEAD"]
    assert db.task(task_id)["status"] == "COMPLETED"  # the task's result is not the report's
    assert _drive(db, upload_report(task_id, POLICY)) == "nothing-to-do"  # a redelivery does not revive it
    _make_due(db, TaskReport, task_id)
    assert db.runtime.transact(lambda tx: due_reports(tx, 10)) == []  # nor does the sweeper

    done = db.runtime.transact(lambda tx: ops.redrive(tx, "report", str(task_id), SUPERVISOR_ID, "store is back"))
    assert done["status"] == "PENDING" and done["redrive_count"] == 1
    assert db.runtime.transact(lambda tx: tx.session.get(TaskReport, task_id).attempts) == 0  # a fresh budget
    assert _drive(db, upload_report(task_id, POLICY)) == "uploaded"
    assert db.report(task_id)["status"] == "UPLOADED"
    assert _actions(db, task_id) == ["REPORT_DEAD", "REPORT_REDRIVEN"]


def test_a_failed_upload_is_due_again_after_its_exponential_step_capped() -> None:
    """Seed 000 §8.2 (a failed report upload is retried with backoff): after failed upload n the report is due again
    min(cap, base * 2^n) after the failure (no jitter: one worker sweeps reports), not before."""
    db = make_db()
    task_id = db.insert_task("COMPLETED", 5)
    db.runtime.transact(lambda tx: add_pending_report(tx, task_id))
    retry = RetryPolicy(attempts=6, base_s=1.0, cap_s=4.0)
    clock = db.runtime.clock
    assert isinstance(clock, TickingClock)
    failed_at = []

    def perform(effect):
        if isinstance(effect, PutObject):
            raise ObjectStoreError("down")
        if effect.name == "report.failed":
            failed_at.append(clock.now + timedelta(milliseconds=1))  # the failure's transaction reads the next tick
        return db.runtime.transact(effect.fn)

    steps = []
    for _ in range(retry.attempts - 1):
        assert run_sync(upload_report(task_id, Policy(report_retry=retry)), perform) == "upload-failed"
        due = db.runtime.transact(lambda tx: as_utc(tx.session.get(TaskReport, task_id).next_attempt_at))
        steps.append((due - failed_at[-1]).total_seconds())
        assert db.runtime.transact(lambda tx: due_reports(tx, 10)) == []  # not due before its step
        clock.now = due - timedelta(milliseconds=1)
        assert db.runtime.transact(lambda tx: due_reports(tx, 10)) == [task_id]  # due at its end
    assert steps == [retry.max_delay(n) for n in range(retry.attempts - 1)] == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_dead_report_keeps_a_bounded_prefix_of_the_stores_error() -> None:
    """A long object-store error is kept as its first 2,000 characters on the report and its first 200 in the
    REPORT_DEAD audit (the bounds of the columns the operator reads)."""
    db = make_db()
    task_id = db.insert_task("COMPLETED", 5)
    db.runtime.transact(lambda tx: add_pending_report(tx, task_id))
    long_error = "".join(f"{k:05d}" for k in range(1000))  # 5,000 characters, every prefix different
    last = Policy(report_retry=RetryPolicy(attempts=1, base_s=1.0, cap_s=2.0))

    def perform(effect):
        if isinstance(effect, PutObject):
            raise ObjectStoreError(long_error)
        return db.runtime.transact(effect.fn) if isinstance(effect, Transact) else 0.0

    assert run_sync(upload_report(task_id, last), perform) == "dead"
    report = db.runtime.transact(lambda tx: tx.session.get(TaskReport, task_id))
    assert (report.status, report.last_error) == ("DEAD", long_error[:2000])
    (audit,) = db.audit(task_id)
    assert (audit["action"], audit["detail"]["error"]) == ("REPORT_DEAD", long_error[:200])


def test_a_report_counts_its_own_tasks_platform_events_and_audit_only() -> None:
    """Seed 000 §4.1 step 12: the report summarises the task: the platform events of its own flight by kind and its
    own audit trail, whatever other tasks' rows the tables hold."""
    db = make_db()
    task_id, other_id = db.insert_task("COMPLETED", 5), db.insert_task("COMPLETED", 5)
    db.runtime.transact(lambda tx: add_pending_report(tx, task_id))

    def events(tx) -> None:
        for tid, flight, kinds in ((task_id, "FL-1", ["TELEMETRY", "TELEMETRY", "ALERT"]),
                                   (other_id, "FL-2", ["TELEMETRY", "COMPLETED", "ALERT", "ALERT"])):
            for seq, kind in enumerate(kinds, start=1):
                tx.session.add(PlatformEventRow(external_task_id=flight, seq=seq, task_id=tid, kind=kind,
                                                occurred_at=tx.now, received_at=tx.now, payload={}))
        add_audit(tx, actor="test", action="OTHER_TASKS_ROW", task_id=other_id)
    db.runtime.transact(events)
    uploaded = []

    def perform(effect):
        if isinstance(effect, PutObject):
            uploaded.append(json.loads(effect.data))
            return None
        return db.runtime.transact(effect.fn) if isinstance(effect, Transact) else 0.0

    assert run_sync(upload_report(task_id, POLICY), perform) == "uploaded"
    (body,) = uploaded
    assert (body["task_id"], body["event_counts"]) == (str(task_id), {"ALERT": 1, "TELEMETRY": 2})
    assert body["audit_trail"] == []  # the other task's audit row is not this one's


def test_a_failed_upload_of_a_report_another_worker_uploaded_neither_counts_nor_pages(caplog) -> None:
    """Two report workers on one report (a redelivery and the sweeper): the other's upload lands while this one's
    fails. The failure finds the report UPLOADED and records nothing: no error, no DEAD, no page (seed 000 §5.5:
    what outlives its retry policy pages a person, nothing else)."""
    db = make_db()
    task_id = db.insert_task("COMPLETED", 5)
    db.runtime.transact(lambda tx: add_pending_report(tx, task_id))
    one_attempt_left = Policy(report_retry=RetryPolicy(attempts=1, base_s=1.0, cap_s=2.0))

    def perform(effect):
        if isinstance(effect, PutObject):
            assert _drive(db, upload_report(task_id, POLICY)) == "uploaded"  # the other worker, meanwhile
            raise ObjectStoreError("down")
        return db.runtime.transact(effect.fn) if isinstance(effect, Transact) else 0.0

    with caplog.at_level(logging.ERROR, logger="reference.copilot.alerts"):
        assert run_sync(upload_report(task_id, one_attempt_left), perform) == "upload-failed"
    assert [r.alert for r in caplog.records] == []
    report = db.runtime.transact(lambda tx: tx.session.get(TaskReport, task_id))
    assert (report.status, report.last_error) == ("UPLOADED", None)
    assert _actions(db, task_id) == []


def test_a_supervisor_redrives_a_consumers_dead_letter_through_ops() -> None:
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    event_id = _outbox_row(db, task_id)

    def dead(tx) -> int:
        letter = DeadLetter(consumer="dispatcher", event_id=event_id, task_id=task_id, event_type=TASK_CREATED,
                            payload={}, error_code="POISON", error_message="bad", attempts=3, history=[],
                            created_at=tx.now)
        tx.session.add(letter)
        tx.session.flush()
        return int(letter.id)
    letter_id = db.runtime.transact(dead)
    waiting = db.runtime.transact(lambda tx: ops.dead_items(tx, SUPERVISOR_ID))
    assert [d["id"] for d in waiting["dead_letters"]] == [letter_id]
    done = db.runtime.transact(lambda tx: ops.redrive(tx, "dead-letter", str(letter_id), SUPERVISOR_ID, "fixed"))
    assert done == {"kind": "dead-letter", "id": str(letter_id), "event_id": str(event_id), "status": "REDRIVEN",
                    "redrive_count": 1}
    assert _actions(db, task_id) == ["DEAD_LETTER_REDRIVEN"]
    assert db.runtime.transact(lambda tx: ops.dead_items(tx, SUPERVISOR_ID))["dead_letters"] == []


def test_the_dead_items_list_the_documented_number_of_each_kind_oldest_first() -> None:
    """docs/openapi/copilot-api.json: GET /v1/ops/dead lists at most N of each kind, oldest first."""
    spec = json.loads(OPENAPI.read_text())
    summary = spec["paths"]["/v1/ops/dead"]["get"]["summary"]
    most = int(re.search(r"at most (\d+) of each kind", summary).group(1))  # type: ignore[union-attr]
    db = make_db()
    task_id = db.insert_task("CREATED", 0)

    def dead_rows(tx) -> list[uuid.UUID]:
        ids = [uuid.uuid4() for _ in range(most + 1)]
        for n, event_id in enumerate(ids):
            tx.session.add(TaskEventOutbox(id=event_id, task_id=task_id, event_type=TASK_CREATED, task_version=0,
                                           payload={}, status="DEAD", attempts=3, available_at=tx.now,
                                           created_at=tx.now, dead_at=tx.now + timedelta(seconds=n)))
        return ids
    ids = db.runtime.transact(dead_rows)
    listed = db.runtime.transact(lambda tx: ops.dead_items(tx, SUPERVISOR_ID))["outbox"]
    assert [o["event_id"] for o in listed] == [str(i) for i in ids[:most]]


def test_a_redrive_is_refused_clearly_and_changes_nothing() -> None:
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    event_id = _outbox_row(db, task_id)
    before = db.counts()

    def redrive(kind: str, item: str, who: str = SUPERVISOR_ID, reason: str = "why"):
        return db.runtime.transact(lambda tx: ops.redrive(tx, kind, item, who, reason))

    with pytest.raises(Conflict, match="PENDING, not DEAD"):
        redrive("outbox", str(event_id))
    for kind, item, code in (("outbox", "not-a-uuid", "OUTBOX_EVENT_NOT_FOUND"),
                             ("outbox", str(uuid.uuid4()), "OUTBOX_EVENT_NOT_FOUND"),
                             ("report", str(task_id), "REPORT_NOT_FOUND"),
                             ("dead-letter", "12345", "DEAD_LETTER_NOT_FOUND"),
                             ("dead-letter", "1e3", "DEAD_LETTER_NOT_FOUND"),
                             ("dead-letter", "abc", "DEAD_LETTER_NOT_FOUND"),  # ASCII, not digits
                             ("dead-letter", "9" * 19, "DEAD_LETTER_NOT_FOUND"),  # past a BIGINT id
                             ("queue", "1", "UNKNOWN_KIND")):
        with pytest.raises(NotFound) as err:
            redrive(kind, item)
        assert err.value.code == code, (kind, item)
    # Another area's row is "not found", not "forbidden": no oracle.
    db.runtime.transact(lambda tx: tx.session.execute(
        UserAreaPermission.__table__.delete().where(UserAreaPermission.user_id == SUPERVISOR_ID,
                                                    UserAreaPermission.area_id == "SITE-001")))
    with pytest.raises(NotFound):
        redrive("outbox", str(event_id))
    with pytest.raises(ValidationFailed):
        redrive("outbox", str(event_id), reason="  ")
    assert db.counts() == before



def test_r11_needs_its_redrive_without_it_the_checkers_see_dead_rows_never_redriven() -> None:
    """The catalogue's R11 passes (its expectation and every invariant); the same schedule without the supervisor's
    re-drive leaves DEAD rows that I6 and I8 name as such, and the expectation says what is missing."""
    import dataclasses

    from scenarios.catalogue import load_catalogue

    CATALOGUE = load_catalogue("copilot")
    from scenarios.runner import simulate
    from scenarios.verdicts import VIOLATED

    r11 = CATALOGUE["R11"]
    assert r11.policy["outbox_retry"]["attempts"] == 4
    passed = simulate(r11, 2)
    assert passed.passed, (passed.exercised, [v.as_json() for v in passed.verdicts if v.status == VIOLATED])
    alone = dataclasses.replace(r11, faults=tuple(f for f in r11.faults if f.fault != "redrive-dead"))
    result = simulate(alone, 2)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert {"I6", "I8"} <= set(violated)
    assert all("DEAD" in x.message and "re-driven" in x.message for x in violated["I6"].violations)
    assert all("went DEAD" in x.message for x in violated["I8"].violations)
    assert not any("only" in x.message for v in violated.values() for x in v.violations)  # not before the budget
    assert result.exercised is not None and "re-drive" in result.exercised


def test_the_refusal_scenarios_see_the_security_log(monkeypatch) -> None:
    """S4's expectation counts the security log's rows against the refusals the attackers got: with the log's write
    switched off, the scenario says what is missing."""
    import reference.copilot.api as api_module
    from scenarios.catalogue import load_catalogue
    CATALOGUE = load_catalogue("copilot")
    from scenarios.runner import simulate

    assert simulate(CATALOGUE["S4"], 1).passed
    monkeypatch.setattr(api_module, "record_refusal", lambda *args, **kwargs: None)
    result = simulate(CATALOGUE["S4"], 1)
    assert not result.passed and "missing from the security log" in (result.exercised or "")
