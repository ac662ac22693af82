"""I19: a platform call is tried at most the policy's times, and retry n+1 waits the policy's backoff: at least half
the exponential step after try n answered and (where the fast path is modelled) at most the whole step after the
process's last platform answer. Hand-made histories of one dispatcher retrying get_device after a 503."""

from __future__ import annotations

import pytest

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from reference.copilot.policy import Policy
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS, CheckContext
from systems.copilot.state import FinalState

TASK = "task-1"
RETRY = Policy().platform_retry  # base 0.5 s: retry 1 waits 0.25-0.5 s, retry 2 waits 0.5-1.0 s


def _retried(gaps: list[float], *, query_between: float | None = None, paused: bool = False) -> History:
    """Tries 0, 1, ... of get_device: each fails 0.1 s after it starts, the next starts ``gaps[n]`` after that."""
    h = History()
    t = 10.0
    for n, gap in enumerate([0.0, *gaps]):
        t += gap
        h.add(t, "dispatcher-1", INVOKE, "get_device", {"task_id": TASK, "method": "get_device", "try": n})
        t += 0.1
        h.add(t, "dispatcher-1", FAIL, "get_device", {"task_id": TASK, "method": "get_device", "try": n,
                                                      "error": "HTTP_503"})
        if n == 0 and query_between is not None:  # another call of the same process, answered this long after
            h.add(t + 0.01, "dispatcher-1", INVOKE, "find_by_request_id", {"task_id": TASK})
            h.add(t + query_between, "dispatcher-1", OK, "find_by_request_id", {"task_id": TASK})
        if n == 0 and paused:
            h.add(t + 0.05, NEMESIS, INFO, "pause", {"process": "dispatcher-1", "seconds": 30.0})
    return h


def _i19(h: History, *, modelled: bool = True) -> Verdict:
    return INVARIANTS["I19"](CheckContext(h, FinalState(), fast_path_modelled=modelled))


@pytest.mark.parametrize("gap,held", [(0.2, False), (0.25, True), (0.5, True), (0.51, False), (1.0, False)],
                         ids=["too-soon", "floor", "ceiling", "just-late", "a-step-too-long"])
def test_retry_one_waits_between_half_and_the_whole_step(gap: float, held: bool) -> None:
    verdict = _i19(_retried([gap]))
    assert verdict.checked == 2 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


def test_the_ceiling_counts_from_the_last_answer_of_the_process() -> None:
    """A query after a timeout comes between the tries: the wait is measured from its answer."""
    assert _i19(_retried([3.0], query_between=2.6)).status == HELD
    assert _i19(_retried([3.0], query_between=1.0)).status == VIOLATED


def test_a_paused_process_is_not_judged_from_above() -> None:
    assert _i19(_retried([31.0], paused=True)).status == HELD


def test_on_a_real_stack_only_the_floor_is_judged() -> None:
    verdict = _i19(_retried([2.0]), modelled=False)
    assert verdict.status == HELD and "not bounded from above" in verdict.note
    assert _i19(_retried([0.1]), modelled=False).status == VIOLATED


def test_a_try_past_the_policy_s_count_violates() -> None:
    gaps = [RETRY.max_delay(n) for n in range(RETRY.attempts)]  # one more try than allowed, each on time
    verdict = _i19(_retried(gaps))
    assert verdict.status == VIOLATED and f"a {RETRY.attempts + 1}th time" in verdict.violations[0].message
