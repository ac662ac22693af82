"""What CI runs of each system on its real stack (scripts/stack.sh reads System.ci_stack_scenarios): the budget is
at most three scenarios a system (docs/ci.md), each a scenario of its own catalogue that its real stack runs."""

from __future__ import annotations

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.systems import load_system, system_names


@pytest.mark.parametrize("name", system_names())
def test_ci_stack_scenarios_are_at_most_three_of_the_catalogue(name: str) -> None:
    system = load_system(name)
    chosen = system.ci_stack_scenarios
    if system.stack_runner is None:
        assert chosen == (), f"{name} has no real stack but names CI stack scenarios {chosen}"
        return
    assert 1 <= len(chosen) <= 3, f"{name}: {len(chosen)} CI stack scenarios; the budget is one to three"
    catalogue = load_catalogue(name)
    assert [s for s in chosen if s not in catalogue] == []
    assert len(set(chosen)) == len(chosen)
    assert [s for s in chosen if "native" not in catalogue[s].shells] == [], f"{name}: not runnable on its real stack"
