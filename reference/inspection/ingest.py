"""A worker's batch commit (seed 001 §3.1-§3.3, §3.6): one transaction that takes the slot's lease row under the
worker's epoch (the fence), drops the messages already processed (message_dedup), writes each new message's
history row, advances the current row through the fenced UPSERT with its derived snapshot, and records its alert
events with the alert's fold. Every function here runs inside a ``Transact`` (either shell's database).

The fence is the lease row, written first: ``UPDATE slot_lease ... WHERE slot_id AND owner AND lease_epoch AND
state = ACTIVE``. On PostgreSQL it holds that row's lock until the commit, so the leader's takeover of the slot
waits for the batch (a short one) or the batch finds the new epoch and rolls back: a stale owner's write never lands
(the seed's row-level ``writer_epoch >= current.writer_epoch`` lets it land on rows the new owner has not written,
bug ``row-epoch-fencing``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from kernel.effects import Tx
from reference.inspection import coverage
from reference.inspection.bugs import BUGS
from reference.inspection.models import (
    ACTIVE,
    LOADING_NEW,
    MOVING,
    alert_current,
    alert_event,
    device_status_current,
    device_status_history,
    message_dedup,
    slot_audit,
    slot_lease,
)
from reference.inspection.reshard import past_grace

RING = 5  # §3.2: last_n_states_ring
SUPPORTED_SCHEMAS = (1, 2)  # INV-7: a worker reads the current envelope version and the one before


class Fenced(Exception):
    """The batch's lease is gone: the slot has another epoch or owner (rolled back; nack and cancel)."""


@dataclass
class BatchResult:
    applied: list[str] = field(default_factory=list)  # advanced the current row
    superseded: list[str] = field(default_factory=list)  # processed, older than the current row (fenced by seq)
    duplicates: list[str] = field(default_factory=list)  # already processed (message_dedup)
    fenced: bool = False  # bug fenced-batch-keeps-dedup only: fenced, yet committed (its dedup rows)
    worker: str = ""
    slot: int = -1
    epoch: int = -1
    cache_age_s: float = 0.0  # the worker's lease cache's age when it committed (INV-15)

    def as_op(self) -> dict[str, Any]:
        return {"worker": self.worker, "slot": self.slot, "epoch": self.epoch, "applied": self.applied,
                "superseded": self.superseded, "duplicates": self.duplicates, "fenced": self.fenced,
                "cache_age_s": round(self.cache_age_s, 3)}


def fold(snapshot: dict[str, Any] | None, message: dict[str, Any]) -> dict[str, Any]:
    """§3.2: the derived state after one more message (a device's state = the fold of its messages)."""
    snap = snapshot or {}
    status = str(message["payload"]["status"])
    failures = int(snap.get("consec_failure_count", 0)) + 1 if status == "DOWN" else 0
    ring = [*snap.get("last_n_states_ring", []), status][-RING:]
    return {"applied": int(snap.get("applied", 0)) + 1, "consec_failure_count": failures,
            "last_n_states_ring": ring, "last_cycle_id": int(message["cycle_id"])}


