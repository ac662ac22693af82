"""R6's expectation on hand-made histories: with every platform event lost, only a task whose dispatcher died between
the platform's accept and the write-back is the reconciler's to confirm. A write-back that drops the platform's answer
leaves every task to the reconciler, and no invariant sees that (the reconciler repairs it): this check does."""

from __future__ import annotations

from harness.history import INFO, History
from scenarios.verdicts import NotFired
from systems.copilot.expectations import EXPECTATIONS
from systems.copilot.state import FinalState

r6 = EXPECTATIONS["stuck-dispatching"]


def history(kills: int) -> History:
    h = History()
    h.fault_start(0.0, "platform", lose_event_kinds=["telemetry", "alert", "completed", "failed", "cancelled"])
    for n in range(kills):
        h.add(10.0 + n, "nemesis", INFO, "kill", {"process": f"dispatcher-{n}", "why": "after create_flight"})
    h.fault_stop(300.0, "platform")
    return h


def state(by_reconciler: int, by_dispatcher: int) -> FinalState:
    actors = ["reconciler"] * by_reconciler + ["dispatcher"] * by_dispatcher
    return FinalState(audit=[{"task_id": f"t-{n}", "action": "FLIGHT_CONFIRMED", "actor": actor}
                             for n, actor in enumerate(actors)])


def test_the_killed_dispatchers_tasks_confirmed_by_the_reconciler_pass() -> None:
    assert r6(history(kills=4), state(by_reconciler=4, by_dispatcher=20)) is None


def test_more_reconciler_confirmations_than_kills_fail() -> None:
    why = r6(history(kills=4), state(by_reconciler=24, by_dispatcher=0))
    assert why is not None and "only 4 dispatchers died" in why and not isinstance(why, NotFired)


def test_no_reconciler_confirmation_fails() -> None:
    assert "settled by the reconciler" in (r6(history(kills=4), state(by_reconciler=0, by_dispatcher=24)) or "")


def test_no_kill_did_not_fire() -> None:
    assert "no dispatcher was killed" in (r6(history(kills=0), state(by_reconciler=0, by_dispatcher=24)) or "")
