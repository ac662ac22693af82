"""R2's and R8's expectations on hand-made histories and final states.

R2: each task whose dispatcher died between the platform's accept and the write-back is settled by its flight's own
events (they come seconds after the accept, the reconciler's threshold much later): events that never counted as
evidence (mutation testing of events.py, 2026-12-06) left every such task to the reconciler, and R2 was green.
R8: with the platform silent past the escalation bound, EXECUTING tasks and the killed dispatchers' DISPATCHING
tasks go to MANUAL_REVIEW: the reconciler used to leave a DISPATCHING task whose resends under the key failed
DISPATCHING for as long as the platform stayed silent."""

from __future__ import annotations

from typing import Any

from harness.history import INFO, History
from scenarios.verdicts import NotFired
from systems.copilot.expectations import EXPECTATIONS
from systems.copilot.state import FinalState

r2 = EXPECTATIONS["crash-before-writeback"]
r8 = EXPECTATIONS["platform-silent"]


def kills(n: int, h: History | None = None) -> History:
    h = History() if h is None else h
    for i in range(n):
        h.add(40.0 + i, "nemesis", INFO, "kill", {"process": f"dispatcher-{i}", "why": "after create_flight"})
    return h


def confirmed(**by_actor: int) -> FinalState:
    rows = [a for actor, n in by_actor.items() for a in [actor.replace("_", "-")] * n]
    return FinalState(audit=[{"task_id": f"t-{i}", "action": "FLIGHT_CONFIRMED", "actor": actor}
                             for i, actor in enumerate(rows)])


def test_r2_the_killed_dispatchers_tasks_settled_by_their_events_pass() -> None:
    assert r2(kills(4), confirmed(platform_events=4, dispatcher=20)) is None
    assert r2(kills(4), confirmed(platform_events=6, dispatcher=18)) is None  # a slow write-back met the telemetry


def test_r2_tasks_left_to_the_reconciler_fail() -> None:
    why = r2(kills(4), confirmed(platform_events=1, reconciler=3, dispatcher=20))
    assert why is not None and not isinstance(why, NotFired)
    assert "settled only 1 tasks (the reconciler: 3)" in why


def test_r2_no_kill_did_not_fire() -> None:
    assert isinstance(r2(kills(0), confirmed(dispatcher=24)), NotFired)


def silent_history(n_kills: int) -> History:
    h = History()
    h.fault_start(0.0, "platform", lose_event_kinds=["telemetry", "alert", "completed", "failed", "cancelled"])
    kills(n_kills, h)
    h.fault_start(90.0, "platform", error_5xx_rate=1.0)
    return h


def reviews(**from_status: int) -> FinalState:
    audit: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for status, n in from_status.items():
        for i in range(n):
            tid = f"{status}-{i}"
            audit.append({"task_id": tid, "action": "OUTCOME_UNKNOWN", "actor": "reconciler", "from": status,
                          "to": "MANUAL_REVIEW"})
            tasks.append({"id": tid, "last_error_code": "PLATFORM_SILENT"})
    return FinalState(audit=audit, tasks=tasks)


def test_r8_executing_and_the_killed_dispatchers_tasks_reviewed_pass() -> None:
    assert r8(silent_history(2), reviews(EXECUTING=19, DISPATCHING=2)) is None


def test_r8_dispatching_tasks_left_waiting_fail() -> None:
    why = r8(silent_history(2), reviews(EXECUTING=19, DISPATCHING=1))
    assert why is not None and not isinstance(why, NotFired) and "only 1 DISPATCHING" in why


def test_r8_no_executing_review_fails_and_no_kill_did_not_fire() -> None:
    assert "no EXECUTING task" in (r8(silent_history(2), reviews(DISPATCHING=2)) or "")
    assert isinstance(r8(silent_history(0), reviews(EXECUTING=19)), NotFired)