def newer(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """(cycle_id, seq) ``a`` is after ``b``."""
    return a > b


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def commit_batch(tx: Tx, worker: str, slot: int, epoch: int, messages: Sequence[dict[str, Any]],
                 snapshots: dict[str, dict[str, Any]], cache_age_s: float = 0.0) -> BatchResult:
    """One batch of one slot under ``epoch``; raises Fenced when the lease is no longer this worker's at that epoch.
    ``snapshots``: the worker's derived snapshots loaded at takeover (INV-10), kept current by its commits."""
    if not BUGS.active("row-epoch-fencing"):
        held = tx.conn.execute(update(slot_lease).where(
            slot_lease.c.slot_id == slot, slot_lease.c.owner_worker_id == worker,
            slot_lease.c.lease_epoch == epoch, slot_lease.c.state.in_((ACTIVE, MOVING)))  # MOVING: draining
            .values(last_renewed_at=tx.now))
        if held.rowcount != 1:
            coverage.COVERAGE.reached(coverage.FENCED_BY_EPOCH)
            if BUGS.active("fenced-batch-keeps-dedup"):  # the seed's batch: dedup first, its rows committed
                _mark_seen(tx, messages)
                return BatchResult(fenced=True, worker=worker, slot=slot, epoch=epoch, cache_age_s=cache_age_s)
            raise Fenced(f"slot {slot}: the lease is no longer {worker}'s at epoch {epoch}")
    ids = [str(m["message_id"]) for m in messages]
    if BUGS.active("reshard-grace-drop") and (late := past_grace(tx, list(messages))):
        dropped = {str(m["message_id"]) for m in late}  # acked as if seen: never processed, never recorded
        messages = [m for m in messages if str(m["message_id"]) not in dropped]
        ids = [i for i in ids if i not in dropped]
    seen = set(tx.conn.execute(select(message_dedup.c.message_id).where(message_dedup.c.message_id.in_(ids)))
               .scalars())
    result = BatchResult(duplicates=[i for i in ids if i in seen], worker=worker, slot=slot, epoch=epoch,
                         cache_age_s=cache_age_s)
    if result.duplicates:
        coverage.COVERAGE.reached(coverage.DEDUP_HIT)
    fresh = list({str(m["message_id"]): m for m in messages if str(m["message_id"]) not in seen}.values())
    if fresh:
        tx.conn.execute(insert(message_dedup), [{"message_id": str(m["message_id"]), "processed_at": tx.now}
                                                for m in fresh])
    fresh.sort(key=lambda m: (str(m["device_id"]), int(m["cycle_id"]), int(m["seq"])))
    # FOR UPDATE, in device order: while a reshard moves a device, the owners of its old and new slots may both
    # hold messages of it; its row lock makes their batches take turns (each folds the snapshot the other wrote)
    rows = {r.device_id: r for r in tx.conn.execute(select(device_status_current).where(
        device_status_current.c.device_id.in_({str(m["device_id"]) for m in fresh}))
        .order_by(device_status_current.c.device_id).with_for_update())} if fresh else {}
    history: list[dict[str, Any]] = []
    for m in fresh:
        applied = _apply(tx, slot, epoch, m, rows, snapshots, history)
        (result.applied if applied else result.superseded).append(str(m["message_id"]))
    if history:
        tx.conn.execute(insert(device_status_history), history)  # one statement (executemany)
    for m in fresh:
        if m["payload"].get("alert"):
            _record_alert(tx, m, epoch)
    tx.conn.execute(insert(slot_audit), {"kind": "batch", "slot_id": slot, "lease_epoch": epoch,
                                         "owner_worker_id": worker, "state": None, "actor": worker, "why": "commit",
                                         "term": None, "at": tx.now})
    if BUGS.active("row-epoch-fencing") and not result.applied and result.superseded:
        raise Fenced(f"slot {slot}: every row refused the batch (rowsAffected = 0, §4.4 E)")
    return result


def _mark_seen(tx: Tx, messages: Sequence[dict[str, Any]]) -> None:
    ids = sorted({str(m["message_id"]) for m in messages})
    if ids:
        seen = set(tx.conn.execute(select(message_dedup.c.message_id).where(message_dedup.c.message_id.in_(ids)))
                   .scalars())
        if new := [i for i in ids if i not in seen]:
            tx.conn.execute(insert(message_dedup), [{"message_id": i, "processed_at": tx.now} for i in new])


def _dialect_insert(tx: Tx) -> Any:
    return postgresql.insert if tx.conn.dialect.name == "postgresql" else sqlite.insert


_STATEMENTS: dict[tuple[str, str], Any] = {}  # (dialect, name) -> a statement built once (its compile cached)


def _statement(tx: Tx, name: str) -> Any:
    key = (tx.conn.dialect.name, name)
    if key not in _STATEMENTS:
        _STATEMENTS[key] = _BUILDERS[name](_dialect_insert(tx))
    return _STATEMENTS[key]


_CURRENT_COLUMNS = ("slot_id", "current_slot", "seq", "cycle_id", "collected_at", "writer_epoch", "slot_map_version",
                    "status_payload", "derived_snapshot", "updated_at")


def _fenced_upsert(dialect_insert: Any, seq_predicate: bool = True, row_epoch: bool = False,
                   handover: bool = True) -> Any:
    """§3.1's template (INV-17): insert, or update only when the message is newer by (cycle_id, seq) and comes from
    the row's current slot or from a newer map's route (§3.4's handover: the row moves to the message's slot and
    version); a message on an older route than the row's never writes it (reference.inspection.reshard).
    ``handover`` False: the seed's slot predicate alone (``current_slot = EXCLUDED.slot_id``)."""
    stmt = dialect_insert(device_status_current)
    cur, new = device_status_current.c, stmt.excluded
    guard: list[Any] = [cur.current_slot == new.slot_id]
    if handover:
        guard = [or_(cur.current_slot == new.slot_id, cur.slot_map_version < new.slot_map_version),
                 cur.slot_map_version <= new.slot_map_version]
    if seq_predicate:
        guard.append(or_(cur.cycle_id < new.cycle_id, and_(cur.cycle_id == new.cycle_id, cur.seq < new.seq)))
    if row_epoch:
        guard.append(cur.writer_epoch <= new.writer_epoch)
    # RETURNING says whether the row was written: PostgreSQL's driver reports no rowcount for an INSERT ... ON CONFLICT
    return stmt.on_conflict_do_update(index_elements=[cur.device_id],
                                      set_={k: getattr(new, k) for k in _CURRENT_COLUMNS},
                                      where=and_(*guard)).returning(cur.device_id)


_BUILDERS: dict[str, Any] = {
    "upsert": _fenced_upsert,
    "upsert-no-seq": lambda ins: _fenced_upsert(ins, seq_predicate=False),
    "upsert-row-epoch": lambda ins: _fenced_upsert(ins, row_epoch=True),
    "upsert-slot-only": lambda ins: _fenced_upsert(ins, handover=False),
    "alert-event": lambda ins: ins(alert_event).on_conflict_do_nothing(
        index_elements=["device_id", "alert_key", "cycle_id", "seq"]),
}


def _apply(tx: Tx, slot: int, epoch: int, m: dict[str, Any], rows: dict[str, Any],
           snapshots: dict[str, dict[str, Any]], history: list[dict[str, Any]]) -> bool:
    """The fenced UPSERT of one message (the only writer of device_status_current: INV-17) and its history row.
    True when it advanced the current row."""
    device, key = str(m["device_id"]), (int(m["cycle_id"]), int(m["seq"]))
    row = rows.get(device)
    base = snapshots.get(device, {}) if BUGS.active("snapshot-not-loaded") else (
        row.derived_snapshot if row is not None else None)
    snapshot = fold(base, m)
    collected = _ts(str(m["collected_at"]))
    name = "upsert-no-seq" if BUGS.active("no-seq-predicate") else (
        "upsert-row-epoch" if BUGS.active("row-epoch-fencing") else (
            "upsert-slot-only" if BUGS.active("reshard-switch-by-clock") else "upsert"))
    version = int(m.get("slot_map_version", 1))
    moved = row is not None and row.slot_map_version < version and row.current_slot != slot
    applied = tx.conn.execute(_statement(tx, name), {
        "device_id": device, "slot_id": slot, "current_slot": slot, "seq": key[1], "cycle_id": key[0],
        "collected_at": collected, "writer_epoch": epoch, "slot_map_version": version, "status_payload": m["payload"],
        "derived_snapshot": snapshot, "updated_at": tx.now}).first() is not None
    if applied:
        if moved:
            coverage.COVERAGE.reached(coverage.RESHARD_HANDOVER)
        rows[device] = _Row(key[0], key[1], snapshot, slot, version)
        snapshots[device] = snapshot
    else:
        coverage.COVERAGE.reached(coverage.FENCED_BY_SEQ)
    history.append({"ts": collected, "device_id": device, "message_id": str(m["message_id"]), "slot_id": slot,
                    "cycle_id": key[0], "seq": key[1], "writer_epoch": epoch, "applied": applied,
                    "payload": m["payload"], "snapshot": snapshot if applied else None})
    return applied


@dataclass(frozen=True)
class _Row:
    cycle_id: int
    seq: int
    derived_snapshot: dict[str, Any]
    current_slot: int
    slot_map_version: int


def _record_alert(tx: Tx, m: dict[str, Any], epoch: int) -> None:
    """§3.3: the alert event (its UNIQUE key makes a repeat a no-op), then alert_current as the fold of the
    device's events for that key (INV-18: never written otherwise)."""
    alert = m["payload"]["alert"]
    device, key = str(m["device_id"]), str(alert["key"])
    tx.conn.execute(_statement(tx, "alert-event"), {
        "device_id": device, "alert_key": key, "event_type": str(alert["type"]), "severity": int(alert["severity"]),
        "event_time": _ts(str(m["collected_at"])), "cycle_id": int(m["cycle_id"]), "seq": int(m["seq"]),
        "payload": alert, "ingest_writer_epoch": epoch})
    order = (alert_event.c.event_id,) if BUGS.active("alert-fold-by-event-id") else (
        alert_event.c.event_time, alert_event.c.cycle_id, alert_event.c.seq)
    events = [dict(r._mapping) for r in tx.conn.execute(select(alert_event).where(
        alert_event.c.device_id == device, alert_event.c.alert_key == key).order_by(*order))]
    folded = fold_alert(events)
    if folded is None:
        return
    stmt = _dialect_insert(tx)(alert_current).values(
        device_id=device, alert_key=key, **folded)
    tx.conn.execute(stmt.on_conflict_do_update(index_elements=[alert_current.c.device_id, alert_current.c.alert_key],
                                               set_=folded))


def fold_alert(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """§3.3's rule over one (device, alert_key)'s events in the order given: ACTIVE after a FIRING or UPDATED with no
    RESOLVED since, RESOLVED when the last is RESOLVED; severity the greatest of the last active period."""
    state: dict[str, Any] | None = None
    for e in events:
        active = e["event_type"] != "RESOLVED"
        if state is None or (active and state["state"] == "RESOLVED"):
            state = {"state": "ACTIVE" if active else "RESOLVED", "severity": int(e["severity"]),
                     "first_fired_at": e["event_time"]}
        elif active:
            state["severity"] = max(int(state["severity"]), int(e["severity"]))
        state.update(state="ACTIVE" if active else "RESOLVED", last_event_at=e["event_time"],
                     last_event_id=int(e["event_id"]), payload=e["payload"])
    return state


def load_slot(tx: Tx, worker: str, slot: int, epoch: int) -> dict[str, dict[str, Any]]:
    """§3.2's takeover load (INV-10): the slot's devices' derived snapshots, then the lease LOADING_NEW -> ACTIVE
    under this worker's epoch (Fenced when it is no longer so)."""
    snapshots = {r.device_id: dict(r.derived_snapshot or {}) for r in tx.conn.execute(
        select(device_status_current.c.device_id, device_status_current.c.derived_snapshot)
        .where(device_status_current.c.current_slot == slot))}
    if BUGS.active("snapshot-not-loaded"):
        snapshots = {}
    done = tx.conn.execute(update(slot_lease).where(
        slot_lease.c.slot_id == slot, slot_lease.c.owner_worker_id == worker, slot_lease.c.lease_epoch == epoch,
        slot_lease.c.state == LOADING_NEW).values(state=ACTIVE, state_since=tx.now))
    if done.rowcount != 1:
        raise Fenced(f"slot {slot}: not {worker}'s to load at epoch {epoch}")
    tx.conn.execute(insert(slot_audit).values(kind="lease", slot_id=slot, lease_epoch=epoch, owner_worker_id=worker,
                                              state=ACTIVE, actor=worker, why="loaded", at=tx.now))
    return snapshots
