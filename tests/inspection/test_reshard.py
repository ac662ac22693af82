"""Resharding's rules (seed 001 §3.4, §4.5; reference/inspection/reshard.py) on the tables alone (SQLite in memory):
the operator's reshard grows TOTAL_SLOTS or writes nothing; an IS node routes a message by the map in force when it
was collected; and the fenced UPSERT's handover moves a device with its first message on the new route, whatever
order the old slot's and the new slot's batches come in, refusing only what a newer message superseded. The seed's
clock-driven switch (bug reshard-switch-by-clock) refuses a newer message: shown on one order."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.inspection.bugs import BUGS
from reference.inspection.ingest import commit_batch
from reference.inspection.models import (
    ACTIVE,
    FREE,
    METADATA,
    device_status_current,
    slot_audit,
    slot_lease,
    slot_map_version,
)
from reference.inspection.probe import Device, Versions, routed
from reference.inspection.reshard import SlotMap, in_force, read_maps, reshard, slot_of, switch_by_clock

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
DEVICE = "dev_00000002"
OLD, NEW = slot_of(DEVICE, 4), slot_of(DEVICE, 6)  # the device's slot under map 1 (4 slots) and under map 2 (6)


ENGINE = create_engine("sqlite://")  # one in-memory database: each test's rows roll back with its transaction
METADATA.create_all(ENGINE)


@contextmanager
def _tables(total_slots: int = 4, at: datetime = NOW) -> Iterator[Tx]:
    with Session(ENGINE) as session:
        session.begin()
        tx = Tx(session, at, uuid.uuid4)
        tx.conn.execute(insert(slot_map_version).values(version=1, effective_at=at - timedelta(hours=1),
                                                        total_slots=total_slots))
        tx.conn.execute(insert(slot_lease), [{"slot_id": s, "owner_worker_id": None, "lease_epoch": 0, "state": FREE,
                                              "slot_map_version": 1} for s in range(total_slots)])
        try:
            yield tx
        finally:
            session.rollback()


def test_the_device_moves_between_the_slots_these_tests_use() -> None:
    assert OLD != NEW


def test_a_reshard_writes_the_new_map_and_the_new_slots_free() -> None:
    with _tables() as tx:
        new = reshard(tx, 6, notice_s=300.0, grace_s=300.0)
        assert (new.version, new.total_slots, new.effective_at) == (2, 6, NOW + timedelta(seconds=300))
        leases = {r.slot_id: (r.state, r.slot_map_version) for r in tx.conn.execute(select(slot_lease))}
        assert leases == {s: ("FREE", 2) for s in range(6)}
        assert [(r.slot_id, r.why) for r in tx.conn.execute(select(slot_audit))] == [(4, "resharded"),
                                                                                     (5, "resharded")]
        assert [m.version for m in read_maps(tx.conn)] == [1, 2]


@pytest.mark.parametrize(("total", "first"), [(4, None), (3, None), (8, 6)], ids=["same", "fewer", "pending"])
def test_a_reshard_that_does_not_grow_or_comes_too_soon_writes_nothing(total: int, first: int | None) -> None:
    with _tables() as tx:
        if first is not None:
            reshard(tx, first, notice_s=300.0, grace_s=300.0)
        before = len(read_maps(tx.conn))
        with pytest.raises(ValueError, match="only grows|one reshard at a time"):
            reshard(tx, total, notice_s=300.0, grace_s=300.0)
        assert len(read_maps(tx.conn)) == before


MAPS = (SlotMap(1, NOW - timedelta(hours=1), 4), SlotMap(2, NOW, 6))


@given(st.integers(0, 10_000), st.integers(-600_000, 600_000))
def test_an_is_node_routes_by_the_map_in_force_when_it_collected(device: int, offset_ms: int) -> None:
    at = NOW + timedelta(milliseconds=offset_ms)
    d, v = routed(Device(f"dev_{device:08d}", slot_of(f"dev_{device:08d}", 4), 2), Versions(), in_force(MAPS, at))
    total = 6 if offset_ms >= 0 else 4
    assert (d.slot, v.slot_map_version) == (slot_of(d.device_id, total), 2 if offset_ms >= 0 else 1)


def _message(cycle: int, seq: int, version: int) -> dict[str, Any]:
    return {"message_id": f"probe-1:{cycle}:{DEVICE}:{seq}", "device_id": DEVICE, "cycle_id": cycle, "seq": seq,
            "slot_id": OLD if version == 1 else NEW, "slot_map_version": version,
            "collected_at": (NOW + timedelta(seconds=10 * cycle)).isoformat(),
            "payload": {"status": "UP", "alert": None}}


def _owned(tx: Tx) -> None:
    """The old slot worker-1's, the new one worker-2's, both ACTIVE at epoch 1 (the new map already written)."""
    reshard(tx, 6, notice_s=0.0, grace_s=0.0)
    for slot, worker in ((OLD, "worker-1"), (NEW, "worker-2")):
        tx.conn.execute(slot_lease.update().where(slot_lease.c.slot_id == slot)
                        .values(owner_worker_id=worker, lease_epoch=1, state=ACTIVE))


def _deliver(tx: Tx, m: dict[str, Any]) -> bool:
    """One message in a batch of its own, on the slot its route names, by that slot's owner: applied or not."""
    worker = "worker-1" if m["slot_id"] == OLD else "worker-2"
    return bool(commit_batch(tx, worker, int(m["slot_id"]), 1, [m], {}).applied)


