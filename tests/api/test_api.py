"""The Copilot-facing HTTP API: happy path, SSE, and refusals that write nothing."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests
from api_support import (
    APPROVER,
    AREA,
    DEVICE,
    FOREIGN_DEVICE,
    NEIGHBOUR,
    OTHER_AREA,
    OWNER,
    SECRET,
    WEBHOOK_TOKEN,
    Api,
    assert_problem,
    build_api,
    database_down,
    draft_body,
    plan,
    read_sse,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.serving import make_server

from reference.copilot import bugs
from reference.copilot.errors import Unauthenticated
from reference.copilot.http import sse
from reference.copilot.http.app import create_app, hub_of
from reference.copilot.http.auth import issue_token, verify_token
from reference.copilot.http.notify import CLOSED, RESYNC, NotificationHub, TaskChange
from reference.copilot.models import DroneTask, SiteArea, TaskAuditLog
from reference.copilot.services import cancel as cancel_service
from reference.copilot.services.drafts import point_in_polygon
from reference.copilot.tasks import load as load_task

# ------------------------------------------------------------------------------------------ happy path


def test_health(api: Api) -> None:
    resp = api.client.get("/health")
    assert resp.status_code == 200
    assert resp.get_json() == {"status": "ok", "database": "ok"}


def test_happy_path(api: Api) -> None:
    resp = api.client.post("/v1/drafts", json=draft_body(), headers=api.draft_headers())
    assert resp.status_code == 201
    draft = resp.get_json()
    assert resp.headers["Location"] == f"/v1/drafts/{draft['id']}"
    for stamp in ("created_at", "updated_at"):  # the OpenAPI document's date-time: UTC, written with a Z
        assert datetime.fromisoformat(draft[stamp]).utcoffset() == timedelta(0) and draft[stamp].endswith("Z")
    assert set(draft) == {
        "id",
        "version",
        "status",
        "goal",
        "area_id",
        "device_id",
        "parameters",
        "route",
        "created_at",
        "updated_at",
    }
    assert (draft["version"], draft["status"], draft["area_id"], draft["device_id"]) == (
        1,
        "READY",
        AREA,
        DEVICE,
    )
    assert draft["parameters"] == {"altitude_m": 60.0, "actions": ["photo", "thermal_scan"], "speed_mps": 8.0}
    assert draft["route"]["version"] == 1 and draft["route"]["waypoints"] == plan()["waypoints"]

    read = api.client.get(f"/v1/drafts/{draft['id']}", headers=api.headers())
    assert read.status_code == 200 and read.get_json() == draft

    approval = api.approve(draft["id"], 1)
    assert approval.status_code == 201
    assert approval.get_json()["status"] == "APPROVED" and approval.get_json()["draft_version"] == 1

    key = api.new_key()
    created = api.confirm(draft["id"], 1, key)
    assert created.status_code == 201
    task = created.get_json()
    assert task["status"] == "CREATED" and task["version"] == 0
    assert created.headers["Location"] == f"/v1/tasks/{task['task_id']}"

    with api.unchanged():
        again = api.confirm(draft["id"], 1, key)  # the user's retry: same key, same payload
    assert again.status_code == 200 and again.get_json() == task

    snap = api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers())
    assert snap.status_code == 200
    s = snap.get_json()
    assert set(s) == {
        "id",
        "status",
        "version",
        "external_task_id",
        "device_id",
        "area_id",
        "draft_id",
        "draft_version",
        "snapshot",
        "last_error_code",
        "alert_count",
        "last_telemetry_seq",
        "created_at",
        "updated_at",
    }
    assert (s["id"], s["status"], s["version"], s["device_id"], s["draft_id"]) == (
        task["task_id"],
        "CREATED",
        0,
        DEVICE,
        draft["id"],
    )
    assert s["snapshot"]["route"]["waypoints"] == plan()["waypoints"]
    assert s["external_task_id"] is None and s["alert_count"] == 0

    events = api.client.get(f"/v1/tasks/{task['task_id']}/events", headers=api.headers()).get_json()
    assert events["task_id"] == task["task_id"] and events["version"] == 0
    assert [(e["version"], e["from"], e["to"], e["action"], e["actor"]) for e in events["events"]] == [
        (0, None, "CREATED", "TASK_CREATED", OWNER)
    ]

    cancel = api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
    assert cancel.status_code == 202
    assert cancel.get_json() == {"task_id": task["task_id"], "status": "CANCELLED", "version": 1}

    after0 = api.client.get(
        f"/v1/tasks/{task['task_id']}/events?after_version=0", headers=api.headers()
    ).get_json()
    assert after0["version"] == 1
    assert [(e["version"], e["from"], e["to"]) for e in after0["events"]] == [(1, "CREATED", "CANCELLED")]
    after1 = api.client.get(
        f"/v1/tasks/{task['task_id']}/events?after_version=1", headers=api.headers()
    ).get_json()
    assert after1["events"] == []

    snap = api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).get_json()
    assert (snap["status"], snap["version"]) == ("CANCELLED", 1)
    with api.unchanged():
        repeat = api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
    assert repeat.status_code == 200 and repeat.get_json()["status"] == "CANCELLED"  # a repeat: nothing written


def test_a_draft_whose_plan_is_still_generating_becomes_a_task_only_once_planned(api: Api) -> None:
    """seed 000 §4.2: a plan of null is a GENERATING draft; it is never confirmed (DRAFT_NOT_READY, nothing written),
    a revision writes its plan (READY), and the planned version is confirmed."""
    body = {**draft_body(), "plan": None}
    with api.unchanged():  # no leave to draft in a foreign area, plan or not
        foreign = api.client.post("/v1/drafts", json={**body, "area_id": OTHER_AREA}, headers=api.draft_headers())
    assert_problem(foreign, 403, "FORBIDDEN_AREA")
    made = api.client.post("/v1/drafts", json=body, headers=api.draft_headers())
    assert made.status_code == 201, made.get_json()
    draft = made.get_json()
    assert (draft["status"], draft["version"], draft["device_id"], draft["route"]["waypoints"]) == (
        "GENERATING", 1, "", [])
    assert api.approve(draft["id"], 1).status_code == 201
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 1, api.new_key()), 409, "DRAFT_NOT_READY")
    planned = api.client.patch(f"/v1/drafts/{draft['id']}", headers=api.headers(),
                               json={"expected_version": 1, "plan": plan()})
    assert planned.status_code == 200 and planned.get_json()["status"] == "READY", planned.get_json()
    assert api.approve(draft["id"], 2).status_code == 201
    assert api.confirm(draft["id"], 2, api.new_key()).status_code == 201


def test_every_audit_row_a_request_writes_carries_its_correlation_id(api: Api) -> None:
    """seed 000 §7.3: the client's X-Request-Id comes back in the answer and on the request's audit rows; a request
    without one (or with one that does not fit the column) gets a fresh id, answered and written the same way."""
    sent = api.client.post("/v1/drafts", json=draft_body(), headers={**api.draft_headers(), "X-Request-Id": "req-1"})
    assert sent.status_code == 201 and sent.headers["X-Request-Id"] == "req-1"
    made = api.client.post("/v1/drafts", json=draft_body(), headers={**api.draft_headers(), "X-Request-Id": "x" * 161})
    fresh = made.headers["X-Request-Id"]
    assert made.status_code == 201 and fresh and len(fresh) <= 160 and fresh != "x" * 161
    with api.runtime.sessions() as s:
        rows = {str(a.draft_id): a.correlation_id for a in s.scalars(select(TaskAuditLog))
                if a.action == "DRAFT_CREATED"}
    assert rows[sent.get_json()["id"]] == "req-1" and rows[made.get_json()["id"]] == fresh


def test_a_cancel_that_lost_the_race_to_another_cancel_is_answered_as_repeated(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cancels of one task read it before either wrote (tests/api/test_api_limits_pg.py races them on
    PostgreSQL): the one whose write finds the task moved answers as a repeated cancel (200), writing nothing."""
    task = api.task()
    tid = uuid.UUID(task["task_id"])
    before = api.runtime.transact(lambda tx: cancel_service.load(tx, tid))  # what the slower cancel read
    first = api.client.post(f"/v1/tasks/{tid}/cancel", headers=api.headers())
    assert first.get_json() == {"task_id": str(tid), "status": "CANCELLED", "version": 1}
    reads = iter([before])
    monkeypatch.setattr(cancel_service, "load", lambda tx, task_id: next(reads, None) or load_task(tx, task_id))
    with api.unchanged():
        slower = api.client.post(f"/v1/tasks/{tid}/cancel", headers=api.headers())
    assert (first.status_code, slower.status_code, slower.get_json()) == (202, 200, first.get_json())


