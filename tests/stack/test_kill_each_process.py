"""SIGKILL of each kind of reference process in the middle of a workload, then the supervisor starts it
again: no task is lost, no flight is duplicated, every invariant holds (one test per process kind). The
same runner and checkers as `sortie run`; the fault is the catalogue's `kill-worker` aimed at one kind."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.scenario import FaultStep
from scenarios.verdicts import HELD, UNCHECKED

CATALOGUE = load_catalogue("copilot")

# Starts a whole native stack and is too slow for CI's budget: scripts/nightly.sh runs it (docs/ci.md).
pytestmark = [pytest.mark.stack, pytest.mark.whole_stack, pytest.mark.nightly]
KINDS = ("api", "publisher", "dispatcher", "report-worker", "reconciler")


@pytest.fixture(scope="module")
def runner() -> Iterator[Any]:
    from stack.native import NativeStack
    from systems.copilot.stack import CopilotApp, CopilotOptions
    from systems.copilot.stack_run import STACK_POLICY, StackScenarioRunner

    stack = NativeStack(Path(tempfile.mkdtemp(prefix="sortie-kill-")),
                        CopilotApp(CopilotOptions(seed=1, policy=STACK_POLICY)))
    stack.start()
    try:
        yield StackScenarioRunner(stack, time_factor=0.25)
    finally:
        stack.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_and_restart_lose_nothing_and_duplicate_nothing(runner: Any, kind: str) -> None:
    base = CATALOGUE["B4"]
    scenario = dataclasses.replace(
        base, id=f"B4-{kind}", workload=dataclasses.replace(base.workload, confirms=20, window_s=80.0),
        # kills come every_s after the killed process serves again: three fit in the window while a restart takes
        # up to 50 scenario seconds (12.5 s of wall time)
        faults=(FaultStep(8.0, "kill-worker", 150.0, {"roles": [kind], "every_s": 25.0}),),
        exercised=lambda h, s: None)
    result = runner.run(scenario, 1)
    kills = [op.value["process"] for op in result.history.ops if op.f == "kill"]
    restarted = {name: n for name, n in runner.stack.restarts.items() if name.startswith(kind)}
    detail = json.dumps({"kills": kills, "restarts": restarted, "counts": result.counts,
                         "violations": [v.as_json() for v in result.verdicts if v.status not in (HELD, UNCHECKED)]},
                        default=str)
    assert len(kills) >= 3 and all(k.startswith(kind) for k in kills), detail
    assert restarted, detail
    assert result.passed, detail
    assert result.counts["tasks"] >= 15, detail  # the users' confirms became tasks despite the kills
    settled = {k: v for k, v in result.counts.items() if k in ("COMPLETED", "CANCELLED", "FAILED", "MANUAL_REVIEW")}
    assert sum(settled.values()) == result.counts["tasks"], detail
    flights_per_task = result.counts["flights"] / max(1, result.counts["tasks"])
    assert flights_per_task <= 1.0, detail
