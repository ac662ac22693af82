"""R14: a poison task, whose every dispatch kills its worker before the create is sent, is dispatched anew only after
the reconciler's query found no flight, at most Policy.max_dispatch_attempts times, then abandoned. Before R14 no
scenario reached the cap, and a reconciler that re-dispatched once more than the policy allows (`<` -> `<=`, mutation
testing of dispatch.py, 2026-12-05) passed everything; now I21 catches it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import reference.copilot.services.dispatch as dispatch
import reference.copilot.services.reconcile as reconcile
from reference.copilot.policy import Policy
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

R14 = load_catalogue("copilot")["R14"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_poison_task_uses_every_attempt_and_is_abandoned(seed: int) -> None:
    result = simulate(R14, seed)
    assert result.passed, (result.outcome, result.exercised)
    cap = Policy().max_dispatch_attempts
    abandoned = {a["task_id"] for a in result.state.audit if a["action"] == "DISPATCH_ABANDONED"}
    assert abandoned and all(t["dispatch_attempts"] == cap for t in result.state.tasks if t["id"] in abandoned)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_attempt_over_the_cap_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = dispatch.after_dispatch_failed

    def one_more(tx: Any, task_id: Any, *, policy: Policy, actor: str) -> str:
        return real(tx, task_id, actor=actor,
                    policy=dataclasses.replace(policy, max_dispatch_attempts=policy.max_dispatch_attempts + 1))

    for module in (dispatch, reconcile):  # the reconciler's NOT_CREATED path decides it too
        monkeypatch.setattr(module, "after_dispatch_failed", one_more)
    result = simulate(R14, seed)
    violated = {v.invariant: v for v in result.verdicts if v.status == VIOLATED}
    assert "I21" in violated and "more than the policy's" in violated["I21"].violations[0].message