def test_revise_draft(api: Api) -> None:
    draft = api.create_draft()
    resp = api.client.patch(
        f"/v1/drafts/{draft['id']}",
        headers=api.headers(),
        json={"expected_version": 1, "plan": plan(altitude_m=80, device_id="DRONE-0003")},
    )
    assert resp.status_code == 200
    revised = resp.get_json()
    assert revised["version"] == 2 and revised["route"]["version"] == 2
    assert revised["device_id"] == "DRONE-0003" and revised["parameters"]["altitude_m"] == 80.0
    assert revised["route"]["id"] != draft["route"]["id"]


def test_rejected_approval_blocks_confirm(api: Api) -> None:
    draft = api.create_draft()
    resp = api.approve(draft["id"], 1, decision="reject")
    assert resp.status_code == 201 and resp.get_json()["status"] == "REJECTED"
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 1, api.new_key()), 409, "APPROVAL_REQUIRED")


def test_platform_webhook(api: Api) -> None:
    task = api.task()
    url, headers = "/v1/platform/events", {"X-Webhook-Token": WEBHOOK_TOKEN}
    events = [
        {
            "external_id": "FL-1",
            "request_id": None,
            "reference": task["task_id"],
            "seq": 1,
            "kind": "telemetry",
            "at": 1_700_000_000.0,
            "payload": {"battery": 90},
        },
        {"external_id": "FL-1", "reference": task["task_id"], "seq": 2, "kind": "alert", "at": 1_700_000_001},
        {"external_id": "FL-9", "seq": 1, "kind": "telemetry", "at": 1_700_000_000.0},
        # a reference that is none of our task ids (the platform's own, a typo): an orphan like any unknown flight;
        # its flight sorts first, so it must not end the lookup of the others' references
        {"external_id": "FL-0", "reference": "not-our-id", "seq": 1, "kind": "telemetry", "at": 1_700_000_000.0},
    ]
    resp = api.client.post(url, headers=headers, json=events)
    assert resp.status_code == 200
    assert resp.get_json() == {"accepted": 4, "duplicates": 0, "orphans": 2}
    # duplicates sorting before a new event of the same flight: the new one still applies
    later = {**events[0], "seq": 3, "at": 1_700_000_002.0}
    again = api.client.post(url, headers=headers, json=[*events[:2], later])
    assert again.get_json() == {"accepted": 1, "duplicates": 2, "orphans": 0}
    nothing = api.client.post(url, headers=headers, json=[])  # an empty batch counts nothing
    assert nothing.status_code == 200 and nothing.get_json() == {"accepted": 0, "duplicates": 0, "orphans": 0}
    snap = api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).get_json()
    assert snap["last_telemetry_seq"] == 3 and snap["alert_count"] == 1


def test_an_event_of_a_known_flight_needs_no_reference(api: Api) -> None:
    """The platform's events carry our task id only as an optional reference (the OpenAPI PlatformEvent): a flight
    whose id the dispatch wrote back is found by that id alone."""
    task = api.task()

    def written_back(tx: Any) -> None:
        tx.session.get(DroneTask, uuid.UUID(task["task_id"])).external_task_id = "FL-5"

    api.runtime.transact(written_back)
    event = {"external_id": "FL-5", "reference": None, "seq": 3, "kind": "telemetry", "at": 1_700_000_000.0}
    resp = api.client.post("/v1/platform/events", headers={"X-Webhook-Token": WEBHOOK_TOKEN}, json=[event])
    assert resp.get_json() == {"accepted": 1, "duplicates": 0, "orphans": 0}
    snap = api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).get_json()
    assert snap["last_telemetry_seq"] == 3


