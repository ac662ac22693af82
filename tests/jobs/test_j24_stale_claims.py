"""J24: a stopped worker's stale claims are reclaimed within stale_after_s plus two reclaim periods, and a row a stuck
transaction holds (a worker stopped before its commit) holds none of them up; the before-commit stop point that makes
such a transaction on the real stack (systems/jobs/worker.py), and the simulation's refusal of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from kernel.effects import Transact, Tx
from kernel.failpoints import CrashPoint, write_points
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs import worker
from systems.jobs.checkers import (
    RECLAIM_SLACK_S,
    JobsState,
    Stall,
    claims_beside_stuck_transactions,
    stale_claims_are_reclaimed_in_time,
    stalls_from,
)
from systems.jobs.faults import FAULTS
from systems.jobs.stack import instance_stalls

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STALE, PERIOD = 60.0, 10.0  # the deadline: a stall + 80 s
STUCK_AT = 20.0  # instance-a stops inside instance-a.1's heartbeat; instance-a.2 holds job 2


def _rows(reclaim_2: float | None, reclaim_1: float = 230.0) -> list[dict[str, Any]]:
    """Job 1: instance-a.1's (the row its stuck heartbeat locks); job 2: instance-a.2's, reclaimed at ``reclaim_2``."""
    rows = [(1, None, "pending", "enqueue", 0), (2, None, "pending", "enqueue", 0),
            (1, "pending", "running", "instance-a.1", 1), (2, "pending", "running", "instance-a.2", 2),
            (1, "running", "pending", "reclaimer", reclaim_1)]
    if reclaim_2 is not None:
        rows.append((2, "running", "pending", "reclaimer", reclaim_2))
    return [{"id": i, "job_id": j, "from_status": frm, "to_status": to, "actor": actor, "message": "", "detail": {},
             "created_at": T0 + timedelta(seconds=at)}
            for i, (j, frm, to, actor, at) in enumerate(sorted(rows, key=lambda r: r[4]))]


def _notes(resume_at: float | None = 220.0) -> list[dict[str, Any]]:
    """The stack's notes of a SIGSTOP inside instance-a.1's heartbeat transaction (and its resume)."""
    notes = [{"time": T0.timestamp() + STUCK_AT, "process": "nemesis", "f": "pause",
              "value": {"process": "instance-a.1", "seconds": 200.0, "why": "before-commit job.heartbeat"}}]
    if resume_at is not None:
        notes.append({"time": T0.timestamp() + resume_at, "process": "nemesis", "f": "resume",
                      "value": {"process": "instance-a.1", "why": "before-commit job.heartbeat"}})
    return notes


def _state(reclaim_2: float | None, stalls: list[Stall] | None = None, end: float = 400.0,
           outages: tuple[tuple[float, float | None], ...] = (), **fields: Any) -> JobsState:
    if stalls is None:
        stalls = instance_stalls(_notes(), T0.timestamp(), workers=2)
    return JobsState([], _rows(reclaim_2), [], {}, [], [], T0 + timedelta(seconds=end), 6, t0=T0.timestamp(),
                     outages=list(outages), stalls=stalls, stale_after_s=STALE, reclaim_every_s=PERIOD,
                     reclaimers=("instance-a", "instance-b"), **fields)


def test_a_stopped_instance_stalls_every_worker_and_its_reclaimer_and_only_the_stopped_thread_is_in_a_transaction(
) -> None:
    stalls = instance_stalls(_notes(), T0.timestamp(), workers=2)
    assert stalls == [Stall(STUCK_AT, "instance-a", 220.0), Stall(STUCK_AT, "instance-a.1", 220.0, True),
                      Stall(STUCK_AT, "instance-a.2", 220.0)]
    assert claims_beside_stuck_transactions(_state(70.0)) == [("instance-a.2", 2)]
    assert [s.until for s in instance_stalls(_notes(resume_at=None), T0.timestamp(), 2)] == [None] * 3


def test_the_other_claims_of_a_stuck_instance_are_reclaimed_within_the_threshold_and_two_periods() -> None:
    held = stale_claims_are_reclaimed_in_time(_state(70.0))  # stale by 80 at the latest, reclaimed at 70
    assert held.status == HELD and held.checked == 1  # job 1, the locked row, is not judged: taken back at 230
    late = stale_claims_are_reclaimed_in_time(_state(221.0))  # what the seed's reclaim does: waits on job 1's lock
    assert late.status == VIOLATED and [v.task_id for v in late.violations] == ["2"]
    assert "ended 201.0 s after: past stale_after_s 60 + 2 reclaim periods (80 s)" in late.violations[0].message
    assert stale_claims_are_reclaimed_in_time(_state(STUCK_AT + 80.0)).status == HELD  # the bound itself
    # a round's own transaction and a loaded machine's scheduling: RECLAIM_SLACK_S past the bound, and no more
    assert stale_claims_are_reclaimed_in_time(_state(STUCK_AT + 80.0 + RECLAIM_SLACK_S)).status == HELD
    assert stale_claims_are_reclaimed_in_time(_state(STUCK_AT + 80.5 + RECLAIM_SLACK_S)).status == VIOLATED
    assert stale_claims_are_reclaimed_in_time(_state(None)).status == VIOLATED  # never


def test_what_excuses_a_late_reclaim() -> None:
    woke = instance_stalls(_notes(resume_at=90.0), T0.timestamp(), 2)  # awake before the deadline: it renews itself
    assert stale_claims_are_reclaimed_in_time(_state(221.0, woke)).checked == 0
    assert stale_claims_are_reclaimed_in_time(_state(221.0, outages=((50.0, 60.0),))).checked == 0  # database cut
    both = [*instance_stalls(_notes(), T0.timestamp(), 2), Stall(60.0, "instance-b", None)]  # no reclaimer ran
    assert stale_claims_are_reclaimed_in_time(_state(221.0, both)).checked == 0
    drained = [{"process": "instance-b.1", "at": 30.0, "until": 40.0}]  # the stack drains the whole instance
    assert stale_claims_are_reclaimed_in_time(_state(221.0, drains=drained)).checked == 0
    assert stale_claims_are_reclaimed_in_time(_state(221.0, end=90.0)).checked == 0  # the run ended first
    assert stale_claims_are_reclaimed_in_time(_state(221.0, drains=[{**drained[0], "at": 150.0}])).status == VIOLATED
    unrecorded = _state(221.0)
    unrecorded.stalls = None
    assert stale_claims_are_reclaimed_in_time(unrecorded).status == UNCHECKED


def test_the_simulations_stalls_kill_pause_and_hold() -> None:
    events = [(1.0, "kill", {"process": "w.1"}), (2.0, "pause", {"process": "w.2", "why": "after execute"}),
              (3.0, "hold", {"process": "w.3", "seconds": 5.0}), (9.0, "resume", {"process": "w.2"})]
    assert stalls_from(events) == [Stall(1.0, "w.1", None), Stall(2.0, "w.2", 9.0), Stall(3.0, "w.3", 8.0)]


def test_a_before_commit_point_is_the_real_stacks_only() -> None:
    params = {"role": "instance-a", "effect": "job.heartbeat", "when": "before-commit", "action": "stop",
              "seconds": 20.0}
    FAULTS["crash-point"].validate(params, "native")
    with pytest.raises(ValueError, match="the simulation's write lock covers the whole database"):
        FAULTS["crash-point"].validate(params, "sim")
    with pytest.raises(ValueError, match="a hold happens before a transaction.s first write"):
        CrashPoint("instance-a", "job.heartbeat", "before-commit", "hold", seconds=1.0)


def test_an_instance_stopped_before_the_commit_has_written_its_rows_and_not_committed_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool instance's before-commit point fires inside the transaction, after its statements: what the stopped
    instance wrote is not visible to others (on PostgreSQL its rows are locked) until it runs again and commits."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with create_engine(url).begin() as conn:
        conn.execute(text("CREATE TABLE job (id INTEGER PRIMARY KEY, claimed_at TEXT)"))
        conn.execute(text("INSERT INTO job VALUES (1, 'then')"))
    failpoints = tmp_path / "failpoints.json"
    write_points(str(failpoints), [CrashPoint("instance-a", "job.heartbeat", "before-commit", "stop", seconds=9.0)])
    seen: list[tuple[str, str]] = []
    other = create_engine(url)

    def stopped(action: str) -> None:  # what another connection sees while the instance is stopped
        with other.connect() as conn:
            seen.append((action, conn.execute(text("SELECT claimed_at FROM job")).scalar_one()))

    monkeypatch.setattr(worker, "crash_this_process", stopped)
    monkeypatch.setattr(worker.subprocess, "Popen", lambda *a, **k: None)  # no helper to send SIGCONT
    instance = worker.Instance("instance-a", url, "http://127.0.0.1:9", str(failpoints))

    def renew(tx: Tx) -> bool:
        tx.conn.execute(text("UPDATE job SET claimed_at = 'now' WHERE id = 1"))
        return True

    assert instance.perform(Transact(renew, "job.heartbeat")) is True
    assert seen == [("stop", "then")]  # stopped after its write, before its commit
    with other.connect() as conn:
        assert conn.execute(text("SELECT claimed_at FROM job")).scalar_one() == "now"  # committed once it ran on
    assert instance.perform(Transact(renew, "job.heartbeat")) and len(seen) == 1  # the point fired once
    instance.engine.dispose()
    other.dispose()
