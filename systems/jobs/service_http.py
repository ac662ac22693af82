"""The service the job handlers call, on the real stack: ``python -m systems.jobs.service_http --port N``. The same
semantics as the simulation's model (systems.jobs.service), in wall-clock time, behind HTTP; its ledger is the
ground truth of what was done (every call, and each key's effects: successful, finished works).

    POST /work     {"job_id", "key", "owner", "token", "payload", "wait_s"} -> 200 {"finished": bool}
                   | 200 {"crash": true} (the work kills its worker: the worker SIGKILLs itself)
                   | 422 {"error"} (the work failed; a failing key's error holds the agent's whole stack, as the
                     simulation's model answers: the worker must cut it to a summary) | 503 {"error"} (down)
    GET  /ledger   {"calls": [...], "effects": {key: n}}
    POST /reset    {"work_s", "work_sigma", "fail_rate", "seed", "failing_keys", "hanging_keys", "crashing_keys",
                    "fail_first", "down"} (each optional; Reset says what each takes)
    GET  /health

A body that is not what a route takes (not strict JSON, a wrong type, an unknown field, a negative time) answers
400 problem+json and changes nothing; unknown routes and methods answer 404 and 405 problem+json.

A call with a key the service has not seen starts a work of the payload's ``work_s`` (else ``work_s`` times
exp(``work_sigma`` x a standard normal draw), failing with probability ``fail_rate``, from a seeded generator); a call
with the key of a running work joins it; a call after a failed work starts another; a call after a finished one
gets its result without a second effect. A call waits for its work up to ``wait_s`` (null: until it ends)."""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from werkzeug.exceptions import HTTPException
from werkzeug.serving import make_server

from kernel import jsonbody, problems
from systems.jobs.service import AGENT_STACK

MAX_WAIT_S = 600.0  # a call without wait_s waits at most this long (a hanging work answers "not finished")
MAX_BODY_BYTES = 4 * 1024 * 1024  # a reset names every failing key of a run
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Reset(BaseModel):
    """What ``POST /reset`` takes: the service's behaviour for the next run."""

    model_config = _STRICT
    work_s: float = Field(2.0, ge=0)
    work_sigma: float = Field(0.0, ge=0)
    fail_rate: float = Field(0.0, ge=0, le=1)
    seed: int | str = 0
    failing_keys: list[str] = []
    hanging_keys: list[str] = []
    crashing_keys: list[str] = []
    fail_first: dict[str, int] = {}
    down: bool = False


