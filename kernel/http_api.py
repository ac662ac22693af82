"""What every route of a reference's Flask API uses: one transaction per call (run again after a lock conflict; 503
DATABASE_UNAVAILABLE when the database cannot be reached, so the caller retries the same request), the caller's
bearer token and role, and a request body checked against the API document's schema for its operation. Refusals
are ``kernel.http_problems.Problem``s, answered by its handlers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from flask import request
from sqlalchemy import Engine, exc
from sqlalchemy.orm import Session

from kernel import jsonbody
from kernel.effects import Tx
from kernel.http_problems import Problem
from kernel.openapi import RequestBodies
from kernel.tokens import Caller, TokenVerifier, bearer_token

T = TypeVar("T")
# InnoDB picks a deadlock's victim (1213) or gives up a lock wait (1205); PostgreSQL's deadlock (40P01) and
# serialization failure (40001): the transaction was rolled back whole and is run again, not answered 503.
LOCK_CONFLICT_ERRNOS = (1213, 1205)
LOCK_CONFLICT_SQLSTATES = ("40P01", "40001")
LOCK_CONFLICT_TRIES = 3


def lock_conflict(err: exc.DBAPIError) -> bool:
    orig = err.orig
    errno = orig.args[0] if orig is not None and orig.args else None
    return errno in LOCK_CONFLICT_ERRNOS or getattr(orig, "sqlstate", None) in LOCK_CONFLICT_SQLSTATES \
        or getattr(orig, "pgcode", None) in LOCK_CONFLICT_SQLSTATES


def no_ids() -> Any:
    raise AssertionError("this API draws no UUIDs")


class ApiContext:
    """``now`` is the transaction clock in the form the database stores (MariaDB's DATETIME takes naive UTC)."""

    def __init__(self, engine: Engine, verify: TokenVerifier, bodies: RequestBodies, *, max_body_bytes: int,
                 now: Callable[[], datetime], log: logging.Logger) -> None:
        self.engine, self.verify, self.bodies = engine, verify, bodies
        self.max_body_bytes, self.now, self.log = max_body_bytes, now, log

    def in_tx(self, fn: Callable[[Tx], T]) -> T:
        for attempt in range(1, LOCK_CONFLICT_TRIES + 1):
            try:
                with Session(self.engine) as session, session.begin():
                    return fn(Tx(session, self.now(), no_ids))
            except exc.OperationalError as err:
                if lock_conflict(err) and attempt < LOCK_CONFLICT_TRIES:  # rolled back whole: run it again
                    self.log.info("transaction retried after a lock conflict: %s", str(err.orig).strip()[:200])
                    continue
                raise self._unavailable(err) from None
        raise AssertionError("unreachable: the last try returns or raises")

    def _unavailable(self, err: exc.OperationalError) -> Problem:
        """The link (or the database) is down, or a lock conflict outlasted its retries: the caller retries."""
        if not lock_conflict(err):
            self.engine.dispose()
        self.log.warning("database unavailable: %s", str(err.orig).strip()[:200])
        return Problem(503, "DATABASE_UNAVAILABLE", "the database is unavailable; retry the same request")

    def caller(self, *roles: str) -> Caller:
        me = self.verify(bearer_token(request.headers.get("Authorization")))
        if me.role not in roles:
            raise Problem(403, "FORBIDDEN", f"the role {me.role} may not do this (it takes {', '.join(roles)})")
        return me

    def body(self, operation_id: str) -> dict[str, Any]:
        value: dict[str, Any] = jsonbody.read_request(request, self.max_body_bytes)
        self.bodies.check(operation_id, value)  # an object: the document's schema asks for one
        return value
