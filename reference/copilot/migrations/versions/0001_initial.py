"""initial: the full reference schema (reference/copilot/models.py), written out explicitly.

Generated with ``alembic revision --autogenerate`` against an empty PostgreSQL 15 and reviewed by hand:
- BIGINT surrogate keys are BIGSERIAL (the models' SQLite variant is irrelevant here); the application
  role needs USAGE on their sequences (reference.copilot.migrations.roles).
- Names come from the models' naming convention (pk_/fk_/ix_/ck_<table>_...) except the ones the seed
  fixes: ck_task_status, uq_task_idempotency, idx_drone_task_status_created, idx_drone_task_device_status.
- CHECK constraints are not compared by autogenerate; tests/postgres checks them by name.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 09:02:35 UTC
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_session",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_session")),
    )
    op.create_index(
        op.f("ix_conversation_session_user_id"), "conversation_session", ["user_id"], unique=False
    )
    op.create_table(
        "dead_letter",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("error_code", sa.String(length=80), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("redriven_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("redrive_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letter")),
        sa.UniqueConstraint("consumer", "event_id", name="uq_dead_letter_event"),
    )
    op.create_table(
        "dispatch_attempt",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=160), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("external_task_id", sa.String(length=160), nullable=True),
        sa.Column("error_code", sa.String(length=80), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dispatch_attempt")),
        sa.UniqueConstraint("task_id", "attempt", name="uq_dispatch_attempt"),
    )
    op.create_table(
        "drone_task",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("draft_id", sa.Uuid(), nullable=False),
        sa.Column("draft_version", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("route_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("idempotency_key", sa.String(length=160), nullable=False),
        sa.Column("external_task_id", sa.String(length=160), nullable=True),
        sa.Column("dispatch_attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error_code", sa.String(length=80), nullable=True),
        sa.Column("last_error_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("area_id", sa.String(length=64), nullable=False),
        sa.Column("route_version", sa.Integer(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("last_telemetry_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("alert_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('CREATED','QUEUED','VALIDATING','DISPATCHING','EXECUTING','COMPLETED',"
            "'DISPATCH_FAILED','FAILED','CANCEL_PENDING','CANCELLED','MANUAL_REVIEW')",
            name=op.f("ck_task_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drone_task")),
        sa.UniqueConstraint("user_id", "idempotency_key", name="uq_task_idempotency"),
    )
    op.create_index("idx_drone_task_device_status", "drone_task", ["device_id", "status"], unique=False)
    op.create_index("idx_drone_task_status_created", "drone_task", ["status", "created_at"], unique=False)
    op.create_table(
        "event_failure",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("delivery_attempt", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(length=80), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_failure")),
    )
    op.create_index("idx_event_failure_event", "event_failure", ["consumer", "event_id"], unique=False)
    op.create_table(
        "platform_event",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("external_task_id", sa.String(length=160), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_platform_event")),
        sa.UniqueConstraint("external_task_id", "seq", name="uq_platform_event_seq"),
    )
    op.create_index(op.f("ix_platform_event_task_id"), "platform_event", ["task_id"], unique=False)
    op.create_table(
        "processed_event",
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column(
            "processed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("consumer", "event_id", name=op.f("pk_processed_event")),
    )
    op.create_table(
        "site_area",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("polygon", sa.JSON(), nullable=False),
        sa.Column("max_altitude_m", sa.Float(), nullable=False),
        sa.Column("airspace_open", sa.Boolean(), nullable=False),
        sa.Column("requires_approval", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_site_area")),
    )
    op.create_table(
        "task_audit_log",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("draft_id", sa.Uuid(), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("from_status", sa.String(length=32), nullable=True),
        sa.Column("to_status", sa.String(length=32), nullable=True),
        sa.Column("from_version", sa.BigInteger(), nullable=True),
        sa.Column("to_version", sa.BigInteger(), nullable=True),
        sa.Column("correlation_id", sa.String(length=160), nullable=True),
        sa.Column("result", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_audit_log")),
    )
    op.create_index("idx_audit_task", "task_audit_log", ["task_id", "id"], unique=False)
    op.create_table(
        "task_event_outbox",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('PENDING','SENT')", name=op.f("ck_task_event_outbox_outbox_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_event_outbox")),
    )
    op.create_index("idx_outbox_pending", "task_event_outbox", ["status", "available_at"], unique=False)
    op.create_index(op.f("ix_task_event_outbox_task_id"), "task_event_outbox", ["task_id"], unique=False)
    op.create_table(
        "task_report",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("object_key", sa.String(length=300), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("uploaded_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('PENDING','UPLOADED','UPLOAD_FAILED')", name=op.f("ck_task_report_report_status")
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_task_report")),
    )
    op.create_table(
        "conversation_message",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["conversation_session.id"],
            name=op.f("fk_conversation_message_session_id_conversation_session"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_message")),
    )
    op.create_index(
        op.f("ix_conversation_message_session_id"), "conversation_message", ["session_id"], unique=False
    )
    op.create_table(
        "device",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("area_id", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["area_id"], ["site_area.id"], name=op.f("fk_device_area_id_site_area")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device")),
    )
    op.create_table(
        "task_draft",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("area_id", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("route_id", sa.Uuid(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('GENERATING','READY','FAILED')", name=op.f("ck_task_draft_draft_status")
        ),
        sa.ForeignKeyConstraint(["area_id"], ["site_area.id"], name=op.f("fk_task_draft_area_id_site_area")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_draft")),
    )
    op.create_index(op.f("ix_task_draft_user_id"), "task_draft", ["user_id"], unique=False)
    op.create_table(
        "user_area_permission",
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("area_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["area_id"], ["site_area.id"], name=op.f("fk_user_area_permission_area_id_site_area")
        ),
        sa.PrimaryKeyConstraint("user_id", "area_id", name=op.f("pk_user_area_permission")),
    )
    op.create_table(
        "approval_order",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("draft_id", sa.Uuid(), nullable=False),
        sa.Column("draft_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("approver_id", sa.String(length=128), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('PENDING','APPROVED','REJECTED','REVOKED')",
            name=op.f("ck_approval_order_approval_status"),
        ),
        sa.ForeignKeyConstraint(
            ["draft_id"], ["task_draft.id"], name=op.f("fk_approval_order_draft_id_task_draft")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_order")),
    )
    op.create_index(
        "idx_approval_draft_version", "approval_order", ["draft_id", "draft_version"], unique=False
    )
    op.create_table(
        "flight_route",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("draft_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("waypoints", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["draft_id"], ["task_draft.id"], name=op.f("fk_flight_route_draft_id_task_draft")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flight_route")),
        sa.UniqueConstraint("draft_id", "version", name="uq_route_draft_version"),
    )
    op.create_table(
        "user_device_permission",
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["device.id"], name=op.f("fk_user_device_permission_device_id_device")
        ),
        sa.PrimaryKeyConstraint("user_id", "device_id", name=op.f("pk_user_device_permission")),
    )


def downgrade() -> None:
    op.drop_table("user_device_permission")
    op.drop_table("flight_route")
    op.drop_index("idx_approval_draft_version", table_name="approval_order")
    op.drop_table("approval_order")
    op.drop_table("user_area_permission")
    op.drop_index(op.f("ix_task_draft_user_id"), table_name="task_draft")
    op.drop_table("task_draft")
    op.drop_table("device")
    op.drop_index(op.f("ix_conversation_message_session_id"), table_name="conversation_message")
    op.drop_table("conversation_message")
    op.drop_table("task_report")
    op.drop_index(op.f("ix_task_event_outbox_task_id"), table_name="task_event_outbox")
    op.drop_index("idx_outbox_pending", table_name="task_event_outbox")
    op.drop_table("task_event_outbox")
    op.drop_index("idx_audit_task", table_name="task_audit_log")
    op.drop_table("task_audit_log")
    op.drop_table("site_area")
    op.drop_table("processed_event")
    op.drop_index(op.f("ix_platform_event_task_id"), table_name="platform_event")
    op.drop_table("platform_event")
    op.drop_index("idx_event_failure_event", table_name="event_failure")
    op.drop_table("event_failure")
    op.drop_index("idx_drone_task_status_created", table_name="drone_task")
    op.drop_index("idx_drone_task_device_status", table_name="drone_task")
    op.drop_table("drone_task")
    op.drop_table("dispatch_attempt")
    op.drop_table("dead_letter")
    op.drop_index(op.f("ix_conversation_session_user_id"), table_name="conversation_session")
    op.drop_table("conversation_session")
