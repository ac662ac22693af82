"""End to end on the native stack: a draft confirmed through the HTTP API is published through RocketMQ,
consumed, dispatched to the simulator over HTTP, executed, completed, and its report stored in the S3
server — checked through the API, the database, the broker's consumers, the ledger and the object store,
and on the owner's SSE streams, held open at the stream tier (its own process, fed through Redis).
Every reference component is its own OS process and reaches its dependencies through Toxiproxy."""

from __future__ import annotations

import http.client
import json
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from reference.copilot.http.auth import issue_token
from reference.copilot.models import DroneTask, ProcessedEvent, TaskAuditLog, TaskReport
from reference.copilot.topology import Topology
from systems.copilot.workload import APPROVER, WorkloadSpec, random_plan

# Starts a whole native stack: scripts/stack.sh runs it in CI, not the test command (docs/ci.md).
pytestmark = [pytest.mark.stack, pytest.mark.whole_stack]

SPEC = WorkloadSpec(confirms=1, window_s=1, devices=8, sites=2, operators=4)


def wait_for(what: str, fn: Any, timeout_s: float = 60.0, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value {last!r}")


class StreamWatch:
    """One ``GET /v1/stream`` held open on a thread; keeps every task event it hears."""

    def __init__(self, url: str, token: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.status: int | None = None
        self._resp: requests.Response | None = None
        self._thread = threading.Thread(target=self._read, args=(url, token), daemon=True)
        self._thread.start()

    def _read(self, url: str, token: str) -> None:
        try:
            with requests.get(f"{url}/v1/stream", headers={"Authorization": f"Bearer {token}"}, stream=True,
                              timeout=(5, 60)) as resp:
                self._resp, self.status = resp, resp.status_code
                for line in resp.iter_lines(decode_unicode=True):
                    if line and line.startswith("data:"):
                        self.events.append(json.loads(line[5:]))
        except (requests.RequestException, AttributeError, ValueError):
            pass  # closed under the reader

    def close(self) -> None:
        if self._resp is not None:
            self._resp.close()


@pytest.fixture(scope="module")
def native() -> Iterator[Any]:
    from stack.native import NativeStack
    from systems.copilot.stack import CopilotApp, CopilotOptions

    stack = NativeStack(Path(tempfile.mkdtemp(prefix="sortie-e2e-")), CopilotApp(
        CopilotOptions(time_scale=60.0, devices=SPEC.devices, api_workers=1,
                       topology=Topology(publishers=1, dispatchers=1),
                       policy={"reconcile_interval_s": 2.0, "invisible_s": 10.0})))
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def test_a_confirmed_draft_flies_completes_and_gets_its_report(native: Any, fleet: Any) -> None:
    import random

    ep = native.endpoints
    user, area = fleet.operators[0]
    plan = random_plan(random.Random(3), fleet, area)
    op = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], user)}"}
    ap = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], APPROVER, role='approver')}"}

    draft = requests.post(f"{ep.api_url}/v1/drafts", headers={**op, "Idempotency-Key": "e2e-draft"}, timeout=10, json={
        "goal": "patrol the fire lanes", "area_id": area,
        "plan": {"device_id": plan.device_id, "waypoints": plan.waypoints, "altitude_m": plan.altitude_m,
                 "actions": plan.actions}})
    assert draft.status_code == 201, draft.text
    d = draft.json()
    appr = requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/approvals", headers=ap, timeout=10,
                         json={"draft_version": d["version"], "decision": "approve"})
    assert appr.status_code == 201, appr.text
    # Streams first, at the stream tier (not the API): two of the owner's, one of another operator's.
    assert ep.app["stream_url"] and ep.app["stream_url"] != ep.api_url and native.components.get("stream") is not None
    other = fleet.operators[1][0]
    streams = [StreamWatch(ep.app["stream_url"], issue_token(ep.app["token_secret"], u)) for u in (user, user, other)]
    wait_for("the three streams held by the tier", lambda: requests.get(
        native.components["stream"].health_url, timeout=5).json()["streams"] == 3, timeout_s=30)
    refused = requests.get(f"{ep.app['stream_url']}/v1/stream", timeout=10)
    assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHENTICATED"

    confirm = requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/confirm", timeout=10,
                            headers={**op, "Idempotency-Key": "e2e-1"}, json={"draft_version": d["version"]})
    assert confirm.status_code == 201, confirm.text
    task_id = confirm.json()["task_id"]
    again = requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/confirm", timeout=10,
                          headers={**op, "Idempotency-Key": "e2e-1"}, json={"draft_version": d["version"]})
    assert again.status_code == 200 and again.json()["task_id"] == task_id

    def snapshot() -> dict[str, Any]:
        r = requests.get(f"{ep.api_url}/v1/tasks/{task_id}", headers=op, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    # A 10-minute flight at time scale 60 takes about 10 s of wall time (lognormal: allow for the tail).
    final = wait_for("COMPLETED", lambda: (s := snapshot())["status"] == "COMPLETED" and s, timeout_s=180)
    assert final["external_task_id"]

    events = requests.get(f"{ep.api_url}/v1/tasks/{task_id}/events", headers=op, timeout=10).json()["events"]
    assert [e["to"] for e in events] == ["CREATED", "QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING",
                                         "COMPLETED"]

    # The owner's streams heard the task change (the API and the dispatcher commit, Redis fans out, the tier
    # writes); the other operator's stream heard nothing of it.
    try:
        for w in streams[:2]:
            wait_for("the task's change on the owner's stream", lambda w=w: any(
                e["task_id"] == task_id and e["status"] == "COMPLETED" and e["version"] == final["version"]
                for e in w.events), timeout_s=30)
        assert streams[0].status == 200 and not [e for e in streams[2].events if e["task_id"] == task_id]
    finally:
        for w in streams:
            w.close()

    ledger = requests.get(f"{ep.app['platform_control_url']}/control/ledger", timeout=10).json()
    mine = [f for f in ledger if f["reference"] == task_id]
    assert len(mine) == 1 and mine[0]["external_id"] == final["external_task_id"]

    engine = create_engine(ep.admin_database_url)
    tid = uuid.UUID(task_id)

    def report() -> TaskReport | None:
        with Session(engine) as s:
            r = s.get(TaskReport, tid)
            return r if r is not None and r.status == "UPLOADED" else None

    # The report worker takes TaskCompleted from the broker (the sweeper would only act after a grace time).
    uploaded = wait_for("the report upload", report, timeout_s=50)
    digests = native.object_digests()
    assert digests.get(uploaded.object_key) == uploaded.sha256
    with Session(engine) as s:
        task = s.get(DroneTask, tid)
        assert task is not None and task.status == "COMPLETED" and task.last_telemetry_seq > 0
        consumers = set(s.scalars(select(ProcessedEvent.consumer).where(ProcessedEvent.task_id == tid)))
        assert consumers == {"dispatcher", "report-worker"}  # both consumer groups took their event
        actors = [a.actor for a in s.scalars(select(TaskAuditLog).where(TaskAuditLog.task_id == tid)
                                              .order_by(TaskAuditLog.id))]
        assert actors[0] == user and "dispatcher" in actors
    engine.dispose()


def test_the_api_keeps_an_idle_client_connection_open_past_gunicorns_default(native: Any) -> None:
    """A connection idle past gunicorn's 2 s default still answers: with the default, a client sending just as
    the server closed it got a connection reset (systems.copilot.stack.API_KEEPALIVE_S)."""
    from systems.copilot.stack import API_KEEPALIVE_S

    url = urllib.parse.urlsplit(native.endpoints.api_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request("GET", "/health")
        first = conn.getresponse()
        assert first.status == 200 and first.getheader("Connection", "keep-alive").lower() != "close"
        first.read()
        sock = conn.sock
        time.sleep(3.0)  # idle past the 2 s default, well inside API_KEEPALIVE_S
        assert API_KEEPALIVE_S > 3.0
        conn.request("GET", "/health")  # on the same socket: http.client reconnects only when it has none
        assert conn.sock is sock
        second = conn.getresponse()
        assert second.status == 200
    finally:
        conn.close()


def test_a_dispatcher_with_a_backlog_stops_gracefully_between_batches(native: Any, fleet: Any) -> None:
    """SIGTERM reaches a dispatcher busy with a backlog: it finishes the batch in hand and stops before its next
    receive ("stopped on signal"), leaving the rest in the broker; restarted, it takes the rest. Before, a worker
    stopped only in a sleep, so it ran through the whole backlog (or until its supervisor killed it at 60 s)."""
    import random

    ep = native.endpoints
    ap = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], APPROVER, role='approver')}"}
    dispatcher = native.components["dispatcher"]
    engine = create_engine(ep.admin_database_url)
    rng = random.Random(11)
    task_ids: list[uuid.UUID] = []

    def statuses() -> list[str]:
        with Session(engine) as s:
            return list(s.scalars(select(DroneTask.status).where(DroneTask.id.in_(task_ids))))

    dispatcher.pause()  # the backlog builds up in the broker while it cannot take any
    try:
        for i in range(60):
            user, area = fleet.operators[i % len(fleet.operators)]
            op = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], user)}"}
            plan = random_plan(rng, fleet, area)
            d = requests.post(f"{ep.api_url}/v1/drafts", headers={**op, "Idempotency-Key": f"backlog-draft-{i}"},
                              timeout=10, json={"goal": "backlog", "area_id": area, "plan": {
                                  "device_id": plan.device_id, "waypoints": plan.waypoints,
                                  "altitude_m": plan.altitude_m, "actions": plan.actions}}).json()
            assert requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/approvals", headers=ap, timeout=10, json={
                "draft_version": d["version"], "decision": "approve"}).status_code == 201
            c = requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/confirm", timeout=10, json={
                "draft_version": d["version"]}, headers={**op, "Idempotency-Key": f"backlog-{i}"})
            assert c.status_code == 201, c.text
            task_ids.append(uuid.UUID(c.json()["task_id"]))
    finally:
        dispatcher.resume()
    try:
        wait_for("the dispatcher at work on the backlog", lambda: any(s != "CREATED" for s in statuses()))
        log_before = dispatcher.log_path.read_text() if dispatcher.log_path else ""
        dispatcher.stop()  # SIGTERM; SIGKILL only if it does not exit in time
        assert dispatcher.log_path is not None
        said = dispatcher.log_path.read_text()[len(log_before):]
        assert "stopped on signal" in said, said[-2000:]
        left = statuses().count("CREATED")
        assert left > 0, "the dispatcher ran through the whole backlog after SIGTERM"
    finally:
        dispatcher.start()
    wait_for("the restarted dispatcher taking the rest of the backlog",
             lambda: "CREATED" not in statuses(), timeout_s=120)
    engine.dispose()


