"""The Copilot's fault registry (chaos/faults.py, systems/copilot/faults.py): one name set for both shells, every
fault of the catalogue and the example incidents has the half each of its shells applies, both shells' apply
functions are thin look-ups that refuse unknown names, and the halves do what their fault says (on fakes: no stack,
no simulation)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from chaos.faults import Fault
from chaos.native import NativeNemesis
from chaos.simulated import apply_fault
from harness.history import NEMESIS, History
from scenarios.scenario import SHELLS
from systems.copilot.faults import CRASH_FAULTS, FAULT_TABLES, FAULTS

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_FILES = sorted((ROOT / "systems" / "copilot" / "catalogue").glob("*.yaml")) + \
    sorted((ROOT / "systems" / "copilot" / "incidents").glob("*.yaml"))

# The names each shell accepted before the registry (chaos/simulated.py SIM_FAULTS, chaos/native.py
# NATIVE_FAULTS at commit 37b4d7f): the registry keeps them all, in the same shells.
OLD_SIM_FAULTS = {
    "broker-outage", "close-airspace", "crash-point", "db-error", "db-latency", "db-outage", "duplicate-delivery",
    "hold-transaction", "kill-api-after-create-commit", "kill-consumer-before-ack", "kill-dispatcher-after-create",
    "kill-publisher-after-publish", "kill-worker", "object-store-outage", "pause-dispatcher-after-create",
    "platform", "platform-partition", "redrive-dead-letters", "restart-process", "stop-service",
}
OLD_NATIVE_FAULTS = OLD_SIM_FAULTS | {"audit-tamper", "pause-process", "redis-loss", "stream-disconnect", "toxic"}
# Since then: the simulation's users go through the API and its cache (scenarios/sim/cache.py), and its operators
# hold task streams on the stream tier (systems/copilot/sim_streams.py, issue 54).
NEW_SIM_FAULTS = {"redis-loss", "stream-disconnect"}
# Issue 54: explore's stream clients that stop reading, so a stream's queue overflows (the simulation only).
NEW_SIM_FAULTS |= {"stream-stall"}
# Issue 11, in both shells: a supervisor's resolutions of MANUAL_REVIEW, and re-drives of what went DEAD.
NEW_FAULTS = {"resolve-reviews", "redrive-dead"}
# R13: a dispatcher killed between its DISPATCHING commit and its create call (a named crash point, both shells).
NEW_FAULTS |= {"kill-dispatcher-before-create"}
# R12: a consumer of an old release in the dispatchers' group acks TaskCreated unread (both shells).
NEW_FAULTS |= {"stale-consumer"}
# S8: devices of waiting tasks made unfit and approvals revoked before their pre-flight check (both shells).
NEW_FAULTS |= {"unfit-for-flight"}
# S10 (issue 54, rule 114): every operator's permissions removed for a window (both shells).
NEW_FAULTS |= {"revoke-permissions"}


def test_the_registry_is_the_union_of_the_old_name_sets_in_the_same_shells() -> None:
    assert set(FAULTS) == OLD_SIM_FAULTS | OLD_NATIVE_FAULTS | NEW_SIM_FAULTS | NEW_FAULTS
    assert FAULTS.names("sim") == OLD_SIM_FAULTS | NEW_SIM_FAULTS | NEW_FAULTS
    assert FAULTS.names("native") == OLD_NATIVE_FAULTS | NEW_FAULTS
    for name, fault in FAULTS.items():
        assert fault.name == name and fault.doc and "\n" not in fault.doc
        assert fault.sim is not None or fault.native is not None, name


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_every_fault_of_a_scenario_file_has_the_halves_its_shells_need(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    shells = doc.get("shells", list(SHELLS))
    for step in doc.get("faults", []):
        fault = FAULTS.get(step["fault"])
        assert fault is not None, f"{path.name}: {step['fault']} is not in the registry"
        for shell in shells:
            assert fault.half(shell) is not None, f"{path.name}: {fault.name} has no {shell} half"
            fault.validate(step.get("params", {}), shell)


def test_crash_faults_are_the_crash_point_table() -> None:
    from chaos.crashpoints import GENERIC

    assert {name for name, fault in FAULTS.items() if fault.crash} == {*CRASH_FAULTS, *GENERIC}


# ---------------------------------------------------------------------------------------------- refusals


def test_unknown_names_are_refused_by_both_shells() -> None:
    with pytest.raises(ValueError, match="unknown fault 'meteor-strike'"):
        apply_fault(FAULTS, _SimWorld(), "meteor-strike", {}, on=True)
    with pytest.raises(ValueError, match="unknown fault 'meteor-strike'"):
        _nemesis().apply("meteor-strike", {}, on=True)


def test_a_fault_without_a_half_is_refused_by_that_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="the simulation cannot model 'toxic'"):
        apply_fault(FAULTS, _SimWorld(), "toxic", {"link": "api", "type": "latency"}, on=True)
    monkeypatch.setitem(FAULTS._faults, "sim-only", Fault("sim-only", "test", lambda w, p, on: None, None))
    with pytest.raises(ValueError, match="fault 'sim-only' has no real-stack form"):
        _nemesis().apply("sim-only", {}, on=True)


def test_bad_params_are_refused_when_applied() -> None:
    with pytest.raises(ValueError, match="simulation models postgres, rocketmq, s3, not 'redis'"):
        apply_fault(FAULTS, _SimWorld(), "stop-service", {"service": "redis"}, on=True)
    with pytest.raises(ValueError, match=r"restart-process: params.process is missing"):
        apply_fault(FAULTS, _SimWorld(), "restart-process", {}, on=True)
    with pytest.raises(ValueError, match=r"toxic: params.link is missing"):
        _nemesis().apply("toxic", {"type": "latency"}, on=True)


# ---------------------------------------------------------------------------------------------- simulation halves


class _SimWorld(SimpleNamespace):
    """The flags of a SimulatedWorld, and the crash points and kills it received."""

    def __init__(self) -> None:
        super().__init__(db_down=False, db_error_tables=set(), db_extra_s=0.0, platform_partitioned=False,
                         kill_worker_window=False, broker=SimpleNamespace(down=False, duplicate_prob=0.0,
                                                                          duplicate_spread_s=0.0),
                         store=SimpleNamespace(down=False), supervised={"dispatcher-1": 1, "dispatcher-2": 2,
                                                                        "publisher": 3},
                         armed=[], killed=[])

    def arm(self, point: Any) -> None:
        self.armed.append(point)

    def kill(self, name: str, why: str) -> None:
        self.killed.append((name, why))


def test_sim_outages_set_their_switch_on_then_off() -> None:
    world = _SimWorld()
    for fault, flag in (("db-outage", lambda w: w.db_down), ("broker-outage", lambda w: w.broker.down),
                        ("object-store-outage", lambda w: w.store.down),
                        ("platform-partition", lambda w: w.platform_partitioned)):
        apply_fault(FAULTS, world, fault, {}, on=True)
        assert flag(world) is True, fault
        apply_fault(FAULTS, world, fault, {}, on=False)
        assert flag(world) is False, fault


def test_sim_stop_service_is_the_outage_of_that_dependency() -> None:
    world = _SimWorld()
    apply_fault(FAULTS, world, "stop-service", {"service": "rocketmq"}, on=True)
    assert world.broker.down and not world.db_down
    apply_fault(FAULTS, world, "stop-service", {"service": "rocketmq"}, on=False)
    assert not world.broker.down


def test_sim_database_faults() -> None:
    world = _SimWorld()
    apply_fault(FAULTS, world, "db-error", {"tables": ["processed_event", "task_event_outbox"]}, on=True)
    apply_fault(FAULTS, world, "db-error", {"tables": ["task_event_outbox"]}, on=False)
    assert world.db_error_tables == {"processed_event"}
    apply_fault(FAULTS, world, "db-latency", {"ms": 250}, on=True)
    assert world.db_extra_s == 0.25
    apply_fault(FAULTS, world, "db-latency", {"ms": 250}, on=False)
    assert world.db_extra_s == 0.0
    apply_fault(FAULTS, world, "duplicate-delivery", {"prob": 0.3, "spread_s": 2}, on=True)
    assert (world.broker.duplicate_prob, world.broker.duplicate_spread_s) == (0.3, 2.0)
    apply_fault(FAULTS, world, "duplicate-delivery", {"prob": 0.3}, on=False)
    assert (world.broker.duplicate_prob, world.broker.duplicate_spread_s) == (0.0, 0.0)


def test_sim_crash_faults_arm_their_points_and_restart_kills_by_prefix() -> None:
    world = _SimWorld()
    apply_fault(FAULTS, world, "kill-publisher-after-publish", {"count": 2}, on=True)
    apply_fault(FAULTS, world, "kill-publisher-after-publish", {"count": 2}, on=False)  # a window's end arms nothing
    [point] = world.armed
    assert (point.role, point.effect, point.when, point.action, point.count) == (
        "publisher", "publish:TaskCreated", "after", "kill", 2)
    apply_fault(FAULTS, world, "restart-process", {"process": "dispatcher"}, on=True)
    assert world.killed == [("dispatcher-1", "restart-process"), ("dispatcher-2", "restart-process")]


# ---------------------------------------------------------------------------------------------- native halves


class _Recorder:
    """Records every method call made on it: (name, args, kwargs)."""

    def __init__(self, calls: list[tuple[Any, ...]], prefix: str = "") -> None:
        self._calls, self._prefix = calls, prefix

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self._calls.append((self._prefix + name, args, kwargs))


class _Admin:
    """An Engine whose transactions record their statements (NativeNemesis installs its triggers at once)."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    @contextmanager
    def begin(self) -> Any:
        yield SimpleNamespace(execute=lambda stmt, params=None: self.statements.append((str(stmt), params)))


