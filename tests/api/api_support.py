"""Helpers for the Copilot API tests: a fresh in-memory database per app, a seeded fleet, tokens."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine, event, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import sessionmaker
from werkzeug.test import TestResponse

from reference.copilot.db import sqlite_engine
from reference.copilot.http.app import create_app, hub_of
from reference.copilot.http.auth import issue_token
from reference.copilot.http.notify import NotificationHub
from reference.copilot.models import ApprovalOrder, DroneTask, FlightRoute, TaskAuditLog, TaskDraft, TaskEventOutbox
from reference.copilot.runtime import Runtime
from systems.copilot.workload import Fleet, WorkloadSpec, seed_fleet

SECRET = "api-test-secret-0123456789abcdefghijklmnopqrstuvwxyz"
WEBHOOK_TOKEN = "webhook-test-token-0123456789"
APPROVER = "approver-1"
# seed_fleet(sites=2, devices=8, operators=4): operator-001/003 work SITE-001 (DRONE-0001/3/5/7),
# operator-002/004 work SITE-002 (DRONE-0002/4/6/8). SITE-001 is lat 30..30.05, lon 120..120.05.
OWNER, NEIGHBOUR, OTHER_SITE = "operator-001", "operator-003", "operator-002"
AREA, OTHER_AREA = "SITE-001", "SITE-002"
DEVICE, FOREIGN_DEVICE = "DRONE-0001", "DRONE-0002"
COUNTED = {
    "drone_task": DroneTask,
    "task_audit_log": TaskAuditLog,
    "task_event_outbox": TaskEventOutbox,
    "task_draft": TaskDraft,
    "approval_order": ApprovalOrder,
    "flight_route": FlightRoute,
}


def plan(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "device_id": DEVICE,
        "waypoints": [[30.01, 120.01], [30.02, 120.03], [30.03, 120.02]],
        "altitude_m": 60,
        "actions": ["photo", "thermal_scan"],
        "speed_mps": 8.0,
    }
    base.update(overrides)
    return base


def draft_body(**plan_overrides: Any) -> dict[str, Any]:
    return {"goal": "inspect the north fence", "area_id": AREA, "plan": plan(**plan_overrides)}


@dataclass
class Api:
    engine: Engine
    runtime: Runtime
    app: Flask
    client: FlaskClient
    fleet: Fleet
    keys: int = field(default=0)

    @property
    def hub(self) -> NotificationHub:
        return hub_of(self.app)

    def headers(self, user: str = OWNER, role: str = "operator", **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {issue_token(SECRET, user, role)}", **extra}

    def draft_headers(self, user: str = OWNER, role: str = "operator") -> dict[str, str]:
        """Headers for POST /v1/drafts: a token and a fresh Idempotency-Key."""
        return self.headers(user, role, **{"Idempotency-Key": f"draft-{uuid.uuid4().hex}"})

    def approver(self) -> dict[str, str]:
        return self.headers(APPROVER, "approver")

    def counts(self) -> dict[str, int]:
        with self.runtime.sessions() as s:
            return {
                name: s.scalar(select(func.count()).select_from(model)) or 0
                for name, model in COUNTED.items()
            }

    @contextmanager
    def unchanged(self) -> Iterator[None]:
        """Asserts that the block wrote no row to any of the counted tables."""
        before = self.counts()
        yield
        assert self.counts() == before

    # ---- shortcuts for the happy path

    def create_draft(self, user: str = OWNER, **plan_overrides: Any) -> dict[str, Any]:
        resp = self.client.post("/v1/drafts", json=draft_body(**plan_overrides), headers=self.draft_headers(user))
        assert resp.status_code == 201, resp.get_json()
        return resp.get_json()

    def approve(self, draft_id: str, version: int, decision: str = "approve") -> TestResponse:
        return self.client.post(
            f"/v1/drafts/{draft_id}/approvals",
            headers=self.approver(),
            json={"draft_version": version, "decision": decision},
        )

    def new_key(self) -> str:
        self.keys += 1
        return f"key-{self.keys}-{uuid.uuid4().hex[:8]}"

    def confirm(self, draft_id: str, version: int, key: str | None = None, user: str = OWNER) -> TestResponse:
        headers = self.headers(user)
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.client.post(
            f"/v1/drafts/{draft_id}/confirm", headers=headers, json={"draft_version": version}
        )

    def ready_draft(self, user: str = OWNER) -> dict[str, Any]:
        draft = self.create_draft(user)
        assert self.approve(draft["id"], draft["version"]).status_code == 201
        return draft

    def task(self, user: str = OWNER) -> dict[str, Any]:
        draft = self.ready_draft(user)
        resp = self.confirm(draft["id"], draft["version"], self.new_key(), user)
        assert resp.status_code == 201, resp.get_json()
        return resp.get_json()


def build_api(heartbeat_s: float = 0.05) -> Api:
    engine = sqlite_engine()
    runtime = Runtime(sessions=sessionmaker(engine, expire_on_commit=False))
    fleet = runtime.transact(
        lambda tx: seed_fleet(tx, WorkloadSpec(confirms=1, window_s=1, devices=8, sites=2, operators=4))
    )
    app = create_app(runtime, token_secret=SECRET, webhook_token=WEBHOOK_TOKEN, heartbeat_s=heartbeat_s)
    return Api(engine, runtime, app, app.test_client(), fleet)


@contextmanager
def database_down(engine: Engine) -> Iterator[None]:
    """Every statement fails as if the server had gone away."""

    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise sa_exc.OperationalError(
            "statement", {}, sqlite3.OperationalError("server closed the connection")
        )

    event.listen(engine, "before_cursor_execute", fail)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", fail)


def assert_problem(resp: TestResponse, status: int, code: str, **fields: Any) -> dict[str, Any]:
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.headers["Content-Type"].startswith("application/problem+json"), resp.headers["Content-Type"]
    text = resp.get_data(as_text=True)
    assert "Traceback" not in text and 'File "' not in text
    body = json.loads(text)
    assert body["code"] == code, body
    assert body["status"] == status
    assert body["type"] == "https://sortie.dev/problems/" + code.lower().replace("_", "-")
    assert body["title"] and isinstance(body["detail"], str)
    for k, v in fields.items():
        assert body.get(k) == v, (k, body)
    return body


def read_sse(resp: TestResponse, event: str = "task", deadline_s: float = 5.0) -> dict[str, str]:
    """The first SSE message of type ``event`` on a streamed response, within a deadline (the stream's
    heartbeat keeps each read short, so the deadline is checked at least every heartbeat)."""
    deadline = time.monotonic() + deadline_s
    buf = b""
    chunks = iter(resp.response)
    while time.monotonic() < deadline:
        try:
            buf += next(chunks)
        except StopIteration:
            break
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            for line in block.decode().splitlines():
                if line and not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
            if fields.get("event") == event:
                return fields
    raise AssertionError(f"no {event!r} event within {deadline_s} s")
