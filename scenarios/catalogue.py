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

ALL_INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8")


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
    shells: tuple[str, ...] = ("sim",)
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
]}
