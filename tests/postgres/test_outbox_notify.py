"""On a real PostgreSQL: migration 0007's trigger notifies the outbox channel when, and only when, a transaction
that wrote a PENDING outbox row commits; the publisher's listener (reference.copilot.adapters.outbox_listen_pg) wakes
on it
and falls back to polling when its connection dies.

Negative checks need no timeout: the test sends a sentinel notification last and reads the channel up to it
(PostgreSQL delivers notifications in commit order), so anything the trigger sent shows up before the sentinel."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, insert, text, update
from sqlalchemy.engine import make_url

from reference.copilot.adapters.outbox_listen_pg import PgOutboxListener
from reference.copilot.models import TaskEventOutbox
from reference.copilot.services.outbox import OUTBOX_CHANNEL

MakeDb = Callable[[str], Any]
Engines = Callable[[str], Engine]
SENTINEL = "sentinel"


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _row(status: str = "PENDING") -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"id": uuid.uuid4(), "task_id": uuid.uuid4(), "event_type": "TaskCreated", "task_version": 0,
            "payload": {}, "status": status, "attempts": 0, "available_at": now, "created_at": now}


@pytest.fixture()
def channel(migrated_database: MakeDb, engines: Engines) -> Any:
    db = migrated_database("sortie_outbox_notify")
    engine = engines(db.app_url)  # the application's role: the trigger must work for it
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM task_event_outbox"))
    listener = psycopg.connect(_dsn(db.app_url), autocommit=True)
    listener.execute(f"LISTEN {OUTBOX_CHANNEL}")

    def heard() -> list[str]:
        """The payloads notified since the last call (the trigger's are empty), read up to a sentinel."""
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": OUTBOX_CHANNEL, "p": SENTINEL})
        got: list[str] = []
        for note in listener.notifies(timeout=30.0):
            if note.payload == SENTINEL:
                return got
            got.append(note.payload)
        raise AssertionError("the sentinel notification never arrived")

    yield engine, heard, db
    listener.close()


def test_a_committed_pending_row_notifies_once_per_transaction(channel: Any) -> None:
    engine, heard, _ = channel
    table = TaskEventOutbox.__table__
    with engine.begin() as conn:  # three rows, one transaction: PostgreSQL folds them into one notification
        conn.execute(insert(table), [_row(), _row(), _row()])
    assert heard() == [""]


def test_no_notification_for_a_rollback_or_a_row_that_is_not_pending(channel: Any) -> None:
    engine, heard, _ = channel
    table = TaskEventOutbox.__table__
    row = _row()
    with engine.begin() as conn:
        conn.execute(insert(table), [row])
    heard()
    conn = engine.connect()
    with conn.begin() as tx:
        conn.execute(insert(table), [_row()])
        tx.rollback()
    conn.close()
    with engine.begin() as conn:
        conn.execute(insert(table), [_row(status="SENT")])
        # a claim moves availability only; marking sent sets another status: neither announces a due row
        conn.execute(update(table).where(table.c.id == row["id"]).values(attempts=table.c.attempts + 1))
        conn.execute(update(table).where(table.c.id == row["id"]).values(status="SENT"))
    assert heard() == []
    with engine.begin() as conn:  # a re-drive sets it PENDING again: the publisher must hear of it
        conn.execute(update(table).where(table.c.id == row["id"]).values(status="PENDING"))
    assert heard() == [""]


def test_the_listener_wakes_on_a_commit_and_polls_after_losing_its_connection(channel: Any, engines: Engines
                                                                             ) -> None:
    engine, _, db = channel
    sleeps: list[float] = []
    listener = PgOutboxListener(db.app_url, OUTBOX_CHANNEL, application_name="sortie-test-listener")
    try:
        assert listener.wait(30.0, 0.5, sleeps.append) is True  # starts listening: claim at once
        with engine.begin() as conn:
            conn.execute(insert(TaskEventOutbox.__table__), [_row()])
        assert listener.wait(30.0, 0.5, sleeps.append) is True  # queued while nobody waited: not lost
        assert listener.wait(0.2, 0.5, sleeps.append) is False  # nothing new: the timeout
        with engines(db.owner_url).begin() as conn:  # the backend dies (an outage, a cut link)
            killed = conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :name"
            ), {"name": listener.application_name}).scalar_one()
        assert killed == 1
        sleeps.clear()
        assert listener.wait(30.0, 0.5, sleeps.append) is False
        assert sleeps == [0.5]  # it polled instead, and listens again on the next wait
        assert listener.wait(30.0, 0.5, sleeps.append) is True
    finally:
        listener.close()
