"""The service the job handlers call, on the real stack: ``python -m systems.jobs.service_http --port N``. The same
semantics as the simulation's model (systems.jobs.service), in wall-clock time, behind HTTP; its ledger is the
ground truth of what was done (every call, and each key's effects: successful, finished works).

    POST /work     {"job_id", "key", "owner", "token", "payload", "wait_s"} -> 200 {"finished": bool}
                   | 200 {"crash": true} (the work kills its worker: the worker SIGKILLs itself)
                   | 422 {"error"} (the work failed) | 503 {"error"} (the service is down)
    GET  /ledger   {"calls": [...], "effects": {key: n}}
    POST /reset    {"work_s", "work_sigma", "fail_rate", "seed", "failing_keys", "hanging_keys", "crashing_keys",
                    "fail_first", "down"}
    GET  /health

A call with a key the service has not seen starts a work of the payload's ``work_s`` (else ``work_s`` times
exp(``work_sigma`` x a standard normal draw), failing with probability ``fail_rate``, from a seeded generator); a call
with the key of a running work joins it; a call after a failed work starts another; a call after a finished one
gets its result without a second effect. A call waits for its work up to ``wait_s`` (null: until it ends)."""

from __future__ import annotations

import argparse
import math
import random
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

MAX_WAIT_S = 600.0  # a call without wait_s waits at most this long (a hanging work answers "not finished")


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
        return ({"finished": True}, 200) if work.ok else ({"error": "the work failed"}, 422)

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

    def reset(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.work_s = float(body.get("work_s", 2.0))
            self.work_sigma = float(body.get("work_sigma", 0.0))
            self.fail_rate = float(body.get("fail_rate", 0.0))
            self.rng = random.Random(body.get("seed", 0))
            self.failing_keys = frozenset(body.get("failing_keys", ()))
            self.hanging_keys = frozenset(body.get("hanging_keys", ()))
            self.crashing_keys = frozenset(body.get("crashing_keys", ()))
            self.fail_first = dict(body.get("fail_first", {}))
            self.down = bool(body.get("down", False))
            self.calls, self.works, self._current = [], [], {}


def create_app(service: Service | None = None) -> Flask:
    svc = service or Service()
    app = Flask("sortie-jobs-service")

    @app.post("/work")
    def work() -> Any:
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("key"), str) or not body["key"]:
            return jsonify({"error": "a JSON object with a non-empty key is required"}), 400
        answer, status = svc.call(body)
        return jsonify(answer), status

    @app.get("/ledger")
    def ledger() -> Any:
        return jsonify(svc.ledger())

    @app.post("/reset")
    def reset() -> Any:
        body = request.get_json(silent=True)
        svc.reset(body if isinstance(body, dict) else {})
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
