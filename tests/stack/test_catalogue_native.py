"""The catalogue on the real stack, one test id per scenario (`pytest -m stack -k catalogue_native`).
The CLI (`sortie run --stack native`) and these tests share the runner. The default test command
deselects them (marker `catalogue`): CI runs the same catalogue once, through `sortie run --all --stack
native`, and running it twice would cost another quarter of an hour."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.verdicts import HELD, UNCHECKED

CATALOGUE = load_catalogue("copilot")

# The catalogue through pytest, by hand (`pytest -m catalogue`): nightly runs it through `sortie run --all`.
pytestmark = [pytest.mark.stack, pytest.mark.whole_stack, pytest.mark.nightly, pytest.mark.catalogue]


@pytest.fixture(scope="module")
def runner() -> Iterator[Any]:
    from stack.native import NativeStack
    from systems.copilot.stack import CopilotApp, CopilotOptions
    from systems.copilot.stack_run import STACK_POLICY, StackScenarioRunner

    stack = NativeStack(Path(tempfile.mkdtemp(prefix="sortie-catalogue-")),
                        CopilotApp(CopilotOptions(seed=1, policy=STACK_POLICY)))
    stack.start()
    try:
        yield StackScenarioRunner(stack, time_factor=0.25)
    finally:
        stack.stop()


@pytest.mark.parametrize("scenario_id", [i for i, s in CATALOGUE.items() if "native" in s.shells])
def test_catalogue_native(runner: Any, scenario_id: str) -> None:
    result = runner.run(CATALOGUE[scenario_id], 1)
    bad = [v.as_json() for v in result.verdicts if v.status not in (HELD, UNCHECKED)]
    detail = json.dumps({"exercised": result.exercised, "violations": bad, "counts": result.counts}, default=str)
    assert result.exercised is None, detail
    assert result.passed, detail