def _nemesis() -> NativeNemesis:
    calls: list[tuple[Any, ...]] = []
    stack = SimpleNamespace(
        endpoints=None, calls=calls, toxiproxy_client=_Recorder(calls),
        services={"redis": _Recorder(calls, "redis."), "postgres": _Recorder(calls, "postgres.")},
        components={"dispatcher-1": _Recorder(calls, "dispatcher-1."), "publisher": _Recorder(calls, "publisher.")},
    )
    return NativeNemesis(stack, _Admin(), 0.25, FAULTS)  # type: ignore[arg-type]


def test_constructing_a_nemesis_installs_the_fault_triggers() -> None:
    statements = " ".join(s for s, _ in _nemesis().admin.statements)  # type: ignore[attr-defined]
    assert "CREATE TABLE IF NOT EXISTS sortie_fault" in statements
    assert all(f"CREATE TRIGGER sortie_fault_{table}" in statements for table in FAULT_TABLES)


@pytest.mark.parametrize("fault, links", [
    ("broker-outage", ["rocketmq"]), ("db-outage", ["postgres"]), ("platform-partition", ["platform", "webhook"]),
    ("object-store-outage", ["s3"]), ("stream-disconnect", ["api"]),
])
def test_native_link_cuts_disable_their_links_then_enable_them(fault: str, links: list[str]) -> None:
    nemesis = _nemesis()
    nemesis.apply(fault, {}, on=True)
    nemesis.apply(fault, {}, on=False)
    assert nemesis.stack.calls == [("set_enabled", (link, False), {}) for link in links] + \
        [("set_enabled", (link, True), {}) for link in links]


