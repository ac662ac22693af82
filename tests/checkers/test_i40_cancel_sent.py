"""I40: the platform is asked to stop a flight only while its task is CANCEL_PENDING. Hand-made runs (checker_scene) of
one task CANCEL_PENDING from t=104 s to t=105 s (then COMPLETED), with a cancel's first try at various times; and T7
with a dispatcher that sends a cancel whatever its task's status, which mutation testing of services/cancel.py found
green everywhere (2026-12-07)."""

from __future__ import annotations

import uuid

import pytest
from checker_scene import T0, Scene

import reference.copilot.services.cancel as cancel
from reference.copilot.effects import Tx
from reference.copilot.tasks import load
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import CANCEL_READ_SLACK_S, INVARIANTS

TASK = "task-cancelled"


def _cancel_sent(at: float, tries: int = 0) -> Scene:
    s = Scene()
    s.task(TASK, ["QUEUED", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "COMPLETED"], user="operator-001",
           key="k-1", start=100.0)  # CANCEL_PENDING at 104, COMPLETED at 105
    s.op(at, "dispatcher-1", "invoke", "cancel_flight", task_id=TASK, method="cancel_flight", **{"try": tries})
    return s


@pytest.mark.parametrize("at,held", [
    (104.5, True),  # while CANCEL_PENDING
    (105.0 + CANCEL_READ_SLACK_S / 2, True),  # read CANCEL_PENDING, the flight's end committed before the call
    (105.0 + CANCEL_READ_SLACK_S + 1.0, False),  # sent for a task that had settled
    (103.5, False),  # sent before anyone asked to cancel
], ids=["pending", "within-slack", "after-settled", "before-requested"])
def test_a_cancels_first_try_is_judged_by_the_tasks_status_at_the_call(at: float, held: bool) -> None:
    verdict = INVARIANTS["I40"](_cancel_sent(at).ctx())
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


@pytest.mark.parametrize("at,held", [
    (107.0, True),  # the flight's end had not committed yet: the sender read CANCEL_PENDING
    (108.0 + CANCEL_READ_SLACK_S + 1.0, False),  # sent after it had certainly committed
], ids=["before-the-commit", "after-the-commit"])
def test_a_cancel_pending_spell_lasts_until_the_move_out_of_it_committed(at: float, held: bool) -> None:
    """A slow database (explore seed 1 run 1451): the move out of CANCEL_PENDING began at t=105 (its audit row's time,
    the transaction's start) and was seen committed only at t=108 (its event marked sent)."""
    s = _cancel_sent(at)
    last = max((o for o in s.state.outbox if o["task_id"] == TASK), key=lambda o: o["task_version"])
    last["sent_at"] = T0 + 108.0
    verdict = INVARIANTS["I40"](s.ctx())
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


def test_a_retry_of_a_cancel_is_not_judged() -> None:
    assert INVARIANTS["I40"](_cancel_sent(110.0, tries=1).ctx()).checked == 0


def test_t7_catches_a_dispatcher_that_sends_a_cancel_whatever_the_status(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = load_catalogue("copilot")["T7"]
    assert simulate(scenario, 1).passed

    def any_flight(tx: Tx, tid: uuid.UUID) -> str | None:
        task = load(tx, tid)
        return task.external_task_id if task is not None else None

    monkeypatch.setattr(cancel, "_pending_flight", any_flight)
    result = simulate(scenario, 1)
    assert {v.invariant for v in result.verdicts if v.status == VIOLATED} == {"I40"}
