"""Locust users for `sortie load` (docs/capacity.md): operators who create drafts, get them approved, confirm
(double clicks and same-key retries), and sometimes cancel; readers of task snapshots; clients holding SSE
streams. Run by `sortie load` (loadtests/run.py), which writes the run's configuration to a JSON file
named by ``SORTIE_LOAD_CONFIG`` (API URL, token secret, seeded fleet, the profile's rates, the ramp).

Every request and every client operation is appended to a per-process JSONL log in the config's
``client_log_dir``: the harness tails it for its time series (throughput, confirm p95, errors by code)
and merges the operations into a Jepsen-style history so invariants I2/I3 are checked on what the
clients were told. Locust's own CSV stats stay the source of the per-endpoint percentiles.

What operators and readers do is the user model's (systems.copilot.users), driven here by ``Driver``. Operators and
readers arrive on a Poisson clock each. Open model (``arrivals: open``, the default): every arrival runs in its own
greenlet, on schedule, whatever became of the earlier ones; requests share the process's ``connections`` (0: no
limit), and waiting for one is part of the latency the user saw. Closed model (``arrivals: closed``, for comparison):
a Locust user waits for its journey to end before the next one starts. Either way every request carries its
intended time (its arrival's scheduled time, or when the previous answer of its journey came), and each process
records raw and corrected latency in HDR histograms (loadtests.latency), written to the client log per interval.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from typing import Any

import gevent
import gevent.lock
from locust import HttpUser, LoadTestShape, between, events, task

from loadtests.latency import Recorder
from loadtests.ramp import step_ramp
from reference.copilot import api
from reference.copilot.api import Principal
from reference.copilot.http.auth import issue_token
from reference.copilot.http.client import headers_for, http_request, reply_of
from reference.copilot.http.server_timing import parse as server_timing
from systems.copilot.users import Fleet, OperatorPlan, no_answer, operator, random_plan, read, run_blocking

CONFIG: dict[str, Any] = json.loads(open(os.environ["SORTIE_LOAD_CONFIG"]).read())  # noqa: SIM115
RATES: dict[str, Any] = CONFIG["rates"]
_FLEET: dict[str, Any] = CONFIG["fleet"]
SECRET: str = CONFIG["token_secret"]
# The stream tier's address (the API's without it): clients take it from the stack's endpoints (stream_asgi.py)
STREAM_URL: str = f"{CONFIG['stream_url']}/v1/stream" if CONFIG.get("stream_url") else "/v1/stream"
FLEET = Fleet(list(_FLEET["areas"].items()), _FLEET["devices_by_area"], [tuple(o) for o in _FLEET["operators"]])
# A race with the flight's own end.
EXPECTED_CONFLICTS: dict[type, frozenset[str]] = {api.Cancel: frozenset({"TASK_NOT_CANCELLABLE"})}
OPEN = CONFIG.get("arrivals", "open") == "open"
_CONNECTIONS = int(CONFIG.get("connections", 0) or 0) if OPEN else 0
# The client's connections (open model): a request waits here for one; that wait is in its corrected latency only.
_POOL: Any = gevent.lock.BoundedSemaphore(_CONNECTIONS) if _CONNECTIONS else contextlib.nullcontext()
_latency = Recorder()

_rng = random.Random(f"{CONFIG.get('seed', 1)}:{os.getpid()}")
_tokens: dict[Principal, str] = {}
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
    now = time.time()
    status = int(getattr(response, "status_code", 0) or 0)
    code = _problem_code(response)
    if code is None and exception is not None and status == 0:
        code = "CONNECTION_ERROR"
    intended = (context or {}).get("intended")
    corrected = None if intended is None else round(max(float(response_time), (now - intended) * 1000.0), 3)
    # The API's own time for this request (Server-Timing): its handler's wall time and its thread's CPU time.
    timing = server_timing(getattr(response, "headers", {}).get("Server-Timing")) if response is not None else {}
    _write({"k": "req", "t": now, "name": name, "ms": round(float(response_time), 3), "corrected_ms": corrected,
            "status": status, "code": code or (f"HTTP_{status}" if status >= 400 else None),
            "failed": exception is not None,
            **({"server_ms": timing["app"]} if "app" in timing else {}),
            **({"cpu_ms": timing["cpu"]} if "cpu" in timing else {})})
    if corrected is not None:  # (SSE streams carry no intended time: their latency is the open, not an answer)
        _latency.record(name, float(response_time), corrected, now)


def _flush_latency(final: bool = False) -> None:
    for record in _latency.closed(None if final else time.time()):
        _write(record)


def _flusher() -> None:
    while True:
        gevent.sleep(2.0)
        _flush_latency()


@events.init.add_listener
def _on_init(**_: Any) -> None:
    gevent.spawn(_flusher)


@events.test_start.add_listener
def _on_test_start(**_: Any) -> None:
    _write({"k": "start", "t": time.time()})  # the load's time 0 (LocustProcesses.wait_started)


@events.quitting.add_listener
def _on_quitting(**_: Any) -> None:
    _flush_latency(final=True)


# ---------------------------------------------------------------------------------------------- driver


def _token(who: Principal) -> str:
    tok = _tokens.get(who)
    if tok is None:
        tok = _tokens[who] = issue_token(SECRET, who.user_id, role=who.role, ttl_s=86400)
    return tok


class Driver:
    """The Locust driver of the user model (systems.copilot.users): requests through the Locust user's client (so
    Locust's statistics see them), history operations to the client log, waits and double clicks as greenlets."""

    def __init__(self, user: HttpUser) -> None:
        self.user = user

    def drive(self, steps: Any, intended: float | None = None) -> Any:
        """Run a user; its first request is intended at ``intended`` (its arrival's scheduled time), each later
        one when the step before it ended."""
        first = [intended]

        def request(cmd: api.Command) -> api.Reply:
            at, first[0] = first[0] or time.time(), None
            return self.request(cmd, at)

        def together(users: list[Any]) -> list[Any]:
            greenlets = [gevent.spawn(self.drive, u) for u in users]
            gevent.joinall(greenlets, raise_error=True)
            return [g.value for g in greenlets]

        return run_blocking(steps, request, lambda r: _op(r.process, r.type, r.f, r.value),
                            lambda s: gevent.sleep(s), together)

    def request(self, cmd: api.Command, intended: float) -> api.Reply:
        req = http_request(cmd)
        caller = getattr(cmd, "caller", None)
        with _POOL, self.user.client.request(
                req.method, req.path, name=req.name, json=req.body, params=req.query,
                headers=headers_for(req, _token(caller) if caller else None), timeout=10, catch_response=True,
                context={"intended": intended}) as resp:
            status = int(resp.status_code or 0)
            if status == 0:  # no answer: an unknown outcome
                resp.failure(f"connection error: {resp.error!r}")
                return no_answer()
            reply = reply_of(status, resp.headers, resp.text)
            if reply.ok or reply.code in EXPECTED_CONFLICTS.get(type(cmd), frozenset()):
                resp.success()
            else:
                resp.failure(f"{status} {reply.code}")
            return reply


