"""Index drone_task.external_task_id: platform events look tasks up by the platform's flight id.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("idx_drone_task_external_id", "drone_task", ["external_task_id"], unique=False)


def downgrade() -> None:
    op.drop_index("idx_drone_task_external_id", table_name="drone_task")
