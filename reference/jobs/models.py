"""The job system's tables (seed 004's ``t_task`` with seed 002's ``task_log`` and ``task_dependency``), in
SQLAlchemy 2 for PostgreSQL (the source of truth) and SQLite (the simulation). Their own MetaData: a database may
hold them beside the Copilot's tables, and neither system's models know the other's.

Port notes (the seed targets MySQL-compatible PolarDB through GORM):
- ``id`` is a BIGINT identity (``AUTO_INCREMENT`` in the seed); ``payload`` stays TEXT holding JSON, as the seed
  stores it ("字符串直存"), so a payload that does not parse is the handler's problem, not the insert's;
- statuses are the seed's strings in a VARCHAR with a CHECK (004 forbids new intermediate states; 002's enum adds
  ``cancelled`` for a job whose hard parent failed or was cancelled, which this port keeps);
- ``unmet`` counts the hard, soft and time dependencies not yet released (002 "入度"): a job is claimable when it is
  pending, due, and has none left;
- ``claim_token`` exists for the fixed variant only (a fencing token per claim); the seed-faithful variant never
  reads it;
- timestamps are written by the workers from the clock port (virtual time in simulation), never ``now()`` on the
  server, so a simulated run is deterministic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from kernel.schema import NAMING, TZ, BigId

PENDING, RUNNING, DONE, DEAD, CANCELLED = "pending", "running", "done", "dead", "cancelled"
STATUSES = (PENDING, RUNNING, DONE, DEAD, CANCELLED)
TERMINAL = frozenset({DONE, DEAD, CANCELLED})
HARD, SOFT, TIME = "hard", "soft", "time"
EDGE_KINDS = (HARD, SOFT, TIME)


class JobBase(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    # Every model maps one Table (declarative types it as the wider FromClause): insert(X.__table__) and
    # update(X.__table__) then type-check.
    __table__: ClassVar[Table]


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


class Job(JobBase):
    __tablename__ = "job"
    __table_args__ = (
        CheckConstraint(f"status IN ({_in(STATUSES)})", name="status"),
        Index("ix_job_claimable", "status", "next_run_at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(64))
    mission_id: Mapped[str] = mapped_column(String(64), default="", index=True)  # 004's campus_id: the scope
    payload: Mapped[str] = mapped_column(Text)  # JSON text, as the seed stores it
    status: Mapped[str] = mapped_column(String(16))
    idempotent_key: Mapped[str] = mapped_column(String(200), unique=True)
    retry: Mapped[int] = mapped_column(Integer, default=0)
    next_run_at: Mapped[datetime] = mapped_column(TZ)
    owner: Mapped[str] = mapped_column(String(64), default="")
    claim_token: Mapped[int] = mapped_column(Integer, default=0)  # fixed variant: fences a claim's writes
    trace_id: Mapped[str] = mapped_column(String(64), default="")
    enqueued_by: Mapped[str] = mapped_column(String(128), default="")  # the API's caller: whose job it is
    claimed_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)  # first claim (time edges count from it)
    timeout_s: Mapped[int] = mapped_column(Integer, default=300)  # 002 timeout_seconds: releases time edges
    unmet: Mapped[int] = mapped_column(Integer, default=0)  # dependencies not released yet (002's in-degree)
    created_at: Mapped[datetime] = mapped_column(TZ)
    updated_at: Mapped[datetime] = mapped_column(TZ)


class JobLog(JobBase):
    """002's task_log: every status change, appended in the transaction that made it; the application's role may
    only INSERT and SELECT (reference.jobs.migrations)."""

    __tablename__ = "job_log"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("job.id", ondelete="CASCADE"), index=True)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)  # None: the job was created
    to_status: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(64))  # the instance or process that made the change
    message: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(TZ)


class JobDependency(JobBase):
    """002's task_dependency: one DAG edge, ``job_id`` waits for ``parent_id``."""

    __tablename__ = "job_dependency"
    __table_args__ = (
        UniqueConstraint("job_id", "parent_id", name="edge"),
        CheckConstraint("job_id <> parent_id", name="no_self_dependency"),
        CheckConstraint(f"kind IN ({_in(EDGE_KINDS)})", name="kind"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("job.id", ondelete="CASCADE"), index=True)
    parent_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("job.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(8), default=HARD)
    released_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)  # None: the child still waits on it
    created_at: Mapped[datetime] = mapped_column(TZ)
