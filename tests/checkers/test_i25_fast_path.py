"""I25: the reconciler does not act on a task no fault touched on its way to the platform. Hand-made runs
(checker_scene) of one task confirmed at t=100 s (QUEUED 101, VALIDATING 102, DISPATCHING 103, EXECUTING 104,
COMPLETED 105), with the reconciler acting on it, and with or without a fault before it."""

from __future__ import annotations

import pytest
from checker_scene import Scene

from harness.history import INFO, INVOKE, NEMESIS
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-calm"
START = 100.0


def _scene(*faults: tuple[str, float, float | None]) -> Scene:
    """The task, after the faults (name, start, end; end None: a one-shot, started and stopped at once)."""
    s = Scene()
    for name, start, end in faults:
        s.op(start, NEMESIS, INFO, "start-fault", fault=name)
        s.op(start if end is None else end, NEMESIS, INFO, "stop-fault", fault=name)
    s.task(TASK, "COMPLETED", user="operator-001", key="k-1", start=START)
    return s


def _reconciler_calls(s: Scene, f: str, at: float) -> int:
    return s.op(at, "reconciler", INVOKE, f, task_id=TASK, method=f).index


def _i25(s: Scene, *, modelled: bool = True) -> Verdict:
    return INVARIANTS["I25"](s.ctx(fast_path_modelled=modelled))


def test_the_reconciler_dispatching_a_task_no_fault_touched_is_a_dead_fast_path() -> None:
    s = _scene()
    index = _reconciler_calls(s, "get_device", START + 2.5)
    verdict = _i25(s)
    assert verdict.status == VIOLATED and verdict.checked == 1, verdict.as_json()
    (v,) = verdict.violations
    assert v.task_id == TASK and "called get_device for it at t=102.5s" in v.message and index in v.ops


def test_a_reconciler_move_is_judged_like_its_calls() -> None:
    s = _scene()
    s.audit(TASK, START + 1.5, "CREATED", "QUEUED", 0, 1, actor="reconciler", action="QUEUED_BY_RECONCILER")
    verdict = _i25(s)
    assert verdict.status == VIOLATED and "QUEUED_BY_RECONCILER" in verdict.violations[0].message


@pytest.mark.parametrize("faults", [
    [("broker-outage", 50.0, 90.0)],  # ended 10 s before the task was created: within the grace (30 + 30 s)
    [("crash-point", 20.0, None)],  # a one-shot long before: its effect may linger
])
def test_a_task_a_fault_touched_may_need_the_reconciler(faults: list[tuple[str, float, float | None]]) -> None:
    s = _scene(*faults)
    _reconciler_calls(s, "get_device", START + 2.5)
    verdict = _i25(s)
    assert verdict.status == HELD and verdict.checked == 0, verdict.as_json()


def test_a_fault_long_over_does_not_excuse_it() -> None:
    s = _scene(("broker-outage", 10.0, 30.0))  # over 70 s before the task was created
    _reconciler_calls(s, "get_device", START + 2.5)
    assert _i25(s).status == VIOLATED


def test_a_fault_that_starts_after_the_reconciler_acted_does_not_excuse_it() -> None:
    s = _scene(("broker-outage", START + 3.0, START + 30.0))
    _reconciler_calls(s, "get_device", START + 2.5)
    assert _i25(s).status == VIOLATED


def test_the_reconciler_querying_a_flying_task_is_its_policy_s_business() -> None:
    s = _scene()
    _reconciler_calls(s, "get_flight", START + 4.5)  # EXECUTING since 104
    verdict = _i25(s)
    assert verdict.status == HELD and verdict.checked == 1, verdict.as_json()


def test_on_a_real_stack_it_is_not_judged() -> None:
    s = _scene()
    _reconciler_calls(s, "get_device", START + 2.5)
    verdict = _i25(s, modelled=False)
    assert verdict.status == UNCHECKED and "simulation only" in verdict.note
