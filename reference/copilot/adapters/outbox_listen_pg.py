"""Wakes the outbox publisher on PostgreSQL: LISTEN on the channel that migration 0007's trigger notifies when a
transaction that wrote a PENDING outbox row commits (services.outbox).

One autocommit psycopg connection per publisher process, outside SQLAlchemy's pool. The first wait starts
listening and returns at once, so the claim that follows sees everything committed before; from then on
notifications queue on the connection while the publisher is busy, and none is lost. Any error (an outage, a cut
link) drops the connection and sleeps the poll time: the publisher polls until it can listen again. The
publisher's own timeout covers what a dead connection does not report."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_SLICE_S = 0.5  # a wait is cut into slices: the worker's stop signal is checked between them


class PgOutboxListener:
    def __init__(self, database_url: str, channel: str, connect_timeout_s: float = 3.0,
                 application_name: str = "sortie-outbox-listener") -> None:
        from sqlalchemy.engine import make_url

        url = make_url(database_url).set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._channel = channel
        self._connect_timeout_s = connect_timeout_s
        self.application_name = application_name  # how pg_stat_activity names the connection
        self._conn: Any = None

    def wait(self, timeout_s: float, poll_s: float, sleep: Callable[[float], None]) -> bool:
        """Return once a notification arrived (True), or after ``timeout_s`` (False); ``sleep`` (the worker's,
        which ends the loop on SIGTERM) is called between slices of the wait. The first call starts listening and
        returns True at once: the caller should claim."""
        import psycopg

        try:
            if self._conn is None:
                self._conn = psycopg.connect(self._dsn, autocommit=True, application_name=self.application_name,
                                             connect_timeout=max(1, round(self._connect_timeout_s)))
                self._conn.execute(f"LISTEN {self._channel}")
                return True
            left = timeout_s
            while left > 0:
                step = min(left, _SLICE_S)
                if any(True for _ in self._conn.notifies(timeout=step, stop_after=1)):
                    for _ in self._conn.notifies(timeout=0.0):  # what else queued: one claim serves them all
                        pass
                    return True
                left -= step
                sleep(0.0)
            return False
        except psycopg.Error as exc:
            log.info("outbox notifications unavailable, polling: %s", exc)
            self.close()
            sleep(poll_s)
            return False

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # the connection is already gone
                pass
            self._conn = None
