"""The native runner's choices, without a stack: a scenario says it runs natively exactly when the runner plays all of
it, the runner plays the simulation's draws (the same tasks, owners and kinds), and the processes' periods are the
simulation's scaled by the time factor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scenarios.catalogue import load_catalogue
from systems.statussync.rules import SIM_ONLY
from systems.statussync.sim import SyncDeployment, SyncSpec
from systems.statussync.stack import _plan, process_config, unsupported

CATALOGUE = load_catalogue("statussync")


@pytest.mark.parametrize("scenario_id", sorted(CATALOGUE))
def test_a_scenario_is_native_exactly_when_the_runner_plays_all_of_it(scenario_id: str) -> None:
    scenario = CATALOGUE[scenario_id]
    missing = unsupported(scenario)
    assert ("native" in scenario.shells) == (missing == []), f"{scenario_id}: shells {scenario.shells}, " \
        f"the runner lacks {missing}"


def test_the_rule_matrix_knows_which_scenarios_have_no_native_form() -> None:
    """The matrix's native column leaves out exactly the scenarios the catalogue runs in simulation only."""
    sim_only = {i for i, s in CATALOGUE.items() if "native" not in s.shells}
    assert sim_only == SIM_ONLY


def test_the_runner_plays_the_simulations_tasks() -> None:
    spec = SyncSpec(tasks=6, users=2, failing=2, reordered=1)
    plan = _plan(spec, 1, 1.0)
    deployment = SyncDeployment(spec, 1)
    assert {t["taskId"]: t["kind"] for t in plan} == deployment.kinds
    assert [t["owner"] for t in plan] == [f"u{i % 2}" for i in range(6)]
    assert all(0.0 <= t["at"] <= spec.window_s for t in plan)


def test_periods_and_windows_scale_with_the_time_factor() -> None:
    spec = SyncSpec(work_s=6.0, step_timeout_s=120.0, stale_after_s=20.0)
    slow, fast = process_config(spec, 1, 1.0), process_config(spec, 1, 0.5)
    assert fast["relay"]["lease_s"] == slow["relay"]["lease_s"] / 2
    assert fast["health"]["stale_after_s"] == slow["health"]["stale_after_s"] / 2
    assert fast["work"]["work_s"] == slow["work"]["work_s"] / 2
    assert [t["at"] / 2 for t in slow["tasks"]] == [t["at"] for t in fast["tasks"]]


def test_a_lead_user_owns_the_first_tasks_then_users_take_turns() -> None:
    spec = SyncSpec(tasks=24, users=2, lead_tasks=20)  # Y17's: u0 past the 20 detail subscriptions
    owners = [spec.owner_of(i) for i in range(spec.tasks)]
    assert owners.count("u0") == 22 and owners[20:] == ["u0", "u1", "u0", "u1"]
    with pytest.raises(ValueError):
        SyncSpec(tasks=2, lead_tasks=3)


def test_clients_spread_over_the_nodes_and_a_lost_node_must_be_one_of_two_or_more() -> None:
    from systems.statussync.faults import FAULTS, NODE_DOWN, node_of

    assert [node_of(f"client-{n}", 2) for n in range(4)] == [0, 1, 0, 1]
    fault = FAULTS[NODE_DOWN]
    fault.validate({"node": 1, "nodes": 2}, "native")
    for bad in ({"node": 2, "nodes": 2}, {"node": 0, "nodes": 1}, {"node": -1}):
        with pytest.raises(ValueError):
            fault.validate(bad, "native")


def test_a_switched_runner_starts_its_processes_with_the_new_bug_and_its_clients_have_it_alone(tmp_path: Path) -> None:
    """switch_bug (scenarios.systems.BugSwitch, the native selfcheck's one stack per run): the environment every
    process of the next scenario starts with names the new bug and not the last, and in the runner's own clients
    exactly the new one is on; closing the runner's switch leaves none on. No service is started."""
    from reference.statussync.bugs import BUGS, ENV_VAR, SEED, SEED_DEFECTS
    from systems.statussync.stack import SyncScenarioRunner, SyncStack

    first, second = list(BUGS.bugs)[:2]
    runner = SyncScenarioRunner(SyncStack(tmp_path))
    with runner.injection:
        runner.switch_bug(first)
        runner.switch_bug(second)
        assert runner.stack._common_env(None)[ENV_VAR] == second
        assert BUGS.active(second) and not BUGS.active(first)
        runner.switch_bug(SEED)
        assert set(runner.stack._common_env(None)[ENV_VAR].split(",")) == set(BUGS.parse(SEED_DEFECTS))
    assert not any(BUGS.active(b) for b in BUGS.bugs)


def test_the_native_client_loads_its_list_after_subscribing_unless_the_defect_reverses_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """§8.3 natively: the task list is loaded once the server-side subscription is up; with the defect
    snapshot-then-subscribe switched on (as `sortie selfcheck --stack native` does) it is loaded before the connection,
    as the simulated client does, and not again when the subscription comes up."""
    import asyncio

    import centrifuge

    from reference.statussync.bugs import BUGS
    from systems.statussync.native_client import NativeClient

    class Subscribed:
        channel, recovered = "task_user:t1/u0", False

    def run() -> list[str]:
        calls: list[str] = []

        class FakeClient:  # what the order needs of centrifuge.Client: connect, then the subscription's event
            def __init__(self, url: str, events: Any, **_: Any) -> None:
                self.events = events

            async def connect(self) -> None:
                calls.append("connect")
                await self.events.on_subscribed(Subscribed())

        monkeypatch.setattr(centrifuge, "Client", FakeClient)
        client = NativeClient("client-0", "t1", "u0", "http://api", "ws://ws", "bearer", 0, lambda *a: None)
        monkeypatch.setattr(client, "_get", lambda path: calls.append(f"GET {path}") or {"tasks": []})
        asyncio.run(client.connect())
        return calls

    assert run() == ["connect", "GET /api/tasks"]
    with BUGS.injected("snapshot-then-subscribe"):
        assert run() == ["GET /api/tasks", "connect"]
