"""Every registered defect of every system (its System.bugs) is caught in simulation where its registry entry says:
each simulated scenario the entry names reports an invariant VIOLATED, one the entry expects (a run that only
misses its fault is no catch: scenarios.selfcheck). One test per (system, bug, seed) so the pool spreads them; seed
1 in the test command, seeds 2 and 3 nightly (the test command's budget), and `sortie selfcheck` (nightly, per bug)
runs every bug against every scenario. Each system's own tests add what is particular to its registry."""

from __future__ import annotations

import json

import pytest

from scenarios.selfcheck import selfcheck_sim
from scenarios.systems import load_system, system_names

CASES = [pytest.param(system, bug, seed, id=f"{system}-{bug}-seed{seed}",
                      marks=[pytest.mark.nightly] if seed > 1 else [])
         for system in system_names() for bug in load_system(system).bugs for seed in (1, 2, 3)]


@pytest.mark.sim
@pytest.mark.parametrize("system,bug,seed", CASES)
def test_each_registered_bug_is_caught_where_its_entry_says(system: str, bug: str, seed: int) -> None:
    entry = load_system(system).bugs[bug]
    report = selfcheck_sim([bug], seed=seed, workers=1, system=system, named=True)
    verdict = report.verdicts[0]
    explain = json.dumps(verdict.as_json(), indent=2)
    assert verdict.runs, f"{system}/{bug} names no simulated scenario of its catalogue: {list(entry.scenarios)}"
    for run in verdict.runs:
        assert run.error is None, explain
        assert run.caught and not run.passed, explain
        assert set(run.violated) & set(entry.invariants), explain