# ------------------------------------------------------------------------------------------ notifications


def test_hub_fans_out_per_user_and_an_overflow_becomes_one_resync() -> None:
    hub = NotificationHub(queue_size=2)
    a1, a2, b = hub.subscribe("alice"), hub.subscribe("alice"), hub.subscribe("bob")
    assert hub.subscriber_count() == 3 and hub.subscriber_count("alice") == 2
    for v in (1, 2, 3):
        hub.task_changed("t1", "alice", "QUEUED", v)
    for sub in (a1, a2):  # the third change overflowed the queue: what it held is replaced by one RESYNC
        assert [sub.get(0), sub.get(0)] == [RESYNC, None] and sub.dropped == 2
    hub.task_changed("t1", "alice", "QUEUED", 4)
    assert [a1.get(0), a2.get(0)] == [TaskChange("t1", "alice", "QUEUED", 4)] * 2  # and the streams go on
    assert b.get(0) is None  # another user's tasks never reach bob
    a1.close()
    assert hub.subscriber_count("alice") == 1
    hub.close()
    assert a2.get(5) is CLOSED and b.get(5) is CLOSED
    assert hub.subscriber_count() == 0
    assert hub.subscribe("carol").get(5) is CLOSED


def test_resync_all_tells_every_open_stream_once() -> None:
    hub = NotificationHub(queue_size=4)
    a, b = hub.subscribe("alice"), hub.subscribe("bob")
    hub.task_changed("t1", "alice", "QUEUED", 1)
    hub.resync_all()
    hub.resync_all()  # a RESYNC already waiting makes another one redundant
    assert [a.get(0), a.get(0), a.get(0)] == [TaskChange("t1", "alice", "QUEUED", 1), RESYNC, None]
    assert [b.get(0), b.get(0)] == [RESYNC, None]
    assert sse.event(RESYNC) == sse.RESYNC_FRAME and b"event: resync" in sse.RESYNC_FRAME
    with bugs.injected(bugs.STREAM_NO_RESYNC):
        hub.resync_all()
    assert a.get(0) is None


def test_hub_receives_committed_changes(api: Api) -> None:
    task = api.task()
    sub = api.hub.subscribe(OWNER)
    other = api.hub.subscribe(NEIGHBOUR)
    api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
    assert sub.get(5.0) == TaskChange(task["task_id"], OWNER, "CANCELLED", 1)
    assert other.get(0) is None


def test_sse_stream_delivers_a_task_change(api: Api) -> None:
    task = api.task()
    resp = api.client.get("/v1/stream", headers=api.headers())
    try:
        assert resp.status_code == 200 and resp.mimetype == "text/event-stream"
        assert api.hub.subscriber_count(OWNER) == 1
        api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
        msg = read_sse(resp)
        assert msg["id"] == f"{task['task_id']}:1"
        assert json.loads(msg["data"]) == {"task_id": task["task_id"], "status": "CANCELLED", "version": 1}
    finally:
        resp.close()  # the client goes away: the subscription ends with it
    assert api.hub.subscriber_count() == 0


def test_sse_stream_ends_when_the_hub_closes(api: Api) -> None:
    resp = api.client.get("/v1/stream", headers=api.headers())
    api.hub.close()
    with pytest.raises(AssertionError, match="no 'task' event"):
        read_sse(resp, deadline_s=5.0)  # the stream ends (StopIteration) well before the deadline
    resp.close()


def test_only_a_stream_starts_the_hubs_feed_and_before_it_subscribes() -> None:
    api = build_api()
    calls: list[int] = []  # the hub's subscriber count when the feed was asked for
    app = create_app(api.runtime, token_secret=SECRET, webhook_token=WEBHOOK_TOKEN, heartbeat_s=0.05,
                     before_stream=lambda: calls.append(hub_of(app).subscriber_count()))
    client = app.test_client()
    task = api.task()
    assert client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).status_code == 200
    assert calls == []
    resp = client.get("/v1/stream", headers=api.headers())
    try:
        assert resp.status_code == 200 and calls == [0] and hub_of(app).subscriber_count() == 1
    finally:
        resp.close()


def test_sse_requires_a_token(api: Api) -> None:
    assert_problem(api.client.get("/v1/stream"), 401, "UNAUTHENTICATED")
    assert api.hub.subscriber_count() == 0


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{not json", "MALFORMED_JSON"),
        (b"", "MALFORMED_JSON"),
        (b"[1, 2]", "MALFORMED_JSON"),
        (b'"a string"', "MALFORMED_JSON"),
        (b'{"goal": NaN}', "MALFORMED_JSON"),
        (b'{"goal": 1e999}', "MALFORMED_JSON"),
        (b'{"goal": "\\ud800"}', "UNSTORABLE_STRING"),
        (b'{"goal": "a\\u0000b"}', "UNSTORABLE_STRING"),
        (b"\xff\xfe{}", "MALFORMED_JSON"),
        (b"[" * 100_000, "MALFORMED_JSON"),
    ],
)
def test_malformed_json(api: Api, data: bytes, code: str) -> None:
    with api.unchanged():
        resp = api.client.post(
            "/v1/drafts", data=data, headers=api.draft_headers(), content_type="application/json"
        )
    assert_problem(resp, 400, code)


