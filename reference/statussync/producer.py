"""Producers (§3.3, §3.4, §3.9, §4.4, §5.2's last paragraph): the step services and the coordinator. A producer
records its real outcome, the event it will report and that event's sourceSeq in one transaction of its own ledger
before it reports, and restores all three when it restarts, so a crash between the outcome and the report loses
nothing and a retry sends the same eventId with the same content. The coordinator creates the task, opens a new
step attempt when one fails or goes silent past its timeout (the old attempt becomes a zombie whose late reports the
service refuses), and reports the task's end."""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import DBAPIError

from kernel.effects import Sleep, Transact, Tx
from reference.statussync.bugs import BUGS
from reference.statussync.models import ProducerLedger
from reference.statussync.registry import COORDINATOR, OPERATIONS, STATUS_VERSION, STEPS, failed_status
from reference.statussync.service import STEP_RETRY, NewTask, create_task, heartbeat, report

REPORT_RETRY_S = 1.0  # the first wait after a report that got no answer; doubled up to REPORT_RETRY_CAP_S
REPORT_RETRY_CAP_S = 16.0


@dataclass(frozen=True)
class Phase:
    """One event a producer reports after ``work_s`` of work."""

    event_type: str
    business: str
    work_s: float
    data: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class StepPlan:
    """What one step attempt's producer will do: its phases, its heartbeat period."""

    phases: tuple[Phase, ...]
    heartbeat_s: float = 5.0
    # The last two reports reach the service in the opposite order (two requests in flight, the network reorders).
    reorder_last: bool = False


def step_phases(step_id: str, progress: int, work_s: float, fails: bool, version: int = STATUS_VERSION
                ) -> tuple[Phase, ...]:
    """STEP_STARTED, ``progress`` STEP_PROGRESS, then STEP_COMPLETED (with its result) or STEP_FAILED (with a
    structured error, §4.4), in the business statuses of the task's definition ``version``."""
    _, operation, running, done, failed = next(s for s in STEPS if s[0] == step_id)
    failed = failed_status(failed, version)
    schemas = OPERATIONS[operation][2]
    slice_s = work_s / (progress + 1)
    phases = [Phase("STEP_STARTED", running, 0.0)]
    phases += [Phase("STEP_PROGRESS", running, slice_s, {"schema": schemas["STEP_PROGRESS"][0],
                                                         "value": {"current": i + 1, "total": progress + 1}})
               for i in range(progress)]
    if fails:
        phases.append(Phase("STEP_FAILED", failed, slice_s, error={
            "category": "BUSINESS_INPUT", "code": "UNSUPPORTED_FILE_FORMAT", "retryable": True,
            "userMessage": "unsupported file format", "diagnosticsRef": f"trace://{step_id}"}))
    else:
        phases.append(Phase("STEP_COMPLETED", done, slice_s, {
            "schema": schemas["STEP_COMPLETED"][0], "value": {"pages": 36, "resultRef": f"result://{step_id}"}}))
    return tuple(phases)


def _iso(now: datetime) -> str:
    return (now if now.tzinfo else now.replace(tzinfo=UTC)).isoformat()


# ---------------------------------------------------------------------------------------------- the ledger


def _stream(ctx: dict[str, Any]) -> dict[str, Any]:
    return {"producer_id": ctx["producerId"], "task_id": ctx["taskId"], "step_id": ctx.get("stepId") or "",
            "attempt": int(ctx.get("stepAttempt") or ctx.get("taskAttempt") or 1)}


def load_ledger(ctx: dict[str, Any], tx: Tx) -> list[dict[str, Any]]:
    """This stream's recorded events in sequence order (each with its answer, None while unanswered)."""
    keys = _stream(ctx)
    rows = tx.conn.execute(select(ProducerLedger.position, ProducerLedger.source_seq, ProducerLedger.event,
                                  ProducerLedger.answer).filter_by(**keys).order_by(ProducerLedger.position)).all()
    return [{"position": r.position, "seq": r.source_seq, "event": r.event, "answer": r.answer} for r in rows]


def record(ctx: dict[str, Any], event: dict[str, Any], tx: Tx) -> int:
    """The outcome, the event to report and its sequence, in one transaction of the producer's own: its position."""
    keys = _stream(ctx)
    position = int(tx.conn.execute(select(func.max(ProducerLedger.position)).filter_by(**keys)).scalar() or 0) + 1
    tx.conn.execute(insert(ProducerLedger.__table__).values(
        **keys, position=position, source_seq=event["sourceSeq"], event_id=event["eventId"], event=event,
        recorded_at=tx.now))
    return position


def record_answer(ctx: dict[str, Any], position: int, answer: str, tx: Tx) -> None:
    tx.conn.execute(update(ProducerLedger.__table__).filter_by(**_stream(ctx), position=position)
                    .values(answer=answer))


def answer_code(answer: dict[str, Any]) -> str:
    return "ACCEPTED" if answer.get("accepted") else str(answer.get("code") or "REFUSED")


