"""I9: the platform's events take their effect on the task whose flight they are from: telemetry never moves it
backwards, each alert counts once, and none of its flight's events is stored as an orphan no task counts. The orphan
case came from mutation testing of events.py (2026-12-06): events matched only by external id, never by the task id
they carry, left a task whose write-back never happened without its flight's alerts and progress, and R2 was green."""

from __future__ import annotations

from typing import Any

from checker_scene import Scene

from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"


def _scene() -> tuple[Scene, dict[str, Any]]:
    s = Scene()
    t = s.task(TASK, "COMPLETED", user="operator-001", key="k-1", start=100.0)
    return s, t


def _i9(s: Scene) -> Verdict:
    return INVARIANTS["I9"](s.ctx())


def test_a_run_whose_events_took_their_effect_holds() -> None:
    s, t = _scene()
    t.update(alert_count=2, last_telemetry_seq=7)
    s.state.alert_events[TASK], s.state.telemetry_max_seq[TASK] = 2, 7
    assert _i9(s).status == HELD


def test_an_alert_counted_twice_or_progress_lost_violates() -> None:
    s, t = _scene()
    t.update(alert_count=3, last_telemetry_seq=5)
    s.state.alert_events[TASK], s.state.telemetry_max_seq[TASK] = 2, 7
    verdict = _i9(s)
    assert verdict.status == VIOLATED
    assert [v.message for v in verdict.violations] == ["alert_count 3 but 2 distinct alerts stored",
                                                       "last_telemetry_seq 5 but the highest telemetry sequence "
                                                       "stored is 7"]


def test_events_of_the_task_s_own_flight_stored_as_orphans_violate() -> None:
    s, t = _scene()
    own = s.flights(TASK)[0]["external_id"]
    s.state.orphan_events[own] = 4
    verdict = _i9(s)
    assert verdict.status == VIOLATED
    assert [(v.task_id, v.message) for v in verdict.violations] == [(TASK, f"4 events of its flight {own} stored "
                                                                           "with no task")]
    t.update(external_task_id=None)  # the write-back never happened: the events carry the task's id all the same
    assert _i9(s).status == VIOLATED


def test_orphans_of_a_flight_no_task_owns_hold() -> None:
    """A second flight of a task that knows another one (a platform without keys made two: I1's business), and a
    flight the platform made for no task of this run, may leave their events with no task."""
    s, t = _scene()
    s.flight(TASK, 150.0, "COMPLETED")  # a duplicate flight made for the same task
    second = s.flights(TASK)[1]["external_id"]
    assert second != t["external_task_id"]
    s.state.orphan_events[second] = 3
    s.state.orphan_events["FLT-NOT-OURS"] = 2
    assert _i9(s).status == HELD


def test_the_webhook_s_answers_must_count_what_was_stored() -> None:
    """Mutation testing of events.py: a webhook that answered duplicates = sent + new was green everywhere, and R3's
    "duplicates arrived" read those answers. Where the harness sees every answer (the simulation), they must add up."""
    s, _ = _scene()
    s.state.event_arrivals = {"stored": 10}
    s.state.orphan_events = {"FLT-NOT-OURS": 2}
    s.state.webhook_answers = {"sent": 14, "accepted": 10, "duplicates": 4, "orphans": 2}
    assert _i9(s).status == HELD
    s.state.webhook_answers = {"sent": 14, "accepted": 10, "duplicates": 24, "orphans": 3}
    verdict = _i9(s)
    assert [v.message for v in verdict.violations] == [
        "the webhook's answers summed accepted + duplicates 34, but 14 events were sent",
        "the webhook's answers summed orphans 3, but 2 events were stored with no task"]
    # A batch stored and then unanswered (the API killed after its commit) is heard as duplicates when sent again.
    s.state.webhook_answers = {"sent": 14, "accepted": 6, "duplicates": 8, "orphans": 0, "unanswered": 1}
    assert _i9(s).status == HELD
    s.state.webhook_answers = {"sent": 14, "accepted": 12, "duplicates": 2, "orphans": 0, "unanswered": 1}
    assert [v.message for v in _i9(s).violations] == [
        "the webhook's answers summed accepted 12, but 10 events were stored"]
    s.state.webhook_answers = None  # a real stack: the platform simulator got the answers
    assert _i9(s).status == HELD
