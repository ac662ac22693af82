"""One task per confirmed draft version (seed 000 §6.3): confirming a version again, with any key, answers with
the task that version already made, whatever its state; to fly it again the user revises the draft.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_unique_constraint("uq_task_draft_version", "drone_task", ["draft_id", "draft_version"])


def downgrade() -> None:
    op.drop_constraint("uq_task_draft_version", "drone_task", type_="unique")
