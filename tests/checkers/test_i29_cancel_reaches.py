"""I29: a cancel the user asked for reaches the platform while the flight flies. Hand-made runs (checker_scene) of one
task cancelled at t=104 s (EXECUTING 103, CANCEL_PENDING 104 by CANCEL_REQUESTED) whose flight flew on, with and
without the platform having heard the cancel; and R15 with the reconciler's re-send of a cancel taken out, which
mutation testing of reconcile.py found green everywhere (2026-12-05)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from checker_scene import T0, Scene

import reference.copilot.services.reconcile as reconcile
from reference.copilot.policy import Policy
from reference.copilot.states import TaskStatus as S
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import CANCEL_SLACK_S, INVARIANTS

TASK = "task-cancelled"
REQUESTED = 104.0
POLICY = Policy()
DEADLINE = REQUESTED + POLICY.stale_after_s[S.CANCEL_PENDING] + 2 * POLICY.reconcile_interval_s + CANCEL_SLACK_S


def _cancelled(*, ended_at: float | None, heard_at: float | None, comparable: bool = True) -> Scene:
    s = Scene()
    s.task(TASK, ["QUEUED", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "COMPLETED"], user="operator-001",
           key="k-1", start=100.0)
    next(a for a in s.state.audit if a["task_id"] == TASK and a["to"] == "CANCEL_PENDING")["action"] = \
        "CANCEL_REQUESTED"
    flight = s.flights(TASK)[0]
    flight["ended_at"] = T0 + ended_at if ended_at is not None else None
    flight["cancel_requested_at"] = T0 + heard_at if heard_at is not None else None
    s.state.ledger_clock_comparable = comparable
    s.state.end_time = 3000.0
    return s


def _i29(s: Scene) -> Verdict:
    return INVARIANTS["I29"](s.ctx())


@pytest.mark.parametrize("ended_at,heard_at,held", [
    (2000.0, None, False),  # flew on to its end, the cancel never heard
    (2000.0, 150.0, True),  # heard (the platform then may still fly it home: its business)
    (2000.0, DEADLINE + 100.0, False),  # heard, but only long after the reconciler should have re-sent it
    (DEADLINE - 10.0, None, True),  # ended on its own before anyone had to re-send the cancel
], ids=["never-heard", "heard", "heard-late", "ended-in-time"])
def test_a_flight_in_the_air_at_the_deadline_must_have_heard_the_cancel(ended_at: float, heard_at: float | None,
                                                                        held: bool) -> None:
    verdict = _i29(_cancelled(ended_at=ended_at, heard_at=heard_at))
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


def test_a_cancel_the_platform_refused_was_heard() -> None:
    s = _cancelled(ended_at=2000.0, heard_at=None)
    s.audit(TASK, REQUESTED + 1.0, "CANCEL_PENDING", "EXECUTING", 4, 5, action="CANCEL_REFUSED")
    assert _i29(s).status == HELD


def test_the_heal_of_the_last_fault_starts_the_deadline() -> None:
    s = _cancelled(ended_at=DEADLINE + 50.0, heard_at=None)
    s.state.heal_time = 200.0  # the cut lasted until t=200: the re-send is due 200 s + the delay
    assert _i29(s).status == HELD


def test_on_a_scaled_platform_clock_only_flights_in_the_air_at_the_end_are_judged() -> None:
    ended = _i29(_cancelled(ended_at=2000.0, heard_at=None, comparable=False))
    assert ended.status == HELD and "scaled" in ended.note
    flying = _i29(_cancelled(ended_at=None, heard_at=None, comparable=False))
    assert flying.status == VIOLATED


R15 = load_catalogue("copilot")["R15"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reconciler_that_never_sends_a_cancel_again_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_sent_again(task_id: object, policy: Policy) -> Iterator[object]:
        """The reconciler's re-send of a cancel, taken out (the dispatcher's first send is another module's name)."""
        yield from ()
        return "not-sent"

    monkeypatch.setattr(reconcile, "send_cancel", not_sent_again)
    result = simulate(R15, seed)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert "I29" in violated and "never reached the platform" in violated["I29"].violations[0].message