def _without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        (_without(draft_body(), "goal"), 422, "MISSING_FIELD", "goal"),
        (_without(draft_body(), "area_id"), 422, "MISSING_FIELD", "area_id"),
        (_without(draft_body(), "plan"), 422, "MISSING_FIELD", "plan"),
        ({**draft_body(), "plan": _without(plan(), "device_id")}, 422, "MISSING_FIELD", "plan.device_id"),
        ({**draft_body(), "plan": _without(plan(), "waypoints")}, 422, "MISSING_FIELD", "plan.waypoints"),
        ({**draft_body(), "goal": 5}, 422, "INVALID_PARAMETERS", "goal"),
        ({**draft_body(), "area_id": ["SITE-001"]}, 422, "INVALID_PARAMETERS", "area_id"),
        ({**draft_body(), "plan": "fly north"}, 422, "INVALID_PARAMETERS", "plan"),
        (draft_body(altitude_m="high"), 422, "INVALID_PARAMETERS", "plan.altitude_m"),
        (draft_body(altitude_m=True), 422, "INVALID_PARAMETERS", "plan.altitude_m"),
        (draft_body(altitude_m=10**400), 422, "INVALID_PARAMETERS", "plan"),
        (
            draft_body(waypoints=[[30.01, "120.01"], [30.02, 120.02]]),
            422,
            "INVALID_PARAMETERS",
            "plan.waypoints[0]",
        ),
        (draft_body(waypoints=[[30.01, 120.01]]), 422, "INVALID_PARAMETERS", "plan.waypoints"),
        (draft_body(actions="photo"), 422, "INVALID_PARAMETERS", "plan.actions"),
        (draft_body(device_id=7), 422, "INVALID_PARAMETERS", "plan.device_id"),
        # server-side checks of what a model drafted
        (draft_body(device_id=FOREIGN_DEVICE), 403, "FORBIDDEN_DEVICE", None),
        # no existence oracle: an unknown device or area is refused as another fleet's is
        (draft_body(device_id="DRONE-9999"), 403, "FORBIDDEN_DEVICE", None),
        ({**draft_body(), "area_id": OTHER_AREA}, 403, "FORBIDDEN_AREA", None),
        ({**draft_body(), "area_id": "SITE-404"}, 403, "FORBIDDEN_AREA", None),
        (
            draft_body(waypoints=[[30.01, 120.01], [30.2, 120.02]]),
            422,
            "COORDINATES_OUTSIDE_AREA",
            "plan.waypoints[1]",
        ),
        (draft_body(altitude_m=500), 422, "ALTITUDE_OUT_OF_RANGE", "plan.altitude_m"),
        (draft_body(altitude_m=2), 422, "ALTITUDE_OUT_OF_RANGE", "plan.altitude_m"),
        (draft_body(actions=["photo", "drop_payload"]), 422, "UNKNOWN_ACTION", "plan.actions"),
        (draft_body(speed_mps=99), 422, "SPEED_OUT_OF_RANGE", "plan.speed_mps"),
    ],
)
def test_create_draft_refusals(
    api: Api, body: dict[str, Any], status: int, code: str, field: str | None
) -> None:
    with api.unchanged():
        resp = api.client.post("/v1/drafts", json=body, headers=api.draft_headers())
    problem = assert_problem(resp, status, code)
    if field is not None:
        assert problem["field"] == field


# The documented bounds of a drafted plan (the OpenAPI document's Plan: 2..200 waypoints, at least 10 m, at most 32
# actions; seed 000 §7.3: the server checks what a model drafted), at both ends: the last value inside is accepted,
# the first outside refused with its field. The figures are the document's, not the code's constants (a test reading
# those would move with them). SITE-001 is lat 30..30.05, lon 120..120.05 with a 120 m ceiling (api_support); its
# edges and corners are outside.
MAX_WAYPOINTS, MIN_ALTITUDE_M, MAX_ACTIONS = 200, 10.0, 32
_LINE = [[30.01 + i * 1e-4, 120.01] for i in range(MAX_WAYPOINTS + 1)]


@pytest.mark.parametrize(
    ("overrides", "code", "field"),
    [
        ({"waypoints": _LINE[:2]}, None, None),  # the fewest points a route has
        ({"waypoints": _LINE[:MAX_WAYPOINTS]}, None, None),
        ({"waypoints": _LINE}, "INVALID_PARAMETERS", "plan.waypoints"),
        ({"altitude_m": MIN_ALTITUDE_M}, None, None),
        ({"altitude_m": 120.0}, None, None),  # the site's ceiling
        ({"altitude_m": MIN_ALTITUDE_M - 0.5}, "ALTITUDE_OUT_OF_RANGE", "plan.altitude_m"),
        ({"actions": ["photo"] * MAX_ACTIONS}, None, None),
        ({"actions": ["photo"] * (MAX_ACTIONS + 1)}, "INVALID_PARAMETERS", "plan.actions"),
        ({"device_id": ""}, "INVALID_PARAMETERS", "plan.device_id"),
        ({"device_id": "D" * 129}, "INVALID_PARAMETERS", "plan.device_id"),
        ({"waypoints": [[30.01, 120.01], [30.0, 120.02]]}, "COORDINATES_OUTSIDE_AREA", "plan.waypoints[1]"),  # south
        ({"waypoints": [[30.01, 120.01], [30.02, 120.0]]}, "COORDINATES_OUTSIDE_AREA", "plan.waypoints[1]"),  # west
        ({"waypoints": [[30.0, 120.0], [30.01, 120.01]]}, "COORDINATES_OUTSIDE_AREA", "plan.waypoints[0]"),  # corner
        ({"waypoints": [[30.0001, 120.0001], [30.0499, 120.0499]]}, None, None),  # just inside two edges
        # on the south edge's line but east of the site: its ray runs along that edge (no crossing to count)
        ({"waypoints": [[30.01, 120.01], [30.0, 120.06]]}, "COORDINATES_OUTSIDE_AREA", "plan.waypoints[1]"),
    ],
    ids=["2-points", "most-points", "too-many-points", "lowest", "ceiling", "too-low", "most-actions",
         "too-many-actions", "empty-device",
         "long-device", "on-south-edge", "on-west-edge", "on-corner", "near-corners", "on-south-edge-line"],
)
def test_a_plan_is_accepted_up_to_its_bounds(
    api: Api, overrides: dict[str, Any], code: str | None, field: str | None
) -> None:
    if code is None:
        resp = api.client.post("/v1/drafts", json=draft_body(**overrides), headers=api.draft_headers())
        assert resp.status_code == 201, resp.get_json()
        return
    with api.unchanged():
        resp = api.client.post("/v1/drafts", json=draft_body(**overrides), headers=api.draft_headers())
    assert assert_problem(resp, 422, code)["field"] == field


def test_a_point_within_the_edge_tolerance_of_a_vertex_is_on_the_edge() -> None:
    """Edges and corners are outside, with the tolerance included: a point ON_EDGE_TOLERANCE (1e-9 degrees) straight
    above the tip of a notch that rises into the area is on both edges of the tip, so outside, though ray casting
    alone would put it inside."""
    notch = [[0.0, 0.0], [0.0, 2.0], [4.0, 4.0], [0.0, 6.0], [0.0, 8.0], [8.0, 8.0], [8.0, 0.0]]  # the tip: (4, 4)
    assert point_in_polygon(4.0 + 1e-8, 4.0, notch)  # beyond the tolerance: inside
    assert not point_in_polygon(4.0 + 1e-9, 4.0, notch)


