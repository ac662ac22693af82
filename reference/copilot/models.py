"""SQLAlchemy 2 models: PostgreSQL is the source of truth (seed 000 §3, §6.2); SQLite runs the same
models in simulation. Timestamps are written by the core from the Clock port so that simulation is
deterministic; the server defaults exist for rows written by hand."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import conv

from kernel.schema import NAMING, TZ, BigId
from reference.copilot.states import TaskStatus


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    # Every model maps one Table (declarative types it as the wider FromClause): insert(X.__table__) and
    # update(X.__table__) then type-check.
    __table__: ClassVar[Table]


# --- conversation (minimal) -------------------------------------------------------------------


class ConversationSession(Base):
    __tablename__ = "conversation_session"
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), index=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


class ConversationMessage(Base):
    __tablename__ = "conversation_message"
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("conversation_session.id"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # user | assistant | tool
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


# --- sites, devices, permissions -------------------------------------------------------------


class SiteArea(Base):
    """An inspection area: a polygon, an altitude ceiling, its airspace status and approval policy."""

    __tablename__ = "site_area"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    polygon: Mapped[list[list[float]]] = mapped_column(JSON)  # [[lat, lon], ...]
    max_altitude_m: Mapped[float] = mapped_column(Float, default=120.0)
    airspace_open: Mapped[bool] = mapped_column(Boolean, default=True)
    requires_approval: Mapped[bool] = mapped_column(Boolean, default=True)


class Device(Base):
    __tablename__ = "device"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    area_id: Mapped[str] = mapped_column(ForeignKey("site_area.id"))
    model: Mapped[str] = mapped_column(String(64), default="M30T")


class UserDevicePermission(Base):
    __tablename__ = "user_device_permission"
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("device.id"), primary_key=True)


class UserAreaPermission(Base):
    __tablename__ = "user_area_permission"
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    area_id: Mapped[str] = mapped_column(ForeignKey("site_area.id"), primary_key=True)


# --- drafts, routes, approvals ---------------------------------------------------------------

class TaskDraft(Base):
    """Editable; every edit bumps ``version``. A task is created from one confirmed version."""

    __tablename__ = "task_draft"
    __table_args__ = (
        CheckConstraint("status IN ('GENERATING','READY','FAILED')", name="draft_status"),
        # Draft creation is idempotent per user operation (seed 000 §6.3: keys are per operation).
        UniqueConstraint("user_id", "idempotency_key", name="uq_draft_idempotency"),
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), index=True)
    session_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=1)
    goal: Mapped[str] = mapped_column(Text, default="")
    area_id: Mapped[str] = mapped_column(ForeignKey("site_area.id"))
    device_id: Mapped[str] = mapped_column(String(128))
    route_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON)  # altitude_m, actions, speed_mps
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())
    idempotency_key: Mapped[str | None] = mapped_column(String(160), nullable=True)  # of the creating request
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)


class FlightRoute(Base):
    """One immutable row per route version of a draft."""

    __tablename__ = "flight_route"
    __table_args__ = (UniqueConstraint("draft_id", "version", name="uq_route_draft_version"),)
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    draft_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("task_draft.id"))
    version: Mapped[int] = mapped_column(Integer)
    waypoints: Mapped[list[list[float]]] = mapped_column(JSON)  # [[lat, lon], ...]
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


class ApprovalOrder(Base):
    """An approval is bound to one draft version: approving v2 does not approve v3."""

    __tablename__ = "approval_order"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING','APPROVED','REJECTED','REVOKED')", name="approval_status"),
        Index("idx_approval_draft_version", "draft_id", "draft_version"),
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    draft_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("task_draft.id"))
    draft_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    approver_id: Mapped[str] = mapped_column(String(128))
    decided_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


# --- the task (seed 000 §6.2, column for column, plus the confirmed snapshot) ----------------

_STATUS_LIST = ",".join(f"'{s.value}'" for s in TaskStatus)


class DroneTask(Base):
    __tablename__ = "drone_task"
    __table_args__ = (
        UniqueConstraint("user_id", "idempotency_key", name="uq_task_idempotency"),
        # One task per confirmed draft version, ever (seed 000 §6.3): a re-confirm gets the task already made.
        UniqueConstraint("draft_id", "draft_version", name="uq_task_draft_version"),
        # conv(): the seed's own name, exempt from the "ck_<table>_" naming convention.
        CheckConstraint(f"status IN ({_STATUS_LIST})", name=conv("ck_task_status")),
        Index("idx_drone_task_status_created", "status", "created_at"),
        Index("idx_drone_task_device_status", "device_id", "status"),
        # Platform events and the reconciler find a task by the platform's id.
        Index("idx_drone_task_external_id", "external_task_id"),
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    draft_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    draft_version: Mapped[int] = mapped_column(Integer)
    user_id: Mapped[str] = mapped_column(String(128))
    device_id: Mapped[str] = mapped_column(String(128))
    route_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    status: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    idempotency_key: Mapped[str] = mapped_column(String(160))
    external_task_id: Mapped[str | None] = mapped_column(String(160), nullable=True)
    dispatch_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_error_code: Mapped[str | None] = mapped_column(String(80), nullable=True)
    last_error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())
    # Confirmed snapshot: what was approved is what flies, whatever happens to the draft later.
    area_id: Mapped[str] = mapped_column(String(64))
    route_version: Mapped[int] = mapped_column(Integer)
    snapshot: Mapped[dict[str, Any]] = mapped_column(JSON)
    request_hash: Mapped[str] = mapped_column(String(64))  # confirm payload digest: same key, other payload
    # Progress from platform events (never moves backwards).
    last_telemetry_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    alert_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_event_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)


class SecurityEvent(Base):
    """Append-only log of security-relevant refusals (a forbidden device or area, an approval of another version, a
    reused key, a self-approval), written in its own transaction after the refused one rolled back, so the refusal
    leaves a trace. On PostgreSQL the application role has INSERT/SELECT only (reference.copilot.migrations.roles)."""

    __tablename__ = "security_log"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(TZ)
    actor: Mapped[str] = mapped_column(String(128), index=True)
    action: Mapped[str] = mapped_column(String(64))  # what was refused: CONFIRM, CREATE_DRAFT, APPROVE
    code: Mapped[str] = mapped_column(String(80))  # the refusal's stable code
    draft_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class TaskAuditLog(Base):
    """Append-only. On PostgreSQL the application role has INSERT/SELECT only."""

    __tablename__ = "task_audit_log"
    __table_args__ = (Index("idx_audit_task", "task_id", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    draft_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    from_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    from_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    to_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    correlation_id: Mapped[str | None] = mapped_column(String(160), nullable=True)
    result: Mapped[str] = mapped_column(String(32), default="OK")
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


class TaskEventOutbox(Base):
    __tablename__ = "task_event_outbox"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING','SENT','DEAD')", name="outbox_status"),
        Index("idx_outbox_pending", "status", "available_at"),
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)  # the eventId consumers dedupe on
    task_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    task_version: Mapped[int] = mapped_column(BigInteger)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="PENDING")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    available_at: Mapped[datetime] = mapped_column(TZ)  # not claimable before (backoff, claim lease)
    created_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())
    sent_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # DEAD: the publisher gave up after the policy's attempts; an operator re-drives it
    # (reference.copilot.services.ops).
    dead_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)
    redrive_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ProcessedEvent(Base):
    __tablename__ = "processed_event"
    consumer: Mapped[str] = mapped_column(String(64), primary_key=True)
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    processed_at: Mapped[datetime] = mapped_column(TZ, server_default=func.now())


class DispatchAttempt(Base):
    """Written (with DISPATCHING) before the platform call, completed after it."""

    __tablename__ = "dispatch_attempt"
    __table_args__ = (UniqueConstraint("task_id", "attempt", name="uq_dispatch_attempt"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    attempt: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(160))
    outcome: Mapped[str] = mapped_column(String(32), default="PENDING")
    external_task_id: Mapped[str | None] = mapped_column(String(160), nullable=True)
    error_code: Mapped[str | None] = mapped_column(String(80), nullable=True)
    started_at: Mapped[datetime] = mapped_column(TZ)
    finished_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)


class EventFailure(Base):
    """One row per failed handling of a message: the retry history a dead letter keeps."""

    __tablename__ = "event_failure"
    __table_args__ = (Index("idx_event_failure_event", "consumer", "event_id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    consumer: Mapped[str] = mapped_column(String(64))
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    delivery_attempt: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str] = mapped_column(String(80))
    error_message: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(TZ)


class DeadLetter(Base):
    __tablename__ = "dead_letter"
    __table_args__ = (UniqueConstraint("consumer", "event_id", name="uq_dead_letter_event"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    consumer: Mapped[str] = mapped_column(String(64))
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    event_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    error_code: Mapped[str] = mapped_column(String(80))
    error_message: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(TZ)
    redriven_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)
    redrive_count: Mapped[int] = mapped_column(Integer, default=0)


class TaskReport(Base):
    """Report metadata; its status is independent of the task's result."""

    __tablename__ = "task_report"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING','UPLOADED','UPLOAD_FAILED','DEAD')", name="report_status"),
    )
    task_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    object_key: Mapped[str] = mapped_column(String(300))
    size_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    next_attempt_at: Mapped[datetime] = mapped_column(TZ)
    created_at: Mapped[datetime] = mapped_column(TZ)
    uploaded_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)
    dead_at: Mapped[datetime | None] = mapped_column(TZ, nullable=True)  # DEAD: uploads stopped after the policy's
    redrive_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # attempts, until re-driven


class PlatformEventRow(Base):
    """Telemetry, alerts and terminal events, deduplicated on (external_task_id, seq)."""

    __tablename__ = "platform_event"
    __table_args__ = (UniqueConstraint("external_task_id", "seq", name="uq_platform_event_seq"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    external_task_id: Mapped[str] = mapped_column(String(160))
    seq: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True, index=True)
    kind: Mapped[str] = mapped_column(String(16))
    occurred_at: Mapped[datetime] = mapped_column(TZ)
    received_at: Mapped[datetime] = mapped_column(TZ)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
