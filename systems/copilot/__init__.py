"""The drone Copilot's task/dispatch backend (seed 000), the default system under test: its reference is
reference/copilot/, its catalogue catalogue/*.yaml, its invariants I1-I37 (systems.copilot.checkers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# The faults: imported with the system, which registers them (chaos.faults.registry("copilot")).
import systems.copilot.faults  # noqa: F401
from reference.copilot import bugs
from reference.copilot.settings import policy_with
from scenarios.systems import CapacitySpec, System
from systems.copilot.checkers import INVARIANTS
from systems.copilot.expectations import EXPECTATIONS
from systems.copilot.explore import EXPLORE
from systems.copilot.fuzz import FUZZ
from systems.copilot.rules import RULES

# Imported with the system, not at its first run: the reference's workers declare coverage targets when imported
# (reference.copilot.coverage), and explore reports every target of the system.
from systems.copilot.sim import CopilotDeployment
from systems.copilot.workload import WorkloadSpec


def _deploy(scenario: Any, seed: int, **overrides: Any) -> Any:
    return CopilotDeployment(scenario, seed, **overrides)


def _check_overrides(which: str, value: dict[str, Any]) -> None:
    if which == "policy":
        policy_with(value)  # ValueError on an unknown field or a malformed value
    elif value:
        raise ValueError(f"the copilot takes no params; given {', '.join(sorted(value))}")


def _stack_runner(req: Any) -> Any:
    from systems.copilot.stack import stack_runner

    return stack_runner(req)


def _stack(req: Any) -> Any:
    from systems.copilot.stack import stack_for

    return stack_for(req)


def _commands() -> Any:
    from systems.copilot.operator import commands

    return commands()


def _bench(profile: str, hours: float, seed: int, profile_code: bool) -> Any:
    from systems.copilot.bench import run_profile
    from systems.copilot.workload import resolve_profile

    return run_profile(resolve_profile(profile)[0], hours=hours, seed=seed, profile_code=profile_code)


def _load(opts: Any, console: Any) -> int:
    from systems.copilot.capacity_report import write_capacity
    from systems.copilot.load import main as run_load

    return run_load(dataclasses.replace(opts, report=write_capacity), console)


def _write_capacity(run_dir: Path, **kw: Any) -> Path:
    from systems.copilot.capacity_report import write_capacity

    return write_capacity(run_dir, **kw)


def _load_parity(measured_dir: Path, calibrate_dir: Path | None, **kw: Any) -> dict[str, Any]:
    from systems.copilot.capacity_report import load_parity

    return load_parity(measured_dir, calibrate_dir, **kw)


SYSTEM = System(
    name="copilot", title="the drone Copilot's task/dispatch backend (seed 000)",
    catalogue_dir=Path(__file__).resolve().parent / "catalogue", catalogue_order="CRTBS",
    workload_type=WorkloadSpec, invariants=INVARIANTS, expectations=EXPECTATIONS, deploy=_deploy,
    injected=bugs.injected, bug_names=lambda: tuple(bugs.BUGS), bugs=bugs.BUGS, check_overrides=_check_overrides,
    explore=EXPLORE,
    stack_runner=_stack_runner, load=_load, bench=_bench, stack=_stack, commands=_commands, rules=RULES,
    capacity=CapacitySpec(write_report=_write_capacity, load_parity=_load_parity),
    # B9 holds the dispatcher's transaction and cuts the platform's and the webhooks' links (Toxiproxy) under cancels;
    # B15 stops the publisher at two crash points (SIGSTOP) and cuts the broker's link mid-batch. T2 (PostgreSQL's
    # db-error trigger, a RocketMQ dead letter re-driven) is nightly: tests/postgres/test_fault_trigger.py and
    # tests/stack/test_rocketmq.py cover its two real-server mechanisms in the test command.
    ci_stack_scenarios=("B9", "B15"),
    # Nightly runs its whole native catalogue once, at the documented windows; CI's B9 and B15 run it scaled (0.25).
    nightly_time_factor=1.0,
    fuzz=FUZZ,
)
