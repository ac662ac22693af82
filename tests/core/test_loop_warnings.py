"""The Copilot's long-running loops (publisher, consumers, reconciler) carry on after a failed round, and say so: one
warning line per failed round, naming the loop and the error (before, each swallowed the error without a word, so an
operator could not tell a reconciler failing every period from an idle one). Off stderr in simulation (the
``reference`` logger has a NullHandler); the stack's processes configure logging and write them to their logs."""

from __future__ import annotations

import logging

import pytest

from scenarios.catalogue import CATALOGUE
from scenarios.runner import simulate


@pytest.mark.sim
def test_a_database_outage_is_a_warning_from_each_loop_it_stopped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reference.services"):
        result = simulate(CATALOGUE["B3"], 1)
    assert result.passed, result
    said = [r for r in caplog.records if r.name.startswith("reference.services.")]
    loops = {r.name for r in said}
    assert {"reference.services.outbox", "reference.services.reconcile"} <= loops, loops
    assert all("\n" not in r.getMessage() and "OperationalError" in r.getMessage() for r in said)
