"""Idempotent draft creation (seed 000 §6.3, keys per operation): the creating request's key and payload hash,
unique per user. Drafts made before carry none.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("task_draft", sa.Column("idempotency_key", sa.String(160), nullable=True))
    op.add_column("task_draft", sa.Column("request_hash", sa.String(64), nullable=True))
    op.create_unique_constraint("uq_draft_idempotency", "task_draft", ["user_id", "idempotency_key"])


def downgrade() -> None:
    op.drop_constraint("uq_draft_idempotency", "task_draft", type_="unique")
    op.drop_column("task_draft", "request_hash")
    op.drop_column("task_draft", "idempotency_key")
