"""The confirm endpoint's capacity, measured the way pgbench measures the database's: a fixed number of
closed-loop clients confirm as fast as they are answered, and throughput is confirms per wall second.

Run by `sortie load` after the load phase and its measurements, back to back with pgbench on the same
PostgreSQL, so ``capacity_ratio = confirms/s ÷ pgbench tps`` compares the endpoint with the database's
ceiling for a transaction of the same shape. The drafts and approvals are made first and are not timed; the
outbox publisher is paused while the confirms run, so the tasks they create are not dispatched during the
measurement and the comparison is the confirm path alone (API, Toxiproxy, Redis, one transaction) against the
database alone. Everything it creates stays in the stack, which is torn down right after."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from loadtests.quantiles import percentile
from reference.copilot.http.auth import issue_token
from systems.copilot.workload import APPROVER, random_plan


def measure(api_url: str, token_secret: str, fleet: Any, *, confirms: int, clients: int, seed: int,
            pause: Callable[[], None] = lambda: None, resume: Callable[[], None] = lambda: None,
            cpu_probe: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
    """Prepare ``confirms`` approved drafts, then confirm them all with ``clients`` closed-loop clients.

    Returns {confirms, ok, errors, clients, seconds, rps, p50_ms, p99_ms, prepared_s, cpu_cores}; ``error``
    instead when not enough drafts could be prepared. ``cpu_probe`` gives CPU seconds per process group; its
    difference over the confirms, per wall second, is ``cpu_cores`` (which process the ceiling is in)."""
    rng = random.Random(f"capacity:{seed}")
    tokens: dict[str, str] = {}
    approver = issue_token(token_secret, APPROVER, role="approver", ttl_s=3600)
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    def token(user: str) -> str:
        if user not in tokens:
            tokens[user] = issue_token(token_secret, user, ttl_s=3600)
        return tokens[user]

    plans = []
    for _ in range(confirms):
        user, area = fleet.operators[rng.randrange(len(fleet.operators))]
        plans.append((user, area, dataclasses.asdict(random_plan(rng, fleet, area))))

    def prepare(item: tuple[str, str, dict[str, Any]]) -> tuple[str, str, int] | None:
        """An approved draft, or None (too few drafts is reported as an error of the measurement)."""
        user, area, plan = item
        s = session()
        try:
            r = s.post(f"{api_url}/v1/drafts", json={"goal": "capacity", "area_id": area, "plan": plan},
                       headers={"Authorization": f"Bearer {token(user)}",
                                "Idempotency-Key": f"capacity-draft-{uuid.uuid4().hex}"}, timeout=30)
            if r.status_code != 201:
                return None
            draft = r.json()
            a = s.post(f"{api_url}/v1/drafts/{draft['id']}/approvals",
                       json={"draft_version": draft["version"], "decision": "approve"},
                       headers={"Authorization": f"Bearer {approver}"}, timeout=30)
        except requests.RequestException:
            return None
        return (user, draft["id"], draft["version"]) if a.status_code in (200, 201) else None

    t_prep = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        drafts = [d for d in pool.map(prepare, plans) if d is not None]
    prepared_s = time.perf_counter() - t_prep
    if len(drafts) < confirms // 2:
        return {"error": f"only {len(drafts)} of {confirms} drafts could be prepared"}

    latencies: list[float] = []
    codes: dict[str, int] = {}
    lock = threading.Lock()

    def confirm(item: tuple[str, str, int]) -> None:
        user, draft_id, version = item
        t = time.perf_counter()
        try:
            r = session().post(f"{api_url}/v1/drafts/{draft_id}/confirm", json={"draft_version": version},
                               headers={"Authorization": f"Bearer {token(user)}",
                                        "Idempotency-Key": f"capacity-{uuid.uuid4().hex}"}, timeout=30)
            code = str(r.status_code)
        except requests.RequestException as exc:
            code = type(exc).__name__
        ms = (time.perf_counter() - t) * 1000.0
        with lock:
            codes[code] = codes.get(code, 0) + 1
            if code == "201":
                latencies.append(ms)

    pause()
    try:
        cpu0 = cpu_probe() if cpu_probe else {}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(confirm, drafts))
        seconds = time.perf_counter() - t0
        cpu1 = cpu_probe() if cpu_probe else {}
    finally:
        resume()
    cores = {k: round((cpu1[k] - cpu0[k]) / seconds, 3) for k in cpu1 if k in cpu0 and seconds > 0}
    ok = len(latencies)
    return {"confirms": len(drafts), "ok": ok, "errors": {k: v for k, v in codes.items() if k != "201"},
            "clients": clients, "seconds": round(seconds, 3), "rps": round(ok / seconds, 2) if seconds else None,
            "p50_ms": _ms(percentile(latencies, 50)), "p99_ms": _ms(percentile(latencies, 99)),
            "prepared_s": round(prepared_s, 2),
            "cpu_cores": dict(sorted(cores.items(), key=lambda kv: -kv[1])),
            "method": "closed loop, fresh Idempotency-Key per confirm, outbox publisher paused (SIGSTOP)"}


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