def send(ctx: dict[str, Any], event: dict[str, Any], position: int) -> Generator[Any, Any, dict[str, Any]]:
    """Report until the service answers (the same eventId and content each time), then record the answer."""
    wait = REPORT_RETRY_S
    while True:
        try:
            answer = yield from report(event, ctx["executionToken"])
            break
        except DBAPIError:  # no answer: the database (or the API) away
            yield Sleep(wait)
            wait = min(REPORT_RETRY_CAP_S, wait * 2)
    while True:
        try:
            yield Transact(lambda tx: record_answer(ctx, position, answer_code(answer), tx),
                           "ledger.answer")
            return answer
        except DBAPIError:
            yield Sleep(REPORT_RETRY_S)


def _durably(effect: Transact[Any]) -> Generator[Any, Any, Any]:
    """A ledger transaction, tried again while the (producer's own) database is away."""
    while True:
        try:
            return (yield effect)
        except DBAPIError:
            yield Sleep(REPORT_RETRY_S)


def step_event(ctx: dict[str, Any], phase: Phase, seq: int, now: datetime) -> dict[str, Any]:
    """The event a step attempt's producer reports for ``phase`` as its ``seq``-th (§3.5)."""
    event: dict[str, Any] = {
        "eventId": f"{ctx['producerId']}:{ctx['taskId']}:{ctx['stepId']}:{ctx['stepAttempt']}:{seq}",
        "taskId": ctx["taskId"], "taskType": "DOCUMENT_PROCESS", "taskAttempt": ctx["taskAttempt"],
        "stepId": ctx["stepId"], "operationCode": ctx["operationCode"], "stepAttempt": ctx["stepAttempt"],
        "producerId": ctx["producerId"], "sourceSeq": seq, "eventType": phase.event_type,
        "businessStatus": phase.business, "occurredAt": _iso(now)}
    if phase.data is not None:
        event["data"] = phase.data
    if phase.error is not None:
        event["error"] = phase.error
    if phase.event_type in ("STEP_COMPLETED", "STEP_FAILED"):
        event["durationMs"] = int(phase.work_s * 1000)
    return event


# ---------------------------------------------------------------------------------------------- a step's producer


def step_run(ctx: dict[str, Any], plan: StepPlan, memory: dict[str, int]) -> Generator[Any, Any, None]:
    """One step attempt's producer, from wherever its ledger says it was: unanswered events are sent again (the
    same eventId and content), then the phases not yet recorded, each after its work (with heartbeats)."""
    recorded = yield from _durably(Transact(lambda tx: load_ledger(ctx, tx), "ledger.load"))
    for row in recorded:
        if row["answer"] is None:
            yield from send(ctx, row["event"], row["position"])
    next_seq = (recorded[-1]["seq"] if recorded else 0) + 1
    if BUGS.active("producer-seq-in-memory"):  # a counter that starts again with the process
        next_seq = memory.setdefault("next_seq", 1)
    held: tuple[dict[str, Any], int] | None = None
    for i, phase in enumerate(plan.phases[len(recorded):], start=len(recorded)):
        yield from _work(ctx, phase.work_s, plan.heartbeat_s)
        seq = next_seq
        next_seq += 1
        memory["next_seq"] = next_seq
        event, position = yield from _durably(Transact(functools.partial(_recorded, ctx, phase, seq),
                                                       "ledger.record"))
        if plan.reorder_last and i == len(plan.phases) - 2:
            held = (event, position)  # overtaken by the next one
            continue
        yield from send(ctx, event, position)
        if held is not None:
            yield from send(ctx, *held)
            held = None


def _recorded(ctx: dict[str, Any], phase: Phase, seq: int, tx: Tx) -> tuple[dict[str, Any], int]:
    event = step_event(ctx, phase, seq, tx.now)
    return event, record(ctx, event, tx)


def _work(ctx: dict[str, Any], work_s: float, heartbeat_s: float) -> Generator[Any, Any, None]:
    """Work ``work_s``, sending a heartbeat every ``heartbeat_s`` (a lost heartbeat is only a missed one)."""
    left = work_s
    while left > 0:
        step = min(left, heartbeat_s)
        yield Sleep(step)
        left -= step
        try:
            yield Transact(functools.partial(heartbeat, task_id=ctx["taskId"], step_id=ctx["stepId"],
                                             attempt=ctx["stepAttempt"], producer=ctx["producerId"],
                                             token=ctx["executionToken"]), "step.heartbeat")
        except DBAPIError:
            pass


# ---------------------------------------------------------------------------------------------- the coordinator


@dataclass
class CoordinatorState:
    """What the harness's coordinator process keeps between its steps (its own ledger holds the events)."""

    ctx: dict[str, Any]  # the coordinator's execution context (task level)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)  # stepId -> the current attempt's context


