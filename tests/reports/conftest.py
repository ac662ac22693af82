"""A small simulated run directory, written exactly as `sortie simulate` writes it, shared by the report tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.results import write_junit, write_summary
from reports.states import write_task_states
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate

CATALOGUE = load_catalogue("copilot")

# C4: many concurrent confirms, no fault window; R1: a platform fault (accept, then time out).
SCENARIOS = ("C4", "R1")


def write_run(out: Path, ids: tuple[str, ...] = SCENARIOS, seed: int = 1) -> list:  # type: ignore[type-arg]
    (out / "histories").mkdir(parents=True, exist_ok=True)
    results = []
    for sid in ids:
        result = simulate(CATALOGUE[sid], seed)
        result.history.write_jsonl(out / "histories" / f"{sid}.jsonl")
        write_task_states(out, result)
        results.append(result)
    write_summary(out, results, {"shell": "sim", "seed": seed})
    write_junit(out, results, "sim")
    return results


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("sim-run")
    return out, write_run(out)
