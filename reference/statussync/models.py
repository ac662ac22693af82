"""Seed 003's tables (§4.6, §4.7, §5, §5.1) in SQLAlchemy 2, portable between SQLite (the simulation) and MySQL 8 /
MariaDB 10.11 (InnoDB, the native stack to come), plus the producers' own ledger (§3.3: a producer keeps its
outcome, its pending event and its next sourceSeq in one transaction of its own).

Where the port departs from the seed's DDL, and why:
- ``task_event_log``'s unique key on a step's sequence includes ``producer_id``: the seed's
  ``(task_id, step_id, step_attempt, source_seq)`` makes the health reconciler's event collide with the worker's of
  the same number (sourceSeq is per producer, §3.3);
- ``task_step_stream`` keeps each producer's last sourceSeq per step attempt: the seed's one ``task_step.source_seq``
  column cannot (the same collision); ``task_step.source_seq`` keeps the step's worker's, as the seed has it;
- ``task_event_dedup`` also stores refusals (their result says why): a retried refusal gets its first answer back
  instead of being judged again against a state that moved on;
- ``task_event_log.committed_at`` is the transaction's clock (the clock port), not ``UTC_TIMESTAMP(3)``, so a
  simulated run is deterministic.

Dialect points that bite: ``BIGINT AUTO_INCREMENT`` is ``INTEGER PRIMARY KEY`` on SQLite (kernel.schema.BigId);
``DATETIME(3)`` on MySQL/MariaDB holds no zone (the service writes UTC, and reads it back naive); ``JSON`` is a real
type on MySQL but an alias of LONGTEXT with a JSON_VALID check on MariaDB, which also has no ``CAST(... AS JSON)``
(the service binds JSON parameters, so neither needs it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from kernel.schema import NAMING, BigId

# DATETIME(3) on MySQL/MariaDB (milliseconds, as the seed's columns), a text timestamp on SQLite.
Stamp = DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"
LIFECYCLES = (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)  # §4.1
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
HEALTHY, DEGRADED, STALE = "HEALTHY", "DEGRADED", "STALE"
OUTBOX_PENDING, OUTBOX_PROCESSING, OUTBOX_PUBLISHED, OUTBOX_DEAD = "PENDING", "PROCESSING", "PUBLISHED", "DEAD"
USER_SUMMARY, TASK_DETAIL = "USER_SUMMARY", "TASK_DETAIL"


class StatusBase(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    __table__: ClassVar[Table]


class StatusDefinition(StatusBase):
    """§4.6: a tenant's versioned business statuses, each mapped to a lifecycle by the service, never the caller."""

    __tablename__ = "task_status_definition"
    tenant_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    product: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_type: Mapped[str] = mapped_column(String(128), primary_key=True)
    definition_version: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(64), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(128))
    lifecycle_status: Mapped[str] = mapped_column(String(32))
    terminal: Mapped[bool] = mapped_column(Boolean, default=False)
    severity: Mapped[str] = mapped_column(String(16), default="INFO")
    sort_order: Mapped[int] = mapped_column(Integer, default=0)
    presentation: Mapped[Any] = mapped_column(JSON, nullable=True)
    allowed_from: Mapped[Any] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class OperationDefinition(StatusBase):
    """§4.7: who may report which events with which data schemas for an operation, and its failure policy."""

    __tablename__ = "task_operation_definition"
    tenant_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    product: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_type: Mapped[str] = mapped_column(String(128), primary_key=True)
    definition_version: Mapped[int] = mapped_column(Integer, primary_key=True)
    operation_code: Mapped[str] = mapped_column(String(128), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(128))
    producer_pattern: Mapped[str] = mapped_column(String(255))
    allowed_event_types: Mapped[Any] = mapped_column(JSON)
    allowed_data_schemas: Mapped[Any] = mapped_column(JSON)
    failure_policy: Mapped[str] = mapped_column(String(32))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class Task(StatusBase):
    __tablename__ = "task"
    __table_args__ = (Index("task_owner_updated_idx", "tenant_id", "owner_id", "updated_at", "id"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(36))
    owner_id: Mapped[str] = mapped_column(String(36))
    product: Mapped[str] = mapped_column(String(64))
    task_type: Mapped[str] = mapped_column(String(128))
    title: Mapped[str] = mapped_column(String(255))
    lifecycle_status: Mapped[str] = mapped_column(String(32))
    business_status: Mapped[str] = mapped_column(String(64))
    status_definition_version: Mapped[int] = mapped_column(Integer)
    operation_definition_version: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    coordinator_source_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    health: Mapped[str] = mapped_column(String(16), default=HEALTHY)
    summary_schema: Mapped[str | None] = mapped_column(String(128), nullable=True)
    summary_data: Mapped[Any] = mapped_column(JSON, nullable=True)
    failure_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    failure_message: Mapped[str | None] = mapped_column(String(512), nullable=True)
    failed_step_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(Stamp)
    started_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(Stamp)


class TaskStep(StatusBase):
    __tablename__ = "task_step"
    __table_args__ = (ForeignKeyConstraint(["task_id"], ["task.id"], name="task_step_task_fk"),)
    task_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    operation_code: Mapped[str] = mapped_column(String(128))
    service_name: Mapped[str] = mapped_column(String(128))
    source_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    lifecycle_status: Mapped[str] = mapped_column(String(32))
    business_status: Mapped[str] = mapped_column(String(64))
    health: Mapped[str] = mapped_column(String(16), default=HEALTHY)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    data_schema: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state_data: Mapped[Any] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    error_category: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    error_retryable: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    diagnostics_ref: Mapped[str | None] = mapped_column(String(255), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(Stamp)


class StepStream(StatusBase):
    """Each producer's last accepted sourceSeq for one step attempt (§3.3: sourceSeq is the producer's own)."""

    __tablename__ = "task_step_stream"
    task_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    producer_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    source_seq: Mapped[int] = mapped_column(BigInteger)


class TaskEventLog(StatusBase):
    __tablename__ = "task_event_log"
    __table_args__ = (
        UniqueConstraint("task_id", "task_version", name="task_event_version_uk"),
        Index("task_event_timeline_idx", "task_id", "committed_at", "event_id"),
        UniqueConstraint("task_id", "step_id", "step_attempt", "producer_id", "source_seq",
                         name="task_step_event_seq_uk"),
    )
    event_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(36))
    task_version: Mapped[int] = mapped_column(BigInteger)
    step_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    operation_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    step_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    task_attempt: Mapped[int] = mapped_column(Integer)
    step_attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    producer_id: Mapped[str] = mapped_column(String(128))
    source_seq: Mapped[int] = mapped_column(BigInteger)
    event_type: Mapped[str] = mapped_column(String(64))
    lifecycle_status: Mapped[str] = mapped_column(String(32))  # the task's, after the event
    business_status: Mapped[str] = mapped_column(String(64))
    health: Mapped[str] = mapped_column(String(16))
    step_lifecycle: Mapped[str | None] = mapped_column(String(32), nullable=True)  # the step's, after the event
    step_health: Mapped[str | None] = mapped_column(String(16), nullable=True)
    data_schema: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    occurred_at: Mapped[datetime] = mapped_column(Stamp)
    received_at: Mapped[datetime] = mapped_column(Stamp)
    committed_at: Mapped[datetime] = mapped_column(Stamp)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    payload: Mapped[Any] = mapped_column(JSON, nullable=True)


class TaskEventDedup(StatusBase):
    __tablename__ = "task_event_dedup"
    __table_args__ = (Index("task_event_task_idx", "task_id", "created_at"),)
    event_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(36))
    payload_hash: Mapped[str] = mapped_column(String(64))
    result: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(Stamp)


