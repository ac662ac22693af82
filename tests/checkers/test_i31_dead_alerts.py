"""I31: an item gone DEAD after its retries pages an operator once, and nothing else does. From mutation testing of
outbox.py (2026-12-06): the OUTBOX_DEAD alert could go unraised with every check green. The real stack's harness reads
the alerts in the components' logs (reference.copilot.alerts.alerts_in_log); the simulation hears the records."""

from __future__ import annotations

from checker_scene import T0, Scene

from harness.history import INFO, NEMESIS
from reference.copilot.alerts import alerts_in_log
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"


def _i31(s: Scene) -> Verdict:
    return INVARIANTS["I31"](s.ctx())


def _scene(alerts: list[dict[str, str]] | None) -> Scene:
    s = Scene()
    s.state.outbox.append({"id": "e1", "task_id": TASK, "event_type": "TaskCreated", "task_version": 0,
                           "status": "DEAD", "created_at": T0, "sent_at": None, "attempts": 4})
    s.state.outbox_budget.append({"action": "OUTBOX_DEAD", "event_id": "e1", "at": T0 + 50.0, "attempts": 4})
    s.audit(TASK, 300.0, None, None, None, None, actor="report-worker", action="REPORT_DEAD")
    s.state.alerts = alerts
    return s


def test_one_alert_per_dead_item_holds() -> None:
    verdict = _i31(_scene([{"code": "OUTBOX_DEAD", "event_id": "e1"}, {"code": "REPORT_DEAD", "task_id": TASK},
                           {"code": "JOB_DEAD", "job_id": "7"}]))
    assert verdict.status == HELD and verdict.checked == 2


def test_a_dead_item_no_operator_heard_of_violates_unless_its_writer_was_killed_right_after() -> None:
    s = _scene([{"code": "REPORT_DEAD", "task_id": TASK}])
    verdict = _i31(s)
    assert verdict.status == VIOLATED
    assert [(v.task_id, v.message) for v in verdict.violations] == [
        (TASK, "outbox event e1 went DEAD at 50.0s and no operator was alerted")]
    s.history.add(51.0, NEMESIS, INFO, "kill", {"process": "publisher-2", "why": "crash point"})
    assert _i31(s).status == HELD
    s.history.ops[-1].value["process"] = "dispatcher-1"  # not the writer
    assert _i31(s).status == VIOLATED


def test_an_alert_twice_or_for_nothing_dead_violates() -> None:
    s = _scene([{"code": "OUTBOX_DEAD", "event_id": "e1"}, {"code": "OUTBOX_DEAD", "event_id": "e1"},
                {"code": "REPORT_DEAD", "task_id": TASK}, {"code": "REPORT_DEAD", "task_id": "task-2"}])
    assert [v.message for v in _i31(s).violations] == [
        "1 OUTBOX_DEAD alert(s) for e1, which has no DEAD audit for them",
        "1 REPORT_DEAD alert(s) for task-2, which has no DEAD audit for them"]


def test_a_shell_that_does_not_observe_alerts_leaves_it_unchecked() -> None:
    assert _i31(_scene(None)).status == UNCHECKED


def test_alerts_are_read_from_a_component_log() -> None:
    text = ("2026-12-06 07:01:02,003 publisher ERROR ALERT OUTBOX_DEAD attempts=4 error=broker unavailable: no "
            "answer within 3.0s event_id=0c5ad9a0-8461-4fc8-9de7-e8fd30109722\n"
            "2026-12-06 07:01:03,000 publisher INFO publish round failed\n"
            "2026-12-06 07:01:04,000 report-worker ERROR ALERT REPORT_DEAD attempts=3 error=down task_id=t-9\n")
    assert alerts_in_log(text) == [{"code": "OUTBOX_DEAD", "event_id": "0c5ad9a0-8461-4fc8-9de7-e8fd30109722"},
                                   {"code": "REPORT_DEAD", "task_id": "t-9"}]


def _dead_letter(s: Scene, *, redriven: bool, redrive_count: int) -> Scene:
    """A TaskCompleted the report worker dead-lettered (and maybe, after re-drives, again)."""
    s.state.outbox.append({"id": "e2", "task_id": TASK, "event_type": "TaskCompleted", "task_version": 4,
                           "status": "SENT", "created_at": T0, "sent_at": T0, "attempts": 1})
    s.state.dead_letters.append({"id": 1, "consumer": "report-worker", "event_id": "e2", "task_id": TASK,
                                 "event_type": "TaskCompleted", "error_code": "BOOM", "attempts": 5,
                                 "history": [{"attempt": 5, "code": "BOOM", "at": "2026-01-01T00:02:00+00:00"}],
                                 "redriven": redriven, "redrive_count": redrive_count, "created_at": T0 + 100.0})
    return s


def test_every_dead_lettering_pages_an_operator_once() -> None:
    both = [{"code": "OUTBOX_DEAD", "event_id": "e1"}, {"code": "REPORT_DEAD", "task_id": TASK}]
    page = {"code": "DEAD_LETTER", "event_id": "e2"}
    # dead once: one page
    assert _i31(_dead_letter(_scene([*both, page]), redriven=False, redrive_count=0)).status == HELD
    silent = _i31(_dead_letter(_scene(both), redriven=False, redrive_count=0))
    assert [v.message for v in silent.violations] == [
        "dead letter of event e2 went DEAD at 120.0s and no operator was alerted"]
    # re-driven once and not dead since: still the one page; dead again after it: a second page is owed
    assert _i31(_dead_letter(_scene([*both, page]), redriven=True, redrive_count=1)).status == HELD
    assert _i31(_dead_letter(_scene([*both, page]), redriven=False, redrive_count=1)).status == VIOLATED
    assert _i31(_dead_letter(_scene([*both, page, page]), redriven=False, redrive_count=1)).status == HELD