def test_a_plan_without_a_speed_flies_at_the_documented_default(api: Api) -> None:
    body = {**draft_body(), "plan": _without(plan(), "speed_mps")}
    resp = api.client.post("/v1/drafts", json=body, headers=api.draft_headers())
    assert resp.status_code == 201 and resp.get_json()["parameters"]["speed_mps"] == 8.0  # the OpenAPI Plan's default


def test_a_draft_and_its_revision_are_audited_with_their_versions(api: Api) -> None:
    """Seed 000 §6.2: every person's action is audited (who, what, on which draft version)."""
    draft = api.create_draft()
    resp = api.client.patch(f"/v1/drafts/{draft['id']}", headers=api.headers(),
                            json={"expected_version": 1, "plan": plan(altitude_m=80)})
    assert resp.status_code == 200, resp.get_json()
    with Session(api.engine) as s:
        rows = s.scalars(select(TaskAuditLog).where(TaskAuditLog.draft_id == uuid.UUID(draft["id"]))
                         .order_by(TaskAuditLog.id)).all()
    assert [(a.action, a.actor, (a.detail or {}).get("version")) for a in rows] == [
        ("DRAFT_CREATED", OWNER, 1), ("DRAFT_REVISED", OWNER, 2)]


def test_a_plan_missing_several_fields_names_the_first(api: Api) -> None:
    body = {**draft_body(), "plan": _without(_without(plan(), "device_id"), "altitude_m")}
    with api.unchanged():
        problem = assert_problem(api.client.post("/v1/drafts", json=body, headers=api.draft_headers()), 422,
                                 "MISSING_FIELD", field="plan.device_id")
    assert "plan.device_id" in problem["detail"]


def test_unknown_and_foreign_drafts(api: Api) -> None:
    draft = api.ready_draft()
    unknown = str(uuid.uuid4())
    with api.unchanged():
        assert_problem(api.client.get(f"/v1/drafts/{unknown}", headers=api.headers()), 404, "DRAFT_NOT_FOUND")
        assert_problem(api.client.get("/v1/drafts/not-a-uuid", headers=api.headers()), 404, "DRAFT_NOT_FOUND")
        assert_problem(api.confirm(unknown, 1, api.new_key()), 404, "DRAFT_NOT_FOUND")
        assert_problem(api.confirm("not-a-uuid", 1, api.new_key()), 404, "DRAFT_NOT_FOUND")
        assert_problem(api.approve(unknown, 1), 404, "DRAFT_NOT_FOUND")
        assert_problem(api.approve("not-a-uuid", 1), 404, "DRAFT_NOT_FOUND")
        # another operator of the same site: the draft does not exist for them
        headers = api.headers(NEIGHBOUR)
        assert_problem(api.client.get(f"/v1/drafts/{draft['id']}", headers=headers), 404, "DRAFT_NOT_FOUND")
        assert_problem(
            api.client.patch(
                f"/v1/drafts/{draft['id']}", headers=headers, json={"expected_version": 1, "plan": plan()}
            ),
            404,
            "DRAFT_NOT_FOUND",
        )
        assert_problem(api.confirm(draft["id"], 1, api.new_key(), user=NEIGHBOUR), 404, "DRAFT_NOT_FOUND")


def test_stale_draft_version(api: Api) -> None:
    draft = api.ready_draft()
    with api.unchanged():
        assert_problem(
            api.client.patch(
                f"/v1/drafts/{draft['id']}",
                headers=api.headers(),
                json={"expected_version": 3, "plan": plan()},
            ),
            409,
            "STALE_DRAFT_VERSION",
            current_version=1,
        )
        assert_problem(
            api.confirm(draft["id"], 2, api.new_key()), 409, "STALE_DRAFT_VERSION", current_version=1
        )
        assert_problem(api.approve(draft["id"], 2), 409, "STALE_DRAFT_VERSION")


def test_patch_refusals(api: Api) -> None:
    draft = api.create_draft()
    url = f"/v1/drafts/{draft['id']}"
    with api.unchanged():
        assert_problem(
            api.client.patch(url, headers=api.headers(), json={"plan": plan()}),
            422,
            "MISSING_FIELD",
            field="expected_version",
        )
        assert_problem(
            api.client.patch(url, headers=api.headers(), json={"expected_version": "1", "plan": plan()}),
            422,
            "INVALID_PARAMETERS",
            field="expected_version",
        )
        assert_problem(
            api.client.patch(
                url,
                headers=api.headers(),
                json={"expected_version": 1, "plan": plan(device_id=FOREIGN_DEVICE)},
            ),
            403,
            "FORBIDDEN_DEVICE",
        )


def test_idempotency_key_reused_for_another_payload(api: Api) -> None:
    first = api.ready_draft()
    key = api.new_key()
    assert api.confirm(first["id"], 1, key).status_code == 201
    second = api.ready_draft()
    with api.unchanged():
        assert_problem(api.confirm(second["id"], 1, key), 409, "IDEMPOTENCY_KEY_REUSED")
    # a second version of the first draft under the same key is another payload too
    revised = api.client.patch(
        f"/v1/drafts/{first['id']}",
        headers=api.headers(),
        json={"expected_version": 1, "plan": plan(altitude_m=90)},
    )
    assert revised.status_code == 200
    assert api.approve(first["id"], 2).status_code == 201
    with api.unchanged():
        assert_problem(api.confirm(first["id"], 2, key), 409, "IDEMPOTENCY_KEY_REUSED")