def test_stream_disconnect_also_cuts_the_stream_tiers_link_when_the_stack_has_one() -> None:
    nemesis = _nemesis()
    nemesis.stack.endpoints = SimpleNamespace(proxies={"api": "127.0.0.1:1", "stream": "127.0.0.1:2"})
    nemesis.apply("stream-disconnect", {}, on=True)
    nemesis.apply("stream-disconnect", {}, on=False)
    assert nemesis.stack.calls == [("set_enabled", ("api", False), {}), ("set_enabled", ("stream", False), {}),
                                   ("set_enabled", ("api", True), {}), ("set_enabled", ("stream", True), {})]


def test_native_toxics_services_and_processes() -> None:
    nemesis = _nemesis()
    history = History()
    nemesis.attach(history, lambda: 1.0)
    nemesis.apply("db-latency", {"ms": 300}, on=True)
    nemesis.apply("db-latency", {}, on=False)
    nemesis.apply("toxic", {"link": "s3", "type": "timeout", "attributes": {"timeout": 0}}, on=True)
    nemesis.apply("toxic", {"link": "s3", "type": "timeout"}, on=False)
    nemesis.apply("stop-service", {"service": "postgres"}, on=True)
    nemesis.apply("stop-service", {"service": "postgres"}, on=False)
    nemesis.apply("redis-loss", {}, on=True)
    nemesis.apply("redis-loss", {}, on=False)
    nemesis.apply("pause-process", {"process": "dispatcher"}, on=True)
    nemesis.apply("pause-process", {"process": "dispatcher"}, on=False)
    nemesis.apply("restart-process", {"process": "publisher"}, on=True)
    assert nemesis.stack.calls == [
        ("add_toxic", ("postgres", "sortie-db-latency", "latency"), {"attributes": {"latency": 300}}),
        ("remove_toxic", ("postgres", "sortie-db-latency"), {}),
        ("add_toxic", ("s3", "sortie-timeout", "timeout"), {"stream": "downstream", "attributes": {"timeout": 0}}),
        ("remove_toxic", ("s3", "sortie-timeout"), {}),
        ("postgres.stop", (), {}), ("postgres.start", (), {}),
        ("redis.flushall", (), {}), ("redis.stop", (), {}), ("redis.start", (), {}),
        ("dispatcher-1.pause", (), {}), ("dispatcher-1.resume", (), {}),
        ("publisher.restart", (), {}),
    ]
    assert [(op.process, op.f, op.value) for op in history.ops] == [
        (NEMESIS, "pause", {"process": "dispatcher-1"}), (NEMESIS, "resume", {"process": "dispatcher-1"}),
        (NEMESIS, "restart", {"process": "publisher"}),
    ]


