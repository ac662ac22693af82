"""The example system's HTTP API, for `sortie fuzz` (its System.fuzz): a counter that a writer increments and a
reader reads, each increment also written as a row; its invariant on the database: the counter is the sum of its
increment rows (nothing half-written). ``planted`` switches on one defect for tests/core/test_fuzz.py: a 500 for
an increment over 8 ("server-error"), or an increment of 1 that skips its row ("half-written")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask, jsonify, request
from sqlalchemy import Column, Integer, MetaData, Table, func, insert, select, update
from sqlalchemy.pool import StaticPool

from scenarios.systems import FuzzRequest, FuzzSpec
from scenarios.verdicts import Verdict, Violation, judged

ROLES = ("writer", "reader")
# An increment of 5 is refused (422 RESERVED): the document leaves this rule to its x-schema-valid-refusals, as a
# real API leaves a rule of the state, and makes 5 its example, so the fuzzer's first request meets it.
RESERVED = 5
TOKENS = {"writer-token": "writer", "reader-token": "reader"}
METADATA = MetaData()
COUNTER = Table("counter", METADATA, Column("id", Integer, primary_key=True), Column("value", Integer, nullable=False))
INCREMENT = Table("increment", METADATA, Column("id", Integer, primary_key=True), Column("by", Integer, nullable=False))

_PROBLEM = {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/problem+json": {"schema": _PROBLEM}}}


_VALUE = {"description": "The counter.", "content": {"application/json": {"schema": {
    "type": "object", "required": ["value"], "additionalProperties": False,
    "properties": {"value": {"type": "integer"}}}}}}
_REFUSED = {**_problem("`INVALID_PARAMETERS`: `by` missing or not an integer in 1..10; `RESERVED`: an increment "
                       "of 5"), "x-schema-valid-refusals": ["RESERVED"]}
DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "example counter", "version": "1"},
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
    "paths": {
        "/counter": {"get": {"responses": {"200": _VALUE, "401": _problem("no or a wrong token")}}},
        "/counter/increments": {"post": {
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["by"], "additionalProperties": False,
                "properties": {"by": {"type": "integer", "minimum": 1, "maximum": 10}}},
                "example": {"by": RESERVED}}}},
            "responses": {"200": _VALUE, "400": _problem("not a JSON object"), "401": _problem("no or a wrong token"),
                          "403": _problem("a reader"), "422": _REFUSED}}},
    },
}


def _refusal(status: int, code: str) -> Any:
    resp = jsonify({"code": code})
    resp.status_code, resp.mimetype = status, "application/problem+json"
    return resp


def create_app(engine: Any, planted: str | None) -> Flask:
    app = Flask("example-counter")

    def role() -> str | None:
        header = request.headers.get("Authorization", "")
        return TOKENS.get(header.removeprefix("Bearer ")) if header.startswith("Bearer ") else None

    def value() -> Any:
        with engine.connect() as conn:
            return jsonify({"value": conn.execute(select(COUNTER.c.value)).scalar_one()})

    @app.get("/counter")
    def read() -> Any:
        return value() if role() else _refusal(401, "UNAUTHENTICATED")

    @app.post("/counter/increments")
    def increment() -> Any:
        who = role()
        if who is None:
            return _refusal(401, "UNAUTHENTICATED")
        if who != "writer":
            return _refusal(403, "FORBIDDEN_ROLE")
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return _refusal(400, "MALFORMED_JSON")
        by = body.get("by")
        if isinstance(by, float) and by.is_integer():  # 3.0 is an integer to JSON Schema
            by = int(by)
        if set(body) != {"by"} or type(by) is not int or not 1 <= by <= 10:
            return _refusal(422, "INVALID_PARAMETERS")
        if planted == "server-error" and by > 8:
            raise RuntimeError("planted: an increment over 8")
        if by == RESERVED:
            return _refusal(422, "RESERVED")
        with engine.begin() as conn:
            conn.execute(update(COUNTER).values(value=COUNTER.c.value + by))
            if not (planted == "half-written" and by == 1):
                conn.execute(insert(INCREMENT).values(by=by))
        return value()

    return app


class CounterTarget:
    """The counter app over an in-memory database (a scenarios.systems.FuzzTarget)."""

    base_url = None

    def __init__(self, planted: str | None) -> None:
        from sqlalchemy import create_engine

        self.engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
        METADATA.create_all(self.engine)
        with self.engine.begin() as conn:
            conn.execute(insert(COUNTER).values(id=1, value=0))
        self.app = create_app(self.engine, planted)

    def credentials(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {role}-token"}

    def examples(self, role: str) -> dict[str, list[Any]]:
        return {}  # no path parameters

    def verdicts(self) -> list[Verdict]:
        with self.engine.connect() as conn:
            counter = conn.execute(select(COUNTER.c.value)).scalar_one()
            rows, total = conn.execute(select(func.count(), func.coalesce(func.sum(INCREMENT.c.by), 0))).one()
        bad = [] if counter == total else [Violation(None, f"the counter is {counter}, its increments sum to {total}")]
        verdict = judged(rows, bad)
        verdict.invariant, verdict.title = "N2", "the counter is the sum of its increment rows"
        return [verdict]


def fuzz_spec(planted: str | None = None) -> FuzzSpec:
    @contextmanager
    def in_process(_req: FuzzRequest) -> Iterator[CounterTarget]:
        target = CounterTarget(planted)
        try:
            yield target
        finally:
            target.engine.dispose()

    return FuzzSpec(openapi=lambda: DOCUMENT, roles=ROLES, in_process=in_process)
