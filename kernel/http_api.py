"""What every route of a reference's Flask API uses (the job system's, the status service's): one transaction per
call (503 DATABASE_UNAVAILABLE when the database cannot be reached, so the caller retries the same request), the
caller's bearer token and role, and a request body checked against the API document's schema for its operation.
Refusals are ``kernel.http_problems.Problem``s, answered by its handlers."""

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


def no_ids() -> Any:
    raise AssertionError("this API draws no UUIDs")


class ApiContext:
    """``now`` is the transaction clock in the form the database stores (MariaDB's DATETIME takes naive UTC)."""

    def __init__(self, engine: Engine, verify: TokenVerifier, bodies: RequestBodies, *, max_body_bytes: int,
                 now: Callable[[], datetime], log: logging.Logger) -> None:
        self.engine, self.verify, self.bodies = engine, verify, bodies
        self.max_body_bytes, self.now, self.log = max_body_bytes, now, log

    def in_tx(self, fn: Callable[[Tx], T]) -> T:
        try:
            with Session(self.engine) as session, session.begin():
                return fn(Tx(session, self.now(), no_ids))
        except exc.OperationalError as err:  # the link (or the database) is down: the caller retries the same request
            self.engine.dispose()
            self.log.warning("database unavailable: %s", str(err.orig).strip()[:200])
            raise Problem(503, "DATABASE_UNAVAILABLE", "the database is unavailable; retry the same request") \
                from None

    def caller(self, *roles: str) -> Caller:
        me = self.verify(bearer_token(request.headers.get("Authorization")))
        if me.role not in roles:
            raise Problem(403, "FORBIDDEN", f"the role {me.role} may not do this (it takes {', '.join(roles)})")
        return me

    def body(self, operation_id: str) -> dict[str, Any]:
        value: dict[str, Any] = jsonbody.read_request(request, self.max_body_bytes)
        self.bodies.check(operation_id, value)  # an object: the document's schema asks for one
        return value