class TaskOutbox(StatusBase):
    __tablename__ = "task_outbox"
    __table_args__ = (
        UniqueConstraint("aggregate_id", "aggregate_version", "channel", "projection",
                         name="outbox_aggregate_version_channel_uk"),
        Index("outbox_claim_idx", "status", "available_at", "id"),
        Index("outbox_lock_timeout_idx", "status", "locked_at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    aggregate_id: Mapped[str] = mapped_column(String(36))
    aggregate_version: Mapped[int] = mapped_column(BigInteger)
    channel: Mapped[str] = mapped_column(String(255))
    projection: Mapped[str] = mapped_column(String(32))
    payload: Mapped[Any] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=OUTBOX_PENDING)
    available_at: Mapped[datetime] = mapped_column(Stamp)
    locked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    locked_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    created_at: Mapped[datetime] = mapped_column(Stamp)
    published_at: Mapped[datetime | None] = mapped_column(Stamp, nullable=True)


class TaskCorrection(StatusBase):
    """§4.2's audit of an administrator's correction: who, why, the task's status before and after, the version it
    made and when (the correction's own event is in task_event_log too)."""

    __tablename__ = "task_correction"
    __table_args__ = (Index("task_correction_task_idx", "task_id", "corrected_at"),)
    correction_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(36))
    task_version: Mapped[int] = mapped_column(BigInteger)
    operator: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(1024))
    old_lifecycle_status: Mapped[str] = mapped_column(String(32))
    old_business_status: Mapped[str] = mapped_column(String(64))
    new_lifecycle_status: Mapped[str] = mapped_column(String(32))
    new_business_status: Mapped[str] = mapped_column(String(64))
    corrected_at: Mapped[datetime] = mapped_column(Stamp)


class ProducerLedger(StatusBase):
    """A producer's own durable record (§3.3): each event it means to report, with its sourceSeq, written in the
    transaction that records the real outcome; ``answer`` is what the status service said (None: not answered)."""

    __tablename__ = "producer_ledger"
    producer_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(128), primary_key=True)  # "" for the coordinator's task events
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1, 2, ... in the order recorded
    source_seq: Mapped[int] = mapped_column(BigInteger)
    event_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[Any] = mapped_column(JSON)
    answer: Mapped[str | None] = mapped_column(String(32), nullable=True)
    recorded_at: Mapped[datetime] = mapped_column(Stamp)
