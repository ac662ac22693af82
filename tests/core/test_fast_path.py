"""I25 on whole runs: the reconciler, the safety net of seed 000 §7.2, heals a broken fast path so well that every
other invariant held. Two hand-made defects of the dispatchers' consumer, of the kind mutation testing found surviving
(2026-12-05): a first delivery of TaskCreated taken for a duplicate (the tasks wait in CREATED until the reconciler
queues them), and a TaskCreated that queues its task but never dispatches it (the reconciler dispatches it a minute
later). Before I25 they violated no invariant anywhere (only some scenarios' expectations went unmet); now I25 catches
both in the scenarios where some tasks meet no fault."""

from __future__ import annotations

from typing import Any

import pytest

import reference.copilot.services.consumer as consumer
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

CATALOGUE = load_catalogue("copilot")


def _violated(result: Any) -> set[str]:
    return {v.invariant for v in result.verdicts if v.status == VIOLATED}


@pytest.mark.parametrize("scenario", ["C4", "S4"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_consumer_that_takes_first_deliveries_for_duplicates_violates_i25(
        scenario: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = consumer.mark_processed
    monkeypatch.setattr(consumer, "mark_processed", lambda tx, group, msg: not real(tx, group, msg))
    result = simulate(CATALOGUE[scenario], seed)
    assert _violated(result) == {"I25"}, (_violated(result), result.outcome)


@pytest.mark.parametrize("scenario", ["C4", "S4"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_consumer_that_queues_but_never_dispatches_violates_i25(
        scenario: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = consumer._accept_created

    def queue_only(tx: Any, msg: Any) -> bool:
        real(tx, msg)
        return False

    monkeypatch.setattr(consumer, "_accept_created", queue_only)
    result = simulate(CATALOGUE[scenario], seed)
    assert _violated(result) == {"I25"}, (_violated(result), result.outcome)
