"""Resharding (seed 001 §3.4, §4.5): a new device -> slot map (``slot_map_version`` N+1, TOTAL_SLOTS grown), and how
a device's writes move from its old slot to its new one while messages go on arriving on both.

The fixed protocol:

1. The operator's reshard (the web tier, ``reshard``): the new slots' queues are declared first (the shell), then one
   transaction writes map version N+1 with ``effective_at`` = now + the notice (§3.4: 5 minutes), the new slots'
   lease rows (FREE: the leader assigns them before the map takes effect) and every slot's ``slot_map_version``.
2. An IS node pulls the maps every cycle (``SlotMaps``, the web tier's read-only API, INV-1/INV-2: versions, never
   epochs) and routes each message by the map in force when it was collected (``route``): N before
   ``effective_at``, N+1 from then on. The route is fixed in the outbox row, so a replay goes where the first
   publish went. A device has one IS node and its (cycle_id, seq) grows (INV-5), so every message of a device on
   route N is older than every one on route N+1.
3. The handover is the device's own: the fenced UPSERT (reference.inspection.ingest) writes a device from the slot
   its row is on, or from a newer route (the row moves to that slot and version, under the batch's lease, in the
   same statement); never from an older route. So the first message of a device on the new route moves it, and
   whatever the old slot still holds of it (its queue's backlog, a killed worker's redeliveries, an IS node's late
   replay) is either newer than the row, and applied there, or older, and superseded. No clock decides, no message
   is refused while it is newer than the row, and one slot's owner writes a device at a time (the device's row
   lock on PostgreSQL: ingest reads the rows FOR UPDATE).

The seed's protocol (registered defects, docs/systems/inspection.md): the leader switches every remapped device's
``current_slot`` at ``effective_at`` by an UPDATE outside the template (bug ``reshard-switch-by-clock``), and the
workers drop any message of version N after the grace window (bug ``reshard-grace-drop``)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select, update

from kernel.effects import Tx
from reference.inspection.models import FREE, aware, device_status_current, slot_audit, slot_lease, slot_map_version


@dataclass(frozen=True)
class SlotMap:
    """One device -> slot map: its version, when IS nodes route by it, TOTAL_SLOTS under it."""

    version: int
    effective_at: datetime
    total_slots: int
    grace_until: datetime | None = None  # the seed's T0 + 10 min (read only by bug reshard-grace-drop)

    def slot_of(self, device_id: str) -> int:
        return slot_of(device_id, self.total_slots)


def slot_of(device_id: str, total_slots: int) -> int:
    """A map's device -> slot function: a stable hash modulo TOTAL_SLOTS."""
    return zlib.crc32(device_id.encode()) % total_slots


def in_force(maps: tuple[SlotMap, ...], at: datetime) -> SlotMap | None:
    """The newest map whose effective_at is not after ``at`` (None: no map known yet)."""
    live = [m for m in maps if aware(m.effective_at) <= at]
    return max(live, key=lambda m: m.version) if live else None


def read_maps(conn: Any) -> tuple[SlotMap, ...]:
    """Every map version, oldest first (``conn``: a connection or session; the IS role may read this table)."""
    return tuple(SlotMap(int(r.version), aware(r.effective_at), int(r.total_slots),
                         aware(r.grace_until) if r.grace_until is not None else None)
                 for r in conn.execute(select(slot_map_version).order_by(slot_map_version.c.version)))


def reshard(tx: Tx, total_slots: int, notice_s: float, grace_s: float) -> SlotMap:
    """§3.4's reshard, the operator's: map version N+1 with TOTAL_SLOTS ``total_slots``, effective ``notice_s`` from
    now, the new slots FREE under it. ValueError (nothing written) when TOTAL_SLOTS does not grow (a slot taken away
    would strand what its queues hold) or the previous reshard has not taken effect yet (one at a time)."""
    maps = read_maps(tx.conn)
    latest = max(maps, key=lambda m: m.version)
    if total_slots <= latest.total_slots:
        raise ValueError(f"TOTAL_SLOTS only grows: {total_slots} after {latest.total_slots}")
    if latest.effective_at > tx.now:
        raise ValueError(f"map version {latest.version} takes effect at {latest.effective_at.isoformat()}: "
                         "one reshard at a time")
    if notice_s < 0 or grace_s < 0:
        raise ValueError("the notice and the grace window are not negative")
    new = SlotMap(latest.version + 1, tx.now + timedelta(seconds=notice_s), total_slots,
                  tx.now + timedelta(seconds=notice_s + grace_s))
    tx.conn.execute(insert(slot_map_version).values(version=new.version, effective_at=new.effective_at,
                                                    total_slots=total_slots, grace_until=new.grace_until))
    tx.conn.execute(update(slot_lease).values(slot_map_version=new.version))
    tx.conn.execute(insert(slot_lease), [{"slot_id": s, "owner_worker_id": None, "lease_epoch": 0, "state": FREE,
                                          "slot_map_version": new.version, "weight": 1, "state_since": tx.now}
                                         for s in range(latest.total_slots, total_slots)])
    tx.conn.execute(insert(slot_audit), [{"kind": "lease", "slot_id": s, "lease_epoch": 0, "owner_worker_id": None,
                                          "state": FREE, "actor": "operator", "why": "resharded", "term": None,
                                          "at": tx.now} for s in range(latest.total_slots, total_slots)])
    return new


def switch_by_clock(tx: Tx) -> int:
    """Bug reshard-switch-by-clock (the seed's §3.4 step 3): once a map is in force, UPDATE every remapped device's
    current_slot and slot_id to its new slot, outside the fenced template (INV-17). How many rows moved."""
    live = in_force(read_maps(tx.conn), tx.now)
    if live is None or live.version == 1:
        return 0
    moved = 0
    for r in list(tx.conn.execute(select(device_status_current.c.device_id, device_status_current.c.current_slot))):
        if (slot := live.slot_of(r.device_id)) != r.current_slot:
            tx.conn.execute(update(device_status_current).where(device_status_current.c.device_id == r.device_id)
                            .values(current_slot=slot, slot_id=slot))
            moved += 1
    return moved


def past_grace(tx: Tx, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bug reshard-grace-drop (the seed's §3.4 T0+10min): the messages of an older map version than the one in force,
    once that map's grace window is over, which the seed's worker refuses ('ignored by message_id' at the IS)."""
    live = in_force(read_maps(tx.conn), tx.now)
    if live is None or live.grace_until is None or tx.now < live.grace_until:
        return []
    return [m for m in messages if int(m.get("slot_map_version", 1)) < live.version]
