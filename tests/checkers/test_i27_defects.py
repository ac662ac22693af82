"""I27: no error only a defect raises. Hand-made runs (checker_scene): a consumer's recorded failure named after a
defect, an API answer INTERNAL_ERROR, and a defect a loop carried on from (seen in simulation only); and the
simulation's own record of them (scenarios.sim.world), from a consumer whose handler raises TypeError."""

from __future__ import annotations

from typing import Any

import pytest
from checker_scene import Scene

import reference.services.dispatch as dispatch
from harness.history import INVOKE
from kernel.logs import DEFECT_NAMES, DEFECTS
from scenarios.catalogue import load_catalogue
from scenarios.checkers import CHECKERS, HELD, VIOLATED, Verdict
from scenarios.runner import simulate

TASK = "task-1"


def _scene() -> Scene:
    s = Scene()
    s.task(TASK, "COMPLETED", user="operator-001", key="k-1", start=100.0)
    s.state.defects = []
    return s


def _i27(s: Scene) -> Verdict:
    return CHECKERS["I27"](s.ctx())


def test_a_run_with_no_defect_holds_and_counts_what_it_judged() -> None:
    s = _scene()
    s.state.event_failures.append({"consumer": "dispatcher", "event_id": "e-1", "attempt": 1,
                                   "code": "OperationalError", "at": 0.0})  # an outage, not a defect
    verdict = _i27(s)
    assert verdict.status == HELD and verdict.checked > 1 and verdict.note == "", verdict.as_json()


@pytest.mark.parametrize("code", sorted(DEFECT_NAMES))
def test_a_consumer_failure_named_after_a_defect_violates(code: str) -> None:
    s = _scene()
    s.state.event_failures.append({"consumer": "dispatcher", "event_id": "e-1", "attempt": 2, "code": code,
                                   "at": 0.0})
    verdict = _i27(s)
    assert verdict.status == VIOLATED and code in verdict.violations[0].message


def test_an_internal_error_answer_violates_and_names_the_request() -> None:
    s = _scene()
    s.op(120.0, "user-3", INVOKE, "read", task_id=TASK)
    op = s.op(120.5, "user-3", "fail", "read", task_id=TASK, status=500, code="INTERNAL_ERROR")
    verdict = _i27(s)
    assert verdict.status == VIOLATED and verdict.violations[0].ops == [op.index], verdict.as_json()


def test_a_defect_carried_on_from_violates_where_the_shell_sees_it_and_is_named_where_it_does_not() -> None:
    s = _scene()
    s.state.defects = [{"t": 42.0, "logger": "reference.services.reconcile", "error": "KeyError: 'x'",
                        "where": "services/reconcile.py:120"}]
    verdict = _i27(s)
    assert verdict.status == VIOLATED and "services/reconcile.py:120" in verdict.violations[0].message
    s.state.defects = None  # the real stack: its processes' logs are not read
    unseen = _i27(s)
    assert unseen.status == HELD and "judged in simulation" in unseen.note


def test_every_defect_type_has_its_name() -> None:
    assert {t.__name__ for t in DEFECTS} <= DEFECT_NAMES


def test_a_write_back_that_raises_type_error_after_a_timeout_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant of dispatch.py that turned `"found by query after " + code` into `-` (mutation testing,
    2026-12-05) raised TypeError there; the task stayed DISPATCHING and the reconciler settled it: R1 was green."""
    real = dispatch._write_back

    def broken(plan: Any, flight: Any, reason: str) -> Any:
        if reason.startswith("found by query"):
            raise TypeError("unsupported operand type(s) for -: 'str' and 'str'")
        return (yield from real(plan, flight, reason))

    monkeypatch.setattr(dispatch, "_write_back", broken)
    result = simulate(load_catalogue("copilot")["R1"], 1)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert set(violated) == {"I27"}, {k: v.violations[0].message for k, v in violated.items()}
    assert "TypeError" in violated["I27"].violations[0].message


def test_a_defect_in_a_loop_that_carries_on_is_recorded_by_the_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler's round logs a defect and carries on (kernel.logs.FailedRounds): only the world's record of the
    log shows it."""
    import reference.services.reconcile as reconcile

    real = reconcile.reconcile_once
    calls = {"n": 0}

    def flaky(policy: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise AttributeError("'NoneType' object has no attribute 'status'")
        return (yield from real(policy))

    monkeypatch.setattr(reconcile, "reconcile_once", flaky)
    result = simulate(load_catalogue("copilot")["C1"], 1)
    assert [d["error"] for d in result.state.defects] == ["AttributeError: 'NoneType' object has no attribute 'status'"]
    assert result.state.defects[0]["where"].startswith("checkers/test_i27_defects.py:")  # where it was raised
    assert {v.invariant for v in result.verdicts if v.status == VIOLATED} == {"I27"}
