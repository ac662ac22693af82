"""Locust users for `sortie load --system jobs` (systems.jobs.load): producers who enqueue single jobs and planners
who create missions (DAGs), against the producer API (reference.jobs.http.app). The run's configuration is a JSON
file named by ``SORTIE_LOAD_CONFIG`` (rates, the DAG's width, the ramp, the client log directory).

Arrivals are open: each user draws its next arrival on a Poisson clock and starts it in its own greenlet, without
waiting for the last one's answer. Every request is logged with its latency from the actual send and from the
arrival's intended time (they differ when the client fell behind), and every answered enqueue with its key and
job id: the harness checks J1-J11 against what the clients were told (systems.jobs.checkers)."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import gevent
from locust import HttpUser, LoadTestShape, events, task

from loadtests.ramp import step_ramp
from reference.jobs.http.auth import ENQUEUER, issue_token
from systems.jobs.bodies import mission_request

CONFIG: dict[str, Any] = json.loads(open(os.environ["SORTIE_LOAD_CONFIG"]).read())  # noqa: SIM115
RATES: dict[str, Any] = CONFIG["rates"]
TYPES = ("survey", "inspect", "report")
RETRIES, BACKOFF_S = 6, 0.5
# Every user of this process enqueues as one caller (a key is its caller's: KEY_TAKEN for another's), with a token
# that outlives the run.
AUTH = {"Authorization": "Bearer " + issue_token(CONFIG["token_secret"], "load-producer", ENQUEUER,
                                                 ttl_s=float(CONFIG["duration_s"]) + 3600)}

_rng = random.Random(f"{CONFIG.get('seed', 1)}:{os.getpid()}")
os.makedirs(CONFIG["client_log_dir"], exist_ok=True)
_log = open(os.path.join(CONFIG["client_log_dir"], f"client-{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115
_counter = 0


def _write(record: dict[str, Any]) -> None:
    _log.write(json.dumps(record, separators=(",", ":")) + "\n")


@events.test_start.add_listener
def _on_test_start(**_: Any) -> None:
    _write({"k": "start", "t": time.time()})  # the load's time 0 (loadtests.run.LocustProcesses.wait_started)


@events.request.add_listener
def _on_request(request_type: str, name: str, response_time: float, response_length: int, response: Any = None,
                context: Any = None, exception: Any = None, **_: Any) -> None:
    status = int(getattr(response, "status_code", 0) or 0)
    intended = (context or {}).get("intended")
    corrected = None if intended is None else round((time.time() - intended) * 1000.0, 3)
    _write({"k": "req", "t": time.time(), "name": name, "ms": round(float(response_time), 3),
            "corrected_ms": corrected, "status": status, "failed": exception is not None,
            "code": _code(response) if status >= 400 else ("CONNECTION_ERROR" if status == 0 else None)})


def _code(response: Any) -> str | None:
    try:
        body = response.json()
    except Exception:
        return f"HTTP_{response.status_code}"
    return body.get("code") if isinstance(body, dict) else f"HTTP_{response.status_code}"


class _OpenArrivals(HttpUser):
    """A user whose arrivals come on its own Poisson clock, each in its own greenlet."""

    abstract = True
    rate = 1.0

    def on_start(self) -> None:
        global _counter
        _counter += 1
        self.n, self.iteration = _counter, 0
        self._next_at = time.time() + _rng.expovariate(self.rate)

    def wait_time(self) -> float:
        return max(0.0, self._next_at - time.time())

    def _arrive(self) -> tuple[str, float]:
        """The next arrival, at its intended time (Locust runs a user's first task at once: that one waits)."""
        intended, self._next_at = self._next_at, self._next_at + _rng.expovariate(self.rate)
        gevent.sleep(max(0.0, intended - time.time()))
        self.iteration += 1
        return f"{os.getpid()}-{self.n}-{self.iteration}", intended

    def send(self, process: str, path: str, name: str, body: dict[str, Any], intended: float) -> Any:
        """POST with the same body until an answer that is not a 5xx or a lost connection; logs the operation."""
        f, key = ("create-mission", body["id"]) if name == "missions" else ("enqueue", body["key"])
        for attempt in range(RETRIES):
            _write({"k": "op", "t": time.time(), "process": process, "type": "invoke", "f": f,
                    "value": {"key": key, "try": attempt}})
            with self.client.post(path, json=body, headers=AUTH, name=f"POST {path}", timeout=10, catch_response=True,
                                  context={"intended": intended if attempt == 0 else time.time()}) as resp:
                status = int(resp.status_code or 0)
                if 200 <= status < 300:
                    answer = resp.json()
                    resp.success()
                    _write({"k": "op", "t": time.time(), "process": process, "type": "ok", "f": f,
                            "value": {"key": key, **answer}})
                    return answer
                resp.failure(f"{status} {_code(resp) if status else resp.error!r}")
                _write({"k": "op", "t": time.time(), "process": process, "type": "fail", "f": f,
                        "value": {"key": key, "status": status}})
                if 400 <= status < 500:  # refused: the same request would be refused again
                    return None
            gevent.sleep(BACKOFF_S * 2 ** attempt * _rng.uniform(1.0, 2.0))
        _write({"k": "op", "t": time.time(), "process": process, "type": "fail", "f": f,
                "value": {"key": key, "gave_up": True}})
        return None


class Producer(_OpenArrivals):
    weight = max(1, int(RATES["producers"]))
    rate = RATES["jobs_per_s"] / max(1, int(RATES["producers"]))

    @task
    def enqueue(self) -> None:
        tag, intended = self._arrive()
        body = {"type": TYPES[self.iteration % len(TYPES)], "key": f"load-{tag}", "payload": {"n": tag}}
        clicks = 2 if _rng.random() < RATES["same_key_ratio"] else 1
        for c in range(clicks):
            gevent.spawn(self.send, f"producer-{tag}-{c}", "/v1/jobs", "jobs", body, intended)


class Planner(_OpenArrivals):
    weight = max(1, int(RATES["planners"]))
    rate = RATES["missions_per_s"] / max(1, int(RATES["planners"]))

    @task
    def plan(self) -> None:
        tag, intended = self._arrive()
        gevent.spawn(self.send, f"planner-{tag}", "/v1/missions", "missions",
                     mission_request(f"mission-{tag}", int(RATES["dag_width"])), intended)


class StepRamp(LoadTestShape):
    """``steps`` equal steps of users over ``ramp_s``, then every user until ``duration_s``."""

    total = max(1, int(RATES["producers"])) + max(1, int(RATES["planners"]))
    steps = max(1, int(CONFIG["ramp"]["steps"]))
    ramp_s = float(CONFIG["ramp"]["ramp_s"])
    duration_s = float(CONFIG["duration_s"])

    def tick(self) -> tuple[int, float] | None:
        return step_ramp(self.get_run_time(), self.total, self.steps, self.ramp_s, self.duration_s)
