"""One user model, three drivers: for the same seed and the same answers, the simulation's driver, the HTTP
driver and the Locust driver record the same operations, in the same order, for every user process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import simpy
from user_model_support import SECRET, SEED, SPEC, ScriptedApi, command_of, fleet, operations

from harness.history import History
from reference.copilot import api
from systems.copilot.stack_run import HttpUsers, StackClock
from systems.copilot.users import schedule
from systems.copilot.workload import SimUsers

ROOT = Path(__file__).resolve().parents[2]


class _World:
    """The part of a SimWorld the simulation's driver uses; each request is answered by the scripted API
    (the use case it would run is closed unstarted) after a short virtual delay."""

    def __init__(self, backend: ScriptedApi) -> None:
        self.env, self.history, self.cache, self.backend = simpy.Environment(), History(), None, backend
        self.requests: list[api.Command] = []

    def drive(self, process: str, gen: Any, on_done: Any) -> Any:
        cmd = gen.gi_frame.f_locals["cmd"]  # api.handle(cmd, ports), not started
        gen.close()
        self.requests.append(cmd)
        on_done(self.backend.answer(cmd), None)
        return self.env.timeout(0.05)


def sim_records() -> list[tuple[str, str, str, dict[str, Any]]]:
    world = _World(ScriptedApi())
    users = SimUsers(world, SPEC, fleet(), SEED)
    tasks: list[tuple[str, str]] = []
    for a in schedule(SPEC, fleet(), SEED):
        world.env.process(users.run(a.start(tasks)))
    world.env.run()
    return [(op.process, op.type, op.f, op.value) for op in world.history.ops]


class _Session:
    def __init__(self, backend: ScriptedApi) -> None:
        self.backend = backend

    def request(self, method: str, url: str, *, json: Any, params: Any, headers: dict[str, str],
                timeout: float) -> Any:
        import requests

        reply = self.backend.answer(command_of(method, url.removeprefix("http://api"), json, headers, params))
        if reply.status == 0:
            raise requests.ConnectionError("reset")
        resp = requests.Response()
        resp.status_code = reply.status
        resp.headers["Content-Type"] = reply.headers.get("Content-Type", "")
        resp._content = __import__("json").dumps(reply.body).encode()
        return resp


def http_records() -> list[tuple[str, str, str, dict[str, Any]]]:
    history = History()
    users = HttpUsers("http://api", SECRET, SPEC, fleet(), history, StackClock(0.0, 0.0), SEED, time_factor=0.0)
    users.session = _Session(ScriptedApi())  # type: ignore[assignment]
    tasks: list[tuple[str, str]] = []
    for a in schedule(SPEC, fleet(), SEED):
        users.drive(a.start(tasks))
    # the connection reset's detail is the transport's own (ConnectionError): not a user decision
    return [(op.process, op.type, op.f, {k: v for k, v in op.value.items() if k != "detail"}) for op in history.ops]


def locust_records(tmp_path: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    rates = {"operators": 1, "readers": 1, "sse_streams": 1, "drafts_per_s": 1.0, "snapshot_reads_per_s": 1.0,
             "confirm_ratio": 1.0, "double_click_ratio": 0.1, "cancel_ratio": 0.0, "flight_wall_median_s": 10.0}
    config = {"rates": rates, "token_secret": SECRET, "seed": SEED, "client_log_dir": str(tmp_path / "log"),
              "duration_s": 1, "ramp": {"steps": 1, "ramp_s": 0},
              "fleet": {"areas": dict(fleet().areas), "devices_by_area": fleet().devices_by_area,
                        "operators": fleet().operators}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code = ("import json, sys; sys.path.insert(0, 'tests/core'); from user_model_support import locust_records; "
            "print(json.dumps(locust_records()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SORTIE_LOAD_CONFIG": str(tmp_path / "config.json")}, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return [tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]  # type: ignore[misc]


def test_three_drivers_record_the_same_operations(tmp_path: Path) -> None:
    sim = operations(sim_records())
    http = operations(http_records())
    locust = operations(locust_records(tmp_path))
    assert sim == http
    assert sim == locust
    # The schedule exercised what the drivers must agree on: retries after a lost answer and a 503, refusals,
    # double clicks and cancels running together, attackers.
    flat = [(t, f, json.loads(v)) for ops in sim.values() for t, f, v in ops]
    assert any(t == "info" and f == "draft" and v["error"] == "CONNECTION_RESET" for t, f, v in flat)
    assert any(t == "fail" and f == "approve" and v["code"] == "SERVICE_UNAVAILABLE" for t, f, v in flat)
    assert any(t == "fail" and f == "confirm" and v["code"] == "IDEMPOTENCY_KEY_REUSED" for t, f, v in flat)
    assert any(p.endswith(".1") for p in sim), "no double click"
    assert any(".cancel1" in p for p in sim), "no double cancel"
    assert any(p.startswith("attacker-") for p in sim)
    assert any(f == "read" for t, f, v in flat)
