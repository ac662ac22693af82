"""The scenario catalogue (DESIGN.md §5): each scenario is data — a workload, a fault schedule, a recovery
bound, the invariants to check, and a check that the fault really fired (a scenario whose fault never
touched anything proves nothing, so it fails)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scenarios.history import FAIL, INFO, OK, History
from scenarios.state import FinalState
from scenarios.workload import WorkloadSpec

ALL_INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9", "I10")


@dataclass(frozen=True)
class FaultStep:
    """At ``at`` seconds, start ``fault`` (with params); stop it ``duration`` seconds later (None: a
    one-shot that arms a trigger or sets a knob)."""

    at: float
    fault: str
    duration: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


Exercised = Callable[[History, FinalState], str | None]  # None when the fault fired, else why not


@dataclass(frozen=True)
class Scenario:
    id: str
    slug: str
    title: str
    workload: WorkloadSpec
    faults: tuple[FaultStep, ...]
    recovery_bound_s: float
    exercised: Exercised
    shells: tuple[str, ...] = ("sim", "native")
    invariants: tuple[str, ...] = ALL_INVARIANTS
    flight_median_s: float = 120.0

    def heal_time(self) -> float:
        return max((f.at + (f.duration or 0.0) for f in self.faults), default=0.0)


def _ops(h: History, f: str, type_: str | None = None) -> list[Any]:
    return [op for op in h.ops if op.f == f and (type_ is None or op.type == type_)]


def _c1(h: History, s: FinalState) -> str | None:
    failed = {op.value["key"] for op in _ops(h, "confirm", FAIL) if op.value.get("code") == "SERVICE_UNAVAILABLE"}
    recovered = {op.value["key"] for op in _ops(h, "confirm", OK)} & failed
    if not failed:
        return "no confirm hit the injected database error"
    if not recovered:
        return "no confirm that hit the database error was retried successfully with the same key"
    return None


def _c2(h: History, s: FinalState) -> str | None:
    w = next((w for w in h.fault_windows() if w.fault == "broker-outage"), None)
    if w is None or w.end is None:
        return "no broker outage window recorded"
    held = [o for o in s.outbox if o["event_type"] == "TaskCreated" and w.start <= o["created_at"] - s.t0 < w.end
            and o["sent_at"] is not None and o["sent_at"] - s.t0 >= w.end]
    return None if held else "no task was created during the outage and published after it"


def _kills(h: History, prefix: str) -> int:
    return sum(1 for op in h.ops if op.f == "kill" and str(op.value.get("process", "")).startswith(prefix))


def _c3(h: History, s: FinalState) -> str | None:
    if not _kills(h, "publisher"):
        return "the publisher was never killed after a broker ack"
    resent = Counter(op.value["event_id"] for op in _ops(h, "deliver") if op.value.get("group") == "dispatcher")
    return None if any(n > 1 for n in resent.values()) else "no event was delivered twice after the crash"


def _c4(h: History, s: FinalState) -> str | None:
    replayed = [op for op in _ops(h, "confirm", OK) if op.value.get("replayed")]
    by_key = Counter(op.value["key"] for op in _ops(h, "confirm", OK))
    if not any(n > 1 for n in by_key.values()):
        return "no key was confirmed concurrently more than once"
    return None if replayed else "no concurrent confirm was answered with the winner's task"


def _r1(h: History, s: FinalState) -> str | None:
    timeouts = [op for op in _ops(h, "create_flight", INFO) if op.value.get("error") == "TIMEOUT"]
    found = [op for op in _ops(h, "find_by_request_id", OK) if op.value.get("external_id")]
    if not timeouts:
        return "no create_flight timed out after the platform accepted it"
    return None if found else "no timed-out dispatch was resolved by a query"


def _r2(h: History, s: FinalState) -> str | None:
    if not _kills(h, "dispatcher"):
        return "no dispatcher was killed between the platform's accept and the write-back"
    settled = [a for a in s.audit if a["action"] == "FLIGHT_CONFIRMED" and a["actor"] in ("reconciler",
                                                                                            "platform-events")]
    return None if settled else "no task was settled by the reconciler or the platform's events after the kill"


def _b1(h: History, s: FinalState) -> str | None:
    deliveries = Counter((op.value["group"], op.value["event_id"]) for op in _ops(h, "deliver"))
    dups = sum(1 for n in deliveries.values() if n > 1)
    return None if dups else "no message was delivered more than once"


def _t1(h: History, s: FinalState) -> str | None:
    codes = Counter(op.value.get("error") for op in h.ops if op.type == FAIL and op.f == "create_flight")
    if not codes:
        return "no create_flight failed with a transient error"
    done = sum(1 for t in s.tasks if t["status"] == "COMPLETED")
    return None if done else f"transient errors {dict(codes)} but no task completed"


def _t3(h: History, s: FinalState) -> str | None:
    rejected = {a["task_id"] for a in s.audit if a["to"] == "DISPATCH_FAILED"}
    if not rejected:
        return "no dispatch was rejected"
    flown = {str(f["reference"]) for f in s.ledger}
    resent = [op for op in _ops(h, "create_flight", "invoke") if op.value.get("task_id") in rejected]
    per_task = Counter(op.value["task_id"] for op in resent)
    if any(n > 1 for n in per_task.values()):
        return f"a rejected takeoff was sent again automatically: {dict(per_task)}"
    return None if not (rejected & flown) else "a rejected task flew"


def _t4(h: History, s: FinalState) -> str | None:
    """Uncertain dispatches happened, none was resent, and each was settled by the platform's own evidence
    (its telemetry names our task) or left to MANUAL_REVIEW. Which of the two depends on whether telemetry
    beats the client's timeout: in simulation it does not, on a time-scaled real platform it does."""
    uncertain = {op.value["task_id"] for op in _ops(h, "create_flight", INFO)
                 if op.value.get("error") == "TIMEOUT"}
    if not uncertain:
        return "no create_flight timed out"
    creates = Counter(op.value["task_id"] for op in _ops(h, "create_flight", "invoke")
                      if op.value.get("task_id") in uncertain)
    resent = sorted(t for t, n in creates.items() if n > 1)
    if resent:
        return f"uncertain dispatches were resent: {resent}"
    by_evidence = {a["task_id"] for a in s.audit
                   if a["action"] == "FLIGHT_CONFIRMED" and a["actor"] == "platform-events"}
    manual = {t["id"] for t in s.tasks if t["status"] == "MANUAL_REVIEW"}
    unresolved = sorted(uncertain - by_evidence - manual)
    if unresolved:
        return f"uncertain dispatches neither in MANUAL_REVIEW nor settled by evidence: {unresolved}"
    return None


