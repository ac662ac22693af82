"""summary.json and the report tell apart an invariant violated, a fault that did not fire, and a fault that
fired while the recovery the scenario expects was not seen."""

from __future__ import annotations

import dataclasses

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import EXPECTATION_NOT_MET, FAULT_DID_NOT_FIRE, VIOLATED, NotFired, Verdict, unexercised_kind

CATALOGUE = load_catalogue("copilot")


def test_kinds_of_reason() -> None:
    assert unexercised_kind(None) is None
    assert unexercised_kind(NotFired("no broker outage window recorded")) == FAULT_DID_NOT_FIRE
    assert unexercised_kind("no task was settled after the kill") == EXPECTATION_NOT_MET


@pytest.mark.sim
def test_a_scenario_whose_fault_never_fires_says_so() -> None:
    c6 = CATALOGUE["C6"]
    quiet = dataclasses.replace(c6, faults=tuple(f for f in c6.faults if f.fault != "hold-transaction"))
    result = simulate(quiet, 1)
    assert not result.passed
    assert result.outcome == FAULT_DID_NOT_FIRE
    summary = result.summary()
    assert summary["outcome"] == FAULT_DID_NOT_FIRE and summary["not_exercised_kind"] == FAULT_DID_NOT_FIRE
    assert "held" in summary["not_exercised_reason"]


@pytest.mark.sim
def test_a_violated_invariant_comes_first() -> None:
    result = simulate(CATALOGUE["C6"], 1, inject_bug="no-version-predicate")
    assert result.outcome == "invariant violated"
    result.verdicts = [Verdict("I4", "t", "held")]
    assert result.outcome in ("passed", FAULT_DID_NOT_FIRE, EXPECTATION_NOT_MET)
    result.verdicts.append(Verdict("I1", "t", VIOLATED))
    assert result.outcome == "invariant violated"
