"""I27: no error only a defect raises. Hand-made runs (checker_scene): a consumer's recorded failure named after a
defect, an API answer INTERNAL_ERROR, and a defect a loop carried on from (seen in simulation only); and the
simulation's own record of them (systems.copilot.sim), from a consumer whose handler raises TypeError."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from checker_scene import Scene

import reference.copilot.services.dispatch as dispatch
from harness.history import INVOKE
from kernel.logs import DEFECT_MARK, DEFECT_NAMES, DEFECTS, FailedRounds, defects_in_log
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"


def _scene() -> Scene:
    s = Scene()
    s.task(TASK, "COMPLETED", user="operator-001", key="k-1", start=100.0)
    s.state.defects = []
    return s


def _i27(s: Scene) -> Verdict:
    return INVARIANTS["I27"](s.ctx())


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
    s.state.defects = [{"t": 42.0, "logger": "reference.copilot.services.reconcile", "error": "KeyError: 'x'",
                        "where": "services/reconcile.py:120"}]
    verdict = _i27(s)
    assert verdict.status == VIOLATED and "services/reconcile.py:120" in verdict.violations[0].message
    s.state.defects = None  # a final state built without the components' logs
    unseen = _i27(s)
    assert unseen.status == HELD and "not judged" in unseen.note


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
    import reference.copilot.services.reconcile as reconcile

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


LOG = """\
2026-12-05 23:12:30,034 reconciler INFO ready
2026-12-05 23:12:31,071 reconciler ERROR reconcile round failed with a defect: TypeError: can only concatenate str
Traceback (most recent call last):
  File "/work/main/reference/services/reconcile.py", line 215, in reconciler_loop
    yield from reconcile_once(policy)
  File "/work/main/reference/services/dispatch.py", line 224, in create_flight
    return (yield from _write_back(plan, found, "found by query after " - exc.code))
TypeError: can only concatenate str (not "int") to str
2026-12-05 23:12:32,313 reconciler WARNING reconcile round failed (1 in a row): OperationalError: the database is down
2026-12-05 23:12:33,000 dispatcher ERROR dispatcher: handling 36623860 failed with a defect: KeyError: 'route'
2026-12-05 23:12:34,000 dispatcher ERROR exception calling callback for <Future raised AioRpcError>
Traceback (most recent call last):
  File "/venv/site-packages/grpc/aio/_call.py", line 333, in __await__
grpc.aio._call.AioRpcError: <AioRpcError of RPC that terminated with:
"""


def test_the_defects_a_component_logged_are_read_from_its_log_and_nothing_else() -> None:
    """The real stack's side of I27: the records with kernel.logs.DEFECT_MARK, their time, process and the innermost
    frame of their traceback; an outage's warning and a library's traceback are not defects."""
    found = defects_in_log(LOG)
    assert [(d["logger"], d["error"].partition(":")[0], d["where"]) for d in found] == [
        ("reconciler", "TypeError", "dispatch.py:224 create_flight"), ("dispatcher", "KeyError", "")]
    assert found[1]["at"] - found[0]["at"] == pytest.approx(1.929)


def test_a_loop_s_defect_record_carries_the_mark_the_stack_reads(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("tests.i27")
    FailedRounds(log, "reconcile round").failed(TypeError("boom"))
    assert [r.getMessage() for r in caplog.records] == [f"reconcile round failed {DEFECT_MARK}TypeError: boom"]


def test_a_defect_in_the_webhook_s_ingest_is_recorded_by_the_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The platform's webhook is no user's request: its 500 answer reaches no history, and the event pump sends the
    batch again. A mutant of events.py raising IndexError on every batch with a DISPATCHING task's telemetry
    (mutation testing, 2026-12-06) left those tasks to the reconciler, and R2 was green: the API's use cases log
    under sortie.api, which the simulation's record of defects did not hear."""
    import reference.copilot.api as api

    real = api.ingest_platform_events

    def broken(tx: Any, events: Any) -> Any:
        if any(e.kind == "telemetry" for e in events):
            raise IndexError("tuple index out of range")
        return real(tx, events)

    monkeypatch.setattr(api, "ingest_platform_events", broken)
    result = simulate(load_catalogue("copilot")["R2"], 1)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert "I27" in violated
    assert violated["I27"].violations[0].message.startswith("IndexError: tuple index out of range")
    assert "sortie.api" in violated["I27"].violations[0].message


def test_the_api_s_record_of_an_unhandled_defect_is_read_from_its_log(caplog: pytest.LogCaptureFixture) -> None:
    """On the real stack the API's defects reach I27 through its log: problem_of marks them (an outage it does not)."""
    from kernel.logs import LOG_FORMAT
    from reference.copilot.api import problem_of

    assert problem_of(KeyError("route")).status == 500
    assert problem_of(RuntimeError("the broker is gone")).status == 500
    formatter = logging.Formatter(LOG_FORMAT)
    text = "\n".join(formatter.format(r) for r in caplog.records if r.name == "sortie.api")
    found = defects_in_log(text)
    assert [(d["logger"], d["error"], d["where"]) for d in found] == [("sortie.api", "KeyError: 'route'", "")]