class Call(BaseModel):
    """What ``POST /work`` takes (a worker's call for one job's work)."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    key: str = Field(min_length=1)
    wait_s: float | None = Field(None, ge=0)


def _problem(status: int, code: str, detail: str) -> Response:
    return Response(json.dumps(problems.body(status, code, detail)), status=status, mimetype=problems.MEDIA_TYPE)


def _body(model: type[BaseModel]) -> Any:
    """The request's body as ``model`` (strict JSON, then the model's checks); BodyRefused 400 otherwise."""
    value = jsonbody.read_request(request, MAX_BODY_BYTES)
    try:
        return model.model_validate(value)
    except ValidationError as err:
        detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the body'}: {e['msg']}" for e in err.errors()[:10])
        raise jsonbody.BodyRefused(detail[:2000], 400, "INVALID_REQUEST") from None


@dataclass
class _Work:
    key: str
    started_at: float
    ends_at: float
    ok: bool


@dataclass
class Service:
    work_s: float = 2.0
    work_sigma: float = 0.0
    fail_rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    failing_keys: frozenset[str] = frozenset()
    hanging_keys: frozenset[str] = frozenset()
    crashing_keys: frozenset[str] = frozenset()
    fail_first: dict[str, int] = field(default_factory=dict)
    down: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)
    works: list[_Work] = field(default_factory=list)  # every work started, in order
    _current: dict[str, _Work] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        key = str(body.get("key", ""))
        now = time.time()
        record = {"at": now, "job_id": body.get("job_id"), "key": key, "owner": body.get("owner"),
                  "token": body.get("token")}
        with self._lock:
            if self.down:
                self.calls.append({**record, "outcome": "unavailable"})
                return {"error": "service unavailable"}, 503
            if key in self.crashing_keys:
                self.calls.append({**record, "outcome": "crashed the worker"})
                return {"crash": True}, 200
            work = self._current.get(key)
            if work is None or (work.ends_at <= now and not work.ok):
                work = self._start(key, body.get("payload"), now)
                self.calls.append({**record, "outcome": "started", "ends_at": work.ends_at})
            else:
                self.calls.append({**record, "outcome": "joined"})
        wait_s = body.get("wait_s")
        deadline = now + (MAX_WAIT_S if wait_s is None else min(float(wait_s), MAX_WAIT_S))
        time.sleep(max(0.0, min(work.ends_at, deadline) - time.time()))
        if work.ends_at > time.time():
            return {"finished": False}, 200
        if work.ok:
            return {"finished": True}, 200
        return {"error": f"the work failed: {AGENT_STACK}" if key in self.failing_keys else "the work failed"}, 422

    def _start(self, key: str, payload: Any, now: float) -> _Work:
        asked = payload.get("work_s") if isinstance(payload, dict) else None
        seconds = float(asked) if isinstance(asked, int | float) and asked > 0 else \
            self.work_s * math.exp(self.work_sigma * self.rng.gauss(0.0, 1.0))
        if key in self.hanging_keys:
            seconds = math.inf
        ok = key not in self.failing_keys and self.rng.random() >= self.fail_rate
        if self.fail_first.get(key, 0) > 0:
            self.fail_first[key] -= 1
            ok = False
        work = _Work(key, now, now + seconds, ok)
        self.works.append(work)
        self._current[key] = work
        return work

    def ledger(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            effects = Counter(w.key for w in self.works if w.ok and w.ends_at <= now)
            return {"calls": list(self.calls), "effects": dict(effects)}

    def reset(self, body: dict[str, Any] | Reset) -> None:
        r = body if isinstance(body, Reset) else Reset.model_validate(body)
        with self._lock:
            self.work_s, self.work_sigma, self.fail_rate = r.work_s, r.work_sigma, r.fail_rate
            self.rng = random.Random(r.seed)
            self.failing_keys = frozenset(r.failing_keys)
            self.hanging_keys = frozenset(r.hanging_keys)
            self.crashing_keys = frozenset(r.crashing_keys)
            self.fail_first = dict(r.fail_first)
            self.down = r.down
            self.calls, self.works, self._current = [], [], {}


def create_app(service: Service | None = None) -> Flask:
    svc = service or Service()
    app = Flask("sortie-jobs-service")

    @app.errorhandler(jsonbody.BodyRefused)
    def refused(err: jsonbody.BodyRefused) -> Response:
        return _problem(err.status, err.code, err.detail)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        resp = _problem(err.code or 500, (err.name or "error").upper().replace(" ", "_"), err.description or "")
        if err.code == 405 and getattr(err, "valid_methods", None):
            resp.headers["Allow"] = ", ".join(sorted(err.valid_methods))  # type: ignore[attr-defined]
        return resp

    @app.post("/work")
    def work() -> Any:
        call = _body(Call)
        answer, status = svc.call(call.model_dump())
        return jsonify(answer), status

    @app.get("/ledger")
    def ledger() -> Any:
        return jsonify(svc.ledger())

    @app.post("/reset")
    def reset() -> Any:
        svc.reset(_body(Reset))
        return jsonify({"ok": True})

    @app.get("/health")
    def health() -> Any:
        return jsonify({"status": "ok"})

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.jobs.service_http", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port, create_app(), threaded=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"sortie jobs service listening on http://{args.host}:{server.server_port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