def test_confirm_costs_one_transaction_of_four_statements(api: Api) -> None:
    """The confirm path's round trips (issue 13: its CPU went to the ORM and a second transaction): one read of
    everything the checks need, then the task, its audit row and its outbox event; a replay with the same key is
    the one read. Counted, not timed."""
    from sqlalchemy import event

    draft = api.ready_draft()
    statements: list[str] = []
    begins: list[int] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement.lstrip()[:6].upper())

    event.listen(api.engine, "before_cursor_execute", count)
    event.listen(api.engine, "begin", lambda *_: begins.append(1))
    key = api.new_key()
    try:
        assert api.confirm(draft["id"], draft["version"], key).status_code == 201
        assert (statements, len(begins)) == (["SELECT", "INSERT", "INSERT", "INSERT"], 1)
        statements.clear()
        begins.clear()
        assert api.confirm(draft["id"], draft["version"], key).status_code == 200  # no cache here: the database
        assert (statements, len(begins)) == (["SELECT"], 1)
    finally:
        event.remove(api.engine, "before_cursor_execute", count)


def test_confirm_refusals(api: Api) -> None:
    draft = api.ready_draft()
    url = f"/v1/drafts/{draft['id']}/confirm"
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 1, key=None), 400, "MISSING_IDEMPOTENCY_KEY")
        assert_problem(api.confirm(draft["id"], 1, key="   "), 400, "MISSING_IDEMPOTENCY_KEY")
        assert_problem(api.confirm(draft["id"], 1, key="k" * 161), 400, "INVALID_IDEMPOTENCY_KEY")
        headers = api.headers(**{"Idempotency-Key": api.new_key()})
        assert_problem(
            api.client.post(url, headers=headers, json={}), 422, "MISSING_FIELD", field="draft_version"
        )
        assert_problem(
            api.client.post(url, headers=headers, json={"draft_version": "1"}),
            422,
            "INVALID_PARAMETERS",
            field="draft_version",
        )
        assert_problem(
            api.client.post(url, headers=headers, json={"draft_version": 0}),
            422,
            "INVALID_PARAMETERS",
            field="draft_version",
        )
        assert_problem(
            api.client.post(url, headers=headers, json={"draft_version": 2**70}),
            422,
            "INVALID_PARAMETERS",
            field="draft_version",
        )
        assert_problem(api.client.post(url, headers=headers, data=b"{", content_type="application/json"), 400,
                       "MALFORMED_JSON")


def test_confirm_without_approval(api: Api) -> None:
    draft = api.create_draft()
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 1, api.new_key()), 409, "APPROVAL_REQUIRED")


def test_approval_for_another_draft_version(api: Api) -> None:
    draft = api.ready_draft()  # version 1 approved
    resp = api.client.patch(
        f"/v1/drafts/{draft['id']}",
        headers=api.headers(),
        json={"expected_version": 1, "plan": plan(altitude_m=70)},
    )
    assert resp.status_code == 200 and resp.get_json()["version"] == 2
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 2, api.new_key()), 409, "APPROVAL_VERSION_MISMATCH")


def test_closed_airspace(api: Api) -> None:
    draft = api.ready_draft()

    def close(tx: Any) -> None:
        area = tx.session.get(SiteArea, AREA)
        area.airspace_open = False

    api.runtime.transact(close)
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 1, api.new_key()), 409, "AIRSPACE_CLOSED", area_id=AREA)


def test_approvals_need_the_approver_role(api: Api) -> None:
    draft = api.create_draft()
    url = f"/v1/drafts/{draft['id']}/approvals"
    with api.unchanged():
        assert_problem(
            api.client.post(url, headers=api.headers(), json={"draft_version": 1, "decision": "approve"}),
            403,
            "FORBIDDEN_ROLE",
        )
        assert_problem(
            api.client.post(url, headers=api.approver(), json={"draft_version": 1, "decision": "maybe"}),
            422,
            "INVALID_PARAMETERS",
            field="decision",
        )
        assert_problem(
            api.client.post(url, headers=api.approver(), json={"draft_version": 1}),
            422,
            "MISSING_FIELD",
            field="decision",
        )


def test_authentication(api: Api) -> None:
    url = "/v1/drafts"
    body = draft_body()
    expired = issue_token(SECRET, OWNER, ttl_s=3600, now=1_000_000_000)
    forged = issue_token("another-secret-0123456789abcdefghijklmnopqrstuvwxyz", OWNER)
    import jwt  # a token with a role the API does not know

    bad_role = jwt.encode({"sub": OWNER, "role": "root", "exp": 4_000_000_000}, SECRET, algorithm="HS256")
    no_exp = jwt.encode({"sub": OWNER, "role": "operator"}, SECRET, algorithm="HS256")
    with api.unchanged():
        assert_problem(api.client.post(url, json=body), 401, "UNAUTHENTICATED")
        assert_problem(
            api.client.post(url, json=body, headers={"Authorization": "Basic dXNlcjpwYXNz"}),
            401,
            "UNAUTHENTICATED",
        )
        for token in (forged, expired, "not.a.jwt", "garbage", bad_role, no_exp):
            resp = api.client.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
            assert_problem(resp, 401, "INVALID_TOKEN")
            assert resp.headers["WWW-Authenticate"] == "Bearer"
        task_url = f"/v1/tasks/{uuid.uuid4()}"
        assert_problem(api.client.get(task_url), 401, "UNAUTHENTICATED")
        assert_problem(
            api.client.get(task_url, headers={"Authorization": f"Bearer {expired}"}), 401, "INVALID_TOKEN"
        )


def test_issue_and_verify_token() -> None:
    token = issue_token(SECRET, APPROVER, role="approver")
    principal = verify_token(SECRET, token)
    assert (principal.user_id, principal.role) == (APPROVER, "approver")
    with pytest.raises(Unauthenticated):
        verify_token(SECRET, issue_token(SECRET, OWNER, ttl_s=-60))
    with pytest.raises(ValueError):
        issue_token(SECRET, OWNER, role="admin")