def test_native_db_error_fills_then_empties_the_fault_table() -> None:
    nemesis = _nemesis()
    admin: _Admin = nemesis.admin  # type: ignore[assignment]
    admin.statements.clear()
    nemesis.apply("db-error", {"tables": ["processed_event"]}, on=True)
    nemesis.apply("db-error", {"tables": ["processed_event"]}, on=False)
    assert [(re.sub(r"\s.*", "", s), p) for s, p in admin.statements] == [
        ("INSERT", {"t": "processed_event"}), ("DELETE", {"t": "processed_event"})]


def test_native_crash_faults_arm_scaled_points() -> None:
    nemesis = _nemesis()
    armed: list[Any] = []
    nemesis.stack.arm_crash_points = armed.extend
    nemesis.apply("hold-transaction", {"role": "api", "tx": "cancel", "seconds": 16.0}, on=True)
    nemesis.apply("hold-transaction", {"role": "api", "tx": "cancel", "seconds": 16.0}, on=False)
    [point] = armed
    assert (point.role, point.effect, point.action, point.seconds) == ("api", "cancel", "hold", 4.0)


def test_the_incident_readme_lists_the_registry() -> None:
    readme = (ROOT / "systems" / "copilot" / "incidents" / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z-]+)` \| (yes|-) \| (yes|-) \| (.+) \|$", readme, re.M)
    assert rows == [(f.name, "yes" if f.sim else "-", "yes" if f.native else "-", f.doc) for f in FAULTS.values()]


def test_sim_redis_loss_flushes_the_cache_and_keeps_it_down_for_the_window() -> None:
    from scenarios.sim.cache import SimCache

    world = _SimWorld()
    world.cache = SimCache(lambda: 0.0)
    world.cache.set("k", "v", 10.0)
    apply_fault(FAULTS, world, "redis-loss", {}, on=True)
    world.cache.set("k2", "v2", 10.0)  # dropped while Redis is down
    assert world.cache.get("k") is None and world.cache.get("k2") is None
    apply_fault(FAULTS, world, "redis-loss", {}, on=False)
    world.cache.set("k3", "v3", 10.0)
    assert world.cache.get("k") is None and world.cache.get("k3") == "v3"


def test_platform_capabilities_stay_as_the_steps_left_them_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capabilities are how the platform is deployed (simulator.model.PLATFORM_CAPABILITIES): a step that names one
    leaves the other as it was, and the end of a window leaves both (explore seed 1 run 727: the key lost at t=0, the
    query at t=0.6). The native half told the deployment the capability a step did not name was back."""
    import requests

    from simulator.model import PlatformFaults
    from systems.copilot.stack import CopilotApp

    steps = [({"idempotency_key": False}, True), ({"query_supported": False, "error_5xx_rate": 0.5}, True),
             ({"query_supported": False, "error_5xx_rate": 0.5}, False)]
    world = _SimWorld()
    world.platform = SimpleNamespace(faults=PlatformFaults())
    for params, on in steps:
        apply_fault(FAULTS, world, "platform", params, on=on)
    f = world.platform.faults
    assert (f.idempotency_key, f.query_supported, f.error_5xx_rate) == (False, False, 0.0)

    nemesis, told, put = _nemesis(), [], []
    nemesis.ep = SimpleNamespace(app={"platform_control_url": "http://platform"})
    nemesis.stack.app = SimpleNamespace(set_platform_capabilities=lambda _stack, key, query: told.append((key, query)))
    monkeypatch.setattr(requests, "put", lambda _url, json, timeout: put.append(json) or SimpleNamespace(
        raise_for_status=lambda: None))
    for params, on in steps:
        nemesis.apply("platform", params, on=on)
    assert told == [(False, None), (None, False)]
    assert put == [steps[0][0], steps[1][0], {"error_5xx_rate": 0.0}]
    restarted: list[dict[str, str]] = []
    stack = SimpleNamespace(restart_with_env=lambda env, names: restarted.append(env))
    CopilotApp.__new__(CopilotApp).set_platform_capabilities(stack, None, False)
    assert restarted == [{"SORTIE_PLATFORM_QUERY": "false"}]
