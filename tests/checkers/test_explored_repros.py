"""The repro files of violations the nightly's explore found (`sortie explore --system copilot --runs 2000 --seed 1`
at 88558d3), each replayed at its run's seed in virtual time: the judged invariant must be checked and hold. All
three were the harness's, not the reference's: I46 read the platform's capabilities from one step only (run 727:
the key lost at t=0, the query at t=0.6), I40 ended a CANCEL_PENDING spell at its move out's transaction start, not
its commit (run 1451, a slow database), I38 judged a stream the run's end had closed inside its reconnect backoff
(run 1739, 0.9 s after its link came back)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scenarios.incident import load_incident
from scenarios.runner import simulate
from scenarios.verdicts import HELD

EXPLORED = Path(__file__).parent / "explored"


@pytest.mark.parametrize("path", sorted(EXPLORED.glob("*.yaml")), ids=lambda p: p.stem)
def test_an_explored_violation_holds_now(path: Path) -> None:
    found = yaml.safe_load(path.read_text())["found_by"]
    result = simulate(load_incident(path), found["run_seed"])
    verdict = next(v for v in result.verdicts if v.invariant == found["invariant"])
    assert verdict.status == HELD and verdict.checked > 0, verdict.as_json()
    assert result.passed, [v.as_json() for v in result.verdicts if v.status != HELD]