def _row(tx: Tx) -> Any:
    return tx.conn.execute(select(device_status_current)).one()


# A device's messages: some on the old route, then the rest on the new one (its seq only grows, INV-5)
ROUTES = st.tuples(st.integers(1, 4), st.integers(1, 4)).flatmap(
    lambda n: st.permutations([_message(i, i, 1) for i in range(1, n[0] + 1)]
                              + [_message(i, i, 2) for i in range(n[0] + 1, n[0] + n[1] + 1)]))


@settings(max_examples=40, deadline=None)
@given(ROUTES)
def test_the_handover_refuses_only_what_a_newer_message_superseded(order: list[dict[str, Any]]) -> None:
    """Whatever order the two slots' batches commit in: a message is applied exactly when it is newer than every one
    applied before it, and the row ends on the newest message's slot and map version."""
    with _tables() as tx:
        _owned(tx)
        newest: tuple[int, int] | None = None
        for m in order:
            key = (m["cycle_id"], m["seq"])
            assert _deliver(tx, m) == (newest is None or key > newest), (key, newest)
            newest = max(key, newest or key)
        last = max(order, key=lambda m: m["seq"])
        row = _row(tx)
        assert (row.seq, row.current_slot, row.slot_map_version) == (last["seq"], last["slot_id"], 2)


def test_an_old_route_message_after_the_move_is_superseded_not_applied() -> None:
    with _tables() as tx:
        _owned(tx)
        assert _deliver(tx, _message(2, 2, 2))  # the new route's first message moves the device
        assert not _deliver(tx, _message(1, 1, 1))  # the old slot's redelivery, older: superseded
        assert (_row(tx).current_slot, _row(tx).seq) == (NEW, 2)


def test_the_seeds_clock_switch_refuses_the_new_routes_first_message() -> None:
    """Bug reshard-switch-by-clock: before the leader's UPDATE, the UPSERT writes only from current_slot, so the new
    route's message, newer than the row, is refused (a lost update); the fixed UPSERT applies it."""
    for bug, applied in ((None, True), ("reshard-switch-by-clock", False)):
        with BUGS.injected(bug), _tables() as tx:
            _owned(tx)
            assert _deliver(tx, _message(1, 1, 1))
            assert _deliver(tx, _message(2, 2, 2)) == applied


def test_the_seeds_clock_switch_moves_rows_outside_the_template() -> None:
    with _tables() as tx:
        _owned(tx)
        assert _deliver(tx, _message(1, 1, 1))
        assert switch_by_clock(tx) == 1
        assert (_row(tx).current_slot, _row(tx).slot_map_version) == (NEW, 1)  # moved, by no message