def coordinator_event(state: CoordinatorState, event_type: str, business: str,
                      extra: dict[str, Any] | None = None) -> Generator[Any, Any, dict[str, Any]]:
    """A task-level event through the coordinator's ledger: recorded with the next sequence, then sent."""
    ctx = state.ctx

    def recorded(tx: Tx) -> tuple[dict[str, Any], int]:
        last = tx.conn.execute(select(func.max(ProducerLedger.source_seq)).filter_by(**_stream(ctx))).scalar()
        seq = int(last or 1) + 1  # the task's creation was the coordinator's sequence 1
        event = {"eventId": f"{COORDINATOR}:{ctx['taskId']}:{seq}", "taskId": ctx["taskId"], "taskAttempt": 1,
                 "stepId": None, "stepAttempt": None, "operationCode": None, "producerId": COORDINATOR,
                 "sourceSeq": seq, "eventType": event_type, "businessStatus": business, "occurredAt": _iso(tx.now),
                 **(extra or {})}
        return event, record(ctx, event, tx)

    event, position = yield from _durably(Transact(recorded, "ledger.record"))
    return (yield from send(ctx, event, position))


def step_outcome(ctx: dict[str, Any], tx: Tx) -> str | None:
    """The step attempt's outcome as its producer recorded it and the service answered it: COMPLETED, FAILED, or
    REFUSED (the service refused the outcome), None while it has none."""
    rows = load_ledger(ctx, tx)
    for row in rows:
        kind = row["event"]["eventType"]
        if kind in ("STEP_COMPLETED", "STEP_FAILED") and row["answer"] is not None:
            if row["answer"] != "ACCEPTED":
                return "REFUSED"
            return "COMPLETED" if kind == "STEP_COMPLETED" else "FAILED"
    return None


def retry_step(state: CoordinatorState, step_id: str) -> Generator[Any, Any, dict[str, Any] | None]:
    """A new attempt of ``step_id`` (STEP_RETRY_CREATED): its context, or None if the service refused it."""
    answer = yield from coordinator_event(state, STEP_RETRY, "PARSE_RETRYING", {"retryStepId": step_id})
    if not answer.get("accepted"):
        return None
    old = state.steps[step_id]
    ctx = {**old, "stepAttempt": int(answer["stepAttempt"]), "executionToken": answer["executionToken"]}
    state.steps[step_id] = ctx
    return ctx


@dataclass(frozen=True)
class StartProducer:
    """Ask the shell to start the producer of one step attempt (the coordinator dispatching work)."""

    ctx: dict[str, Any]


@dataclass(frozen=True)
class CoordinatorConfig:
    groups: tuple[tuple[str, ...], ...] = (("01_prepare",), ("02_parse",), ("03_store",))  # run one group at a time
    step_timeout_s: float = 120.0  # an attempt silent this long is given up: a new attempt opens (§4.1)
    max_attempts: int = 2  # per step whose failure policy retries (RETRY_THEN_FAIL_TASK)
    poll_s: float = 2.0


def create(new: NewTask) -> Generator[Any, Any, dict[str, Any]]:
    """Create the task, again with the same id until it is answered (creation is idempotent on the id)."""
    return (yield from _durably(Transact(functools.partial(create_task, new=new), "task.create")))


def coordinator_run(new: NewTask, cfg: CoordinatorConfig) -> Generator[Any, Any, CoordinatorState]:
    """Create the task, dispatch its steps group by group, retry a failed or silent step where its policy allows,
    and report the task's end (§3.4, §3.9, §4.4): the task ends only when the coordinator says so."""
    answer = yield from create(new)
    state = CoordinatorState({"taskId": new.task_id, "taskAttempt": 1, "stepId": None, "stepAttempt": None,
                              "operationCode": None, "producerId": COORDINATOR,
                              "executionToken": answer["coordinatorToken"]},
                             {c["stepId"]: c for c in answer["steps"]})
    for group in cfg.groups:
        for step_id in group:
            yield StartProducer(state.steps[step_id])
        outcomes = {}
        for step_id in group:
            outcomes[step_id] = yield from _await_step(state, step_id, cfg)
        failed = [s for s in group if outcomes[s] != "COMPLETED"]
        if failed:
            yield from coordinator_event(state, "TASK_FAILED", "REJECTED", {
                "failedStepId": failed[0], "error": {"code": "STEP_FAILED", "userMessage": f"{failed[0]} failed"}})
            return state
    yield from coordinator_event(state, "TASK_COMPLETED", "COMPLETED")
    return state


def _await_step(state: CoordinatorState, step_id: str, cfg: CoordinatorConfig) -> Generator[Any, Any, str]:
    """COMPLETED, or FAILED once the step's policy allows no other attempt."""
    waited = 0.0
    while True:
        ctx = state.steps[step_id]
        try:
            outcome = yield Transact(functools.partial(step_outcome, ctx), "step.outcome")
        except DBAPIError:
            outcome = None
        if outcome == "COMPLETED":
            return outcome
        if outcome is None and waited < cfg.step_timeout_s:
            yield Sleep(cfg.poll_s)
            waited += cfg.poll_s
            continue
        retries = OPERATIONS[ctx["operationCode"]][3] == "RETRY_THEN_FAIL_TASK"
        if not retries or int(ctx["stepAttempt"]) >= cfg.max_attempts:
            return "FAILED"
        fresh = yield from retry_step(state, step_id)
        if fresh is None:
            return "FAILED"
        yield StartProducer(fresh)
        waited = 0.0
