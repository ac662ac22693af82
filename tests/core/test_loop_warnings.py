"""The Copilot's long-running loops (publisher, consumers, reconciler) carry on after a failed round, and say so: a
warning line naming the loop and the error (before, each swallowed the error without a word, so an operator could not
tell a reconciler failing every period from an idle one), at the 1st, 2nd, 4th... failure in a row, and a line when a
round succeeds again (kernel.logs.FailedRounds). Off stderr in simulation (the ``reference`` logger has a
NullHandler); the stack's processes configure logging and write them to their logs."""

from __future__ import annotations

import logging

import pytest

from kernel.logs import FailedRounds
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate

CATALOGUE = load_catalogue("copilot")


@pytest.mark.sim
def test_a_database_outage_is_a_warning_from_each_loop_it_stopped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="reference.copilot.services"):
        result = simulate(CATALOGUE["B3"], 1)
    assert result.passed, result
    said = [r for r in caplog.records if r.name.startswith("reference.copilot.services.")]
    warned = [r for r in said if r.levelno == logging.WARNING]
    loops = {r.name for r in warned}
    assert {"reference.copilot.services.outbox", "reference.copilot.services.reconcile"} <= loops, loops
    assert all("\n" not in r.getMessage() and "OperationalError" in r.getMessage() for r in warned)
    # The outage ends inside the scenario: each loop that warned says so once it has a round that works again.
    again = {r.name for r in said if r.levelno == logging.INFO and "succeeded again after" in r.getMessage()}
    assert loops <= again, (loops, again)


def test_failures_in_a_row_are_said_at_each_doubling_and_their_end_once(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.rounds")
    rounds = FailedRounds(log, "poll")
    with caplog.at_level(logging.INFO, logger="test.rounds"):
        for _ in range(100):
            rounds.failed(OSError("link down\nwith detail"))
        rounds.succeeded()
        rounds.succeeded()  # nothing to say: no failure since
        rounds.failed(OSError("again"))
    assert [r.getMessage() for r in caplog.records] == [
        *(f"poll failed ({n} in a row): OSError: link down" for n in (1, 2, 4, 8, 16, 32, 64)),
        "poll succeeded again after 100 failure(s) in a row",
        "poll failed (1 in a row): OSError: again"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 7 + [logging.INFO, logging.WARNING]
