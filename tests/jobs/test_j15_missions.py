"""J15: the stored edges form a DAG within each mission, a mission sent with a defect is refused, and a refused one
wrote nothing; the refused-missions scenario's planners send each defect of systems.jobs.sim.REFUSED."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scenarios.verdicts import HELD
from systems.jobs.checkers import JobsState, missions_are_dags_or_refused
from systems.jobs.sim import REFUSED, JobsSpec, simulate_jobs


def _edge(child: int, parent: int, kind: str = "hard") -> dict[str, Any]:
    return {"job_id": child, "parent_id": parent, "kind": kind, "released_at": None}


def _state(edges: list[dict[str, Any]], missions: tuple[dict[str, Any], ...] = ()) -> JobsState:
    jobs = [{"id": i, "mission_id": "m" if i < 10 else "other"} for i in (1, 2, 3, 10)]
    return JobsState(jobs, [], [], {}, [], edges, datetime.now(UTC), 6, missions=list(missions))


def _messages(s: JobsState) -> list[str]:
    verdict = missions_are_dags_or_refused(s)
    return [v.message for v in verdict.violations]


def test_a_dag_holds_and_each_stored_defect_violates() -> None:
    assert missions_are_dags_or_refused(_state([_edge(2, 1), _edge(3, 2, "soft"), _edge(3, 1, "time")])).status == HELD
    assert _messages(_state([_edge(2, 1), _edge(1, 2)])) == ["the stored edges form a cycle through jobs [1, 2]"]
    assert _messages(_state([_edge(2, 2)])) == ["depends on itself", "the stored edges form a cycle through jobs [2]"]
    assert _messages(_state([_edge(2, 1), _edge(2, 1, "soft")])) == ["has two edges to parent 1"]
    assert _messages(_state([_edge(2, 1, "maybe")])) == ["has an edge of kind 'maybe'"]
    assert _messages(_state([_edge(10, 1)])) == ["depends on job 1 of another mission"]


def test_a_defective_mission_must_be_refused_and_write_nothing() -> None:
    refused = {"mission": "x", "defect": "cycle", "repost": False, "answer": "refused", "refused": "a cycle"}
    assert missions_are_dags_or_refused(_state([], (refused,))).status == HELD
    assert _messages(_state([], ({**refused, "answer": "ok"},))) == ["sent with a cycle, answered ok, not refused"]
    assert _messages(_state([], ({**refused, "mission": "m"},))) == ["refused (a cycle), and its jobs were written"]


def test_every_defect_the_planners_send_is_refused_in_simulation() -> None:
    run = simulate_jobs(JobsSpec(jobs=0, missions=1, refused_missions=len(REFUSED)), 1, "fixed")
    answers = {m["defect"]: m["answer"] for m in run.state.missions if m["defect"]}
    assert answers == {defect: "refused" for defect, _steps, _edges in REFUSED}
    verdict = missions_are_dags_or_refused(run.state)
    assert verdict.status == HELD and verdict.checked == len(run.state.edges) + len(REFUSED) + 1


def test_a_repeat_of_a_stored_mission_is_answered_and_a_conflicting_one_refused() -> None:
    repeat = {"mission": "m", "defect": "", "repost": True, "answer": "ok", "refused": ""}
    conflict = {**repeat, "defect": "conflict-edges", "answer": "refused", "refused": "other edges"}
    assert missions_are_dags_or_refused(_state([], (repeat, conflict))).status == HELD
    assert _messages(_state([], ({**repeat, "answer": "refused", "refused": "other edges"},))) == [
        "a repeat of the stored mission, refused (other edges)", "refused (other edges), and its jobs were written"]
    run = simulate_jobs(JobsSpec(jobs=0, missions=1, reposted_missions=3), 1, "fixed")
    assert [(m["defect"], m["answer"]) for m in run.state.missions if m["repost"]] == [
        ("", "ok"), ("conflict-edges", "refused"), ("conflict-steps", "refused")]
    assert missions_are_dags_or_refused(run.state).status == HELD