# ---------------------------------------------------------------------------------------------- users


class _Arrivals(HttpUser):
    """A user whose arrivals come on its own Poisson clock at ``rate``: open, each arrival in its own greenlet on
    schedule; closed, one after the other (a late one starts at once and is timed from its scheduled time)."""

    abstract = True
    rate = 1.0

    def on_start(self) -> None:
        self._next_at = time.time() + _rng.expovariate(self.rate)
        self.driver = Driver(self)

    def wait_time(self) -> float:
        return max(0.0, self._next_at - time.time())

    def arrive(self, steps: Any) -> None:
        """Start ``steps`` at the next arrival's intended time (Locust runs a user's first task at once: it waits)."""
        intended = self._next_at
        # A closed user that fell far behind catches up at most 60 s of arrivals, not the whole backlog at once.
        self._next_at = max(intended + _rng.expovariate(self.rate), time.time() - 60.0)
        gevent.sleep(max(0.0, intended - time.time()))
        if OPEN:
            gevent.spawn(self.driver.drive, steps, intended)
        else:
            self.driver.drive(steps, intended)


class Operator(_Arrivals):
    """An operator of the user model (systems.copilot.users.operator), arriving on a Poisson clock (the profile's
    drafts/s spread over its operators): draft, approval, ``confirm_ratio`` of them confirmed, a share with a
    double click, ``cancel_ratio`` of the confirmed tasks cancelled part-way through the flight."""

    weight = max(1, int(RATES["operators"]))
    rate = RATES["drafts_per_s"] / max(1, int(RATES["operators"]))

    def on_start(self) -> None:
        global _counter
        super().on_start()
        _counter += 1
        self.n = _counter
        self.user_id, self.area = FLEET.operators[(self.n - 1) % len(FLEET.operators)]
        self.iteration = 0

    @task
    def draft_and_maybe_confirm(self) -> None:
        self.iteration += 1
        cancel = _rng.random() < RATES["cancel_ratio"]
        plan = OperatorPlan(
            n=f"{os.getpid()}-{self.n}-{self.iteration}", user=self.user_id, area=self.area,
            plan=random_plan(_rng, FLEET, self.area), confirm=_rng.random() < RATES["confirm_ratio"],
            clicks=2 if _rng.random() < RATES["double_click_ratio"] else 1,
            cancel_after_s=_rng.uniform(0.2, 0.8) * RATES["flight_wall_median_s"] if cancel else None,
            seed=str(CONFIG.get("seed", 1)))
        self.arrive(operator(plan, _recent_tasks))
        del _recent_tasks[:-500]


class SnapshotReader(_Arrivals):
    """Reads the snapshot of a recently confirmed task as its owner (the UI's polling), on a Poisson clock (the
    profile's reads/s spread over the readers); an arrival before any task was confirmed reads nothing."""

    weight = max(1, int(RATES["readers"]))
    rate = RATES["snapshot_reads_per_s"] / max(1, int(RATES["readers"]))

    @task
    def read(self) -> None:
        if not _recent_tasks:
            self._next_at += _rng.expovariate(self.rate)
            return
        user, task_id = _rng.choice(_recent_tasks[-200:])
        self.arrive(read(f"reader-{os.getpid()}", user, task_id, _rng))


class StreamWatcher(HttpUser):
    """Holds an SSE stream (GET /v1/stream) open for 30-90 s, counts the changes it hears, reconnects."""

    weight = max(1, int(RATES["sse_streams"]))
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        self.user_id = FLEET.operators[_rng.randrange(len(FLEET.operators))][0]

    @task
    def hold(self) -> None:
        hold_s = _rng.uniform(30.0, 90.0)
        received, broken = 0, None
        # No catch_response: the request event fires when the headers arrive (the open latency).
        resp = self.client.get(STREAM_URL, name="GET /v1/stream", stream=True, timeout=(10, 60),
                               headers={"Authorization": f"Bearer {_token(Principal(self.user_id, 'operator'))}"})
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
        return step_ramp(self.get_run_time(), self.total, self.steps, self.ramp_s, self.duration_s)
