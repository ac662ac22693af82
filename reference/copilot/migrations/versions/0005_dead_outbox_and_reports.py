"""A terminal DEAD state for outbox rows and reports (seed 000 §5.5: retries are bounded; what exceeds them waits
for an operator to re-drive it): the publisher and the report worker stop after the policy's attempts, record
when, and count the re-drives.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECKS = {  # table -> (constraint, before, after)
    "task_event_outbox": ("ck_task_event_outbox_outbox_status", "status IN ('PENDING','SENT')",
                          "status IN ('PENDING','SENT','DEAD')"),
    "task_report": ("ck_task_report_report_status", "status IN ('PENDING','UPLOADED','UPLOAD_FAILED')",
                    "status IN ('PENDING','UPLOADED','UPLOAD_FAILED','DEAD')"),
}


def upgrade() -> None:
    for table, (name, _, after) in _CHECKS.items():
        op.drop_constraint(op.f(name), table, type_="check")
        op.create_check_constraint(op.f(name), table, after)
        op.add_column(table, sa.Column("dead_at", sa.DateTime(timezone=True), nullable=True))
        op.add_column(table, sa.Column("redrive_count", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table, (name, before, _) in _CHECKS.items():
        op.execute(sa.text(f"UPDATE {table} SET status = 'PENDING' WHERE status = 'DEAD'"))
        op.drop_column(table, "redrive_count")
        op.drop_column(table, "dead_at")
        op.drop_constraint(op.f(name), table, type_="check")
        op.create_check_constraint(op.f(name), table, before)
