"""Issue 11's adversarial kinds as data: ONE table (``KINDS``) of bad requests, each with the refusal it must get
(status, stable ``code``) and whether it leaves a row in the security log. Two runs send the same table:

- tests/api/test_adversarial.py: on SQLite, through Flask's test client (a fresh database per test);
- tests/api/test_adversarial_pg.py: on PostgreSQL, over HTTP to the API under gunicorn (the native stack's worker
  class and app factory, connected as the application role).

A kind is a function of a :class:`Scene` (drafts, a task and keys made through the API itself, each on first use) to
a :class:`Request`, built just before it is sent (tokens' ``exp`` are computed then). A
:class:`Bench` sends one kind and checks everything: the status, ``application/problem+json``, the code, no stack
trace, and that no table changed (row counts and a digest of every row of every table, read around the request),
except ``security_log``, which must keep its rows and gain exactly the kind's row if the kind is security-relevant.

``gunicorn_code``: gunicorn itself refuses some header values (NUL and the other control characters but TAB,
RFC 9110 §5.5) with a 400 before the application sees them, answered in problem+json by
reference.copilot.http.gunicorn_worker; over HTTP that is the code to expect, the application's own check (the only one
on
the test client) being the second line."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import jwt
from api_support import APPROVER, FOREIGN_DEVICE, OTHER_AREA, OWNER, SECRET, WEBHOOK_TOKEN, draft_body, plan
from sqlalchemy import Engine, MetaData, select

from reference.copilot.api import PROBLEM_TYPE_BASE
from reference.copilot.http.auth import MAX_LIFETIME_S, issue_token
from reference.copilot.models import Base, SecurityEvent
from systems.copilot.workload import SUPERVISOR_ID as SUPERVISOR  # seed_fleet: a permission on every site

SECURITY_LOG = SecurityEvent.__tablename__
STRANGER = "mallory"  # signed tokens, but no permission anywhere


# ------------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # sent as is
    content_type: str | None = None  # None: no Content-Type header


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive (werkzeug Headers, requests' CaseInsensitiveDict)
    text: str


Send = Callable[[Request], Answer]


def flask_sender(client: Any) -> Send:
    """Through Flask's test client (no server in between)."""

    def send(req: Request) -> Answer:
        resp = client.open(req.path, method=req.method, data=req.body, headers=req.headers,
                           content_type=req.content_type)
        return Answer(resp.status_code, resp.headers, resp.get_data(as_text=True))

    return send


def http_sender(base_url: str, session: Any, timeout_s: float = 10.0) -> Send:
    """Over real HTTP with ``requests`` (a ``requests.Session``)."""

    def send(req: Request) -> Answer:
        headers = dict(req.headers)
        if req.content_type is not None:
            headers["Content-Type"] = req.content_type
        resp = session.request(req.method, base_url + req.path, data=req.body, headers=headers, timeout=timeout_s,
                               allow_redirects=False)
        return Answer(resp.status_code, resp.headers, resp.text)

    return send


def bearer(user: str = OWNER, role: str = "operator", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, user, role)}", **extra}


def forged(claims: dict[str, Any], secret: str = SECRET, algorithm: str = "HS256") -> dict[str, str]:
    """A token with exactly these claims (signed with the API's secret unless told)."""
    return {"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm=algorithm)}"}


def json_request(method: str, path: str, body: Any, headers: dict[str, str]) -> Request:
    return Request(method, path, headers, json.dumps(body).encode(), "application/json")


def raw_json(method: str, path: str, text: str, headers: dict[str, str]) -> Request:
    return Request(method, path, headers, text.encode(), "application/json")


def new_key(prefix: str = "key") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


# ------------------------------------------------------------------------------------------------ the scene


