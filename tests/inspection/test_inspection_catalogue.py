"""The inspection pipeline through the harness core: a catalogue scenario passes on the fixed reference and replays
exactly, and a registered defect fails the scenario its registry entry names with the invariant it names. (CI runs
the whole catalogue in simulation and `sortie selfcheck` every bug: docs/ci.md.)"""

from __future__ import annotations

from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate

CATALOGUE = load_catalogue("inspection")


def test_the_worker_kill_passes_and_replays_and_its_defect_is_caught() -> None:
    scenario = CATALOGUE["P4"]
    a, b = simulate(scenario, 1), simulate(scenario, 1)
    assert a.passed, (a.exercised, [(v.invariant, v.violations[:2]) for v in a.verdicts if v.status == "violated"])
    assert a.history_digest == b.history_digest
    broken = simulate(scenario, 1, inject_bug="snapshot-not-loaded")
    assert not broken.passed
    assert "V10" in {v.invariant for v in broken.verdicts if v.status == "violated"}


def test_the_catalogue_covers_seed_001_scenarios_a_to_g_and_says_why_one_does_not_run_natively() -> None:
    assert {"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8"} <= set(CATALOGUE)
    for s in CATALOGUE.values():
        assert "sim" in s.shells
        assert "native" in s.shells or s.why_not.get("native"), s.id


# What the seed-faithful variant (`--variant seed`: the seed's own defects, reference/inspection/bugs.py SEED_DEFECTS)
# breaks, per scenario (docs/systems/inspection.md tells each): SUSPECTED never reaching DEAD, a zombie's write
# landing, a slot stalled after a database outage, confirmed messages dropped from a full queue.
SEED_BREAKS = {"P4": {"V25"}, "P6": {"V23"}, "P7": {"V24"}, "P12": {"V21"}}


def test_the_seed_variant_breaks_what_its_defects_predict() -> None:
    for scenario_id, broken in sorted(SEED_BREAKS.items()):
        result = simulate(CATALOGUE[scenario_id], 1, inject_bug="seed")
        assert not result.passed, scenario_id
        assert broken <= {v.invariant for v in result.verdicts if v.status == "violated"}, scenario_id


def test_a_scenario_may_name_its_native_time_factor_and_nothing_else() -> None:
    import pytest

    from systems.inspection import NATIVE_TIME_FACTOR, SYSTEM

    SYSTEM.check_overrides("params", {NATIVE_TIME_FACTOR: 1.0})
    for bad in ({"native_time_factr": 1.0}, {NATIVE_TIME_FACTOR: 0}, {NATIVE_TIME_FACTOR: "1"}):
        with pytest.raises(ValueError):
            SYSTEM.check_overrides("params", bad)
    # the one whose purpose needs an IS cycle longer than a process's start (docs/systems/inspection.md)
    assert {s.id for s in CATALOGUE.values() if NATIVE_TIME_FACTOR in s.params} == {"P9"}