def _r3(h: History, s: FinalState) -> str | None:
    alerts = sum(s.alert_events.values())
    if not alerts:
        return "no alert was stored"
    late = [o for o in s.outbox if o["event_type"] == "TaskCompleted"]
    return None if late else "no task completed"


def _r4(h: History, s: FinalState) -> str | None:
    timeouts = [op for op in _ops(h, "cancel_flight", INFO) if op.value.get("error") == "TIMEOUT"]
    if not timeouts:
        return "no cancel request timed out"
    cancelled = {t["id"] for t in s.tasks if t["status"] == "CANCELLED"}
    return None if {op.value["task_id"] for op in timeouts} & cancelled else \
        "no task whose cancel timed out was cancelled after the platform confirmed"


def _r5(h: History, s: FinalState) -> str | None:
    retried = [r for r in s.reports if r["status"] == "UPLOADED" and r["attempts"] > 1]
    return None if retried else "no report upload failed and recovered"


def _b3(h: History, s: FinalState) -> str | None:
    refused = [op for op in h.ops if op.type == FAIL and op.f in ("draft", "confirm", "cancel")
               and op.value.get("code") == "SERVICE_UNAVAILABLE"]
    return None if refused else "no request was refused while the database was down"


def _b5(h: History, s: FinalState) -> str | None:
    if not any(op.f == "pause" for op in h.ops):
        return "no dispatcher was paused after the platform accepted"
    taken = [a for a in s.audit if a["action"] == "FLIGHT_CONFIRMED" and a["actor"] in ("reconciler",
                                                                                         "platform-events")]
    return None if taken else "no paused dispatcher's task was taken over while it slept"


def _b8(h: History, s: FinalState) -> str | None:
    reset = {op.value["key"] for op in _ops(h, "confirm", INFO) if op.value.get("error") == "CONNECTION_RESET"}
    if not reset:
        return "the API never died between commit and answer"
    replayed = {op.value["key"] for op in _ops(h, "confirm", OK) if op.value.get("replayed")}
    return None if reset & replayed else "no client retry after the reset got the committed task back"


def _b6(h: History, s: FinalState) -> str | None:
    w = next((w for w in h.fault_windows() if w.fault == "redis-loss"), None)
    if w is None or w.end is None:
        return "no Redis loss window recorded"
    served = [op for op in h.ops if op.process.startswith("user") and op.type == OK and w.start <= op.time <= w.end]
    return None if served else "no client request was answered while Redis was lost"


def _b9(h: History, s: FinalState) -> str | None:
    # CONNECT_TIMEOUT: the simulated partition; CONNECT_FAILED: Toxiproxy's disabled link refuses.
    cut = [op for op in h.ops if op.type == FAIL and op.value.get("error") in ("CONNECT_TIMEOUT", "CONNECT_FAILED")]
    return None if cut else "no platform call hit the partition"


