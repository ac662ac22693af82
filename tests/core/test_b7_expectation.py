"""B7's "the fault did what it should" check, on hand-made histories: it must not depend on whether a stream
happened to know a task when it dropped (that depends on flight timing), and must fail each way it can."""

from __future__ import annotations

from harness.history import INFO, OK, History
from systems.copilot.expectations import EXPECTATIONS
from systems.copilot.state import FinalState

b7 = EXPECTATIONS["stream-disconnect"]
TASK = "t-1"


def history(*, reconnect: bool = True, resync: bool = True, knew: bool = True, believed: int = 5) -> History:
    h = History()
    h.add(0.0, "stream-0", INFO, "stream-open", {"after_drop": False})
    h.fault_start(10.0, "stream-disconnect")
    h.add(10.1, "stream-0", INFO, "stream-drop", {"error": "ChunkedEncodingError"})
    h.fault_stop(20.0, "stream-disconnect")
    if reconnect:
        h.add(21.5, "stream-0", INFO, "stream-open", {"after_drop": True})
        if resync:
            if knew:
                h.add(21.6, "stream-0", OK, "resync", {"task_id": TASK, "stream_version": 4, "version": 5})
            h.add(21.6, "stream-0", OK, "resync-done", {"tasks": int(knew), "missed_changes": int(knew)})
    h.add(50.0, "stream-0", OK, "stream-final", {"task_id": TASK, "stream_version": believed, "version": 5})
    h.add(50.0, "stream-0", OK, "stream-final-done", {"tasks": 1, "missed_changes": 0})
    return h


STATE = FinalState(tasks=[{"id": TASK, "version": 5}])


def test_drop_reconnect_resync_and_convergence_pass() -> None:
    assert b7(history(), STATE) is None


def test_a_stream_that_knew_no_task_when_it_dropped_still_passes() -> None:
    assert b7(history(knew=False), STATE) is None


def test_no_reconnect_fails() -> None:
    assert "never reconnected" in (b7(history(reconnect=False), STATE) or "")


def test_reconnect_without_resync_fails() -> None:
    assert "without resyncing" in (b7(history(resync=False), STATE) or "")


def test_a_stale_stream_fails() -> None:
    assert "did not converge" in (b7(history(believed=4), STATE) or "")


def test_no_drop_in_the_window_fails() -> None:
    h = History()
    h.fault_start(10.0, "stream-disconnect")
    h.fault_stop(20.0, "stream-disconnect")
    assert "no open stream dropped" in (b7(h, STATE) or "")
