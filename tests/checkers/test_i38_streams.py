"""I38: every task stream ends at each of its user's tasks' latest status and version. Hand-made runs: a stream that
converged holds; one that ended on an older version, or never heard of a task changed while it was open, is
violated; a change committed while the stream was down is not asked of it; a run without streams is unchecked."""

from __future__ import annotations

from harness.history import INFO, OK, History
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS, CheckContext
from systems.copilot.state import FinalState

T0 = 1_000_000.0
TASK, USER = "00000000-0000-4000-8000-000000000001", "operator-001"


def run(final_ops: list[dict[str, object]], *, committed_at: float = 10.0, drop: tuple[float, float] | None = None,
        streams: bool = True) -> Verdict:
    h = History()
    if streams:
        h.add(0.0, "stream-0", INFO, "stream-open", {"user_id": USER, "after_drop": False})
        if drop is not None:
            h.add(drop[0], "stream-0", INFO, "stream-drop", {"user_id": USER, "error": "ConnectionError"})
            h.add(drop[1], "stream-0", INFO, "stream-open", {"user_id": USER, "after_drop": True})
        for value in final_ops:
            h.add(100.0, "stream-0", OK, "stream-final", value)
        h.add(100.0, "stream-0", OK, "stream-final-done", {"user_id": USER, "tasks": len(final_ops),
                                                            "missed_changes": 0})
    state = FinalState(t0=T0, tasks=[{"id": TASK, "user_id": USER, "status": "COMPLETED", "version": 5}],
                       audit=[{"task_id": TASK, "to": "COMPLETED", "to_version": 5, "at": T0 + committed_at}])
    return INVARIANTS.check(CheckContext(h, state), ["I38"])[0]


def final(status: str, version: int) -> dict[str, object]:
    return {"task_id": TASK, "stream_status": status, "stream_version": version, "status": "COMPLETED", "version": 5}


def test_a_stream_at_the_latest_status_holds() -> None:
    verdict = run([final("COMPLETED", 5)])
    assert (verdict.status, verdict.checked) == (HELD, 1)


def test_a_stream_left_on_an_older_version_is_violated() -> None:
    verdict = run([final("EXECUTING", 4)])
    assert verdict.status == VIOLATED
    assert verdict.violations[0].task_id == TASK and "EXECUTING@v4" in verdict.violations[0].message


def test_a_task_changed_while_the_stream_was_open_must_be_known() -> None:
    verdict = run([])
    assert verdict.status == VIOLATED and "never heard of the task" in verdict.violations[0].message


def test_a_task_changed_only_while_the_stream_was_down_is_not_asked_of_it() -> None:
    verdict = run([], committed_at=10.0, drop=(5.0, 20.0))
    assert (verdict.status, verdict.checked) == (HELD, 0)


def test_a_run_without_streams_is_unchecked() -> None:
    assert run([], streams=False).status == UNCHECKED
