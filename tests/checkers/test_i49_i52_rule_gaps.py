"""I49-I52: rules of the traceability matrix (systems/copilot/rules.py) that nothing judged on a history until issue 54
gave each an invariant: no self-approval (113), every stored plan within its area and limits (91), every task keeping
the version it was confirmed from (4), an owner never forbidden to cancel (114). Hand-made runs (checker_scene), each
broken one way: the checker must name it, and hold on the run the reference would leave."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from checker_scene import AREAS, DEVICE, Scene

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"
USER = "operator-001"
SQUARE = [[30.0, 120.0], [30.0, 120.05], [30.05, 120.05], [30.05, 120.0]]  # the workload's sites (seed_fleet)
ROUTE_V1 = [[30.01, 120.01], [30.02, 120.02], [30.03, 120.01]]
ROUTE_V2 = [[30.04, 120.04], [30.02, 120.03]]
PARAMETERS = {"altitude_m": 60.0, "actions": ["photo", "hover"], "speed_mps": 8.0}


def _drafted(*, revised: bool = False) -> Scene:
    """A completed task confirmed from version 1 of its draft, every row as the reference leaves it; ``revised``: the
    author revised the draft afterwards (version 2: a new route row, other parameters)."""
    s = Scene()
    for area in s.state.areas:
        area.update(polygon=SQUARE, max_altitude_m=120.0)
    task = s.task(TASK, "COMPLETED", user=USER, key="k-1", start=100.0)
    draft = task["draft_id"]
    task.update(area_id=AREAS[0], device_id=DEVICE, draft_version=1, route_id="route-1", route_version=1,
                snapshot={"device_id": DEVICE, "area": {"id": AREAS[0]}, "draft_version": 1,
                          "route": {"id": "route-1", "version": 1, "waypoints": copy.deepcopy(ROUTE_V1)},
                          "parameters": dict(PARAMETERS)})
    s.state.routes.append({"id": "route-1", "draft_id": draft, "version": 1, "waypoints": copy.deepcopy(ROUTE_V1)})
    s.state.drafts.append({"id": draft, "user_id": USER, "status": "READY", "version": 1, "area_id": AREAS[0],
                           "device_id": DEVICE, "parameters": dict(PARAMETERS), "route_id": "route-1"})
    if revised:
        s.state.routes.append({"id": "route-2", "draft_id": draft, "version": 2, "waypoints": ROUTE_V2})
        s.state.drafts[0].update(version=2, route_id="route-2", parameters={**PARAMETERS, "altitude_m": 100.0})
    return s


def _judge(name: str, s: Scene) -> str:
    verdict = INVARIANTS[name](s.ctx())
    assert verdict.checked, verdict.as_json()
    return verdict.status


def test_the_drafted_runs_hold_every_new_invariant() -> None:
    for revised in (False, True):
        for name in ("I49", "I50", "I51"):
            assert _judge(name, _drafted(revised=revised)) == HELD, (name, revised)


# ------------------------------------------------------------------ I49: no decision by the draft's own author

@pytest.mark.parametrize("approver,status", [("approver-1", HELD), (USER, VIOLATED)], ids=["another", "author"])
def test_i49_no_draft_is_decided_by_its_author(approver: str, status: str) -> None:
    s = _drafted()
    for approval in s.state.approvals:
        approval["approver_id"] = approver
    assert _judge("I49", s) == status


# ------------------------------------------------------------------ I50: every stored plan within area and limits

def _route_outside(s: Scene) -> None:
    s.state.routes[0]["waypoints"][1] = [30.2, 120.02]


def _draft_too_high(s: Scene) -> None:
    s.state.drafts[0]["parameters"]["altitude_m"] = 5000.0


def _on_the_edge(s: Scene) -> None:
    s.state.routes[0]["waypoints"][0] = [30.0, 120.01]  # on the site's border: outside (strictly inside is the rule)


def _snapshot_unknown_action(s: Scene) -> None:
    s.state.tasks[0]["snapshot"]["parameters"]["actions"] = ["photo", "self_destruct"]


def _snapshot_too_slow(s: Scene) -> None:
    s.state.tasks[0]["snapshot"]["parameters"]["speed_mps"] = 0.1


def _generating(s: Scene) -> None:  # a draft a planner still works on: no plan yet, nothing to judge
    s.state.drafts.append({"id": "draft-gen", "user_id": USER, "status": "GENERATING", "version": 1,
                           "area_id": AREAS[0], "device_id": "", "parameters": {}, "route_id": "route-gen"})
    s.state.routes.append({"id": "route-gen", "draft_id": "draft-gen", "version": 1, "waypoints": []})


@pytest.mark.parametrize("breaks,status", [
    (_route_outside, VIOLATED), (_draft_too_high, VIOLATED), (_on_the_edge, VIOLATED),
    (_snapshot_unknown_action, VIOLATED), (_snapshot_too_slow, VIOLATED), (_generating, HELD),
], ids=lambda x: getattr(x, "__name__", x))
def test_i50_every_stored_plan_lies_within_its_area_and_limits(breaks: Any, status: str) -> None:
    s = _drafted()
    breaks(s)
    assert _judge("I50", s) == status


# ------------------------------------------------------------------ I51: a task keeps its confirmed version

def _route_rewritten(s: Scene) -> None:  # the revision edited version 1's route row (bug route-rewritten)
    s.state.routes = [{"id": "route-1", "draft_id": s.state.tasks[0]["draft_id"], "version": 2,
                       "waypoints": ROUTE_V2}]
    s.state.drafts[0].update(route_id="route-1")


def _waypoints_edited(s: Scene) -> None:
    s.state.routes[0]["waypoints"] = ROUTE_V2


def _parameters_followed_the_draft(s: Scene) -> None:  # the draft (unrevised) and the task disagree
    s.state.tasks[0]["snapshot"]["parameters"]["altitude_m"] = 100.0


def _flew_another_device(s: Scene) -> None:
    s.state.ledger[0]["device_id"] = "DRONE-0002"


@pytest.mark.parametrize("revised,breaks", [
    (True, _route_rewritten), (False, _waypoints_edited), (False, _parameters_followed_the_draft),
    (True, _flew_another_device),
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_i51_a_task_keeps_the_version_it_was_confirmed_from(revised: bool, breaks: Any) -> None:
    s = _drafted(revised=revised)
    assert _judge("I51", s) == HELD
    breaks(s)
    assert _judge("I51", s) == VIOLATED


# ------------------------------------------------------------------ I52: an owner may always cancel

@pytest.mark.parametrize("answer,status", [
    ({"type": "ok", "status": "CANCEL_PENDING"}, HELD),
    ({"type": "fail", "code": "TASK_NOT_CANCELLABLE", "status": 409}, HELD),  # a status that cannot be cancelled
    ({"type": "fail", "code": "FORBIDDEN_DEVICE", "status": 403}, VIOLATED),  # refused for the owner's permissions
], ids=["taken", "not-cancellable", "forbidden"])
def test_i52_an_owner_is_never_forbidden_to_cancel(answer: dict[str, Any], status: str) -> None:
    s = _drafted()
    s.op(300.0, NEMESIS, INFO, "permissions", users=[USER], revoked=True)
    s.op(310.0, "user-1.cancel0", INVOKE, "cancel", user_id=USER, task_id=TASK, attempt=0)
    kind = answer.pop("type")
    s.op(310.1, "user-1.cancel0", OK if kind == "ok" else FAIL, "cancel", user_id=USER, task_id=TASK, attempt=0,
         **answer)
    # another operator's cancel refused is I22's business, never I52's
    s.op(311.0, "attacker-1", INVOKE, "cancel", user_id="operator-002", task_id=TASK, attempt=0)
    s.op(311.1, "attacker-1", FAIL, "cancel", user_id="operator-002", task_id=TASK, attempt=0, code="FORBIDDEN_AREA",
         status=403)
    verdict = INVARIANTS["I52"](s.ctx())
    assert verdict.checked == 1 and verdict.status == status, verdict.as_json()
