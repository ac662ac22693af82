"""A worker transition is logged from the state the row has when the write takes it (reference.inspection.worker._log,
reference.inspection.leader._log_worker): on the real stack P15 once had a restarted worker read SUSPECTED, the
leader then mark it DEAD, and the worker log SUSPECTED -> REGISTERED over the DEAD (V25: the log no longer a path of
the state machine). Each side's stale read, replayed on SQLite in memory."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.inspection.leader import _log_worker
from reference.inspection.models import DEAD, METADATA, REGISTERED, SUSPECTED, worker_heartbeat, worker_log
from reference.inspection.worker import _log

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _row(state: str) -> tuple[Session, Tx]:
    engine = create_engine("sqlite://")
    METADATA.create_all(engine)
    session = Session(engine)
    session.begin()
    tx = Tx(session, NOW, uuid.uuid4)
    tx.conn.execute(insert(worker_heartbeat).values(worker_id="worker-2", state=state, last_heartbeat=NOW,
                                                    registered_at=NOW))
    return session, tx


def _logged(tx: Tx) -> list[tuple[str | None, str]]:
    return [(r.from_state, r.to_state) for r in tx.conn.execute(select(worker_log))]


def test_a_worker_registering_over_a_death_it_did_not_see_logs_it_from_dead() -> None:
    session, tx = _row(DEAD)  # the worker read SUSPECTED; the leader has marked it DEAD since
    with session:
        _log(tx, "worker-2", SUSPECTED, REGISTERED)
        assert _logged(tx) == [(DEAD, REGISTERED)]


def test_the_leader_does_not_mark_dead_a_worker_that_registered_since_it_read_it() -> None:
    session, tx = _row(REGISTERED)  # the tick read SUSPECTED; the restarted worker has registered since
    with session:
        assert _log_worker(tx, "worker-2", SUSPECTED, DEAD, 31.0, "web-1") == REGISTERED
        assert _logged(tx) == []
        assert tx.conn.execute(select(worker_heartbeat.c.state)).scalar_one() == REGISTERED