def test_token_verifier_remembers_a_token_only_until_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    """TokenVerifier (the API's per-process memory of accepted tokens) answers as verify_token does, and a token it
    accepted is refused once it expires, the same way (INVALID_TOKEN, "expired"); refusals are never remembered."""
    import time as real_time

    from kernel import tokens
    from reference.copilot.http import auth

    verifier = auth.TokenVerifier(SECRET, max_tokens=2)
    now = real_time.time()
    token = issue_token(SECRET, OWNER, ttl_s=60, now=now)
    assert verifier(token) == verify_token(SECRET, token)
    assert verifier(token) == auth.Principal(OWNER, "operator")  # remembered
    import datetime as dt

    import jwt.api_jwt

    later = now + 60 + auth.LEEWAY_S + 1  # the token has expired, for both clocks (ours and PyJWT's)

    class Later(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Later:  # type: ignore[override]
            return cls.fromtimestamp(later, tz)

    with monkeypatch.context() as m:
        m.setattr(tokens.time, "time", lambda: later)
        m.setattr(jwt.api_jwt, "datetime", Later)
        with pytest.raises(Unauthenticated, match="expired"):
            verifier(token)
    forged = issue_token("another-secret-0123456789abcdefghijklmnopqrstuvwxyz", OWNER)
    for _ in range(2):
        with pytest.raises(Unauthenticated, match="invalid"):
            verifier(forged)
    for user in ("operator-a", "operator-b", "operator-c"):  # bounded: the memory empties when full
        assert verifier(issue_token(SECRET, user, now=now)).user_id == user
        assert len(verifier._verify._accepted) <= 2


def test_task_reads_and_cancel_refusals(api: Api) -> None:
    task = api.task()
    tid = task["task_id"]
    with api.unchanged():
        for path in (f"/v1/tasks/{uuid.uuid4()}", "/v1/tasks/not-a-uuid", f"/v1/tasks/{uuid.uuid4()}/events"):
            assert_problem(api.client.get(path, headers=api.headers()), 404, "TASK_NOT_FOUND")
        assert_problem(
            api.client.get(f"/v1/tasks/{tid}", headers=api.headers(NEIGHBOUR)), 404, "TASK_NOT_FOUND"
        )
        assert_problem(
            api.client.get(f"/v1/tasks/{tid}/events", headers=api.headers(NEIGHBOUR)), 404, "TASK_NOT_FOUND"
        )
        assert_problem(
            api.client.post(f"/v1/tasks/{tid}/cancel", headers=api.headers(NEIGHBOUR)), 404, "TASK_NOT_FOUND"
        )
        assert_problem(api.client.post("/v1/tasks/nope/cancel", headers=api.headers()), 404, "TASK_NOT_FOUND")
        for bad in ("abc", "-2", "--1", "+1", " 1", "1.5", "", "٣", "99999999999999999999999"):
            assert_problem(
                api.client.get(f"/v1/tasks/{tid}/events?after_version={bad}", headers=api.headers()),
                422,
                "INVALID_PARAMETERS",
                field="after_version",
            )


def test_list_tasks_the_callers_newest_change_first(api: Api) -> None:
    first, second = api.task(), api.task()
    api.task(NEIGHBOUR)  # another user's task is never listed
    api.client.post(f"/v1/tasks/{first['task_id']}/cancel", headers=api.headers())  # now the newest change
    resp = api.client.get("/v1/tasks", headers=api.headers())
    assert resp.status_code == 200, resp.get_data(as_text=True)
    body = resp.get_json()
    assert body["limit"] == 50
    assert [(t["id"], t["status"], t["version"]) for t in body["tasks"]] == [
        (first["task_id"], "CANCELLED", 1), (second["task_id"], second["status"], second["version"])]
    one = api.client.get("/v1/tasks?limit=1", headers=api.headers()).get_json()
    assert [t["id"] for t in one["tasks"]] == [first["task_id"]] and one["limit"] == 1
    with api.unchanged():
        for bad in ("0", "201", "-1", "abc", "", "1.5", " 1", "٣", "99999"):
            assert_problem(api.client.get(f"/v1/tasks?limit={bad}", headers=api.headers()), 422,
                           "INVALID_PARAMETERS", field="limit")
        assert api.client.get("/v1/tasks").status_code == 401


def test_database_down(api: Api) -> None:
    draft = api.ready_draft()
    task = api.task()
    with api.unchanged():
        with database_down(api.engine):
            calls = [
                api.client.post("/v1/drafts", json=draft_body(), headers=api.draft_headers()),
                api.confirm(draft["id"], 1, api.new_key()),
                api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()),
                api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers()),
            ]
            health = api.client.get("/health")
        for resp in calls + [health]:
            assert_problem(resp, 503, "SERVICE_UNAVAILABLE")
            assert resp.headers["Retry-After"] == "1"
            assert "server closed the connection" not in resp.get_data(as_text=True)
    # the same request succeeds once the database is back
    assert api.confirm(draft["id"], 1, api.new_key()).status_code == 201


def test_database_gone_after_dispose(api: Api) -> None:
    draft = api.ready_draft()
    api.engine.dispose()  # the in-memory database is gone: a new connection finds no schema
    assert_problem(api.confirm(draft["id"], 1, api.new_key()), 503, "SERVICE_UNAVAILABLE")


def test_webhook_refusals(api: Api) -> None:
    url = "/v1/platform/events"
    ok = {"external_id": "FL-1", "seq": 1, "kind": "telemetry", "at": 1_700_000_000.0}
    with api.unchanged():
        assert_problem(api.client.post(url, json=[ok]), 401, "UNAUTHENTICATED")
        assert_problem(
            api.client.post(url, json=[ok], headers={"X-Webhook-Token": "wrong"}), 401, "INVALID_TOKEN"
        )
        assert_problem(api.client.post(url, json=[ok], headers=api.headers()), 401, "UNAUTHENTICATED")
        headers = {"X-Webhook-Token": WEBHOOK_TOKEN}
        assert_problem(api.client.post(url, json=ok, headers=headers), 400, "MALFORMED_JSON")
        assert_problem(api.client.post(url, data=b"[{", headers=headers, content_type="application/json"), 400,
                       "MALFORMED_JSON")
        cases = [
            ({**ok, "seq": "one"}, "INVALID_PARAMETERS", "[1].seq"),
            (_without(ok, "kind"), "MISSING_FIELD", "[1].kind"),
            ({**ok, "kind": "teleport"}, "INVALID_PARAMETERS", "[1].kind"),
            ({**ok, "at": 1e300}, "INVALID_PARAMETERS", "[1].at"),
            ({**ok, "payload": [1]}, "INVALID_PARAMETERS", "[1].payload"),
            ("event", "INVALID_PARAMETERS", "[1]"),
        ]
        for bad, code, field in cases:
            assert_problem(
                api.client.post(url, json=[ok, bad], headers=headers), 422, code, index=1, field=field
            )
    counts = api.counts()
    resp = api.client.post(url, json=[ok], headers=headers)
    assert resp.status_code == 200 and resp.get_json()["orphans"] == 1
    assert api.counts() == counts  # an orphan event touches no task table