class Scene:
    """What the kinds refer to, made through the API itself, each part on first use (while the request is built,
    before the tables are read); kinds do not change it."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def _create(self, key: str) -> dict[str, Any]:
        return _ok(self._send(json_request("POST", "/v1/drafts", draft_body(), bearer(**{"Idempotency-Key": key}))),
                   201)

    def _approved(self) -> dict[str, Any]:
        draft = self._create(new_key())
        _ok(self._send(json_request("POST", f"/v1/drafts/{draft['id']}/approvals",
                                    {"draft_version": draft["version"], "decision": "approve"},
                                    bearer(APPROVER, "approver"))), 201)
        return draft

    @cached_property
    def _drafted(self) -> tuple[dict[str, Any], str]:
        key = new_key("scene-draft")
        return self._create(key), key

    @property
    def draft(self) -> dict[str, Any]:
        """OWNER's draft at version 1, not approved."""
        return self._drafted[0]

    @property
    def draft_key(self) -> str:
        """The Idempotency-Key that created ``draft``."""
        return self._drafted[1]

    @cached_property
    def ready(self) -> dict[str, Any]:
        """OWNER's draft, approved at version 1, not confirmed."""
        return self._approved()

    @cached_property
    def _confirmed(self) -> tuple[dict[str, Any], str]:
        draft, key = self._approved(), new_key("scene-confirm")
        task = _ok(self._send(json_request("POST", f"/v1/drafts/{draft['id']}/confirm", {"draft_version": 1},
                                           bearer(**{"Idempotency-Key": key}))), 201)
        return task, key

    @property
    def task(self) -> dict[str, Any]:
        """OWNER's task (CREATED), confirmed from an approved draft of its own."""
        return self._confirmed[0]

    @property
    def confirm_key(self) -> str:
        """The Idempotency-Key that confirmed ``task``."""
        return self._confirmed[1]

    @cached_property
    def revised(self) -> dict[str, Any]:
        """OWNER's draft approved at version 1, then revised to version 2 (READY, not approved)."""
        draft = self._approved()
        out = _ok(self._send(json_request("PATCH", f"/v1/drafts/{draft['id']}",
                                          {"expected_version": 1, "plan": plan()}, bearer())), 200)
        assert out["version"] == 2
        return out


def _ok(answer: Answer, status: int) -> dict[str, Any]:
    assert answer.status == status, (answer.status, answer.text)
    out: dict[str, Any] = json.loads(answer.text)
    return out


# ------------------------------------------------------------------------------------------------ the kinds


@dataclass(frozen=True)
class Kind:
    id: str
    group: str  # which test of test_adversarial.py runs it on SQLite
    status: int
    code: str
    request: Callable[[Scene], Request]
    logged: str | None = None  # the security log's action for this refusal (actor OWNER); None: no row
    gunicorn_code: str | None = None  # the code when gunicorn refuses the request before the application
    oracle: tuple[str, str] | None = None  # (pair, the probed value): answers of one pair differ only by the value

    def code_for(self, gunicorn: bool) -> str:
        return self.gunicorn_code if gunicorn and self.gunicorn_code else self.code


def _confirm(key: str | None, version: int = 1, who: str = "ready") -> Callable[[Scene], Request]:
    def build(s: Scene) -> Request:
        headers = bearer() if key is None else bearer(**{"Idempotency-Key": key})
        draft = getattr(s, who)
        return json_request("POST", f"/v1/drafts/{draft['id']}/confirm", {"draft_version": version}, headers)

    return build


def _create(headers: Callable[[], dict[str, str]], body: Callable[[], Any] = draft_body) -> Callable[[Scene], Request]:
    return lambda s: json_request("POST", "/v1/drafts", body(), headers())


