"""Samples a load run every ``interval_s`` in a background thread: the clients' request log (throughput,
confirm p95 over a sliding window, errors), the database's backlog (outbox depth and oldest age,
published-but-unconsumed events, dead letters, unsettled tasks, connections, commits), and the CPU and
resident memory of every stack and reference process (psutil, by the pids the NativeStack knows)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import requests
from sqlalchemy import Engine, text

from loadtests.quantiles import percentile
from systems.copilot.checkers import SUBSCRIBED
from systems.copilot.load_analysis import CONFIRM

log = logging.getLogger("sortie.load")

SETTLED = ("COMPLETED", "FAILED", "CANCELLED", "MANUAL_REVIEW")
WINDOW_S = 10.0  # sliding window of the confirm p95 series
RPS_WINDOW_S = 5.0

_CONSUMER_CASE = " ".join(f"WHEN '{et}' THEN '{c}'" for et, c in SUBSCRIBED.items())
_SUBSCRIBED_TYPES = ", ".join(f"'{et}'" for et in SUBSCRIBED)
_SETTLED_SQL = ", ".join(f"'{s}'" for s in SETTLED)
# "consumer_lag" is published-but-not-yet-consumed: outbox rows the publisher marked SENT whose subscribed
# consumer group has neither a processed_event row nor a dead letter for them. It counts events, not
# broker offsets (RocketMQ's own consumer offsets would also count redeliveries and other tags).
SAMPLE_SQL = text(f"""
SELECT
  (SELECT count(*) FROM task_event_outbox WHERE status = 'PENDING') AS outbox_depth,
  (SELECT EXTRACT(EPOCH FROM clock_timestamp() - min(created_at)) FROM task_event_outbox
     WHERE status = 'PENDING') AS outbox_oldest_s,
  (SELECT count(*) FROM task_event_outbox o WHERE o.status = 'SENT' AND o.event_type IN ({_SUBSCRIBED_TYPES})
     AND NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.event_id = o.id
                     AND p.consumer = CASE o.event_type {_CONSUMER_CASE} END)
     AND NOT EXISTS (SELECT 1 FROM dead_letter d WHERE d.event_id = o.id)) AS consumer_lag,
  (SELECT count(*) FROM task_event_outbox WHERE status = 'SENT') AS outbox_sent,
  (SELECT count(*) FROM dead_letter) AS dead_letters,
  (SELECT count(*) FROM drone_task WHERE status NOT IN ({_SETTLED_SQL})) AS unsettled,
  (SELECT count(*) FROM drone_task) AS tasks,
  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()) AS db_connections,
  (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS xact_commit,
  (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database
     WHERE datname = current_database()) AS tup_written
""")


def process_groups(stack: Any) -> dict[str, list[int]]:
    """Name -> root pids of every stack service and reference component (children are added per sample)."""
    out: dict[str, list[int]] = {}
    for name, comp in list(stack.components.items()):
        if comp.pid:
            out[name] = [comp.pid]
    for name, svc in list(stack.services.items()):
        pids: list[int] = []
        if name == "postgres":
            with contextlib.suppress(Exception):
                pid = svc._postmaster_pid()
                pids = [pid] if pid else []
        elif hasattr(svc, "pids"):
            with contextlib.suppress(Exception):
                got = svc.pids() if callable(svc.pids) else svc.pids
                pids = list(got)
        else:
            pid = getattr(svc, "pid", None)
            pids = [pid] if isinstance(pid, int) else []
        if pids:
            out[name] = pids
    return out


def cpu_seconds(groups: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each group's processes and their live descendants. A child that
    exited since an earlier call takes its CPU with it, so differences are lower bounds."""
    out: dict[str, float] = {}
    for name, roots in groups.items():
        total = 0.0
        for root in roots:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(root)
                for p in [proc, *proc.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        ct = p.cpu_times()
                        total += ct.user + ct.system
        out[name] = total
    return out


class WebhookDeliveries:
    """The platform simulator's log of webhook deliveries (``GET /control/webhook-deliveries``), drained with its
    cursor while the run goes on: the log is bounded (about 20 minutes at 5x), a run may be hours long."""

    def __init__(self, control_url: str, every_s: float = 30.0, timeout_s: float = 10.0) -> None:
        self.url = f"{control_url}/control/webhook-deliveries"
        self.every_s, self.timeout_s = every_s, timeout_s
        self.columns: list[str] | None = None  # None until one answer was read
        self.items: list[list[Any]] = []
        self.missed = 0  # deliveries the log had dropped before they were read
        self.after = 0
        self.unreadable = 0  # answers that could not be read (the next drain reads on from the same cursor)
        self._last = -math.inf

    def drain(self, force: bool = False) -> None:
        """Read what the log has after the cursor; at most every ``every_s`` seconds unless ``force``."""
        if not force and time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        try:
            resp = requests.get(self.url, params={"after": self.after}, timeout=self.timeout_s)
            resp.raise_for_status()
            body = resp.json()
            columns, items, nxt, missed = body["columns"], body["items"], int(body["next"]), int(body["missed"])
        except (requests.RequestException, ValueError, KeyError, TypeError):
            self.unreadable += 1
            log.warning("the simulator's webhook deliveries are unavailable", exc_info=True)
            return
        self.columns = columns  # the simulator's constant: the same in every answer
        self.items.extend(items)
        self.missed += missed
        self.after = nxt

    def result(self) -> dict[str, Any] | None:
        """The log as ``GET /control/webhook-deliveries`` gives it, every delivery since the stack started; None when
        no answer could be read (a figure missing from a report, not a failed run)."""
        if self.columns is None:
            return None
        return {"columns": self.columns, "items": self.items, "missed": self.missed}


class Sampler:
    def __init__(self, stack: Any, admin: Engine, client_log_dir: Path, t0_epoch: float,
                 interval_s: float = 1.5, extra_pids: Callable[[], dict[str, list[int]]] | None = None,
                 webhook_deliveries: WebhookDeliveries | None = None) -> None:
        self.stack, self.admin, self.log_dir, self.t0 = stack, admin, client_log_dir, t0_epoch
        self.webhook_deliveries = webhook_deliveries  # drained from the sampling thread
        self.interval_s = interval_s
        # name -> [pid]: the Locust processes, the harness
        self.extra_pids: Callable[[], dict[str, list[int]]] = extra_pids or (lambda: {})
        self.series: dict[str, Any] = {k: [] for k in (
            "t", "rps", "confirm_p95_ms", "errors", "outbox_depth", "outbox_oldest_s", "consumer_lag",
            "outbox_sent", "dead_letters", "unsettled", "tasks", "db_connections", "db_commits_per_s",
            "db_writes_per_s", "machine_cpu_pct")}
        self.series["cpu_pct"] = {}
        self.series["rss_mb"] = {}
        self.series["threads"] = {}  # OS threads per group (the API's gthread pool, the stream tier's)
        self.requests: list[dict[str, Any]] = []  # every request record, with t relative to t0
        self.ops: list[dict[str, Any]] = []  # client history operations
        self.sse: list[dict[str, Any]] = []
        self.hdr: list[dict[str, Any]] = []  # the clients' latency histograms per interval (loadtests.latency)
        self.cpu_seconds: dict[str, float] = {}  # cumulative CPU seconds per group (live processes)
        self._last_cpu: dict[str, float] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._offsets: dict[Path, int] = {}
        self._recent: deque[dict[str, Any]] = deque()
        self._last_db: tuple[float, int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self.lock = threading.Lock()
        self.db_errors = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        psutil.cpu_percent(None)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.read_client_logs()  # whatever the clients wrote after the last sample

    def now(self) -> float:
        return time.time() - self.t0

    def last(self, key: str) -> Any:
        with self.lock:
            vals = self.series[key]
            return vals[-1] if vals else None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
                if self.webhook_deliveries is not None:
                    self.webhook_deliveries.drain()
            except Exception:  # a sampler must not take the run down; the gap shows in the series
                log.warning("sample failed", exc_info=True)

    # ------------------------------------------------------------------ client logs

    def read_client_logs(self) -> list[dict[str, Any]]:
        new: list[dict[str, Any]] = []
        for path in sorted(self.log_dir.glob("client-*.jsonl")):
            off = self._offsets.get(path, 0)
            with path.open("rb") as fh:
                fh.seek(off)
                chunk = fh.read()
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[path] = off + end + 1
            for line in chunk[: end + 1].splitlines():
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    rec["t"] = float(rec["t"]) - self.t0
                    new.append(rec)
        new.sort(key=lambda r: r["t"])
        with self.lock:
            for rec in new:
                kind = rec.pop("k", "")
                if kind == "req":
                    self.requests.append(rec)
                    self._recent.append(rec)
                elif kind == "op":
                    self.ops.append(rec)
                elif kind == "sse":
                    self.sse.append(rec)
                elif kind == "hdr":
                    self.hdr.append(rec)
        return new

    # ------------------------------------------------------------------ one sample

    def sample(self) -> None:
        self.read_client_logs()
        t = self.now()
        while self._recent and self._recent[0]["t"] < t - max(WINDOW_S, RPS_WINDOW_S):
            self._recent.popleft()
        recent = list(self._recent)
        rps = sum(1 for r in recent if r["t"] >= t - RPS_WINDOW_S) / RPS_WINDOW_S
        confirm_ms = [r["ms"] for r in recent if r["name"] == CONFIRM and not r["failed"]]
        errors = sum(1 for r in recent if r["failed"] and r["t"] >= t - RPS_WINDOW_S)
        db = self._db()
        cpu, rss, threads = self._processes()
        with self.lock:
            s = self.series
            s["t"].append(round(t, 2))
            s["rps"].append(round(rps, 3))
            p95 = percentile(confirm_ms, 95)
            s["confirm_p95_ms"].append(round(p95, 2) if p95 is not None else None)
            s["errors"].append(errors)
            for k in ("outbox_depth", "outbox_oldest_s", "consumer_lag", "outbox_sent", "dead_letters", "unsettled",
                      "tasks", "db_connections", "db_commits_per_s", "db_writes_per_s"):
                s[k].append(db.get(k))
            s["machine_cpu_pct"].append(psutil.cpu_percent(None))
            n = len(s["t"])
            for group, series in (("cpu_pct", cpu), ("rss_mb", rss), ("threads", threads)):
                for name, v in series.items():
                    col = s[group].setdefault(name, [None] * (n - 1))
                    col.append(v)
                for col in s[group].values():
                    if len(col) < n:
                        col.append(None)

    def _db(self) -> dict[str, Any]:
        try:
            with self.admin.connect() as conn:
                row = conn.execute(SAMPLE_SQL).mappings().one()
        except Exception:
            self.db_errors += 1
            return {}
        out = dict(row)
        out["outbox_oldest_s"] = round(float(out["outbox_oldest_s"]), 3) if out["outbox_oldest_s"] is not None else 0.0
        now = time.monotonic()
        commits, writes = int(out.pop("xact_commit") or 0), int(out.pop("tup_written") or 0)
        if self._last_db is not None:
            dt = max(1e-6, now - self._last_db[0])
            out["db_commits_per_s"] = round((commits - self._last_db[1]) / dt, 2)
            out["db_writes_per_s"] = round((writes - self._last_db[2]) / dt, 2)
        self._last_db = (now, commits, writes)
        return {k: (int(v) if isinstance(v, int) else v) for k, v in out.items()}

    def _processes(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        groups = {**process_groups(self.stack), **self.extra_pids()}
        cpu: dict[str, float] = {}
        rss: dict[str, float] = {}
        threads: dict[str, float] = {}
        seen: set[int] = set()
        for name, roots in groups.items():
            total_cpu, total_rss, cpu_s, n_threads = 0.0, 0.0, 0.0, 0
            for root in roots:
                try:
                    tree = [psutil.Process(root)]
                    tree += tree[0].children(recursive=True)
                except psutil.Error:
                    continue
                for p in tree:
                    if p.pid in seen:
                        continue
                    seen.add(p.pid)
                    proc = self._procs.get(p.pid)
                    if proc is None or proc.create_time() != p.create_time():
                        proc = self._procs[p.pid] = p
                    try:
                        with proc.oneshot():
                            total_cpu += proc.cpu_percent(None)
                            total_rss += proc.memory_info().rss
                            n_threads += proc.num_threads()
                            ct = proc.cpu_times()
                            cpu_s += ct.user + ct.system
                    except psutil.Error:
                        continue
            cpu[name] = round(total_cpu, 1)
            rss[name] = round(total_rss / 2**20, 1)
            threads[name] = n_threads
            # Only growth counts: time of processes that exited between samples (a killed worker, a
            # closed database backend) is lost, so these totals are lower bounds.
            prev = self._last_cpu.get(name)
            self._last_cpu[name] = cpu_s
            if prev is not None:
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + max(0.0, cpu_s - prev)
        return cpu, rss, threads