CATALOGUE: dict[str, Scenario] = {s.id: s for s in [
    Scenario(
        "C1", "db-fault-on-create",
        "DB error inside task creation: task, audit, outbox all absent; a retry with the same key creates one",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(20.0, "db-error", 40.0, {"tables": ["task_event_outbox"]}),),
        600.0, _c1),
    Scenario(
        "C2", "broker-down-after-commit",
        "broker down after commit: the outbox row waits; after recovery it is published and the task proceeds",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(30.0, "broker-outage", 120.0),),
        600.0, _c2),
    Scenario(
        "C3", "publisher-crash-after-send",
        "publisher dies after the broker's ack, before marking sent: resent, deduplicated, one dispatch",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(15.0, "kill-publisher-after-publish", None, {"count": 3}),),
        600.0, _c3),
    Scenario(
        "C4", "concurrent-same-key",
        "N concurrent confirms with one key: one task; every answer names it",
        WorkloadSpec(confirms=16, window_s=60.0, same_key_burst=8),
        (),
        600.0, _c4),
    Scenario(
        "R1", "accepted-then-timeout",
        "the platform creates the flight but the response times out: found by query, no second flight",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(0.0, "platform", None, {"accept_then_timeout": 6, "drop_response": 2}),),
        600.0, _r1),
    Scenario(
        "R2", "crash-before-writeback",
        "worker killed after the platform accepted, before external_task_id is written: settled, no second flight",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(10.0, "kill-dispatcher-after-create", None, {"count": 4}),),
        600.0, _r2),
    Scenario(
        "B1", "duplicate-delivery",
        "the broker redelivers (duplicates, a consumer killed before its ack): one effect",
        WorkloadSpec(confirms=24, window_s=120.0, cancel_ratio=0.2),
        (FaultStep(0.0, "duplicate-delivery", 180.0, {"prob": 0.5}),
         FaultStep(20.0, "kill-consumer-before-ack", None, {"count": 3})),
        600.0, _b1),
    Scenario(
        "T1", "transient-platform-errors",
        "5xx/429 bursts: bounded backoff with jitter, then success",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(10.0, "platform", 120.0, {"error_5xx_rate": 0.3, "error_429_rate": 0.2}),),
        600.0, _t1),
    Scenario(
        "T3", "dispatch-rejected",
        "a definite rejection: DISPATCH_FAILED, no automatic resend of a takeoff",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(0.0, "platform", None, {"reject_next": 5}),),
        600.0, _t3),
    Scenario(
        "T4", "no-key-no-query",
        "a platform with neither idempotency key nor query: uncertain dispatch goes to MANUAL_REVIEW",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(0.0, "platform", None, {"idempotency_key": False, "query_supported": False,
                                           "accept_then_timeout": 4}),),
        600.0, _t4),
    Scenario(
        "R3", "telemetry-disorder",
        "telemetry out of order, duplicate alerts, late completion: no regression, alerts once, completion applied",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(0.0, "platform", None, {"reorder_window_s": 12.0, "duplicate_event_prob": 0.3,
                                           "late_completion_s": 45.0}),),
        600.0, _r3),
    Scenario(
        "R4", "cancel-timeout",
        "cancel request times out: CANCEL_PENDING until the platform confirms",
        WorkloadSpec(confirms=24, window_s=120.0, cancel_ratio=0.5),
        (FaultStep(0.0, "platform", None, {"cancel_timeout": 6}),),
        600.0, _r4, flight_median_s=300.0),
    Scenario(
        "R5", "report-upload-failure",
        "object store fails during upload: task stays COMPLETED, report recovers",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(60.0, "object-store-outage", 300.0),),
        600.0, _r5),
    Scenario(
        "B3", "db-outage",
        "database down for a window: clear 503 errors, no half writes, nothing acked; recovery completes all",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(40.0, "db-outage", 60.0),),
        600.0, _b3),
    Scenario(
        "B5", "zombie-worker",
        "a paused worker resumes after its work was taken over: its stale writes are fenced",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(10.0, "pause-dispatcher-after-create", None, {"seconds": 150.0, "count": 2}),),
        600.0, _b5, flight_median_s=300.0),
    Scenario(
        "B6", "redis-loss",
        "Redis flushed and stopped for a window: outcomes unchanged (real stack only: the simulation has no "
        "Redis, so nothing there can depend on it)",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(30.0, "redis-loss", 60.0),),
        600.0, _b6, shells=("native",)),
    Scenario(
        "B8", "api-restart",
        "API restarted between commit and response: the client's retry gets the same task",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(10.0, "kill-api-after-create-commit", None, {"count": 4}),),
        600.0, _b8),
    Scenario(
        "B9", "platform-partition",
        "the platform link is cut for a window: nothing duplicated; settled after heal",
        WorkloadSpec(confirms=24, window_s=120.0),
        (FaultStep(40.0, "platform-partition", 120.0),),
        600.0, _b9),
]}
