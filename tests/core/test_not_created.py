"""R13: a dispatcher dies after committing DISPATCHING and before its create call reaches a platform without
idempotency keys. A redelivered TaskCreated finds the task DISPATCHING and leaves it; only the reconciler settles
it: its query by request id finds no flight, so the attempt closes NOT_CREATED and the task is dispatched anew
(reference.copilot.services.reconcile._not_created). Before R13 no catalogue scenario needed that branch: a reconciler
that left such a task alone passed every scenario (mutation testing, 2026-12-05)."""

from __future__ import annotations

from collections import Counter

import pytest

import reference.copilot.services.reconcile as reconcile
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

R13 = load_catalogue("copilot")["R13"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_create_that_never_left_is_found_missing_by_the_query_and_dispatched_once_more(seed: int) -> None:
    result = simulate(R13, seed)
    assert result.passed, (result.outcome, result.exercised)
    killed = [op for op in result.history.ops if op.f == "kill" and op.value.get("why") == "before create_flight"]
    not_created = {a["task_id"] for a in result.state.audit if a["action"] == "DISPATCH_NOT_CREATED"}
    assert killed and not_created
    # Each query that found nothing was asked for the killed attempt's own request id, and the platform made one
    # flight per such task: the one of its second attempt.
    flights = Counter(str(f["reference"]) for f in result.state.ledger)
    assert all(flights[t] == 1 for t in not_created), flights
    assert all(t["status"] == "COMPLETED" for t in result.state.tasks if t["id"] in not_created)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reconciler_that_leaves_a_never_created_dispatch_alone_is_caught(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconcile, "_not_created", lambda tx, task_id, version, attempt, policy: "moved")
    result = simulate(R13, seed)
    assert "I3" in {v.invariant for v in result.verdicts if v.status == VIOLATED}
