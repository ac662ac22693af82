"""Rows the job system writes from several places: a job to enqueue, and its log rows (job_log: every status change,
in the transaction that made it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert

from kernel.effects import Tx
from reference.jobs.models import JobLog

_LOG = insert(JobLog.__table__)


@dataclass(frozen=True)
class NewJob:
    """What a caller enqueues (seed 004 ``New``): type and key are required; ``payload`` is any JSON value."""

    type: str
    idempotent_key: str
    payload: Any = None
    mission_id: str = ""
    trace_id: str = ""
    timeout_s: int = 300
    unmet: int = 0  # dependencies it waits for (reference.jobs.dag sets it)
    enqueued_by: str = ""  # the caller who enqueued it (the API's token subject); "" for the harness's producers


def log(tx: Tx, job_id: int, frm: str | None, to: str, actor: str, message: str = "",
        detail: dict[str, Any] | None = None) -> None:
    tx.conn.execute(_LOG, {"job_id": job_id, "from_status": frm, "to_status": to, "actor": actor,
                           "message": message[:2000], "detail": detail or {},
                           "created_at": tx.now})


def aware(t: datetime) -> datetime:
    """SQLite hands timezone-aware columns back naive: they were written in UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
