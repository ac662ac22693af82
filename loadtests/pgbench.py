"""pgbench against the stack's own PostgreSQL with a transaction of the confirm's shape (seed 000 §4.1;
reference/copilot/services/confirm.py + reference/copilot/tasks.py): look the (user, key) up, read the site and a device
permission, insert the task, its creation audit row and its TaskCreated outbox event, commit.

It writes to copies of the three tables in a scratch schema (``pgb_shape``), so the run's invariants
never see its rows; the schema is dropped afterwards. The confirm endpoint writes the same rows in one
transaction whose reads (the key, the draft, its route, area, permissions and approval) are one joined SELECT,
through Toxiproxy and SQLAlchemy: pgbench is the database's ceiling for that shape, so
``ratio = confirm_rps / tps`` says how much of it the endpoint's traffic used (or, at saturation, reached)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

SCHEMA = "pgb_shape"
SCRIPT = """\\set n random(1, 1000000000000)
\\set u random(1, {operators})
BEGIN;
SELECT id FROM pgb_shape.drone_task WHERE user_id = 'operator-' || lpad((:u)::text, 3, '0')
  AND idempotency_key = 'pgb-' || (:n)::text;
SELECT id, polygon, max_altitude_m, airspace_open, requires_approval FROM site_area WHERE id = '{area}';
SELECT 1 FROM user_device_permission WHERE user_id = 'operator-' || lpad((:u)::text, 3, '0') LIMIT 1;
INSERT INTO pgb_shape.drone_task (id, draft_id, draft_version, user_id, device_id, route_id, status, version,
  idempotency_key, dispatch_attempts, created_at, updated_at, area_id, route_version, snapshot, request_hash,
  last_telemetry_seq, alert_count)
VALUES (md5((:n)::text || ':' || (:client_id)::text)::uuid, md5((:n)::text || 'd')::uuid, 1,
  'operator-' || lpad((:u)::text, 3, '0'), 'DRONE-0001', md5((:n)::text || 'r')::uuid, 'CREATED', 0,
  'pgb-' || (:n)::text, 0, now(), now(), '{area}', 1, '{snapshot}'::json, md5((:n)::text), 0, 0);
INSERT INTO pgb_shape.task_audit_log (task_id, draft_id, actor, action, from_status, to_status, from_version,
  to_version, correlation_id, result, detail, created_at)
VALUES (md5((:n)::text || ':' || (:client_id)::text)::uuid, md5((:n)::text || 'd')::uuid,
  'operator-' || lpad((:u)::text, 3, '0'), 'TASK_CREATED', NULL, 'CREATED', NULL, 0, 'pgb-' || (:n)::text, 'OK',
  '{{"draft_id": "x", "draft_version": 1}}'::json, now());
INSERT INTO pgb_shape.task_event_outbox (id, task_id, event_type, task_version, payload, status, attempts,
  available_at, created_at)
VALUES (md5((:n)::text || '-o-' || (:client_id)::text)::uuid, md5((:n)::text || ':' || (:client_id)::text)::uuid,
  'TaskCreated', 0, '{{"user_id": "operator-001", "device_id": "DRONE-0001"}}'::json, 'PENDING', 0, now(), now());
END;
"""
SNAPSHOT = ('{"device_id": "DRONE-0001", "area": {"id": "SITE-001", "polygon": [[30.0, 120.0], [30.0, 120.05], '
            '[30.05, 120.05], [30.05, 120.0]], "max_altitude_m": 120.0}, "route": {"id": "r", "version": 1, '
            '"waypoints": [[30.01, 120.01], [30.02, 120.02], [30.03, 120.03], [30.04, 120.04]]}, '
            '"parameters": {"altitude_m": 60.0, "actions": ["photo", "hover"], "speed_mps": 8.0}, '
            '"draft_version": 1}')


def find_pgbench(pg_bin: Path | None = None) -> str | None:
    if pg_bin is not None and (pg_bin / "pgbench").exists():
        return str(pg_bin / "pgbench")
    for cand in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True):
        return str(cand)
    return shutil.which("pgbench")


def run_script(binary: str, pg: Any, script: str, clients: int, seconds: float,
               database: str) -> subprocess.CompletedProcess[str]:
    """pgbench running ``script`` for ``seconds`` with ``clients`` (prepared statements, as the superuser, direct)."""
    with tempfile.TemporaryDirectory(prefix="sortie-pgbench-") as tmp:
        path = Path(tmp) / "script.sql"
        path.write_text(script)
        Path(tmp).chmod(0o755)  # pgbench may run as another OS user than the one that wrote it
        path.chmod(0o644)
        cmd = [binary, "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.superuser, "-n", "-M", "prepared",
               "-f", str(path), "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(max(1, round(seconds))),
               database]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)


def run_pgbench(admin: Engine, pg: Any, *, seconds: float = 10.0, clients: int = 4, operators: int = 50,
                area: str = "SITE-001") -> dict[str, Any]:
    """Runs pgbench for ``seconds`` and returns {tps, latency_avg_ms, clients, seconds, transactions, script}."""
    binary = find_pgbench(getattr(pg, "bin_dir", None))
    if binary is None:
        return {"error": "pgbench not found"}
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        conn.execute(text(f"CREATE SCHEMA {SCHEMA}"))
        for table in ("drone_task", "task_audit_log", "task_event_outbox"):
            conn.execute(text(f"CREATE TABLE {SCHEMA}.{table} (LIKE public.{table} INCLUDING ALL)"))
    script = SCRIPT.format(operators=operators, area=area, snapshot=SNAPSHOT)
    try:
        proc = run_script(binary, pg, script, clients, seconds, "sortie")
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
    out = proc.stdout + proc.stderr
    tps = re.search(r"tps = ([0-9.]+)", out)
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if proc.returncode != 0 or tps is None:
        return {"error": f"pgbench exited {proc.returncode}: {out[-800:]}"}
    return {"tps": float(tps[1]), "latency_avg_ms": float(lat[1]) if lat else None,
            "transactions": int(done[1]) if done else None, "failed": int(failed[1]) if failed else 0,
            "clients": clients, "seconds": seconds, "connection": "direct (superuser, no Toxiproxy)",
            "protocol": "prepared", "script": script}
