"""T5: flights fail part-way or are aborted by the platform's operator, and for a while the failures' events are lost.
Each such task ends as the platform says, FAILED, by the terminal event or by the reconciler's query. Before T5 no
flight of any scenario failed: a reference whose settle() left a failed or aborted flight's task EXECUTING passed every
scenario (mutation testing, 2026-12-05). Also I21 on a whole run: a reference that never closes its dispatch attempts
is caught (it too passed every scenario before I21)."""

from __future__ import annotations

import pytest

import reference.copilot.services.settle as settle
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

CATALOGUE = load_catalogue("copilot")
T5 = CATALOGUE["T5"]


def _violated(result: object) -> set[str]:
    return {v.invariant for v in result.verdicts if v.status == VIOLATED}  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_failed_and_aborted_flights_end_their_tasks_failed_by_event_and_by_query(seed: int) -> None:
    result = simulate(T5, seed)
    assert result.passed, (result.outcome, result.exercised, _violated(result))
    ended = {a["task_id"]: (a["action"], a["actor"]) for a in result.state.audit if a["to"] == "FAILED"}
    actions = set(ended.values())
    assert ("FLIGHT_FAILED", "platform-events") in actions and ("FLIGHT_FAILED", "reconciler") in actions
    assert ("FLIGHT_CANCELLED_EXTERNALLY", "platform-events") in actions
    flights = {str(f["reference"]): f["status"] for f in result.state.ledger}
    assert all(flights[t] in ("FAILED", "CANCELLED") for t in ended if ended[t][0].startswith("FLIGHT_"))


@pytest.mark.parametrize("action", ["FLIGHT_FAILED", "FLIGHT_CANCELLED_EXTERNALLY"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reference_that_ignores_a_bad_ending_is_caught(seed: int, action: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real = settle.transition

    def ignoring(tx, task, to, **kw):  # type: ignore[no-untyped-def]
        return task.version if kw.get("action") == action else real(tx, task, to, **kw)

    monkeypatch.setattr(settle, "transition", ignoring)
    assert "I3" in _violated(simulate(T5, seed))


@pytest.mark.parametrize("scenario", ["R2", "T3", "R13"])
def test_a_reference_that_never_closes_its_dispatch_attempts_violates_i21(
        scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "_close_attempt", lambda *args, **kw: None)
    assert "I21" in _violated(simulate(CATALOGUE[scenario], 1))