def _keyed(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Idempotency-Key": new_key()}


def _claims(**claims: Any) -> Callable[[Scene], Request]:
    def build(s: Scene) -> Request:
        values = {"sub": OWNER, "role": "operator", "exp": int(time.time()) + 600, **claims}
        return json_request("POST", "/v1/drafts", draft_body(), _keyed(forged(values)))

    return build


def _edge(lat: float, lon: float) -> Callable[[Scene], Request]:
    # SITE-001 is lat 30..30.05, lon 120..120.05 (api_support)
    waypoints = [[30.01, 120.01], [lat, lon], [30.03, 120.02]]
    return _create(lambda: _keyed(bearer()), lambda: draft_body(waypoints=waypoints))


def _approval(user: str, role: str = "approver") -> Callable[[Scene], Request]:
    return lambda s: json_request("POST", f"/v1/drafts/{s.draft['id']}/approvals",
                                  {"draft_version": 1, "decision": "approve"}, bearer(user, role))


def _review(user: str, role: str) -> Callable[[Scene], Request]:
    return lambda s: json_request("POST", f"/v1/tasks/{s.task['task_id']}/review",
                                  {"resolution": "completed", "reason": "the pilot says it landed"}, bearer(user, role))


def _redrive(kind: str, item_id: str, user: str = SUPERVISOR, role: str = "supervisor") -> Callable[[Scene], Request]:
    return lambda s: json_request("POST", f"/v1/ops/dead/{kind}/{item_id}/redrive", {"reason": "the outage is over"},
                                  bearer(user, role))


def _webhook(token: str | None = WEBHOOK_TOKEN, **event: Any) -> Callable[[Scene], Request]:
    def build(s: Scene) -> Request:
        body = [{"external_id": "FL-404", "seq": 1, "kind": "telemetry", "at": time.time(), **event}]
        return json_request("POST", "/v1/platform/events", body, {} if token is None else {"X-Webhook-Token": token})

    return build


def _body_text(text: str) -> Callable[[Scene], Request]:
    return lambda s: raw_json("POST", "/v1/drafts", text, _keyed(bearer()))


def _typed(content_type: str | None) -> Callable[[Scene], Request]:
    return lambda s: Request("POST", "/v1/drafts", _keyed(bearer()), json.dumps(draft_body()).encode(), content_type)


def _exp_past_the_limit() -> int:
    return int(time.time()) + MAX_LIFETIME_S + 3600


_BAD_KEY, _BAD_TOKEN, _BAD_JSON = "INVALID_IDEMPOTENCY_KEY", "INVALID_TOKEN", "MALFORMED_JSON"
_UNSTORABLE = "UNSTORABLE_STRING"  # valid JSON no database stores (NUL, a lone surrogate): a code of its own
_DRAFT = "CREATE_DRAFT"

KINDS: tuple[Kind, ...] = (
    # 1. control characters in a header value the API stores (the confirm's Idempotency-Key)
    Kind("key-nul", "idempotency-key", 400, _BAD_KEY, _confirm("abc\x00def"), gunicorn_code="BAD_REQUEST"),
    Kind("key-tab", "idempotency-key", 400, _BAD_KEY, _confirm("tab\there")),
    Kind("key-bell", "idempotency-key", 400, _BAD_KEY, _confirm("bell\x07"), gunicorn_code="BAD_REQUEST"),
    Kind("key-del", "idempotency-key", 400, _BAD_KEY, _confirm("del\x7f"), gunicorn_code="BAD_REQUEST"),
    Kind("key-c1", "idempotency-key", 400, _BAD_KEY, _confirm("c1\x85")),
    # 2. a correctly signed token whose role claim is not a role
    Kind("role-list", "role-claim", 401, _BAD_TOKEN, _claims(role=["approver"])),
    Kind("role-object", "role-claim", 401, _BAD_TOKEN, _claims(role={"r": "approver"})),
    Kind("role-number", "role-claim", 401, _BAD_TOKEN, _claims(role=7)),
    Kind("role-null", "role-claim", 401, _BAD_TOKEN, _claims(role=None)),
    Kind("role-true", "role-claim", 401, _BAD_TOKEN, _claims(role=True)),
    # 7. tokens with an absurd exp
    Kind("exp-2**64", "lifetime", 401, _BAD_TOKEN, _claims(exp=2**64)),
    Kind("exp-2**40", "lifetime", 401, _BAD_TOKEN, _claims(exp=2**40)),
    Kind("exp-string", "lifetime", 401, _BAD_TOKEN, _claims(exp="later")),
    Kind("exp-an-hour-past-the-limit", "lifetime", 401, _BAD_TOKEN,
         lambda s: _claims(exp=_exp_past_the_limit())(s)),
    Kind("exp-infinity", "lifetime", 401, _BAD_TOKEN, _claims(exp=float("inf"))),
    Kind("exp-nan", "lifetime", 401, _BAD_TOKEN, _claims(exp=float("nan"))),
    # 5. loose parsing
    Kind("duplicate-key", "parsing", 400, _BAD_JSON,
         _body_text('{"goal": "a", "goal": "b", "area_id": "SITE-001", "plan": {}}')),
    Kind("duplicate-nested-key", "parsing", 400, _BAD_JSON,
         _body_text('{"goal": "a", "area_id": "SITE-001", "plan": {"device_id": "X", "device_id": "Y"}}')),
    Kind("json-as-text-plain", "parsing", 415, "UNSUPPORTED_MEDIA_TYPE", _typed("text/plain")),
    Kind("json-as-form", "parsing", 415, "UNSUPPORTED_MEDIA_TYPE", _typed("application/x-www-form-urlencoded")),
    Kind("json-without-content-type", "parsing", 415, "UNSUPPORTED_MEDIA_TYPE", _typed(None)),
    # 6. existence oracles: an unknown device (area) is answered as another fleet's
    Kind("device-unknown", "oracle", 403, "FORBIDDEN_DEVICE",
         _create(lambda: _keyed(bearer()), lambda: draft_body(device_id="DRONE-9999")),
         logged=_DRAFT, oracle=("device", "DRONE-9999")),
    Kind("device-foreign", "oracle", 403, "FORBIDDEN_DEVICE",
         _create(lambda: _keyed(bearer()), lambda: draft_body(device_id=FOREIGN_DEVICE)),
         logged=_DRAFT, oracle=("device", FOREIGN_DEVICE)),
    Kind("area-unknown", "oracle", 403, "FORBIDDEN_AREA",
         _create(lambda: _keyed(bearer()), lambda: {**draft_body(), "area_id": "SITE-404"}),
         logged=_DRAFT, oracle=("area", "SITE-404")),
    Kind("area-foreign", "oracle", 403, "FORBIDDEN_AREA",
         _create(lambda: _keyed(bearer()), lambda: {**draft_body(), "area_id": OTHER_AREA}),
         logged=_DRAFT, oracle=("area", OTHER_AREA)),
    # 3. separation of duties: the owner may not approve; an unknown approver approves (and reads) nothing
    Kind("self-approval", "duties", 403, "SELF_APPROVAL", _approval(OWNER), logged="APPROVE"),
    Kind("unknown-approver-approves", "duties", 404, "DRAFT_NOT_FOUND", _approval(STRANGER)),
    Kind("unknown-approver-reads", "duties", 404, "DRAFT_NOT_FOUND",
         lambda s: Request("GET", f"/v1/drafts/{s.draft['id']}", bearer(STRANGER, "approver"))),
    # 4. the area's boundary: every edge and every corner is outside
    Kind("edge-south", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.0, 120.02)),
    Kind("edge-west", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.02, 120.0)),
    Kind("edge-north", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.05, 120.02)),
    Kind("edge-east", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.02, 120.05)),
    Kind("corner-sw", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.0, 120.0)),
    Kind("corner-se", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.0, 120.05)),
    Kind("corner-ne", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.05, 120.05)),
    Kind("corner-nw", "area-edges", 422, "COORDINATES_OUTSIDE_AREA", _edge(30.05, 120.0)),
    # more: keys, NUL where PostgreSQL cannot store it, the other security-relevant refusals, roles, ranges
    Kind("key-too-long", "more", 400, _BAD_KEY, _confirm("k" * 161)),
    Kind("confirm-key-missing", "more", 400, "MISSING_IDEMPOTENCY_KEY", _confirm(None)),
    Kind("confirm-key-reused", "more", 409, "IDEMPOTENCY_KEY_REUSED", lambda s: _confirm(s.confirm_key)(s),
         logged="CONFIRM"),
    Kind("approval-of-another-version", "more", 409, "APPROVAL_VERSION_MISMATCH",
         lambda s: _confirm(new_key(), version=2, who="revised")(s), logged="CONFIRM"),
    Kind("confirm-version-beyond-int4", "more", 422, "INVALID_PARAMETERS", _confirm("version-probe", version=2**31)),
    Kind("draft-key-nul", "more", 400, _BAD_KEY, _create(lambda: bearer(**{"Idempotency-Key": "a\x00"})),
         gunicorn_code="BAD_REQUEST"),
    Kind("draft-key-c1", "more", 400, _BAD_KEY, _create(lambda: bearer(**{"Idempotency-Key": "a\x9b"}))),
    Kind("draft-key-missing", "more", 400, "MISSING_IDEMPOTENCY_KEY", _create(bearer)),
    Kind("draft-key-reused", "more", 409, "IDEMPOTENCY_KEY_REUSED",
         lambda s: json_request("POST", "/v1/drafts", draft_body(altitude_m=80),
                                bearer(**{"Idempotency-Key": s.draft_key})), logged=_DRAFT),
    Kind("revise-to-a-foreign-device", "more", 403, "FORBIDDEN_DEVICE",
         lambda s: json_request("PATCH", f"/v1/drafts/{s.draft['id']}",
                                {"expected_version": 1, "plan": plan(device_id=FOREIGN_DEVICE)}, bearer()),
         logged="REVISE_DRAFT"),
    Kind("operator-approves", "more", 403, "FORBIDDEN_ROLE", _approval(OWNER, "operator")),
    Kind("token-sub-nul", "more", 401, _BAD_TOKEN, _claims(sub=OWNER + "\x00")),
    Kind("token-sub-too-long", "more", 401, _BAD_TOKEN, _claims(sub="u" * 129)),
    Kind("token-other-secret", "more", 401, _BAD_TOKEN,
         lambda s: json_request("POST", "/v1/drafts", draft_body(), _keyed(forged(
             {"sub": OWNER, "role": "operator", "exp": int(time.time()) + 600}, secret="x" * 40)))),
    Kind("token-alg-none", "more", 401, _BAD_TOKEN,
         lambda s: json_request("POST", "/v1/drafts", draft_body(), _keyed(forged(
             {"sub": OWNER, "role": "operator", "exp": int(time.time()) + 600}, secret="", algorithm="none")))),
    Kind("body-nul-in-a-string", "more", 400, _UNSTORABLE,
         _create(lambda: _keyed(bearer()), lambda: {**draft_body(), "goal": "north\x00fence"})),
    Kind("body-nul-in-a-key", "more", 400, _UNSTORABLE,
         _create(lambda: _keyed(bearer()), lambda: {**draft_body(), "go\x00al": "x"})),
    Kind("body-lone-surrogate", "more", 400, _UNSTORABLE,
         _body_text('{"goal": "\\ud800", "area_id": "SITE-001", "plan": ' + json.dumps(plan()) + "}")),
    Kind("body-infinite-number", "more", 400, _BAD_JSON,
         _body_text('{"goal": "a", "area_id": "SITE-001", "plan": ' + json.dumps(plan())[:-1] + ', "x": 1e400}}')),
    Kind("body-nan", "more", 400, _BAD_JSON, _body_text('{"goal": NaN}')),
    Kind("body-not-an-object", "more", 400, _BAD_JSON, _body_text("[1, 2]")),
    Kind("waypoint-beyond-double", "more", 422, "INVALID_PARAMETERS",
         _create(lambda: _keyed(bearer()), lambda: draft_body(waypoints=[[10**400, 120.01], [30.02, 120.02]]))),
    Kind("draft-id-nul", "more", 404, "DRAFT_NOT_FOUND", lambda s: Request("GET", "/v1/drafts/%00", bearer())),
    Kind("task-id-nul", "more", 404, "TASK_NOT_FOUND", lambda s: Request("GET", "/v1/tasks/%00", bearer())),
    Kind("after-version-nul", "more", 422, "INVALID_PARAMETERS",
         lambda s: Request("GET", f"/v1/tasks/{s.task['task_id']}/events?after_version=%00", bearer())),
    Kind("redrive-by-an-operator", "more", 403, "FORBIDDEN_ROLE", _redrive("outbox", str(uuid.UUID(int=1)), OWNER,
                                                                         "operator")),
    Kind("redrive-of-an-unknown-kind", "more", 404, "UNKNOWN_KIND", _redrive("everything", "1")),
    Kind("redrive-outbox-id-nul", "more", 404, "OUTBOX_EVENT_NOT_FOUND", _redrive("outbox", "%00")),
    Kind("redrive-dead-letter-superscript-digit", "more", 404, "DEAD_LETTER_NOT_FOUND",
         _redrive("dead-letter", "%C2%B2")),  # '²'.isdigit() is true; int('²') raised: a 500
    Kind("redrive-dead-letter-beyond-bigint", "more", 404, "DEAD_LETTER_NOT_FOUND",
         _redrive("dead-letter", "9" * 19)),
    Kind("redrive-dead-letter-largest-bigint-id", "more", 404, "DEAD_LETTER_NOT_FOUND",
         _redrive("dead-letter", "9" * 18)),
    Kind("webhook-without-token", "more", 401, "UNAUTHENTICATED", _webhook(None)),
    Kind("webhook-wrong-token", "more", 401, _BAD_TOKEN, _webhook("not-the-token")),
    Kind("webhook-seq-beyond-int4", "more", 422, "INVALID_PARAMETERS", _webhook(seq=2**31)),
    Kind("webhook-at-beyond-year-9999", "more", 422, "INVALID_PARAMETERS", _webhook(at=253402300800)),
    Kind("webhook-external-id-too-long", "more", 422, "INVALID_PARAMETERS", _webhook(external_id="F" * 161)),
    Kind("webhook-nul-in-external-id", "more", 400, _UNSTORABLE, _webhook(external_id="FL-\x00")),
    Kind("review-by-an-operator", "more", 403, "FORBIDDEN_ROLE", _review(OWNER, "operator")),
    Kind("review-by-an-unknown-supervisor", "more", 404, "TASK_NOT_FOUND", _review(STRANGER, "supervisor")),
    Kind("review-of-a-task-not-in-review", "more", 409, "TASK_NOT_IN_REVIEW", _review(SUPERVISOR, "supervisor")),
)

