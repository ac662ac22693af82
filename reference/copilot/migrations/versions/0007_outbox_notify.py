"""Outbox notifications: a transaction that writes a PENDING outbox row (a new event, a re-drive) notifies the
channel ``task_event_outbox`` when it commits, so an idle publisher claims at once instead of polling
(services.outbox). PostgreSQL folds a transaction's identical notifications into one. No grant is needed: the
trigger runs as the writing role, and pg_notify is open to every role.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "task_event_outbox"  # reference.copilot.services.outbox.OUTBOX_CHANNEL, as it was when this ran


def upgrade() -> None:
    op.execute(f"""
        CREATE FUNCTION notify_task_event_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END $$""")
    op.execute("""
        CREATE TRIGGER task_event_outbox_notify AFTER INSERT OR UPDATE OF status ON task_event_outbox
        FOR EACH ROW WHEN (NEW.status = 'PENDING') EXECUTE FUNCTION notify_task_event_outbox()""")


def downgrade() -> None:
    op.execute("DROP TRIGGER task_event_outbox_notify ON task_event_outbox")
    op.execute("DROP FUNCTION notify_task_event_outbox()")
