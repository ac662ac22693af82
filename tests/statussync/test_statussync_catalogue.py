"""The status sync through the harness core: a catalogue scenario replays exactly (the CI step
`sortie simulate --system statussync --all` runs the whole catalogue), and the seed variant breaks what its
defects predict (each registered bug: tests/core/test_every_bug_is_caught.py)."""

from __future__ import annotations

import pytest

from reference.statussync.bugs import BUGS
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate

CATALOGUE = load_catalogue("statussync")


def test_a_scenario_passes_and_replays_exactly() -> None:
    a, b = simulate(CATALOGUE["Y1"], 1), simulate(CATALOGUE["Y1"], 1)
    assert a.passed, [(v.invariant, v.violations[:2]) for v in a.verdicts if v.status == "violated"]
    assert a.history_digest == b.history_digest
    assert {v.invariant for v in a.verdicts} == set(CATALOGUE["Y1"].invariants)


def test_every_scenario_simulates_and_one_not_native_says_why() -> None:
    assert len(CATALOGUE) >= 20 and len(BUGS.bugs) >= 10
    for scenario in CATALOGUE.values():
        assert "sim" in scenario.shells, scenario.id
        assert "native" in scenario.shells or scenario.why_not.get("native"), scenario.id


# What the seed-faithful variant (--variant seed: the seed's own defects on together) breaks, per scenario.
SEED_BREAKS = {"Y7": {"S4"}, "Y9": {"S7"}}


@pytest.mark.parametrize(("scenario_id", "broken"), sorted(SEED_BREAKS.items()))
def test_the_seed_variant_breaks_what_its_defects_predict(scenario_id: str, broken: set[str]) -> None:
    result = simulate(CATALOGUE[scenario_id], 1, inject_bug="seed")
    assert broken <= {v.invariant for v in result.verdicts if v.status == "violated"}
