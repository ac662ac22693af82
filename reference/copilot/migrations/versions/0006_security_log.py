"""The append-only security log: security-relevant refusals, written outside the refused transaction (issue 11).
Re-run the role grants after this migration (reference.copilot.migrations.roles): the application role gets SELECT and
INSERT on it only.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "security_log",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("code", sa.String(80), nullable=False),
        sa.Column("draft_id", sa.Uuid(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_log")),
    )
    op.create_index(op.f("ix_security_log_actor"), "security_log", ["actor"])


def downgrade() -> None:
    op.drop_index(op.f("ix_security_log_actor"), table_name="security_log")
    op.drop_table("security_log")
