"""The job system's faults (systems/jobs/faults.py): registry entries like the Copilot's, looked up by name in both
shells; on the real stack through a JobsNemesis (fakes here: no stack): crash points scaled into the instances' file,
the database's link cut and slowed, instance-a killed while a load's window lasts."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.faults import registry
from scenarios.catalogue import load_catalogue
from systems.jobs.faults import DB_PROXY, FAULTS, JobsNemesis


def test_the_job_system_registers_its_own_faults_only() -> None:
    assert registry("jobs") is FAULTS
    assert FAULTS.names("sim") == {"crash-point", "hold-transaction", "db-outage", "db-latency", "drain"}
    assert FAULTS.names("native") == {"crash-point", "db-outage", "db-latency", "drain", "worker-kill"}
    import systems.copilot.faults  # noqa: F401 - registers the Copilot's (alone, this module never loads them)

    assert "platform" in registry("copilot") and "platform" not in FAULTS  # a Copilot fault is not the job system's


def test_every_fault_of_the_catalogue_has_the_halves_its_shells_need() -> None:
    for scenario in load_catalogue("jobs").values():
        for step in scenario.faults:
            for shell in scenario.shells:
                FAULTS.half_for(step.fault, shell, step.params)  # ValueError if not


class _Links:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def set_enabled(self, link: str, enabled: bool) -> None:
        self.calls.append(("enabled", link, enabled))

    def add_toxic(self, link: str, name: str, kind: str, **kw: Any) -> None:
        self.calls.append(("add", link, name, kind, kw["attributes"]))

    def remove_toxic(self, link: str, name: str) -> None:
        self.calls.append(("remove", link, name))


class _Instance:
    def __init__(self) -> None:
        self.kills = 0

    def running(self) -> bool:
        return True

    def kill(self) -> None:
        self.kills += 1

    def stop(self) -> None:  # Component.stop: SIGTERM (the instance drains), then wait for its exit
        self.stopped = True

    def start(self) -> None:
        assert getattr(self, "stopped", False), "started again before it was stopped"
        self.restarts = getattr(self, "restarts", 0) + 1


def _nemesis(tmp_path: Path, factor: float = 0.1) -> JobsNemesis:
    stack = SimpleNamespace(toxiproxy=SimpleNamespace(client=_Links()), failpoints=tmp_path / "failpoints.json",
                            instances={"instance-a": _Instance(), "instance-b": _Instance()}, noted=[])
    stack.note = lambda f, value: stack.noted.append((f, value))
    return JobsNemesis(stack, factor)


def test_native_crash_points_are_scaled_into_the_instances_file(tmp_path: Path) -> None:
    nemesis = _nemesis(tmp_path)
    params = {"role": "instance-a", "effect": "execute", "when": "after", "action": "stop", "seconds": 150.0,
              "count": 2}
    nemesis.apply("crash-point", params, on=True)
    nemesis.apply("crash-point", params, on=False)  # the end of a window arms nothing
    armed = json.loads(nemesis.stack.failpoints.read_text())["instance-a"]
    [(key, entry)] = armed.items()
    assert "execute" in key and entry["action"] == "stop" and entry["count"] == 2
    assert entry["seconds"] == pytest.approx(15.0)


def test_native_outage_and_latency_act_on_the_database_link(tmp_path: Path) -> None:
    nemesis = _nemesis(tmp_path)
    for on in (True, False):
        nemesis.apply("db-outage", {}, on=on)
        nemesis.apply("db-latency", {"ms": 300}, on=on)
    assert nemesis.links.calls == [("enabled", DB_PROXY, False), ("add", DB_PROXY, "latency", "latency",
                                                                   {"latency": 300}),
                                   ("enabled", DB_PROXY, True), ("remove", DB_PROXY, "latency")]


def test_worker_kill_kills_instance_a_until_its_window_closes(tmp_path: Path) -> None:
    nemesis = _nemesis(tmp_path, factor=1.0)
    nemesis.apply("worker-kill", {"every_s": 0.01}, on=True)
    for _ in range(500):
        if nemesis.kills >= 3:
            break
        threading.Event().wait(0.01)
    nemesis.apply("worker-kill", {}, on=False)
    threading.Event().wait(0.05)
    kills = nemesis.kills
    threading.Event().wait(0.05)
    assert kills >= 3 and nemesis.kills == kills == nemesis.stack.instances["instance-a"].kills
    assert nemesis.stack.instances["instance-b"].kills == 0
    assert nemesis.stack.noted == [("kill", {"process": "instance-a", "why": "worker-kill"})] * kills


def test_drain_restarts_the_instance_and_notes_it(tmp_path: Path) -> None:
    nemesis = _nemesis(tmp_path)
    nemesis.apply("drain", {"instance": "instance-b"}, on=True)
    nemesis.apply("drain", {"instance": "instance-b"}, on=False)  # one-shot: the end of its step does nothing
    for _ in range(500):  # the drain runs in its own thread (it lasts as long as the jobs the instance holds)
        if getattr(nemesis.stack.instances["instance-b"], "restarts", 0):
            break
        threading.Event().wait(0.01)
    assert nemesis.stack.noted == [("restart", {"process": "instance-b"})]
    assert getattr(nemesis.stack.instances["instance-b"], "restarts", 0) == 1
    assert getattr(nemesis.stack.instances["instance-a"], "restarts", 0) == 0


def test_what_the_stack_has_no_form_for_is_refused(tmp_path: Path) -> None:
    nemesis = _nemesis(tmp_path)
    with pytest.raises(ValueError, match="fault 'hold-transaction' has no real-stack form"):
        nemesis.apply("hold-transaction", {"role": "instance-a", "tx": "job.claim", "seconds": 1.0}, on=True)
    with pytest.raises(ValueError, match="unknown fault 'platform'"):
        nemesis.apply("platform", {}, on=True)
