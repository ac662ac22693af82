"""`sortie stack bench`: the Copilot's native stack's own figures: warm start time to all-ready,
resident memory of every part at idle, and one task's confirm-to-DISPATCHING/-EXECUTING latency at idle,
from the database's own audit timestamps."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from kernel.runtime import Runtime
from reference.copilot.http.auth import issue_token
from reference.copilot.models import TaskAuditLog
from systems.copilot.workload import APPROVER, WorkloadSpec, random_plan, seed_fleet


def _rss_by_part(stack: Any) -> dict[str, float]:
    import psutil

    parts: dict[str, list[int]] = {name: [c.pid] for name, c in stack.components.items() if c.pid}
    for name, svc in stack.services.items():
        pid = svc._postmaster_pid() if hasattr(svc, "_postmaster_pid") else None
        proc = getattr(getattr(svc, "_process", None), "_proc", None)
        pids = [pid] if pid else [proc.pid] if proc is not None else []
        if name == "rocketmq":
            pids = [j.proc.pid for j in (svc._namesrv, svc._proxy) if j is not None]
        parts[name] = pids
    out: dict[str, float] = {}
    for name, pids in parts.items():
        total = 0
        for pid in pids:
            try:
                root = psutil.Process(pid)
                total += sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                pass
        out[name] = round(total / 2**20, 1)
    return out


def bench_stack(run_dir: Path, tasks: int = 5) -> dict[str, Any]:
    from systems.copilot.stack import CopilotOptions, copilot_stack
    from systems.copilot.stack_run import STACK_POLICY

    stack = copilot_stack("native", run_dir, CopilotOptions(seed=1, policy=STACK_POLICY))
    t0 = time.perf_counter()
    stack.start()
    start_s = time.perf_counter() - t0
    try:
        time.sleep(10.0)  # idle: the workers poll, nothing else happens
        rss = _rss_by_part(stack)
        ep = stack.endpoints
        admin = create_engine(ep.admin_database_url)
        fleet = Runtime(sessionmaker(admin, expire_on_commit=False)).transact(
            lambda tx: seed_fleet(tx, WorkloadSpec(confirms=tasks, window_s=1, devices=8, sites=2, operators=2)))
        latencies: dict[str, list[float]] = {"DISPATCHING": [], "EXECUTING": []}
        for n in range(tasks):  # one at a time: each task meets an idle backend
            user, area = fleet.operators[n % len(fleet.operators)]
            plan = random_plan(random.Random(n), fleet, area)
            op = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], user)}"}
            ap = {"Authorization": f"Bearer {issue_token(ep.app['token_secret'], APPROVER, role='approver')}"}
            body: dict[str, Any] = {"goal": "patrol", "area_id": area, "plan": {
                "device_id": plan.device_id, "waypoints": plan.waypoints, "altitude_m": plan.altitude_m,
                "actions": plan.actions}}
            d = requests.post(f"{ep.api_url}/v1/drafts", headers={**op, "Idempotency-Key": f"bench-draft-{n}"},
                              timeout=10, json=body).json()
            requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/approvals", headers=ap, timeout=10,
                          json={"draft_version": d["version"], "decision": "approve"}).raise_for_status()
            resp = requests.post(f"{ep.api_url}/v1/drafts/{d['id']}/confirm", timeout=10,
                                 headers={**op, "Idempotency-Key": f"bench-{n}"}, json={"draft_version": d["version"]})
            resp.raise_for_status()
            tid = resp.json()["task_id"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with Session(admin) as s:
                    rows = {a.to_status: a.created_at for a in s.scalars(
                        select(TaskAuditLog).where(TaskAuditLog.task_id == tid))}
                if "EXECUTING" in rows:
                    for status in latencies:
                        latencies[status].append((rows[status] - rows["CREATED"]).total_seconds() * 1000)
                    break
                time.sleep(0.1)
            time.sleep(1.0)
        admin.dispose()
    finally:
        t1 = time.perf_counter()
        stack.stop()
        stop_s = time.perf_counter() - t1
    return {
        "start_to_all_ready_s": round(start_s, 1), "stop_s": round(stop_s, 1),
        "idle_rss_mb": rss, "idle_rss_total_mb": round(sum(rss.values()), 1),
        "confirm_to_ms": {k: {"n": len(v), "median": round(statistics.median(v), 1) if v else None,
                              "max": round(max(v), 1) if v else None} for k, v in latencies.items()},
    }
