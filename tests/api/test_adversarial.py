"""Issue 11's adversarial requests: each was a defect (a 500, an oracle, an accepted bad input); each must now
be a structured refusal that writes nothing. The single-request kinds are data, adversarial_kinds.KINDS, run here on
SQLite through the test client and by test_adversarial_pg.py over HTTP to gunicorn on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from adversarial_kinds import GROUPS, Bench, Kind, flask_sender, kinds, oracle_pairs
from api_support import APPROVER, AREA, OWNER, Api, assert_problem, draft_body
from hypothesis import given
from hypothesis import strategies as st

from reference.copilot.services.drafts import point_in_polygon

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "copilot-api.json"
# The longest reason a supervisor may give (a review's resolution, a re-drive), as the API documents it.
_MAX_REASON = json.loads(OPENAPI.read_text())["components"]["schemas"]["Reason"]["maxLength"]


@pytest.fixture
def bench(api: Api) -> Bench:
    """The shared table's kinds on this test's fresh SQLite database, through Flask's test client."""
    return Bench.on(flask_sender(api.client), api.engine)


def _ids(kind: Kind) -> str:
    return kind.id


# Each group of the shared table (adversarial_kinds.KINDS, which test_adversarial_pg.py sends to gunicorn on
# PostgreSQL) runs here; every kind is checked by Bench.refuse: status, problem+json, code, no trace, no table
# changed but its own security_log row.
GROUPS_RUN_HERE = {"idempotency-key", "role-claim", "lifetime", "parsing", "oracle", "duties", "area-edges", "more"}


def test_every_group_of_the_shared_table_runs_here() -> None:
    assert GROUPS_RUN_HERE == GROUPS


