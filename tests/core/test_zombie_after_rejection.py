"""B12: a dispatcher stopped after the platform refused its create wakes up while the reconciler's new attempt of the
task (its query found no flight) waits for its write-back. Only the dispatcher's version fence keeps the zombie's
stale DISPATCH_FAILED off the task the new attempt owns. Before B12 no scenario raced two dispatches of one task, and
every mutant of that fence survived the catalogue (mutation testing of dispatch.py, 2026-12-05)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import reference.copilot.services.dispatch as dispatch
from harness.history import INFO, History
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import load
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED, NotFired
from systems.copilot.expectations import EXPECTATIONS
from systems.copilot.state import FinalState

B12 = load_catalogue("copilot")["B12"]
b12 = EXPECTATIONS["zombie-after-rejection"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_new_attempt_flies_once_and_the_zombie_is_fenced(seed: int) -> None:
    result = simulate(B12, seed)
    assert result.passed, (result.outcome, result.exercised)
    anew = {a["task_id"] for a in result.state.audit if a["action"] == "DISPATCH_NOT_CREATED"}
    assert len(anew) == 1
    attempts = {a["attempt"]: a["outcome"] for a in result.state.dispatch_attempts if a["task_id"] in anew}
    assert attempts == {1: "NOT_CREATED", 2: "ACCEPTED"}
    # The zombie's refusal never reached the task: no DISPATCH_FAILED with the platform's code.
    assert not [a for a in result.state.audit if a["task_id"] in anew and a["action"] == "DISPATCH_FAILED"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_unfenced_stale_failure_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = dispatch._failed

    def unfenced(tx: Any, plan: dispatch.DispatchPlan, code: str, message: str, *, policy: Any) -> str:
        task = load(tx, plan.task_id)
        if task is not None and task.status == S.DISPATCHING:  # takes the task as it finds it, whoever owns it now
            plan = dataclasses.replace(plan, version=task.version)
        return real(tx, plan, code, message, policy=policy)

    monkeypatch.setattr(dispatch, "_failed", unfenced)
    result = simulate(B12, seed)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert "I18" in violated and "FAILED but its flight" in violated["I18"].violations[0].message


def timeline(zombie_wakes_at: float) -> History:
    h = History()
    h.add(20.0, "nemesis", INFO, "pause", {"process": "dispatcher-1", "why": "before dispatch.rejected"})
    h.add(90.0, "nemesis", INFO, "pause", {"process": "reconciler", "why": "before dispatch.write_back"})
    h.add(zombie_wakes_at, "nemesis", INFO, "resume", {"process": "dispatcher-1"})
    h.add(240.0, "nemesis", INFO, "resume", {"process": "reconciler"})
    return h


STATE = FinalState(tasks=[{"id": "t-1", "status": "COMPLETED"}], ledger=[{"reference": "t-1"}],
                   audit=[{"task_id": "t-1", "action": "DISPATCH_NOT_CREATED", "actor": "reconciler"}])


def test_a_zombie_waking_inside_the_window_passes() -> None:
    assert b12(timeline(170.0), STATE) is None


def test_a_zombie_waking_after_the_write_back_did_not_fire() -> None:
    assert isinstance(b12(timeline(250.0), STATE), NotFired)


def test_a_second_flight_fails() -> None:
    two = dataclasses.replace(STATE, ledger=[{"reference": "t-1"}, {"reference": "t-1"}])
    assert "2 flight(s)" in (b12(timeline(170.0), two) or "")
