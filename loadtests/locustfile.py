"""Locust users for `sortie load` (DESIGN.md §8): operators who create drafts, get them approved, confirm
(double clicks and same-key retries), and sometimes cancel; readers of task snapshots; clients holding SSE
streams. Run by `sortie load` (loadtests/run.py), which writes the run's configuration to a JSON file
named by ``SORTIE_LOAD_CONFIG`` (API URL, token secret, seeded fleet, the profile's rates, the ramp).

Every request and every client operation is appended to a per-process JSONL log in the config's
``client_log_dir``: the harness tails it for its time series (throughput, confirm p95, errors by code)
and merges the operations into a Jepsen-style history so invariants I2/I3 are checked on what the
clients were told. Locust's own CSV stats stay the source of the per-endpoint percentiles.

The operators' arrivals are open-loop per user: each schedules its next draft on a Poisson clock and
does not wait longer because the last one was slow (no coordinated omission, unless a single
operator's own iteration takes longer than its inter-arrival time).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import uuid
from typing import Any

import gevent
from locust import HttpUser, LoadTestShape, between, constant_throughput, events, task

from reference.http.auth import issue_token

CONFIG: dict[str, Any] = json.loads(open(os.environ["SORTIE_LOAD_CONFIG"]).read())  # noqa: SIM115
RATES: dict[str, Any] = CONFIG["rates"]
FLEET: dict[str, Any] = CONFIG["fleet"]
SECRET: str = CONFIG["token_secret"]
RETRYABLE = frozenset({0, 502, 503, 504})
EXPECTED_CONFLICTS = {"cancel": frozenset({"TASK_NOT_CANCELLABLE"})}  # a race with the flight's own end
APPROVER = "approver-1"

_rng = random.Random(f"{CONFIG.get('seed', 1)}:{os.getpid()}")
_approver_token = issue_token(SECRET, APPROVER, role="approver", ttl_s=86400)
_tokens: dict[str, str] = {}
_recent_tasks: list[tuple[str, str]] = []  # (user, task id): what readers read
_counter = 0

# ---------------------------------------------------------------------------------------------- client log

_log_dir = CONFIG["client_log_dir"]
os.makedirs(_log_dir, exist_ok=True)
_log = open(os.path.join(_log_dir, f"client-{os.uname().nodename}-{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115


def _write(record: dict[str, Any]) -> None:
    _log.write(json.dumps(record, separators=(",", ":")) + "\n")


def _op(process: str, type_: str, f: str, value: dict[str, Any]) -> None:
    _write({"k": "op", "t": time.time(), "process": process, "type": type_, "f": f, "value": value})


def _problem_code(response: Any) -> str | None:
    if response is None or getattr(response, "status_code", 0) < 400:
        return None
    try:
        body = response.json()
    except Exception:
        return None
    return body.get("code") if isinstance(body, dict) else None


@events.request.add_listener
def _on_request(request_type: str, name: str, response_time: float, response_length: int, response: Any = None,
                context: Any = None, exception: Any = None, start_time: float | None = None, **_: Any) -> None:
    status = int(getattr(response, "status_code", 0) or 0)
    code = _problem_code(response)
    if code is None and exception is not None and status == 0:
        code = "CONNECTION_ERROR"
    _write({"k": "req", "t": time.time(), "name": name, "ms": round(float(response_time), 3), "status": status,
            "code": code or (f"HTTP_{status}" if status >= 400 else None), "failed": exception is not None})


# ---------------------------------------------------------------------------------------------- helpers


def _token(user: str) -> str:
    tok = _tokens.get(user)
    if tok is None:
        tok = _tokens[user] = issue_token(SECRET, user, ttl_s=86400)
    return tok


def _plan(area_id: str) -> dict[str, Any]:
    poly = FLEET["areas"][area_id]
    (lat0, lon0), (lat1, lon1) = poly[0], poly[2]
    pts = [[round(_rng.uniform(lat0 + 0.001, lat1 - 0.001), 6), round(_rng.uniform(lon0 + 0.001, lon1 - 0.001), 6)]
           for _ in range(_rng.randint(3, 8))]
    return {"device_id": _rng.choice(FLEET["devices_by_area"][area_id]), "waypoints": pts,
            "altitude_m": float(_rng.choice([40, 60, 80, 100])),
            "actions": _rng.sample(["photo", "video", "thermal_scan", "hover"], 2), "speed_mps": 8.0}


def _json(resp: Any) -> dict[str, Any]:
    try:
        body = resp.json()
    except Exception:
        return {}
    return body if isinstance(body, dict) else {}


class _Call:
    """One client operation with same-key retries on 5xx / connection errors, recorded as history ops."""

    def __init__(self, user: HttpUser, process: str, f: str, value: dict[str, Any]) -> None:
        self.user, self.process, self.f, self.value = user, process, f, value

    def run(self, method: str, path: str, name: str, token: str, body: dict[str, Any] | None = None,
            key: str | None = None, ok_extra: Any = None, attempts: int = 6) -> dict[str, Any] | None:
        headers = {"Authorization": f"Bearer {token}"}
        if key:
            headers["Idempotency-Key"] = key
        expected = EXPECTED_CONFLICTS.get(self.f, frozenset())
        for attempt in range(attempts):
            _op(self.process, "invoke", self.f, {**self.value, "attempt": attempt})
            with self.user.client.request(method, path, name=name, json=body, headers=headers, timeout=10,
                                          catch_response=True) as resp:
                status = int(resp.status_code or 0)
                data = _json(resp) if status else {}
                if 200 <= status < 300:
                    resp.success()
                    _op(self.process, "ok", self.f, {**self.value, **(ok_extra(resp, data) if ok_extra else {})})
                    return data
                if status == 0:  # no answer: unknown outcome, retry with the same key
                    resp.failure(f"connection error: {resp.error!r}")
                    _op(self.process, "info", self.f, {**self.value, "error": "CONNECTION_RESET"})
                else:
                    code = data.get("code", f"HTTP_{status}")
                    if code in expected:
                        resp.success()
                    else:
                        resp.failure(f"{status} {code}")
                    _op(self.process, "fail", self.f, {**self.value, "status": status,
                                                       "code": "SERVICE_UNAVAILABLE" if status == 503 else code})
                    if status not in RETRYABLE:
                        return None
            gevent.sleep(_rng.uniform(0.5, 1.0) * 2 ** min(attempt, 4))
        return None


# ---------------------------------------------------------------------------------------------- users


class Operator(HttpUser):
    """Creates drafts on a Poisson clock (the profile's drafts/s spread over its operators); the approver
    approves each; ``confirms/drafts`` of them are confirmed, 10% with a double click (two concurrent
    requests, one key); ``cancel_ratio`` of the confirmed tasks are cancelled part-way through the flight."""

    weight = max(1, int(RATES["operators"]))
    rate = RATES["drafts_per_s"] / max(1, int(RATES["operators"]))

    def wait_time(self) -> float:
        now = time.monotonic()
        self._next_at = max(self._next_at + _rng.expovariate(self.rate), now - 60.0)  # bounded catch-up
        return max(0.0, self._next_at - now)

    def on_start(self) -> None:
        global _counter
        _counter += 1
        self.n = _counter
        self.user_id, self.area = FLEET["operators"][(self.n - 1) % len(FLEET["operators"])]
        self._next_at = time.monotonic()
        self.iteration = 0
        gevent.sleep(self.wait_time())  # Locust runs the first task at once: that would be a burst at each step

    @task
    def draft_and_maybe_confirm(self) -> None:
        self.iteration += 1
        proc = f"user-{os.getpid()}-{self.n}-{self.iteration}"
        token = _token(self.user_id)
        body = {"goal": "patrol the fire lanes", "area_id": self.area, "plan": _plan(self.area)}
        draft = _Call(self, proc, "draft", {"user_id": self.user_id}).run(
            "POST", "/v1/drafts", "POST /v1/drafts", token, body)
        if not draft:
            return
        appr = _Call(self, proc, "approve", {"user_id": APPROVER, "draft_id": draft["id"]}).run(
            "POST", f"/v1/drafts/{draft['id']}/approvals", "POST /v1/drafts/{id}/approvals", _approver_token,
            {"draft_version": draft["version"], "decision": "approve"})
        if not appr or _rng.random() >= RATES["confirm_ratio"]:
            return
        key = f"load-{uuid.uuid4().hex}"
        clicks = 2 if _rng.random() < RATES["double_click_ratio"] else 1
        value = {"user_id": self.user_id, "key": key, "draft_id": draft["id"], "draft_version": draft["version"]}

        def click(c: int) -> str | None:
            answer = _Call(self, f"{proc}.{c}", "confirm", value).run(
                "POST", f"/v1/drafts/{draft['id']}/confirm", "POST /v1/drafts/{id}/confirm", token,
                {"draft_version": draft["version"]}, key=key,
                ok_extra=lambda r, b: {"task_id": b.get("task_id"), "replayed": r.status_code == 200})
            return answer.get("task_id") if answer else None

        greenlets = [gevent.spawn(click, c) for c in range(clicks)]
        gevent.joinall(greenlets)
        task_id = next((g.value for g in greenlets if g.value), None)
        if task_id is None:
            return
        _recent_tasks.append((self.user_id, task_id))
        del _recent_tasks[:-500]
        if _rng.random() < RATES["cancel_ratio"]:
            gevent.spawn(self._cancel_later, proc, token, task_id)

    def _cancel_later(self, proc: str, token: str, task_id: str) -> None:
        gevent.sleep(_rng.uniform(0.2, 0.8) * RATES["flight_wall_median_s"])  # part-way through the flight
        _Call(self, proc, "cancel", {"user_id": self.user_id, "task_id": task_id}).run(
            "POST", f"/v1/tasks/{task_id}/cancel", "POST /v1/tasks/{id}/cancel", token, {})


class SnapshotReader(HttpUser):
    """Reads the snapshot of a recently confirmed task as its owner (the UI's polling)."""

    weight = max(1, int(RATES["readers"]))
    wait_time = constant_throughput(RATES["snapshot_reads_per_s"] / max(1, int(RATES["readers"])))

    @task
    def read(self) -> None:
        if not _recent_tasks:
            return
        user, task_id = _rng.choice(_recent_tasks[-200:])
        _Call(self, f"reader-{os.getpid()}", "read", {"user_id": user, "task_id": task_id}).run(
            "GET", f"/v1/tasks/{task_id}", "GET /v1/tasks/{id}", _token(user), attempts=1,
            ok_extra=lambda r, b: {"status_seen": b.get("status"), "version": b.get("version")})


class StreamWatcher(HttpUser):
    """Holds an SSE stream (GET /v1/stream) open for 30-90 s, counts the changes it hears, reconnects."""

    weight = max(1, int(RATES["sse_streams"]))
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        self.user_id = FLEET["operators"][_rng.randrange(len(FLEET["operators"]))][0]

    @task
    def hold(self) -> None:
        hold_s = _rng.uniform(30.0, 90.0)
        received, broken = 0, None
        # No catch_response: the request event fires when the headers arrive (the open latency).
        resp = self.client.get("/v1/stream", name="GET /v1/stream", stream=True, timeout=(10, 60),
                               headers={"Authorization": f"Bearer {_token(self.user_id)}"})
        try:
            if resp.status_code != 200:
                return
            with gevent.Timeout(hold_s, False):
                for line in resp.iter_lines():
                    if line.startswith(b"data:"):
                        received += 1
        except Exception as exc:  # the stream broke (e.g. the API restarted): the client reconnects
            broken = type(exc).__name__
        finally:
            resp.close()
        _write({"k": "sse", "t": time.time(), "events": received, "broken": broken})


# ---------------------------------------------------------------------------------------------- ramp-up


class StepRamp(LoadTestShape):
    """Step ramp-up: ``steps`` equal steps of users over ``ramp_s``, then the full profile until ``duration_s``."""

    total = int(RATES["operators"]) + int(RATES["readers"]) + int(RATES["sse_streams"])
    steps = max(1, int(CONFIG["ramp"]["steps"]))
    ramp_s = float(CONFIG["ramp"]["ramp_s"])
    duration_s = float(CONFIG["duration_s"])

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        if t >= self.duration_s:
            return None
        step = self.steps if self.ramp_s <= 0 else min(self.steps, int(t / (self.ramp_s / self.steps)) + 1)
        return math.ceil(self.total * step / self.steps), max(10.0, self.total / 5.0)
