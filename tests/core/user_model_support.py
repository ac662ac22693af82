"""A scripted API for the user-model test: answers depend only on what one user process sent, never on how
processes interleave, so any driver must record the same operations. Used in-process (simulation and HTTP
drivers) and in a subprocess (the Locust driver: importing locust monkey-patches the interpreter)."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from reference.copilot import api
from reference.copilot.http.auth import verify_token
from systems.copilot.users import no_answer
from systems.copilot.workload import WorkloadSpec

SECRET = "user-model-test-secret-of-32-bytes!!"
SEED = 5
SPEC = WorkloadSpec(confirms=6, window_s=60.0, drafts_per_confirm=1.5, double_click_ratio=0.5, cancel_ratio=0.5,
                    cancel_clicks=2, devices=8, sites=2, operators=4,
                    bad_requests=("forbidden-area", "key-reuse", "stale-draft-version"), bad_each=1)


def fleet() -> Any:
    from systems.copilot.users import Fleet

    areas = [(f"SITE-{i}", [[30.0 + i, 120.0], [30.0 + i, 120.05], [30.05 + i, 120.05], [30.05 + i, 120.0]])
             for i in range(2)]
    return Fleet(areas, {"SITE-0": ["D-1", "D-2"], "SITE-1": ["D-3", "D-4"]},
                 [("operator-001", "SITE-0"), ("operator-002", "SITE-1"), ("operator-003", "SITE-0")])


class ScriptedApi:
    """A create is lost (no answer) the first time a user sends its body; an approval is refused with 503 the
    first time; a key confirmed for another draft is refused (409); everything else succeeds."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.keys: dict[str, str] = {}  # idempotency key -> the draft it first confirmed

    def answer(self, cmd: api.Command) -> api.Reply:
        caller = getattr(cmd, "caller", None)
        who = caller.user_id if caller else "-"
        fp = f"{type(cmd).__name__}:{who}:{json.dumps(cmd.__dict__.get('body'), sort_keys=True, default=str)}:" \
             f"{getattr(cmd, 'draft_id', '')}:{getattr(cmd, 'task_id', '')}"
        self.seen[fp] += 1
        first = self.seen[fp] == 1
        ident = str(uuid.uuid5(uuid.NAMESPACE_URL, fp + str(self.seen[fp] if isinstance(cmd, api.CreateDraft) else 0)))
        if isinstance(cmd, api.CreateDraft):
            return no_answer() if first else _json(201, {"id": ident, "version": 1})
        if isinstance(cmd, api.Approve):
            return _problem(503, "SERVICE_UNAVAILABLE") if first else _json(201, {"decision": "ok"})
        if isinstance(cmd, api.ReviseDraft):
            return _json(200, {"id": cmd.draft_id, "version": 2})
        if isinstance(cmd, api.Confirm):
            if self.keys.setdefault(cmd.key or "", cmd.draft_id) != cmd.draft_id:
                return _problem(409, "IDEMPOTENCY_KEY_REUSED")
            return _json(201, {"task_id": str(uuid.uuid5(uuid.NAMESPACE_URL, cmd.key or "")), "status": "CREATED",
                               "version": 1})
        if isinstance(cmd, api.Cancel):
            return _json(202, {"task_id": cmd.task_id, "status": "CANCEL_PENDING", "version": 4})
        if isinstance(cmd, api.ReadTask):
            return _json(200, {"task_id": cmd.task_id, "status": "EXECUTING", "version": 3})
        raise AssertionError(f"unexpected command {cmd!r}")


def _json(status: int, body: dict[str, Any]) -> api.Reply:
    return api.Reply(status, body, {"Content-Type": "application/json"})


def _problem(status: int, code: str) -> api.Reply:
    p = api.problem(status, code, code.lower())
    return api.Reply(p.status, p.body, {**p.headers, "Content-Type": "application/problem+json"})


_ROUTES = [
    ("POST", re.compile(r"/v1/drafts"), lambda who, m, body, key, q: api.CreateDraft(who, body, key)),
    ("PATCH", re.compile(r"/v1/drafts/([^/]+)"), lambda who, m, body, key, q: api.ReviseDraft(who, m[1], body)),
    ("POST", re.compile(r"/v1/drafts/([^/]+)/approvals"), lambda who, m, body, key, q: api.Approve(who, m[1], body)),
    ("POST", re.compile(r"/v1/drafts/([^/]+)/confirm"), lambda who, m, body, key, q: api.Confirm(who, m[1], key, body)),
    ("GET", re.compile(r"/v1/tasks/([^/]+)"), lambda who, m, body, key, q: api.ReadTask(who, m[1])),
    ("POST", re.compile(r"/v1/tasks/([^/]+)/cancel"), lambda who, m, body, key, q: api.Cancel(who, m[1])),
]


def command_of(method: str, path: str, body: Any, headers: dict[str, str], query: Any = None) -> api.Command:
    """The command an HTTP request carries (what the Flask routes parse), for the scripted API."""
    who = verify_token(SECRET, headers["Authorization"].removeprefix("Bearer "))
    for verb, pattern, make in _ROUTES:
        m = pattern.fullmatch(path)
        if verb == method and m:
            return make(who, m, body, headers.get("Idempotency-Key"), query)
    raise AssertionError(f"no route for {method} {path}")


def operations(records: list[tuple[str, str, str, dict[str, Any]]]) -> dict[str, list[tuple[str, str, str]]]:
    """Per process, the ordered operations (type, f, value as canonical JSON)."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for process, type_, f, value in records:
        out.setdefault(process, []).append((type_, f, json.dumps(value, sort_keys=True, default=str)))
    return out


def locust_records() -> list[tuple[str, str, str, dict[str, Any]]]:
    """Run in a subprocess with SORTIE_LOAD_CONFIG set: drive every user of the schedule through the Locust
    driver, with a fake Locust client answering from the scripted API; return the recorded operations."""
    import contextlib
    import glob
    import os

    import gevent

    from systems.copilot import locustfile
    from systems.copilot.users import schedule

    backend = ScriptedApi()

    class Resp:
        def __init__(self, reply: api.Reply) -> None:
            self.status_code, self.headers, self.error = reply.status, reply.headers, None
            self.text = "" if reply.status == 0 else json.dumps(reply.body)

        def success(self) -> None: ...

        def failure(self, why: str) -> None: ...

    class Client:
        @contextlib.contextmanager
        def request(self, method: str, path: str, *, name: str, json: Any, params: Any, headers: dict[str, str],
                    timeout: float, catch_response: bool, context: Any = None) -> Any:
            yield Resp(backend.answer(command_of(method, path, json, headers, params)))

    class FakeUser:
        client = Client()

    real_sleep = gevent.sleep
    gevent.sleep = lambda seconds=0, *a, **k: real_sleep(0)  # think times pass at once
    driver = locustfile.Driver(FakeUser())  # type: ignore[arg-type]
    tasks: list[tuple[str, str]] = []
    for a in schedule(SPEC, fleet(), SEED):
        driver.drive(a.start(tasks))
    locustfile._log.flush()
    records = []
    for path in glob.glob(os.path.join(locustfile.CONFIG["client_log_dir"], "*.jsonl")):
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r["k"] == "op":
                records.append((r["process"], r["type"], r["f"], r["value"]))
    return records
