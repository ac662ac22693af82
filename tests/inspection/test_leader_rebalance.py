"""§4.3's rebalance (reference.inspection.leader._rebalance) on its tables alone (SQLite in memory): the giver is the
most loaded worker that may give now. On the real stack P4 once killed a worker-2 that held no slot: worker-1, ACTIVE
first, had taken every slot and given half to worker-3; worker-2, ACTIVE last, then met two workers tied at 4, and
the tie went to worker-3, whose slots had all just moved (5 minutes' cooldown), so nothing moved for 5 minutes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.inspection.config import Settings
from reference.inspection.leader import Node, _rebalance
from reference.inspection.models import ACTIVE, METADATA, MOVING, slot_lease, worker_heartbeat

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def test_of_two_equally_loaded_workers_the_one_that_may_give_gives() -> None:
    engine = create_engine("sqlite://")
    METADATA.create_all(engine)
    with Session(engine) as session, session.begin():
        tx = Tx(session, NOW, uuid.uuid4)
        tx.conn.execute(insert(worker_heartbeat), [
            {"worker_id": w, "state": ACTIVE, "last_heartbeat": NOW, "registered_at": NOW - timedelta(minutes=3),
             "moved_out_at": moved_out} for w, moved_out in (("worker-1", NOW - timedelta(seconds=70)),
                                                             ("worker-2", None), ("worker-3", None))])
        tx.conn.execute(insert(slot_lease), [
            {"slot_id": s, "owner_worker_id": "worker-1" if s < 4 else "worker-3", "lease_epoch": 1, "state": ACTIVE,
             "slot_map_version": 1, "moved_at": None if s < 4 else NOW - timedelta(seconds=30)} for s in range(8)])
        slots = list(tx.conn.execute(select(slot_lease).order_by(slot_lease.c.slot_id)))
        _rebalance(tx, Node("web-1", term=1), Settings(), dict.fromkeys(("worker-1", "worker-2", "worker-3"), ACTIVE),
                   slots)
        moving = [(r.slot_id, r.owner_worker_id, r.move_to) for r in tx.conn.execute(select(slot_lease))
                  if r.state == MOVING]
    assert moving == [(0, "worker-1", "worker-2"), (1, "worker-1", "worker-2")]
