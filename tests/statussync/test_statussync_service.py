"""The status service's event entry (reference.statussync.service) in process on SQLite, without its HTTP shell: the
rules that belong to the service whichever shell calls it (an execution token the service did not sign is refused
before anything is read or written, so a forger cannot claim the eventId a real producer will send; another user's
task is refused a detail token as a task that does not exist; the audited admin correction of §4.2)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.statussync.models import StatusBase, TaskCorrection, TaskEventLog
from reference.statussync.registry import STEPS, TENANT, install
from reference.statussync.service import (
    Correction,
    NewTask,
    Refused,
    correct_task,
    create_task,
    heartbeat,
    report_event,
    subscription_token,
)

T = TypeVar("T")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        install(conn)
    yield engine
    engine.dispose()


def in_tx(engine: Engine, fn: Callable[[Tx], T]) -> T:
    with Session(engine) as session, session.begin():
        return fn(Tx(session, datetime.now(UTC).replace(tzinfo=None), lambda: pytest.fail("no ids drawn")))


def rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in StatusBase.metadata.sorted_tables}


def first_step(engine: Engine, task_id: str) -> dict[str, Any]:
    new = NewTask(task_id, TENANT, "u1", "report", tuple((s[0], s[1]) for s in STEPS))
    return dict(in_tx(engine, lambda tx: create_task(tx, new))["steps"][0])


def started(ctx: dict[str, Any]) -> dict[str, Any]:
    return {"eventId": f"{ctx['taskId']}:started", "taskId": ctx["taskId"], "taskAttempt": 1,
            "stepId": ctx["stepId"], "stepAttempt": ctx["stepAttempt"], "operationCode": ctx["operationCode"],
            "producerId": ctx["producerId"], "sourceSeq": 1, "eventType": "STEP_STARTED",
            "businessStatus": "PREPARING"}


@pytest.mark.parametrize(("name", "forged"), [("bad-signature", None), ("no-dot", "not-a-token"),
                                               ("not-base64", "%%%.0"), ("not-ascii", "é.é"), ("empty", "")])
def test_a_forged_token_is_refused_keeping_nothing_so_the_real_event_id_stays_free(engine: Engine, name: str,
                                                                                    forged: str | None) -> None:
    ctx = first_step(engine, f"task-forged-{name}")
    event = started(ctx)
    signed = ctx["executionToken"].rpartition(".")[0] + "." + "0" * 64 if forged is None else forged
    before = rows(engine)
    answer = in_tx(engine, lambda tx: report_event(tx, event, signed)).answer
    assert answer["code"] == "TOKEN_REFUSED" and answer["accepted"] is False
    assert rows(engine) == before  # no dedup row: the refusal is not this eventId's first answer
    real = in_tx(engine, lambda tx: report_event(tx, event, ctx["executionToken"])).answer
    assert real["accepted"] is True and real["duplicate"] is False


def test_a_heartbeat_takes_the_step_attempts_own_token(engine: Engine) -> None:
    ctx = first_step(engine, "task-heartbeat")
    in_tx(engine, lambda tx: report_event(tx, started(ctx), ctx["executionToken"]))
    args = (ctx["taskId"], ctx["stepId"], ctx["stepAttempt"], ctx["producerId"])
    assert in_tx(engine, lambda tx: heartbeat(tx, *args, ctx["executionToken"]))
    with pytest.raises(Refused, match="TOKEN_REFUSED"):
        in_tx(engine, lambda tx: heartbeat(tx, *args, "forged"))
    with pytest.raises(Refused, match="TOKEN_MISMATCH"):
        in_tx(engine, lambda tx: heartbeat(tx, ctx["taskId"], "02_parse", 1, ctx["producerId"],
                                           ctx["executionToken"]))


def test_a_detail_token_for_another_users_task_is_refused_as_for_a_task_that_does_not_exist(engine: Engine) -> None:
    """§7.2: the ACL is checked again; the answer does not tell a prober whether the task exists."""
    first_step(engine, "task-acl")
    with engine.connect() as conn:
        granted = subscription_token(conn, TENANT, "u1", "task-acl", 0.0, 60.0)
    assert granted["channel"] == f"task_detail:{TENANT}/task-acl"
    for user, task in (("u2", "task-acl"), ("u1", "task-that-is-not-there")):
        with pytest.raises(Refused) as refused, engine.connect() as conn:
            subscription_token(conn, TENANT, user, task, 0.0, 60.0)
        assert refused.value.code == "TASK_NOT_FOUND"


def correct(engine: Engine, task_id: str, status: str, correction_id: str, reason: str = "the parse was fine",
            tenant: str = TENANT) -> dict[str, Any]:
    fix = Correction(correction_id, task_id, tenant, "ops-alice", reason, status)
    return in_tx(engine, lambda tx: correct_task(tx, fix))


def test_an_admin_correction_settles_a_result_with_a_new_version_an_event_an_audit_row_and_outbox_rows(
        engine: Engine) -> None:
    """§4.2: a terminal task no report may move is corrected by an audited command (operator, reason, old and new
    status, when), committed with its version, event and projections."""
    ctx = first_step(engine, "task-corrected")
    in_tx(engine, lambda tx: report_event(tx, started(ctx), ctx["executionToken"]))
    rejected = correct(engine, "task-corrected", "REJECTED", "fix-1", "the customer cancelled")
    assert rejected["accepted"] and rejected["taskVersion"] == "3" and rejected["lifecycleStatus"] == "FAILED"
    before = rows(engine)
    answer = correct(engine, "task-corrected", "COMPLETED", "fix-2")
    assert answer["taskVersion"] == "4" and answer["lifecycleStatus"] == "SUCCEEDED"
    after = rows(engine)
    assert {t: after[t] - before[t] for t in after if after[t] != before[t]} == {
        "task_correction": 1, "task_event_log": 1, "task_event_dedup": 1, "task_outbox": 2}
    with engine.connect() as conn:
        audit = conn.execute(select(TaskCorrection.__table__).where(TaskCorrection.correction_id == "fix-2")).one()
        event = conn.execute(select(TaskEventLog.__table__).where(TaskEventLog.event_id == "correct:fix-2")).one()
    assert (audit.operator, audit.reason, audit.task_version) == ("ops-alice", "the parse was fine", 4)
    assert (audit.old_lifecycle_status, audit.old_business_status) == ("FAILED", "REJECTED")
    assert (audit.new_lifecycle_status, audit.new_business_status) == ("SUCCEEDED", "COMPLETED")
    assert (event.event_type, event.task_version, event.producer_id) == ("TASK_CORRECTED", 4, "admin:ops-alice")
    assert correct(engine, "task-corrected", "COMPLETED", "fix-2") == {**answer, "duplicate": True}
    assert rows(engine) == after  # the same correction again: its first answer, nothing written


@pytest.mark.parametrize(("name", "status", "reason", "tenant", "code"), [
    ("no-reason", "COMPLETED", "  ", TENANT, "CORRECTION_UNEXPLAINED"),
    ("not-terminal", "PARSING", "why", TENANT, "CORRECTION_NOT_TERMINAL"),
    ("unknown-status", "DONE-ISH", "why", TENANT, "UNKNOWN_STATUS"),
    ("other-tenant", "COMPLETED", "why", "t2", "TASK_NOT_FOUND"),
    ("unchanged", "REJECTED", "why", TENANT, "NOTHING_TO_CORRECT"),
])
def test_a_correction_that_is_not_one_is_refused_and_writes_nothing(engine: Engine, name: str, status: str,
                                                                    reason: str, tenant: str, code: str) -> None:
    task_id = f"task-refused-{name}"
    first_step(engine, task_id)
    correct(engine, task_id, "REJECTED", f"{name}-setup")
    before = rows(engine)
    with pytest.raises(Refused) as refused:
        correct(engine, task_id, status, f"{name}-fix", reason, tenant)
    assert refused.value.code == code and rows(engine) == before
