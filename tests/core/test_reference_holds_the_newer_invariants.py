"""The unchanged reference holds the invariants added since mutation testing (I23-I37) where they have something to
examine: each verdict is 'held' with items checked, so the tests that break the reference to see them fail
(test_unfit_for_flight, test_answers_name_real_states, test_fast_path, test_audit_coverage, test_i27_defects,
test_i28_refusal_causes, test_i29_cancel_reaches, test_i30_outbox_backoff, test_i31_dead_alerts,
test_i32_i34_consumers, test_i35_cancel_answers,
test_i36_i37_outbox_rounds, and selfcheck's bugs) start from a real pass."""

from __future__ import annotations

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD

CATALOGUE = load_catalogue("copilot")
WHERE = {"I23": ("S8", "C4"), "I24": ("R4", "C5", "B6", "R10"), "I25": ("C4", "S4"),
         "I26": ("R10", "R11", "S6", "S8"), "I27": ("R1", "B4", "C3"), "I28": ("S7", "S8"),
         "I29": ("R15", "B9", "R4"), "I30": ("B2", "C2", "R11"), "I31": ("R11",),
         "I32": ("T2",), "I33": ("B14", "T2"), "I34": ("B13",), "I35": ("C6", "B9"),
         "I36": ("B2", "C2", "R11"), "I37": ("B2", "B3", "B15")}


@pytest.mark.parametrize("invariant,scenario", [(i, s) for i, where in WHERE.items() for s in where])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_holds_it_non_vacuously(invariant: str, scenario: str, seed: int) -> None:
    verdict = next(v for v in simulate(CATALOGUE[scenario], seed).verdicts if v.invariant == invariant)
    assert verdict.status == HELD and verdict.checked > 0, verdict.as_json()