def test_routing_and_size_problems(api: Api) -> None:
    assert_problem(api.client.get("/nope"), 404, "NOT_FOUND")
    assert_problem(api.client.get("/v1/unknown", headers=api.headers()), 404, "NOT_FOUND")
    resp = api.client.delete("/v1/drafts", headers=api.draft_headers())
    assert_problem(resp, 405, "METHOD_NOT_ALLOWED")
    assert "POST" in resp.headers["Allow"]
    with api.unchanged():
        big = {**draft_body(), "goal": "x" * (256 * 1024)}
        assert_problem(
            api.client.post("/v1/drafts", json=big, headers=api.draft_headers()), 413, "PAYLOAD_TOO_LARGE"
        )


def test_internal_error_hides_details(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    task = api.task()

    def boom(*_args: Any) -> None:
        raise RuntimeError("secret internals at /srv/sortie")

    monkeypatch.setattr("reference.copilot.api.task_snapshot", boom)
    resp = api.client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers())
    body = assert_problem(resp, 500, "INTERNAL_ERROR")
    assert "secret" not in resp.get_data(as_text=True) and "RuntimeError" not in resp.get_data(as_text=True)
    assert body["error_id"] in caplog.text and "secret internals" in caplog.text


# ------------------------------------------------------------------------------------------ property

_SAFE_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            10**400,
            -(10**400),
            2**63,
            1e308,
            "",
            AREA,
            OTHER_AREA,
            DEVICE,
            FOREIGN_DEVICE,
            "DRONE-0003",
            "photo",
            30.02,
            120.02,
            60,
        ]
    )
)
# Values a JSON encoder writes but the API refuses to store: NaN, Infinity, lone surrogates, NUL.
_HOSTILE = st.sampled_from([float("nan"), float("inf"), "\ud800", "a\x00b"])
_LEAVES = _SAFE_LEAVES | _HOSTILE


def _json(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )


JSON_VALUES = _json(_LEAVES)
_SAFE_JSON = _json(_SAFE_LEAVES)
_KEYS = ["goal", "area_id", "plan", "extra"]
_PLAN_KEYS = ["device_id", "waypoints", "altitude_m", "actions", "speed_mps", "extra"]


@st.composite
def mutated_bodies(draw: st.DrawFn) -> Any:
    """A valid body with a few fields removed or replaced by arbitrary JSON."""
    body: dict[str, Any] = copy.deepcopy(draft_body())
    for _ in range(draw(st.integers(1, 2))):
        target = body["plan"] if isinstance(body.get("plan"), dict) and draw(st.integers(0, 3)) else body
        key = draw(st.sampled_from(_PLAN_KEYS if target is not body else _KEYS))
        if draw(st.integers(0, 3)) == 0:
            target.pop(key, None)
        elif key == "waypoints" and draw(st.booleans()):
            coord = st.floats(-200, 200) | st.floats(30.0, 30.05) | st.floats(120.0, 120.05) | _SAFE_LEAVES
            point = st.tuples(coord, coord).map(list) | st.lists(coord, max_size=3)
            target[key] = draw(st.lists(point, max_size=4))
        elif key in ("altitude_m", "speed_mps") and draw(st.booleans()):
            target[key] = draw(st.integers(-10, 200) | st.floats(-1e3, 1e3) | _SAFE_LEAVES)
        elif key == "actions" and draw(st.booleans()):
            target[key] = draw(
                st.lists(st.sampled_from(["photo", "video", "hover", "drop_payload"]), max_size=3)
            )
        else:
            target[key] = draw(_SAFE_JSON if draw(st.integers(0, 3)) else JSON_VALUES)
    return body


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # lone surrogates become \ud800 escapes, NaN becomes NaN


_MUTATED = mutated_bodies().map(_encode)
BODIES = st.one_of(JSON_VALUES.map(_encode), _MUTATED, _MUTATED, _MUTATED, st.binary(max_size=40))


def test_any_body_gives_201_or_a_problem_and_4xx_writes_nothing() -> None:
    api = build_api()

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(BODIES)
    def check(data: bytes) -> None:
        before = api.counts()
        resp = api.client.post("/v1/drafts", data=data, headers=api.draft_headers(), content_type="application/json")
        if resp.status_code == 201:  # a plan of null is a GENERATING draft (seed 000 §4.2), any other is READY
            planless = json.loads(data).get("plan", ...) is None
            assert resp.get_json()["status"] == ("GENERATING" if planless else "READY")
            return
        assert 400 <= resp.status_code < 500, resp.get_data(as_text=True)
        assert resp.mimetype == "application/problem+json"
        assert resp.get_json()["code"]
        assert api.counts() == before

    try:
        check()
    finally:
        api.engine.dispose()


def test_sse_over_a_real_server_ends_when_the_client_disconnects(api: Api) -> None:
    server = make_server("127.0.0.1", 0, api.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        task = api.task()
        url = f"http://127.0.0.1:{server.server_port}/v1/stream"
        with requests.get(url, headers=api.headers(), stream=True, timeout=5) as resp:
            assert resp.status_code == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            lines = resp.iter_lines(decode_unicode=True)
            assert next(lines).startswith("retry:")  # the stream is open and subscribed
            api.client.post(f"/v1/tasks/{task['task_id']}/cancel", headers=api.headers())
            data = next(line for line in lines if line.startswith("data:"))
            assert json.loads(data.removeprefix("data:")) == {
                "task_id": task["task_id"],
                "status": "CANCELLED",
                "version": 1,
            }
        # the client hung up: the next heartbeat write fails and the subscription goes away
        deadline = time.monotonic() + 5.0
        while api.hub.subscriber_count() and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a condition with a deadline, not sleeping for synchronisation
        assert api.hub.subscriber_count() == 0
    finally:
        server.shutdown()
        server.server_close()
