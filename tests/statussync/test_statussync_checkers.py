"""Each of the status sync's invariants S1-S15 holds on a clean run and is violated by a record that breaks its rule:
one small simulated run (failing tasks with a late worker, reused and forged reports, details open) gives a real
record; each test breaks one rule in a copy of it and checks that exactly the invariant of that rule says so."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from harness.history import INFO, OK
from scenarios.runner import simulate
from scenarios.scenario import Scenario
from systems.statussync.checkers import INVARIANTS, SyncState
from systems.statussync.sim import SyncSpec


@pytest.fixture(scope="module")
def clean() -> SyncState:
    spec = SyncSpec(tasks=3, users=2, failing=1, late_workers=1, reuses=1, forged=1, retries=1, details=2,
                    window_s=5.0)
    scenario = Scenario(id="T1", slug="t", title="t", workload=spec, faults=(), recovery_bound_s=120.0,
                        exercised=lambda h, s: None, shells=("sim",), invariants=INVARIANTS.ids, system="statussync")
    result = simulate(scenario, 1)
    assert result.passed, [(v.invariant, v.violations[:2]) for v in result.verdicts if v.status == "violated"]
    state: SyncState = result.state
    return state


def _first(rows: list[dict[str, Any]], **want: Any) -> dict[str, Any]:
    return next(r for r in rows if all(r.get(k) == v for k, v in want.items()))


def _ok(s: SyncState, f: str) -> Any:
    return next(op for op in s.history.ops if op.f == f and op.type == OK)


def _s1(s: SyncState) -> None:
    first = next(op for op in s.reports() if op.value["accepted"])
    s.history.add(99.0, "p", OK, "event.report", {**first.value, "accepted": False, "code": "STALE_SEQUENCE"})


def _s2(s: SyncState) -> None:
    op = _ok(s, "reuse")
    s.history.add(99.0, "p", OK, "reuse", {**op.value, "answer": {"accepted": True, "duplicate": True}})


def _s3(s: SyncState) -> None:
    op = _ok(s, "forged")
    s.history.add(99.0, "p", OK, "forged", {**op.value, "answer": {"accepted": True}})


def _s4(s: SyncState) -> None:  # a refusal as old of a stream nothing was committed of
    first = next(op for op in s.reports() if op.value["accepted"] and op.value["stepId"])
    s.history.add(99.0, "p", OK, "event.report", {**first.value, "eventId": "x", "accepted": False,
                                                   "code": "STALE_SEQUENCE", "producerId": "someone-else"})


def _s5(s: SyncState) -> None:
    last = next(e for e in reversed(s.events) if e["lifecycle_status"] == "SUCCEEDED")
    s.events.append({**last, "event_id": "late", "task_version": last["task_version"] + 1,
                     "lifecycle_status": "RUNNING"})


def _s6(s: SyncState) -> None:
    s.outbox.remove(_first(s.outbox, projection="TASK_DETAIL"))


def _s7(s: SyncState) -> None:
    s.outbox[0]["status"] = "PROCESSING"


def _s8(s: SyncState) -> None:
    client = s.clients[0]
    task = next(iter(client["summary"]))
    client["summary"][task] -= 1


def _s9(s: SyncState) -> None:
    view = next(op for op in s.history.ops if op.f == "view")
    s.history.add(99.0, view.process, INFO, "view", {**view.value, "version": view.value["version"]})


def _s10(s: SyncState) -> None:
    running = next(e for e in s.events if e["step_lifecycle"] == "RUNNING")
    s.events.insert(s.events.index(running) + 1, {**running, "event_id": "h", "event_type": "STEP_HEALTH_CHANGED",
                                                  "step_lifecycle": "FAILED", "step_health": "STALE"})


def _s11(s: SyncState) -> None:
    row = _first(s.outbox, projection="USER_SUMMARY")
    row["payload"] = {**row["payload"], "task": {**row["payload"]["task"], "diagnosticsRef": "trace://x"}}


def _s12(s: SyncState) -> None:
    failed = _first(s.events, event_type="TASK_FAILED")
    row = _first(s.outbox, projection="USER_SUMMARY", aggregate_id=failed["task_id"],
                 aggregate_version=failed["task_version"])
    row["payload"] = {k: v for k, v in row["payload"].items() if k != "notice"}


def _s13(s: SyncState) -> None:
    _first(s.steps, step_id="01_prepare")["lifecycle_status"] = "RUNNING"


def _s14(s: SyncState) -> None:
    s.events[1]["business_status"] = "NOT_REGISTERED"


def _s15(s: SyncState) -> None:
    s.history.add(99.0, "centrifugo", INFO, "deliver", {"client": s.clients[0]["client"], "channel":
                                                        "task_user:t1/someone-else", "offset": 1})


BREAKS: dict[str, Callable[[SyncState], None]] = {
    "S1": _s1, "S2": _s2, "S3": _s3, "S4": _s4, "S5": _s5, "S6": _s6, "S7": _s7, "S8": _s8, "S9": _s9,
    "S10": _s10, "S11": _s11, "S12": _s12, "S13": _s13, "S14": _s14, "S15": _s15}


def test_every_invariant_has_a_break() -> None:
    assert set(BREAKS) == set(INVARIANTS)


@pytest.mark.parametrize("invariant", sorted(BREAKS, key=lambda i: int(i[1:])))
def test_the_invariant_holds_on_the_clean_run_and_catches_its_break(clean: SyncState, invariant: str) -> None:
    assert INVARIANTS[invariant](clean).status == "held"
    broken = copy.deepcopy(clean)
    BREAKS[invariant](broken)
    verdict = INVARIANTS[invariant](broken)
    assert verdict.status == "violated", verdict
