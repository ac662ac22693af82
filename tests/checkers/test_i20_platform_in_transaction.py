"""I20 (no database transaction is open across a platform call) is violated by any
``platform-call-in-transaction`` operation, whichever shell recorded it, and holds on a history of platform
calls made outside transactions; either way it says how many platform calls it examined. The real stack's
``idle in transaction`` samples are information in its note, never a violation."""

from __future__ import annotations

from harness.history import INFO, INVOKE, OK, History
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import IDLE_IN_TRANSACTION, INVARIANTS, CheckContext
from systems.copilot.state import FinalState

TASK = "task-1"


def _history(*, inside: bool, idle_sample: bool = False) -> History:
    h = History()
    h.fault_start(0.0, "db-latency", ms=300, duration=90.0)
    for t, method in ((1.0, "get_device"), (2.0, "create_flight")):
        if inside and method == "create_flight":  # the dispatcher's begin transaction is still open
            h.add(t, "dispatcher-1", INFO, "platform-call-in-transaction",
                  {"method": method, "task_id": TASK, "transaction": "dispatch.begin", "via": "runtime"})
        h.add(t, "dispatcher-1", INVOKE, method, {"task_id": TASK, "method": method, "try": 0})
        h.add(t + 0.1, "dispatcher-1", OK, method, {"task_id": TASK, "method": method, "try": 0})
    if idle_sample:
        h.add(9.0, "monitor", INFO, IDLE_IN_TRANSACTION, {"pid": 4242, "application": "sortie-dispatcher-17",
                                                           "max_idle_s": 0.61, "max_xact_s": 1.9, "seen": 3,
                                                           "samples": 40})
    h.fault_stop(10.0, "db-latency")
    return h


def _check(history: History):  # type: ignore[no-untyped-def]
    return INVARIANTS["I20"](CheckContext(history, FinalState()))


def test_a_platform_call_inside_a_transaction_violates_i18() -> None:
    history = _history(inside=True)
    verdict = _check(history)
    assert verdict.status == VIOLATED
    assert verdict.checked == 2  # both platform calls examined
    [violation] = verdict.violations
    flagged = next(op for op in history.ops if op.f == "platform-call-in-transaction")
    assert violation.task_id == TASK and violation.ops == [flagged.index]
    assert "create_flight" in violation.message and "dispatch.begin" in violation.message


def test_platform_calls_outside_transactions_hold_i18() -> None:
    verdict = _check(_history(inside=False))
    assert verdict.status == HELD and not verdict.violations
    assert verdict.checked == 2 and "2 platform calls examined" in verdict.note


def test_idle_in_transaction_samples_are_information_not_violations() -> None:
    verdict = _check(_history(inside=False, idle_sample=True))
    assert verdict.status == HELD
    assert "0.61s" in verdict.note and "sortie-dispatcher-17" in verdict.note


def test_every_scenario_checks_i18() -> None:
    assert "I20" in INVARIANTS.ids
