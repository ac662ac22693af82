"""I24 on whole runs: an answer that names a state the task never had is caught. A cancel answered with the version of
the EXECUTING it replaced was green in every scenario before I24 (nothing compared an answer's version with the
task's history); now it violates I24 wherever a flying task is cancelled."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reference.copilot import api
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

CATALOGUE = load_catalogue("copilot")


@pytest.mark.parametrize("scenario", ["R4", "C5"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_cancel_answered_with_the_version_it_replaced_violates_i24(
        scenario: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = api.request_cancel

    def stale(tx: Any, task_id: str, user_id: str) -> Any:
        answer = real(tx, task_id, user_id)
        return dataclasses.replace(answer, version=answer.version - 1) if answer.status == "CANCEL_PENDING" \
            else answer

    monkeypatch.setattr(api, "request_cancel", stale)
    result = simulate(CATALOGUE[scenario], seed)
    assert "I24" in {v.invariant for v in result.verdicts if v.status == VIOLATED}