def test_the_publisher_listens_for_outbox_notifications(native: Any) -> None:
    """The publisher waits on LISTEN (migration 0007's trigger notifies it) instead of polling the outbox."""
    from sqlalchemy import text

    engine = create_engine(native.endpoints.admin_database_url)

    def listening() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(text(
                "SELECT application_name FROM pg_stat_activity WHERE query = :q AND application_name LIKE :who"),
                {"q": "LISTEN task_event_outbox", "who": "sortie-publisher-listen-%"}).scalars())

    try:
        assert len(wait_for("the publisher's LISTEN connection", listening)) == 1  # one publisher in this stack
    finally:
        engine.dispose()


def test_the_application_role_cannot_rewrite_the_audit_log(native: Any) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import ProgrammingError

    engine = create_engine(native.endpoints.database_url)  # the role the components use, via Toxiproxy
    with engine.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
        conn.execute(text("UPDATE task_audit_log SET actor = 'x'"))
    engine.dispose()


def test_a_worker_killed_with_sigkill_is_restarted(native: Any) -> None:
    comp = native.components["reconciler"]
    pid = comp.pid
    comp.kill()
    comp.wanted = True  # a crash, not a stop: the supervisor brings it back
    def restarted_and_healthy() -> bool:
        # The supervisor counts a restart once start() returned (after the health check): the new pid can answer
        # its health check a moment before the count moves, so the count is part of the condition (a CI run
        # asserted it right after the health check, and lost the race).
        if comp.pid == pid or native.restarts.get("reconciler", 0) < 1:
            return False
        try:
            return requests.get(comp.health_url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_for("the reconciler restarted (counted by the supervisor) and healthy", restarted_and_healthy, timeout_s=60)


def test_reports_in_the_store_describe_completed_tasks(native: Any) -> None:
    import json

    from minio import Minio

    ep = native.endpoints
    client = Minio(ep.s3_endpoint, access_key=ep.s3_access_key, secret_key=ep.s3_secret_key, secure=False,
                   region="us-east-1")
    keys = [o.object_name for o in client.list_objects(ep.s3_bucket, prefix="reports/", recursive=True)]
    assert keys, "no report in the object store"
    for key in keys:
        body = json.loads(client.get_object(ep.s3_bucket, key).read())
        assert key == f"reports/{body['task_id']}.json"
        assert body["status"] == "COMPLETED" and body["audit_trail"][-1]["to"] == "COMPLETED"
