"""J18: a worker ends each attempt by the handler timeout (at the heartbeat that reaches it) after its claim; J19: a
failure's reason in the job log is at most seed 004's 256 characters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, attempts_end_by_the_handler_timeout, failure_reasons_are_summaries

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _log(outcome_at: float, message: str = "the handler did not finish") -> list[dict[str, Any]]:
    rows = [(None, "pending", "enqueue", 0.0, ""), ("pending", "running", "w.1", 10.0, ""),
            ("running", "pending", "w.1", 10.0 + outcome_at, message)]
    return [{"id": i, "job_id": 1, "from_status": f, "to_status": t, "actor": a, "message": m, "detail": {},
             "created_at": T0 + timedelta(seconds=at)} for i, (f, t, a, at, m) in enumerate(rows)]


def _state(log: list[dict[str, Any]], kills: list[tuple[float, str]] | None = None) -> JobsState:
    return JobsState([], log, [], {}, [], [], T0, 6, t0=T0.timestamp(), kills=[] if kills is None else kills,
                     handler_timeout_s=90.0, heartbeat_s=15.0)


def test_an_attempt_ends_by_the_heartbeat_that_reaches_the_timeout() -> None:
    assert attempts_end_by_the_handler_timeout(_state(_log(90.2))).status == HELD
    verdict = attempts_end_by_the_handler_timeout(_state(_log(105.2)))
    assert verdict.status == VIOLATED and "given up at the 90 s heartbeat" in verdict.violations[0].message
    assert attempts_end_by_the_handler_timeout(_state(_log(105.2), kills=[(50.0, "w.1")])).status == HELD
    late = JobsState([], _log(105.2), [], {}, [], [], T0, 6, t0=T0.timestamp(), kills=[], handler_timeout_s=100.0,
                     heartbeat_s=15.0)
    assert attempts_end_by_the_handler_timeout(late).status == HELD  # 100 s is reached at the 105 s heartbeat
    assert attempts_end_by_the_handler_timeout(JobsState([], [], [], {}, [], [], T0, 6)).status == UNCHECKED


def test_a_stall_recorded_as_the_claims_transaction_began_excuses_a_late_outcome_as_in_j17() -> None:
    """The excuse J16 and J17 share (nightly J17-run1134: a hold on job.claim recorded 0.4 ms before the claim row's
    stamp, the row being written inside the held transaction); J18 counted a stall only from the row's stamp on."""
    assert attempts_end_by_the_handler_timeout(_state(_log(105.2), kills=[(9.9996, "w.1")])).status == HELD
    assert attempts_end_by_the_handler_timeout(_state(_log(105.2), kills=[(5.0, "w.1")])).status == VIOLATED


def test_a_reason_over_256_characters_violates() -> None:
    assert failure_reasons_are_summaries(_state(_log(5.0, "x" * 256))).status == HELD
    verdict = failure_reasons_are_summaries(_state(_log(5.0, "x" * 257)))
    assert [v.message for v in verdict.violations] == [
        "its failure's reason is 257 characters, over seed 004's 256 (log row 2)"]
