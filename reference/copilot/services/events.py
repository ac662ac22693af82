"""Ingesting platform events (telemetry, alerts, terminal events): deduplicated on (flight, seq),
ordered by sequence, never moving a task backwards (seed 000 §7.3).

A batch (one webhook delivery) is one transaction with set-based statements: the insert reports which
events are new (ON CONFLICT DO NOTHING ... RETURNING), so a duplicate can never count an alert twice,
even when two deliveries of the same events race."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import bindparam, case, select, update
from sqlalchemy.dialects import postgresql, sqlite

from reference.copilot import platform as p
from reference.copilot.effects import Tx
from reference.copilot.models import DroneTask, PlatformEventRow
from reference.copilot.services.settle import settle
from reference.copilot.states import TaskStatus as S

ACTOR = "platform-events"
_TERMINAL_EVENT = {p.EVENT_COMPLETED: p.FLIGHT_COMPLETED, p.EVENT_FAILED: p.FLIGHT_FAILED,
                   p.EVENT_CANCELLED: p.FLIGHT_CANCELLED}

_progress = (
    update(DroneTask)
    .where(DroneTask.id == bindparam("b_id"))
    .values(
        last_telemetry_seq=case((DroneTask.last_telemetry_seq < bindparam("b_seq"), bindparam("b_seq")),
                                else_=DroneTask.last_telemetry_seq),
        alert_count=DroneTask.alert_count + bindparam("b_alerts"),
        last_event_at=bindparam("b_at"),
    )
)


_EVENT_TABLE = PlatformEventRow.__table__
# Built once per dialect (ON CONFLICT is dialect-specific): a webhook batch arrives every second or so.
_INSERT_NEW = {
    name: (dialect.insert(_EVENT_TABLE).on_conflict_do_nothing(index_elements=["external_task_id", "seq"])
           .returning(_EVENT_TABLE.c.external_task_id, _EVENT_TABLE.c.seq))
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))}
_TASKS_BY_EXTERNAL_ID = (select(DroneTask.id, DroneTask.external_task_id, DroneTask.status)
                         .where(DroneTask.external_task_id.in_(bindparam("ids", expanding=True))))
_TASKS_BY_ID = (select(DroneTask.id, DroneTask.external_task_id, DroneTask.status)
                .where(DroneTask.id.in_(bindparam("ids", expanding=True))))


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    orphans: int = 0  # no task matches (yet): stored; the reconciler's query settles the task


def _tasks_for(tx: Tx, events: list[p.PlatformEvent]) -> dict[str, tuple[uuid.UUID, str]]:
    """external id -> (task id, status). Falls back to the event's reference (our task id) when the
    write-back of external_task_id has not happened (a crash after the platform accepted)."""
    conn = tx.conn
    ext_ids = sorted({e.external_id for e in events})
    found = {ext: (tid, status) for tid, ext, status in conn.execute(_TASKS_BY_EXTERNAL_ID, {"ids": ext_ids})
             if ext is not None}  # (IN never matches a NULL: this only narrows the type)
    refs: dict[uuid.UUID, str] = {}
    for e in events:
        if e.external_id not in found and e.reference:
            try:
                refs[uuid.UUID(e.reference)] = e.external_id
            except ValueError:
                continue
    if refs:
        for tid, ext, status in conn.execute(_TASKS_BY_ID, {"ids": sorted(refs)}):
            if ext in (None, refs[tid]):
                found[refs[tid]] = (tid, status)
    return found


def ingest_platform_events(tx: Tx, events: list[p.PlatformEvent]) -> IngestResult:
    result = IngestResult()
    if not events:
        return result
    events = sorted(events, key=lambda e: (e.external_id, e.seq))
    tasks = _tasks_for(tx, events)
    conn = tx.conn
    rows = [{"external_task_id": e.external_id, "seq": e.seq, "task_id": tasks.get(e.external_id, (None,))[0],
             "kind": e.kind, "occurred_at": datetime.fromtimestamp(e.at, UTC), "received_at": tx.now,
             "payload": e.payload} for e in events]
    new = {(ext, seq) for ext, seq in conn.execute(_INSERT_NEW[conn.dialect.name], rows)}
    result.accepted = len(new)
    result.duplicates = len(events) - len(new)

    max_seq: dict[uuid.UUID, int] = defaultdict(int)
    alerts: dict[uuid.UUID, int] = defaultdict(int)
    evidence: dict[uuid.UUID, p.PlatformEvent] = {}
    terminal: list[tuple[uuid.UUID, p.PlatformEvent]] = []
    seen: set[tuple[str, int]] = set()
    for e in events:
        key = (e.external_id, e.seq)
        if key not in new or key in seen:
            continue
        seen.add(key)
        task = tasks.get(e.external_id)
        if task is None:
            result.orphans += 1
            continue
        tid = task[0]
        if e.kind == p.EVENT_TELEMETRY:
            max_seq[tid] = max(max_seq[tid], e.seq)
        elif e.kind == p.EVENT_ALERT:
            alerts[tid] += 1
        if e.kind in _TERMINAL_EVENT:
            terminal.append((tid, e))
        elif task[1] == S.DISPATCHING and tid not in evidence:
            evidence[tid] = e
    touched = sorted(set(max_seq) | set(alerts))
    if touched:
        # Core executemany: one statement, many parameter sets (no per-row ORM work).
        conn.execute(_progress, [
            {"b_id": tid, "b_seq": max_seq.get(tid, 0), "b_alerts": alerts.get(tid, 0), "b_at": tx.now}
            for tid in touched])
    for tid, e in sorted(evidence.items(), key=lambda kv: (kv[1].external_id, kv[1].seq)):
        # Telemetry or an alert from our flight is reliable evidence that it is executing.
        settle(tx, tid, p.FLIGHT_EXECUTING, e.external_id, actor=ACTOR, reason=f"{e.kind} event",
               cause=f"{e.external_id}#{e.seq}")
    for tid, e in terminal:
        settle(tx, tid, _TERMINAL_EVENT[e.kind], e.external_id, actor=ACTOR, reason=f"{e.kind} event",
               cause=f"{e.external_id}#{e.seq}")
    return result
