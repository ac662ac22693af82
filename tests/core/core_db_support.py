"""Helpers for the core tests: a real SQLite database (reference.copilot.db.sqlite_engine) behind a Runtime with a
deterministic clock and deterministic ids, task rows inserted by hand, and plain-data reads of everything
a transition writes (task row, audit rows, outbox rows, report row)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import sessionmaker

from reference.copilot.db import sqlite_engine
from reference.copilot.models import DroneTask, TaskAuditLog, TaskEventOutbox, TaskReport
from reference.copilot.runtime import Runtime
from systems.copilot.workload import Fleet, WorkloadSpec, seed_fleet

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Small enough to build per hypothesis example: 2 sites, 4 drones, 4 operators
# (operator-001/003 on SITE-001 with DRONE-0001/3, operator-002/004 on SITE-002 with DRONE-0002/4).
SMALL_FLEET = WorkloadSpec(confirms=1, window_s=1.0, devices=4, sites=2, operators=4)

COUNTED_TABLES = {
    "drone_task": DroneTask,
    "task_audit_log": TaskAuditLog,
    "task_event_outbox": TaskEventOutbox,
    "task_report": TaskReport,
}


class TickingClock:
    """Every reading is one millisecond after the previous one: deterministic, strictly increasing."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@dataclass
class Db:
    engine: Engine
    runtime: Runtime
    fleet: Fleet | None
    commits: list[int] = field(default_factory=list)

    def dispose(self) -> None:
        self.engine.dispose()

    # ---- counting

    def counts(self) -> dict[str, int]:
        with self.runtime.sessions() as s:
            return {name: s.scalar(select(func.count()).select_from(m)) or 0 for name, m in COUNTED_TABLES.items()}

    @contextmanager
    def count_commits(self) -> Iterator[list[int]]:
        """Yields a list that receives one item per COMMIT issued on the engine inside the block."""
        seen: list[int] = []

        def on_commit(_conn: Any) -> None:
            seen.append(1)

        event.listen(self.engine, "commit", on_commit)
        try:
            yield seen
        finally:
            event.remove(self.engine, "commit", on_commit)

    # ---- reads as plain data

    def task(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        with self.runtime.sessions() as s:
            t = s.get(DroneTask, task_id)
            if t is None:
                return None
            return {"id": t.id, "status": t.status, "version": t.version, "user_id": t.user_id,
                    "idempotency_key": t.idempotency_key, "updated_at": _aware(t.updated_at),
                    "draft_id": t.draft_id, "draft_version": t.draft_version}

    def audit(self, task_id: uuid.UUID) -> list[dict[str, Any]]:
        with self.runtime.sessions() as s:
            rows = s.scalars(select(TaskAuditLog).where(TaskAuditLog.task_id == task_id).order_by(TaskAuditLog.id))
            return [{"id": a.id, "actor": a.actor, "action": a.action, "from": a.from_status, "to": a.to_status,
                     "from_version": a.from_version, "to_version": a.to_version, "at": _aware(a.created_at),
                     "detail": a.detail} for a in rows]

    def outbox(self, task_id: uuid.UUID) -> list[dict[str, Any]]:
        with self.runtime.sessions() as s:
            rows = s.scalars(select(TaskEventOutbox).where(TaskEventOutbox.task_id == task_id)
                             .order_by(TaskEventOutbox.task_version, TaskEventOutbox.created_at))
            return [{"id": o.id, "event_type": o.event_type, "task_version": o.task_version, "status": o.status,
                     "payload": o.payload, "at": _aware(o.created_at)} for o in rows]

    def report(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        with self.runtime.sessions() as s:
            r = s.get(TaskReport, task_id)
            if r is None:
                return None
            return {"status": r.status, "object_key": r.object_key, "at": _aware(r.created_at)}

    def all_tasks(self) -> list[dict[str, Any]]:
        with self.runtime.sessions() as s:
            return [{"id": t.id, "status": t.status, "version": t.version, "user_id": t.user_id,
                     "idempotency_key": t.idempotency_key, "draft_id": t.draft_id,
                     "draft_version": t.draft_version}
                    for t in s.scalars(select(DroneTask).order_by(DroneTask.created_at, DroneTask.id))]

    # ---- writes

    def insert_task(self, status: str, version: int, *, user: str = "operator-001",
                    key: str | None = None) -> uuid.UUID:
        """A task row written directly (no audit, no outbox): a starting point for transition()."""
        task_id = uuid.uuid4()

        def fn(tx: Any) -> None:
            tx.session.add(DroneTask(
                id=task_id, draft_id=uuid.uuid4(), draft_version=1, user_id=user, device_id="DRONE-0001",
                route_id=uuid.uuid4(), status=status, version=version, idempotency_key=key or f"key-{task_id}",
                dispatch_attempts=0, created_at=tx.now, updated_at=tx.now, area_id="SITE-001", route_version=1,
                snapshot={}, request_hash="0" * 64, last_telemetry_seq=0, alert_count=0,
            ))

        self.runtime.transact(fn)
        return task_id


def make_db(*, fleet: WorkloadSpec | None = SMALL_FLEET, seed: int = 0) -> Db:
    engine = sqlite_engine()
    rng = random.Random(seed)
    runtime = Runtime(
        sessions=sessionmaker(engine, expire_on_commit=False),
        clock=TickingClock(),
        new_id=lambda: uuid.UUID(int=rng.getrandbits(128), version=4),
    )
    seeded = runtime.transact(lambda tx: seed_fleet(tx, fleet)) if fleet is not None else None
    return Db(engine, runtime, seeded)


def _aware(dt: datetime | None) -> datetime | None:
    """SQLite hands timezone-aware columns back naive; they were written in UTC."""
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