_ids = [k.id for k in KINDS]
assert len(_ids) == len(set(_ids)), "kind ids must be unique"
GROUPS = frozenset(k.group for k in KINDS)


def kinds(*groups: str) -> list[Kind]:
    unknown = set(groups) - GROUPS
    assert not unknown, f"no such group: {sorted(unknown)}"
    return [k for k in KINDS if k.group in groups]


def oracle_pairs() -> dict[str, tuple[Kind, Kind]]:
    pairs: dict[str, list[Kind]] = {}
    for k in KINDS:
        if k.oracle is not None:
            pairs.setdefault(k.oracle[0], []).append(k)
    assert all(len(v) == 2 for v in pairs.values()), pairs
    return {name: (a, b) for name, (a, b) in pairs.items()}


# ------------------------------------------------------------------------------------------------ the tables


@dataclass(frozen=True)
class State:
    tables: dict[str, tuple[int, str]]  # every table but the security log: (rows, sha256 of the rows)
    security: tuple[tuple[Any, ...], ...]  # the security log's rows, in id order


class Tables:
    """Every table of the database (reflected, so a table the models lack is seen too), read whole."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.meta = MetaData()
        self.meta.reflect(engine)
        missing = set(Base.metadata.tables) - set(self.meta.tables)
        assert not missing, f"tables of the models missing from the database: {sorted(missing)}"

    def state(self) -> State:
        tables: dict[str, tuple[int, str]] = {}
        security: tuple[tuple[Any, ...], ...] = ()
        with self.engine.connect() as conn:
            for table in self.meta.sorted_tables:
                order = list(table.primary_key.columns) or list(table.columns)
                rows = tuple(tuple(r) for r in conn.execute(select(table).order_by(*order)))
                if table.name == SECURITY_LOG:
                    security = rows
                else:
                    tables[table.name] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return State(tables, security)


# ------------------------------------------------------------------------------------------------ the checks


def assert_problem(answer: Answer, status: int, code: str) -> dict[str, Any]:
    assert answer.status == status, (answer.status, answer.text[:500])
    ctype = answer.headers.get("Content-Type", "")
    assert ctype.split(";")[0].strip() == "application/problem+json", ctype
    assert "Traceback" not in answer.text and 'File "' not in answer.text, answer.text[:500]
    body: dict[str, Any] = json.loads(answer.text)
    assert body["code"] == code, body
    assert body["status"] == status, body
    assert body["type"] == PROBLEM_TYPE_BASE + code.lower().replace("_", "-"), body
    assert body["title"] and isinstance(body["detail"], str), body
    return body


_DRAFT_PATH = re.compile(r"/v1/drafts/([0-9a-f-]{36})(?:/|$)")


def assert_unchanged(kind: Kind, req: Request, before: State, after: State) -> None:
    changed = {name: (before.tables[name][0], after.tables.get(name, (None,))[0])
               for name in before.tables if before.tables[name] != after.tables.get(name)}
    assert not changed, f"{kind.id} changed tables (rows before, after): {changed}"
    assert set(after.tables) == set(before.tables)
    n = len(before.security)
    assert after.security[:n] == before.security, f"{kind.id} changed rows of the append-only {SECURITY_LOG}"
    added = after.security[n:]
    if kind.logged is None:
        assert not added, f"{kind.id} is not security-relevant but wrote {added}"
        return
    assert len(added) == 1, f"{kind.id} must add exactly one {SECURITY_LOG} row, added {added}"
    row = dict(zip([c.name for c in SecurityEvent.__table__.columns], added[0], strict=True))
    assert (row["actor"], row["action"], row["code"]) == (OWNER, kind.logged, kind.code), row
    match = _DRAFT_PATH.match(req.path)
    logged_draft = uuid.UUID(str(row["draft_id"])) if row["draft_id"] else None  # reflected: a UUID or its hex
    assert logged_draft == (uuid.UUID(match.group(1)) if match else None), row


@dataclass
class Bench:
    """Where the kinds run: how a request is sent, the database it must not change, the scene it refers to."""

    send: Send
    tables: Tables
    scene: Scene
    gunicorn: bool = False  # gunicorn in front: its own refusals come first

    @classmethod
    def on(cls, send: Send, engine: Engine, gunicorn: bool = False) -> Bench:
        return cls(send, Tables(engine), Scene(send), gunicorn)

    def refuse(self, kind: Kind) -> dict[str, Any]:
        """Send ``kind``; its refusal and the unchanged tables are checked; returns the problem document."""
        req = kind.request(self.scene)
        before = self.tables.state()
        answer = self.send(req)
        after = self.tables.state()
        body = assert_problem(answer, kind.status, kind.code_for(self.gunicorn))
        assert_unchanged(kind, req, before, after)
        return body

    def alike(self, a: Kind, b: Kind) -> None:
        """Both refused, and told apart by nothing but the probed value (no existence oracle)."""
        assert a.oracle is not None and b.oracle is not None
        first, second = self.refuse(a), self.refuse(b)
        masked = [json.dumps(body, sort_keys=True).replace(kind.oracle[1], "<probe>")  # type: ignore[index]
                  for body, kind in ((first, a), (second, b))]
        assert masked[0] == masked[1], (first, second)