@pytest.mark.parametrize("kind", kinds("idempotency-key"), ids=_ids)
def test_control_characters_in_the_idempotency_key_are_refused(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


@pytest.mark.parametrize("kind", kinds("role-claim"), ids=_ids)
def test_a_malformed_role_claim_is_a_401_not_a_500(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


@pytest.mark.parametrize("kind", kinds("lifetime"), ids=_ids)
def test_a_token_living_too_long_is_refused(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


@pytest.mark.parametrize("kind", kinds("parsing"), ids=_ids)
def test_duplicate_keys_and_a_non_json_content_type_are_refused(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


def test_a_json_structured_suffix_is_json(api: Api) -> None:
    resp = api.client.post("/v1/drafts", data=json.dumps(draft_body()).encode(), headers=api.draft_headers(),
                           content_type="application/merge+json")
    assert resp.status_code == 201


@pytest.mark.parametrize("pair", sorted(oracle_pairs()))
def test_unknown_and_foreign_devices_and_areas_get_the_same_answer(bench: Bench, pair: str) -> None:
    bench.alike(*oracle_pairs()[pair])


def test_separation_of_duties_on_approvals(api: Api, bench: Bench) -> None:
    """One identity may not draft and approve; an approver must hold a permission on the draft's area (an
    unknown user with the approver role approves nothing) and can read what it approves."""
    for kind in kinds("duties"):  # the draft's owner holding an approver token; an approver nobody knows
        bench.refuse(kind)
    draft = bench.scene.draft
    seen = api.client.get(f"/v1/drafts/{draft['id']}", headers=api.approver())
    assert seen.status_code == 200 and seen.get_json()["id"] == draft["id"]
    assert api.approve(draft["id"], draft["version"]).status_code == 201
    assert APPROVER != OWNER and AREA


@pytest.mark.parametrize("kind", kinds("area-edges"), ids=_ids)
def test_a_waypoint_on_an_edge_or_corner_of_the_area_is_refused(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


@pytest.mark.parametrize("kind", kinds("more"), ids=_ids)
def test_more_adversarial_kinds_are_refused_and_write_nothing(bench: Bench, kind: Kind) -> None:
    bench.refuse(kind)


SQUARE = [[30.0, 120.0], [30.0, 120.05], [30.05, 120.05], [30.05, 120.0]]
fraction = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(fraction, st.sampled_from(range(4)))
def test_every_edge_and_corner_of_an_area_is_outside(t: float, edge: int) -> None:
    (y1, x1), (y2, x2) = SQUARE[edge], SQUARE[(edge + 1) % 4]
    assert not point_in_polygon(y1 + t * (y2 - y1), x1 + t * (x2 - x1), SQUARE)


@given(st.floats(min_value=0.001, max_value=0.999), st.floats(min_value=0.001, max_value=0.999))
def test_points_strictly_inside_are_inside(u: float, v: float) -> None:
    assert point_in_polygon(30.0 + 0.05 * u, 120.0 + 0.05 * v, SQUARE)


@given(st.floats(min_value=-1.0, max_value=2.0), st.floats(min_value=-1.0, max_value=2.0))
def test_points_outside_the_square_are_outside(u: float, v: float) -> None:
    if 0.0 <= u <= 1.0 and 0.0 <= v <= 1.0:
        return
    assert not point_in_polygon(30.0 + 0.05 * u, 120.0 + 0.05 * v, SQUARE)


def test_a_user_whose_permissions_were_removed_can_still_cancel_their_task(api: Api) -> None:
    """Intended (README, "The Copilot API's rules"): permissions gate starting a flight, not stopping one."""
    from sqlalchemy import delete

    from reference.copilot.models import UserAreaPermission, UserDevicePermission

    task = api.task()
    with api.runtime.sessions() as s, s.begin():
        s.execute(delete(UserAreaPermission).where(UserAreaPermission.user_id == OWNER))
        s.execute(delete(UserDevicePermission).where(UserDevicePermission.user_id == OWNER))
    resp = api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
    assert resp.status_code == 202, resp.get_json()
    with api.unchanged():  # but no new flight: a draft in the area is refused
        assert_problem(api.client.post("/v1/drafts", json=draft_body(), headers=api.draft_headers()), 403,
                       "FORBIDDEN_AREA")


def test_reconfirming_a_draft_version_with_new_keys_returns_its_task(api: Api) -> None:
    """One approved version confirmed 10 times with 10 keys made 10 tasks; now one, named by every answer,
    also after it ended. A revised (and approved) version makes a new task."""
    draft = api.ready_draft()
    first = api.confirm(draft["id"], draft["version"], api.new_key())
    assert first.status_code == 201
    with api.unchanged():
        for _ in range(9):
            again = api.confirm(draft["id"], draft["version"], api.new_key())
            assert again.status_code == 200 and again.get_json()["task_id"] == first.get_json()["task_id"]
    revised = api.client.patch(f"/v1/drafts/{draft['id']}", headers=api.headers(),
                               json={"expected_version": draft["version"], "plan": draft_body()["plan"]}).get_json()
    assert api.approve(draft["id"], revised["version"]).status_code == 201
    second = api.confirm(draft["id"], revised["version"], api.new_key())
    assert second.status_code == 201 and second.get_json()["task_id"] != first.get_json()["task_id"]


def test_draft_creation_is_idempotent_per_key(api: Api) -> None:
    """Seed 000's first failure case: the draft was created, the answer was lost, the user clicks again."""
    headers = api.draft_headers()
    first = api.client.post("/v1/drafts", json=draft_body(), headers=headers)
    assert first.status_code == 201
    with api.unchanged():
        again = api.client.post("/v1/drafts", json=draft_body(), headers=headers)
        assert again.status_code == 200 and again.get_json()["id"] == first.get_json()["id"]
        assert_problem(api.client.post("/v1/drafts", json=draft_body(altitude_m=80), headers=headers), 409,
                       "IDEMPOTENCY_KEY_REUSED")
        assert_problem(api.client.post("/v1/drafts", json=draft_body(), headers=api.headers()), 400,
                       "MISSING_IDEMPOTENCY_KEY")
        nul = api.headers(**{"Idempotency-Key": "a\x00"})
        assert_problem(api.client.post("/v1/drafts", json=draft_body(), headers=nul), 400, "INVALID_IDEMPOTENCY_KEY")
    # the key is the user's: another user's request with the same key makes that user's own draft
    other = api.client.post("/v1/drafts", json=draft_body(), headers={**api.headers("operator-003"),
                                                                       "Idempotency-Key": headers["Idempotency-Key"]})
    assert other.status_code == 201 and other.get_json()["id"] != first.get_json()["id"]


# ---------------------------------------------------------------------------------------------- manual review


class _Platform:
    """What the review use case asks: the flight's status (or an exception)."""

    def __init__(self, answer: object) -> None:
        self.answer, self.calls = answer, []

    def get_flight(self, external_id: str) -> object:
        self.calls.append(external_id)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _in_review(api: Api) -> str:
    import uuid

    from reference.copilot.states import TaskStatus as S
    from reference.copilot.tasks import load, transition

    tid = uuid.UUID(api.task()["task_id"])
    for to in (S.QUEUED, S.VALIDATING, S.DISPATCHING, S.EXECUTING, S.MANUAL_REVIEW):
        api.runtime.transact(lambda tx, to=to: transition(
            tx, load(tx, tid), to, actor="test", action="TEST",
            set_values={"external_task_id": "FL-1"} if to == S.EXECUTING else None))
    return str(tid)


def test_a_supervisor_resolves_manual_review_only_as_the_platform_says(api: Api) -> None:
    from reference.copilot import platform as p

    tid = _in_review(api)
    url = f"/v1/tasks/{tid}/review"
    flying = p.FlightInfo("FL-1", None, "DRONE-0001", p.FLIGHT_EXECUTING)
    api.runtime.platform = _Platform(flying)
    body = {"resolution": "completed", "reason": "the pilot says it landed"}
    supervisor = api.headers("supervisor-1", "supervisor")
    with api.unchanged():
        assert_problem(api.client.post(url, json=body, headers=api.headers()), 403, "FORBIDDEN_ROLE")
        assert_problem(api.client.post(url, json=body, headers=api.headers("mallory", "supervisor")), 404,
                       "TASK_NOT_FOUND")
        assert_problem(api.client.post("/v1/tasks/not-a-task-id/review", json=body, headers=supervisor), 404,
                       "TASK_NOT_FOUND")  # a malformed id is a task that does not exist, not a 500
        assert_problem(api.client.post(url, json={**body, "resolution": "vanished"}, headers=supervisor), 422,
                       "INVALID_PARAMETERS")
        assert_problem(api.client.post(url, json={**body, "reason": " "}, headers=supervisor), 422,
                       "INVALID_PARAMETERS")
        assert_problem(api.client.post(url, json={**body, "reason": "r" * (_MAX_REASON + 1)}, headers=supervisor),
                       422, "INVALID_PARAMETERS")
        refused = assert_problem(api.client.post(url, json=body, headers=supervisor), 409,
                                 "RESOLUTION_CONTRADICTS_PLATFORM")
        assert refused["platform_status"] == "EXECUTING"
        assert refused["detail"].startswith("the platform says EXECUTING;")  # what the supervisor reads
        api.runtime.platform = _Platform(p.PlatformNotFound("FLIGHT_NOT_FOUND"))
        refused = assert_problem(api.client.post(url, json=body, headers=supervisor), 409,
                                 "RESOLUTION_CONTRADICTS_PLATFORM")
        assert refused["platform_status"] is None and refused["detail"].startswith("the platform says no flight;")
        api.runtime.platform = _Platform(p.PlatformUnavailable("HTTP_503"))
        assert_problem(api.client.post(url, json={**body, "resolution": "executing"}, headers=supervisor), 503,
                       "PLATFORM_UNAVAILABLE")
    api.runtime.platform = _Platform(flying)
    at_the_bound = ("the pilot confirms the flight; " * 100)[:_MAX_REASON]  # the longest reason documented
    resp = api.client.post(url, json={"resolution": "executing", "reason": at_the_bound}, headers=supervisor)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["status"] == "EXECUTING" and resp.get_json()["platform_status"] == "EXECUTING"
    from sqlalchemy import select

    from reference.copilot.models import TaskAuditLog

    with api.runtime.sessions() as s:
        last = s.scalars(select(TaskAuditLog).order_by(TaskAuditLog.id.desc())).first()
    assert last is not None and (last.actor, last.action, last.from_status, last.to_status) == (
        "operator:supervisor-1", "REVIEW_RESOLVED", "MANUAL_REVIEW", "EXECUTING")
    assert last.detail["reason"] == at_the_bound  # whole
    assert "request_id" not in last.detail  # only a re-dispatch reopens an attempt (and names its request id)
    with api.unchanged():  # out of review now
        assert_problem(api.client.post(url, json={**body, "resolution": "executing"}, headers=supervisor), 409,
                       "TASK_NOT_IN_REVIEW")


class _NoFlight:
    """A platform that has no flight for any request id."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def capabilities(self) -> object:
        from reference.copilot import platform as p

        return p.PlatformCapabilities()

    def find_by_request_id(self, rid: str) -> None:
        self.asked.append(rid)
        return None


def test_a_supervisor_redispatches_a_task_the_platform_has_no_flight_for_under_the_same_key(api: Api) -> None:
    import uuid

    from sqlalchemy import func, select

    from reference.copilot import platform as p
    from reference.copilot.models import DispatchAttempt, TaskAuditLog
    from reference.copilot.policy import Policy
    from reference.copilot.services.dispatch import _begin, request_id
    from reference.copilot.states import TaskStatus as S
    from reference.copilot.tasks import load, transition

    tid = uuid.UUID(api.task()["task_id"])
    rid = request_id(tid, 1)

    def to_review(tx) -> None:
        for to in (S.QUEUED, S.VALIDATING, S.DISPATCHING):
            transition(tx, load(tx, tid), to, actor="test", action="TEST",
                       set_values={"dispatch_attempts": 1} if to == S.DISPATCHING else None)
        tx.session.add(DispatchAttempt(task_id=tid, attempt=1, request_id=rid, outcome="UNKNOWN", started_at=tx.now))
        transition(tx, load(tx, tid), S.MANUAL_REVIEW, actor="test", action="TEST")
    api.runtime.transact(to_review)
    api.runtime.platform = _NoFlight()
    url, supervisor = f"/v1/tasks/{tid}/review", api.headers("supervisor-1", "supervisor")
    resp = api.client.post(url, json={"resolution": "redispatch", "reason": "the platform has no flight"},
                           headers=supervisor)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["status"] == "QUEUED" and api.runtime.platform.asked == [rid]
    # The dispatcher's next attempt is the same attempt, under the same request id: no second attempt row.
    device = p.DeviceState("DRONE-0001", True, 90.0)
    plan = api.runtime.transact(lambda tx: _begin(tx, tid, device, p.PlatformCapabilities(), Policy()))
    assert plan is not None and plan.attempt == 1 and plan.request.request_id == rid
    with api.runtime.sessions() as s:
        assert s.scalar(select(func.count()).select_from(DispatchAttempt).where(DispatchAttempt.task_id == tid)) == 1
        assert s.scalars(select(DispatchAttempt.outcome).where(DispatchAttempt.task_id == tid)).one() == "PENDING"
        audited = s.scalars(select(TaskAuditLog).where(TaskAuditLog.task_id == tid,
                                                       TaskAuditLog.action == "REVIEW_RESOLVED")).one()
    assert (audited.from_status, audited.to_status) == ("MANUAL_REVIEW", "QUEUED")
    assert audited.detail["request_id"] == rid  # the audit names the request id the re-dispatch sends again


def test_a_task_whose_flight_the_platform_confirmed_is_not_redispatched(api: Api) -> None:
    tid = _in_review(api)  # EXECUTING with external id FL-1 before its review
    from reference.copilot import platform as p

    api.runtime.platform = _Platform(p.PlatformNotFound("gone"))
    with api.unchanged():
        assert_problem(api.client.post(f"/v1/tasks/{tid}/review", json={"resolution": "redispatch", "reason": "x"},
                                       headers=api.headers("supervisor-1", "supervisor")), 409,
                       "REDISPATCH_NOT_ALLOWED")

