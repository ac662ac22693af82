"""The Copilot's hooks of the load pipeline (loadtests.run): `sortie load` against its native stack.

One run: a NativeStack sized for the profile, the fleet seeded, Locust (systems/copilot/locustfile.py) for the
profile's duration, sampled every ~1.5 s (systems.copilot.sampler), the backlog left to drain, the invariants
checked on the merged history; then, back to back on the same PostgreSQL, pgbench with a confirm-shaped transaction
(the database's ceiling for that shape) and a closed-loop burst of confirms with the same number of clients (the
endpoint's ceiling). Writes DIR/load.json, DIR/capacity.json (and capacity.html through the report) and Locust's CSV
files (DIR/locust_*.csv)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from loadtests import analysis
from loadtests.run import (
    FaultWindow,
    LoadOptions,
    LoadRun,
    compare_with_baseline,
    exit_code,
    find_max,
    run_once,
    start_fault,
    window_s,
)
from reference.copilot.http.app import HEARTBEAT_S
from systems.copilot import load_analysis
from systems.copilot.idle_streams import OPEN_RATE as IDLE_OPEN_RATE
from systems.copilot.load_analysis import CONFIRM
from systems.copilot.sampler import Sampler, WebhookDeliveries
from systems.copilot.workload import resolve_profile, scale_profile

log = logging.getLogger("sortie.load")
HERE = Path(__file__).resolve().parent
LOCUSTFILE = HERE / "locustfile.py"

FAULTS = ("broker-outage", "db-outage", "worker-kill", "platform-partition", "api-stall")
# Windows when the catalogue has no step for the fault (worker-kill and api-stall are not catalogue faults).
DEFAULT_WINDOWS_S = {"broker-outage": 120.0, "db-outage": 60.0, "platform-partition": 120.0, "worker-kill": 30.0,
                     "api-stall": 2.0}
ARRIVALS = ("open", "closed")
WORKER_KILL_EVERY_S = 10.0
WORKER_KILL_TARGETS = ("publisher", "dispatcher-1")
FAULT_GRACE_S = 10.0  # errors this long after a fault heals still count as the fault's
FIND_MAX_MULTIPLES = (1, 2, 3, 5, 8, 13, 21, 34, 55)
LOAD_ASSUMPTIONS = [
    "Load runs compress the platform simulator's clock by time_scale (default 60): a flight of the profile's "
    "lognormal duration (median 10 min) lasts duration/time_scale wall seconds (median 10 s). Telemetry stays one "
    "message per 5 model seconds, so the platform's event rate (telemetry, alerts, completions) equals the "
    "profile's; fewer flights are in the air at once (confirms/s x flight wall time) and confirm-to-COMPLETED is "
    "compressed by the same factor. --time-scale 1 flies the real durations (allow a drain of ~30 min).",
    "Open model (the default): operators and snapshot readers arrive on Poisson clocks (the profile's drafts/s and "
    "reads/s spread over them), each arrival on schedule in its own greenlet whatever became of the earlier ones; "
    "every Locust process's requests share its client connections (--connections; 0: no limit), and the wait for "
    "one counts in the corrected latency (from the intended send time), not in the raw one (from the actual send). "
    "--arrivals closed: each Locust user waits for its journey to end before its next arrival (for comparison).",
    "Each draft is "
    "approved by one approver; confirms/drafts of them are confirmed; double clicks are two concurrent requests "
    "with one key; 5xx and connection errors are retried with the same key (backoff 0.5-1 s x 2^n).",
    "Cancels come part-way through the flight (0.2-0.8 x the median flight wall time after the confirm); a 409 "
    "TASK_NOT_CANCELLABLE (the flight ended first) is a business answer, not an error.",
    "Snapshot readers read recently confirmed tasks as their owners; SSE clients hold a stream 30-90 s, then "
    "reconnect. Streams are served by the async stream tier (its own process) and the API keeps 16 threads per "
    "worker; with --no-stream-tier each open stream holds one gunicorn thread and gunicorn does not balance "
    "connections over its workers, so every API worker gets ceil(1.25 x streams) + 16 threads (a stream whose "
    "client left holds its thread until the next heartbeat, <= 15 s of a 30-90 s hold).",
    "Step ramp-up: 4 equal steps of users over min(60 s, duration/4); SLOs are computed over the whole run "
    "(faults included); the error rate excludes requests inside fault windows plus a 10 s grace.",
]


# Without the stream tier (--no-stream-tier) each open SSE stream holds one gunicorn gthread thread for its whole
# life (reference/copilot/http/app.py), and gunicorn does not balance connections over its workers: whichever worker
# wakes
# first accepts, and a gthread worker accepts up to --worker-connections (1000) and queues the requests beyond its
# --threads behind the streams it holds, for as long as a stream lasts (30-90 s). Measured at 5x with
# ceil(streams / workers) + 16 threads (2 x 141): one worker held 141 streams in 141 threads with 170 connections,
# the requests queued on its other 29 connections timed out at the client's 10 s (docs/results.md, "Why 5x
# missed its SLOs"). So every worker then gets threads for all the streams, plus the streams whose client already
# left: the server notices that only at its next write, a heartbeat at most HEARTBEAT_S later, so up to
# HEARTBEAT_S / mean hold (15 / 60 s) more, plus headroom for requests.
# With the stream tier (the default) streams are asyncio tasks of their own process: the API keeps a small fixed
# pool, the headroom alone.
SSE_MEAN_HOLD_S = 60.0  # locustfile.StreamWatcher holds a stream 30-90 s
API_THREAD_HEADROOM = 16


def api_threads_for(streams: int, stream_tier: bool = True) -> int:
    """gthread threads per API worker: a fixed few when the stream tier holds the streams; otherwise enough that
    any one worker can hold every stream and still answer requests."""
    if stream_tier:
        return API_THREAD_HEADROOM
    return math.ceil(streams * (1.0 + HEARTBEAT_S / SSE_MEAN_HOLD_S)) + API_THREAD_HEADROOM


def fault_window_s(fault: str, spec: str | None) -> float:
    """The catalogue's window for the fault (first scenario with a step of that fault), scaled or replaced."""
    base = DEFAULT_WINDOWS_S[fault]
    try:
        from scenarios.catalogue import load_catalogue
        CATALOGUE = load_catalogue("copilot")

        for scn in CATALOGUE.values():
            step = next((s for s in scn.faults if s.fault == fault and s.duration), None)
            if step is not None and step.duration is not None:
                base = float(step.duration)
                break
    except Exception:  # the catalogue is someone else's moving part: fall back to the documented windows
        log.debug("catalogue lookup failed", exc_info=True)
    return window_s(base, spec)


class IdleStreams:
    """``--idle-streams N``: systems/copilot/idle_streams.py as its own process, holding N streams for the load."""

    def __init__(self, out: Path, url: str, secret: str, count: int, users: list[str], duration_s: float) -> None:
        self.summary_path = out / "idle_streams.json"
        self.summary_path.unlink(missing_ok=True)
        self.cmd = [sys.executable, "-m", "systems.copilot.idle_streams", "--url", url, "--token-secret", secret,
                    "--count", str(count), "--users", ",".join(users), "--duration", f"{duration_s:g}",
                    "--out", str(self.summary_path)]
        self.count, self.url, self.out = count, url, out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")])
               .rstrip(os.pathsep)}
        log_fh = (self.out / "idle_streams.log").open("ab")
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=log_fh, stderr=subprocess.STDOUT)

    def wait_open(self, timeout_s: float) -> int:
        """Until the server holds the streams (its /health count) or ``timeout_s``; returns the count seen."""
        deadline, seen = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            try:
                seen = int(requests.get(f"{self.url}/health", timeout=2).json().get("streams", 0))
            except (requests.RequestException, ValueError, AttributeError):
                seen = 0
            if seen >= self.count:
                break
            time.sleep(1.0)
        return seen

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []

    def stop(self) -> dict[str, Any] | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        try:
            return dict(json.loads(self.summary_path.read_text()))
        except (OSError, ValueError):
            return None


def stream_resources(ts: dict[str, Any], steady: list[float]) -> dict[str, Any]:
    """The stream tier's and the API's CPU (mean % of one core, steady window), peak RSS and peak thread count."""
    t = ts.get("t") or []
    out: dict[str, Any] = {}
    for name in ("stream", "api", "idle-streams"):
        cpu = [v for tt, v in zip(t, ts.get("cpu_pct", {}).get(name) or [], strict=False)
               if v is not None and steady[0] <= tt <= steady[1]]
        rss = [v for v in ts.get("rss_mb", {}).get(name) or [] if v is not None]
        threads = [v for v in ts.get("threads", {}).get(name) or [] if v is not None]
        if cpu or rss:
            out[name] = {"cpu_pct_mean": round(sum(cpu) / len(cpu), 1) if cpu else None,
                         "cpu_pct_max": max(cpu) if cpu else None, "rss_mb_peak": max(rss) if rss else None,
                         "threads_peak": max(threads) if threads else None}
    return out


def _hold(runner: Any, stack: Any, fault: str, history: Any) -> Any:
    """The Copilot's fault under load, for loadtests.run.FaultWindow: worker-kill kills the dispatch workers every
    WORKER_KILL_EVERY_S (the stack's supervisor restarts them), api-stall stops gunicorn's processes, the rest go
    through the scenario runner's nemesis; in the load's history as a window, in the load's seconds."""

    def hold(window: Any) -> dict[str, Any] | None:
        kills = 0
        history.fault_start(window.start_s, fault)
        try:
            if fault == "worker-kill":
                while (now := window.now()) < window.end_s:
                    for name in WORKER_KILL_TARGETS:
                        comp = stack.components.get(name)
                        if comp is not None and comp.running():
                            comp.kill()  # SIGKILL; the stack's supervisor restarts it
                            kills += 1
                    window.until(min(window.end_s, now + WORKER_KILL_EVERY_S))
            elif fault == "api-stall":
                stack.components["api"].pause()  # gunicorn's master and its workers
                window.until(window.end_s)
            else:
                runner.nemesis.apply(fault, {}, on=True)
                window.until(window.end_s)
        finally:
            if fault == "api-stall":
                stack.components["api"].resume()
            elif fault != "worker-kill":
                runner.nemesis.apply(fault, {}, on=False)
            history.fault_stop(window.now(), fault)
        return {"kills": kills} if fault == "worker-kill" else None

    return hold


class CopilotLoad:
    """The pipeline's hooks for one run of the Copilot (loadtests.run.LoadHooks)."""

    locustfile = LOCUSTFILE

    def __init__(self) -> None:
        self.stack_: Any = None
        self.runner: Any = None
        self.admin: Any = None
        self.fleet: Any = None
        self.native_opts: Any = None
        self.api_threads = 0
        self.logs_at: Any = None
        self.max_connections = 0
        self.rates: dict[str, Any] = {}
        self.idle: IdleStreams | None = None
        self.idle_summary: dict[str, Any] | None = None
        self.sampler: Sampler | None = None
        self.webhook_log: WebhookDeliveries | None = None
        self.history: Any = None
        self.xact0 = 0
        self.xact_delta = 0
        self.drain_timeout = 0.0
        self.drained_at = 0.0
        self.clock: Any = None
        self.merged: Any = None
        self.state: Any = None
        self.verdicts: list[Any] = []

    # ---------------------------------------------------------------- the stack

    @contextmanager
    def stack(self, run: LoadRun) -> Iterator[Any]:
        from reference.copilot.http.notify import STREAMS_PER_USER
        from reference.copilot.topology import Topology
        from stack.native import NativeStack
        from systems.copilot.stack import CopilotApp, CopilotOptions
        from systems.copilot.stack_run import STACK_POLICY

        opts, profile = run.opts, run.profile
        self.api_threads = opts.api_threads or api_threads_for(profile.sse_streams, opts.stream_tier)
        self.native_opts = CopilotOptions(
            time_scale=opts.time_scale, devices=max(profile.devices, 1), seed=opts.seed, api_workers=opts.api_workers,
            api_threads=self.api_threads, policy=STACK_POLICY, stream_tier=opts.stream_tier,
            # the profile's streams share its few operators: no per-user cap, and without the tier the API holds them
            # all on the threads api_threads_for sized for them (its headroom stays for requests)
            streams_per_user=max(STREAMS_PER_USER, profile.sse_streams + opts.idle_streams),
            api_max_streams=max(1, self.api_threads - API_THREAD_HEADROOM),
            # one publisher: the capacity model's outbox stage is calibrated on one
            topology=Topology(publishers=1, dispatchers=opts.dispatchers))
        self.stack_ = NativeStack((run.out / "stack").resolve(), CopilotApp(self.native_opts))
        run.say(f"[bold]{profile.name}[/]: starting the native stack ({opts.api_workers} API workers x "
                f"{self.api_threads} threads, {opts.dispatchers} dispatchers, simulator time_scale "
                f"{opts.time_scale:g})")
        self.stack_.start()
        try:
            yield self.stack_
        finally:
            if self.idle is not None:
                self.idle.stop()
            if self.sampler is not None and self.sampler._thread.is_alive():
                self.sampler.stop()
            if self.admin is not None:
                self.admin.dispose()
            self.stack_.stop()

    def warm(self, run: LoadRun) -> dict[str, Any]:
        """The fleet seeded, the idle streams opened (before the load's clock starts: their windows measure the
        held streams only); the locustfile's configuration."""
        from sqlalchemy import create_engine, text

        from systems.copilot.stack_run import StackScenarioRunner
        from systems.copilot.workload import WorkloadSpec

        opts, profile, ep = run.opts, run.profile, self.stack_.endpoints
        self.runner = StackScenarioRunner(self.stack_, time_factor=1.0)
        self.admin = create_engine(ep.admin_database_url, pool_size=2, max_overflow=2)
        self.fleet = self.runner.reset(opts.seed, WorkloadSpec.from_profile(profile, run.duration_s))
        self.logs_at = self.stack_.log_sizes()  # I27 reads the defects the components log from here on
        with self.admin.connect() as conn:
            self.max_connections = int(conn.execute(text("SHOW max_connections")).scalar_one())
        readers = max(1, math.ceil(profile.snapshot_reads_per_s / 2.0))
        self.rates = {"operators": profile.operators, "drafts_per_s": profile.drafts_per_s,
                      "confirm_ratio": profile.confirms_per_s / profile.drafts_per_s,
                      "confirms_per_s": profile.confirms_per_s, "double_click_ratio": profile.double_click_ratio,
                      "cancel_ratio": profile.cancel_ratio, "snapshot_reads_per_s": profile.snapshot_reads_per_s,
                      "readers": readers, "sse_streams": profile.sse_streams,
                      "flight_wall_median_s": profile.flight_median_s / opts.time_scale}
        if opts.idle_streams:
            self._open_idle_streams(run)
        run.host = ep.api_url
        run.say(f"locust: {profile.operators} operators, {readers} readers, {profile.sse_streams} SSE streams; "
                f"{run.duration_s:g} s with a {opts.ramp_steps}-step ramp over {run.ramp_s:g} s"
                + (f"; {opts.workers} Locust workers" if opts.workers else ""))
        self.xact0 = _xact(self.admin)
        return {"token_secret": ep.app["token_secret"], "seed": opts.seed, "duration_s": run.duration_s,
                "stream_url": ep.app.get("stream_url") or ep.api_url, "arrivals": opts.arrivals,
                "connections": opts.connections,
                "ramp": {"steps": opts.ramp_steps, "ramp_s": run.ramp_s}, "rates": self.rates,
                "client_log_dir": str(run.client_dir),
                "fleet": {"areas": dict(self.fleet.areas), "devices_by_area": self.fleet.devices_by_area,
                          "operators": [list(o) for o in self.fleet.operators]}}

    def _open_idle_streams(self, run: LoadRun) -> None:
        opts, ep = run.opts, self.stack_.endpoints
        open_s = min(180.0, 2.0 * opts.idle_streams / IDLE_OPEN_RATE + 15.0)
        stream_url = ep.app.get("stream_url") or ep.api_url
        self.idle = IdleStreams(run.out, stream_url, ep.app["token_secret"], opts.idle_streams,
                                [o[0] for o in self.fleet.operators], open_s + run.duration_s + 150.0)
        run.say(f"idle streams: opening {opts.idle_streams} at {stream_url} for the whole load")
        self.idle.start()
        held = self.idle.wait_open(open_s)
        run.say(f"idle streams: {held} held by the server before the load starts")

    # ---------------------------------------------------------------- under load

    def sample(self, run: LoadRun) -> None:
        from harness.history import History
        from systems.copilot.stack_run import StackClock

        self.history = History()
        self.clock = StackClock(time.monotonic() - (time.time() - run.t0), run.t0)
        harness_pid, locust, idle = os.getpid(), run.locust, self.idle
        assert locust is not None

        def extra_pids() -> dict[str, list[int]]:
            # the idle-stream client before the harness, whose child it is (a pid counts once)
            return {"locust": locust.pids(), **({"idle-streams": idle.pids()} if idle is not None else {}),
                    "harness": [harness_pid]}

        self.webhook_log = WebhookDeliveries(self.stack_.endpoints.app["platform_control_url"])
        self.sampler = Sampler(self.stack_, self.admin, run.client_dir, run.t0, run.opts.sample_interval_s,
                               extra_pids=extra_pids, webhook_deliveries=self.webhook_log)
        self.sampler.start()

    def fault(self, run: LoadRun) -> FaultWindow | None:
        opts = run.opts
        if not opts.fault:
            return None
        window = fault_window_s(opts.fault, opts.fault_window)
        fault = start_fault(run, window, _hold(self.runner, self.stack_, opts.fault, self.history),
                            default_at_s=run.ramp_s + max(10.0, 0.15 * run.duration_s))
        run.say(f"fault {opts.fault}: {window:g} s from t={fault.start_s:g} s")
        return fault

    def after_load(self, run: LoadRun) -> None:
        self.idle_summary = self.idle.stop() if self.idle is not None else None
        self.idle = None

    def drain(self, run: LoadRun) -> None:
        self.drain_timeout = run.opts.drain_s or (120.0 + 3.0 * run.profile.flight_median_s / run.opts.time_scale)
        run.say(f"load done at t={run.load_end:.0f} s; draining (up to {self.drain_timeout:.0f} s)")
        deadline = time.monotonic() + self.drain_timeout
        while time.monotonic() < deadline and self.runner._unsettled():
            time.sleep(1.0)
        self.drained_at = time.time() - run.t0
        assert self.sampler is not None
        self.sampler.sample()
        self.sampler.stop()
        self.xact_delta = _xact(self.admin) - self.xact0

    def check(self, run: LoadRun) -> None:
        """I1-I37 on the clients' operations merged with the stack's own history."""
        from systems.copilot.checkers import INVARIANTS

        assert self.sampler is not None
        for op in self.sampler.ops:
            self.history.add(op["t"], op["process"], op["type"], op["f"], op["value"])
        clock = self.clock
        heal = float(run.fault.window["end"]) if run.fault is not None else 0.0
        self.merged = self.runner._merged(_sorted(self.history), clock)
        self.state = self.runner.final_state(clock, heal, self.logs_at)
        self.verdicts = INVARIANTS.check(self.runner.check_context(self.merged, self.state,
                                                                    self.drain_timeout + 60.0))
        self.merged.write_jsonl(run.out / "history.jsonl")

    # ---------------------------------------------------------------- figures

    def figures(self, run: LoadRun) -> dict[str, Any]:
        """load.json: measured figures first, then the capacity probes (pgbench, the confirm burst), which add
        rows and CPU of their own."""
        assert self.sampler is not None
        invariants = {v.invariant: v.status for v in self.verdicts}
        endpoints = analysis.read_locust_stats(run.out / "locust") or analysis.endpoints_from_requests(
            self.sampler.requests, (0.0, run.load_end))
        deliveries = self._webhook_deliveries(run)
        life = load_analysis.lifecycle(self.admin)
        svc = self._service_times(run, endpoints, deliveries)
        pgbench, capacity = self._capacity_probes(run, svc)
        latency = self._latency(run)
        errors = analysis.error_summary(self.sampler.requests, run.windows, FAULT_GRACE_S)
        slo = load_analysis.slo_verdicts(run.profile.slo, endpoints, life, errors, invariants, latency)
        load = {**self._run_figures(run), "endpoints": endpoints, "latency": latency,
                "endpoints_steady": self._steady_endpoints(run, deliveries), "lifecycle_ms": life,
                "service_times_ms": svc, "errors": errors, "slo": slo, "slo_held": all(s["held"] for s in slo),
                "invariants": invariants,
                "invariant_details": [v.as_json() for v in self.verdicts if v.status != "held"],
                "confirm_capacity": capacity, "pgbench": _pgbench_figures(pgbench, capacity, endpoints),
                **self._stack_figures(run, endpoints, deliveries)}
        if "script" in pgbench:
            (run.out / "pgbench_confirm_shape.sql").write_text(pgbench["script"])
        _fault_figures(run, load, self.verdicts, self.sampler.requests)
        load["missing"] = missing_figures(load)
        return load

    def _webhook_deliveries(self, run: LoadRun) -> dict[str, Any] | None:
        assert self.webhook_log is not None
        self.webhook_log.drain(force=True)
        deliveries = self.webhook_log.result()
        if deliveries is not None and deliveries["missed"]:
            run.say(f"[yellow]the simulator's delivery log dropped {deliveries['missed']} webhook deliveries before "
                    "they were read: the webhook figures miss them[/]")
        return deliveries

    def _service_times(self, run: LoadRun, endpoints: dict[str, Any],
                       deliveries: dict[str, Any] | None) -> dict[str, Any]:
        assert self.sampler is not None
        svc = load_analysis.db_service_times(self.admin)
        counts = svc.pop("_counts")
        webhook_posts = None if deliveries is None else load_analysis.webhook_posts(deliveries, run.t0, self.drained_at)
        svc.update(load_analysis.cpu_service_times(self.sampler.cpu_seconds, counts, len(self.sampler.requests),
                                              self.xact_delta, webhook_posts))
        svc.update(load_analysis.platform_call_times(self.merged.ops))
        confirm = endpoints.get(CONFIRM, {})
        svc["api_confirm"] = {"p50": confirm.get("p50_ms"), "p95": confirm.get("p95_ms"), "n": confirm.get(
            "requests", 0), "source": "Locust: confirm request latency at the client (API + 1 transaction)"}
        return svc

    def _capacity_probes(self, run: LoadRun, svc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The confirm endpoint's capacity against pgbench, back to back, after every figure of the load is taken
        (neither adds rows or CPU to the load's own measurements)."""
        opts = run.opts
        pgbench: dict[str, Any] = {}
        if opts.pgbench_s > 0:
            from loadtests.pgbench import run_pgbench

            run.say(f"pgbench: a confirm-shaped transaction, {opts.capacity_clients} clients for "
                    f"{opts.pgbench_s:g} s on the stack's PostgreSQL")
            pgbench = run_pgbench(self.admin, self.stack_.services["postgres"], seconds=opts.pgbench_s,
                                  clients=opts.capacity_clients, operators=run.profile.operators,
                                  area=self.fleet.areas[0][0])
            if pgbench.get("error"):  # a missing figure (exit 5): say why where the run's output goes
                log.warning("pgbench failed: %s", pgbench["error"])
        capacity = self._confirm_capacity(run) if opts.capacity_confirms > 0 else {}
        if pgbench.get("latency_avg_ms") is not None:
            svc["db_tx"] = {"mean": pgbench["latency_avg_ms"], "n": pgbench.get("transactions"),
                            "source": f"pgbench latency average, confirm-shaped transaction, "
                                      f"{pgbench['clients']} clients"}
        return pgbench, capacity

    def _confirm_capacity(self, run: LoadRun) -> dict[str, Any]:
        import psutil

        from systems.copilot import confirm_capacity
        from systems.copilot.sampler import cpu_seconds, process_groups

        opts, ep = run.opts, self.stack_.endpoints
        run.say(f"confirm capacity: {opts.capacity_confirms} confirms by {opts.capacity_clients} closed-loop clients")
        publisher = self.stack_.components.get("publisher")
        try:
            return dict(confirm_capacity.measure(
                ep.api_url, ep.app["token_secret"], self.fleet, confirms=opts.capacity_confirms,
                clients=opts.capacity_clients, seed=opts.seed,
                pause=publisher.pause if publisher else lambda: None,
                resume=publisher.resume if publisher else lambda: None,
                cpu_probe=lambda: cpu_seconds(process_groups(self.stack_)) | {"harness (the clients)": sum(
                    psutil.Process().cpu_times()[:2])}))
        except Exception as exc:  # the load's own figures are taken: report this one as failed, keep them
            log.warning("confirm capacity failed", exc_info=True)
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _latency(self, run: LoadRun) -> dict[str, Any]:
        from loadtests.latency import figures as latency_figures

        assert self.sampler is not None
        opts = run.opts
        return dict(latency_figures(self.sampler.hdr, mode=opts.arrivals,
                                    connections=opts.connections if opts.arrivals == "open" else None))

    def _steady_endpoints(self, run: LoadRun, deliveries: dict[str, Any] | None) -> dict[str, Any]:
        assert self.sampler is not None
        steady = (run.ramp_s, run.load_end)
        return analysis.endpoints_from_requests(
            [r for r in self.sampler.requests if steady[0] <= r["t"] <= steady[1]], steady) | _webhooks_steady(
            deliveries, run.t0, steady)

    def _run_figures(self, run: LoadRun) -> dict[str, Any]:
        """What ran: the profile, the clock, the machine, the stack's sizes."""
        import psutil

        opts = run.opts
        return {
            "schema": "sortie.load/1", "system": "copilot",
            "profile": run.profile.name, "multiple": run.multiple, "duration_s": run.duration_s, "stack": opts.stack,
            "seed": opts.seed, "time_scale": opts.time_scale,
            "assumptions": [*run.profile.assumptions, *LOAD_ASSUMPTIONS],
            "rates": self.rates, "ramp": {"steps": opts.ramp_steps, "ramp_s": run.ramp_s},
            "steady_window": [run.ramp_s, run.load_end],
            "t0_epoch": round(run.t0, 3),  # the run's time 0: the client log's epochs are relative to it
            "load_end_s": round(run.load_end, 2), "drained_at_s": round(self.drained_at, 2),
            "machine": {"cpus": psutil.cpu_count(), "hostname": os.uname().nodename,
                        "load_avg": [round(x, 2) for x in os.getloadavg()],
                        "note": "Locust and every stack process share this machine"},
            "workers": {"api_workers": opts.api_workers, "api_threads": self.api_threads,
                        "dispatchers": opts.dispatchers, "publisher": self.native_opts.topology.publishers,
                        "report_worker": 1, "reconciler": 1, "locust_workers": opts.workers,
                        "db_pool_per_process": "5 + 5 overflow (reference/copilot/settings.py)"},
            "db": {"max_connections": self.max_connections, "commits": self.xact_delta},
            "fault": opts.fault, "fault_windows": run.windows,
            "fault_detail": ({"kills": run.fault.window["kills"]}
                             if run.fault is not None and opts.fault == "worker-kill" else None),
            "model_inputs": MODEL_INPUTS,
        }

    def _stack_figures(self, run: LoadRun, endpoints: dict[str, Any],
                       deliveries: dict[str, Any] | None) -> dict[str, Any]:
        """The series, the backlog, the streams, the stack's restarts and the harness's own health."""
        assert self.sampler is not None and self.webhook_log is not None
        sampler, ts = self.sampler, dict(self.sampler.series)
        return {
            "timeseries": ts, "backlog": load_analysis.backlog(ts, run.windows, run.load_end),
            "dead_letters": len(self.state.dead_letters), "counts": self.state.counts(),
            "sse": {"opened": endpoints.get("GET /v1/stream", {}).get("requests", 0),
                    "closed": len(sampler.sse), "events_received": sum(s["events"] for s in sampler.sse),
                    "broken": sum(1 for s in sampler.sse if s.get("broken")),
                    "stream_tier": run.opts.stream_tier, "idle_streams": self.idle_summary,
                    "resources": stream_resources(ts, [run.ramp_s, run.load_end])},
            "restarts": dict(self.stack_.restarts), "locust_exit_code": run.locust_code,
            "sampler_db_errors": sampler.db_errors,
            "webhook_deliveries": None if deliveries is None else {
                "logged": len(deliveries["items"]), "missed": deliveries["missed"],
                "unreadable_reads": self.webhook_log.unreadable},
            "wall_s": round(time.perf_counter() - run.wall0, 1),
        }


# The reference's constants the capacity model (capacity_model.py) needs, recorded with the run: the consumer's receive
# (a RocketMQ long poll), the stream tier's heartbeat and the platform's webhook batch cap.
def _model_inputs() -> dict[str, float]:
    from reference.copilot.adapters.broker_rocketmq import LONG_POLL_S
    from simulator.app import MAX_BATCH

    return {"consumer_long_poll_s": LONG_POLL_S, "sse_heartbeat_s": HEARTBEAT_S, "webhook_max_batch": MAX_BATCH}


MODEL_INPUTS = _model_inputs()


def _pgbench_figures(pgbench: dict[str, Any], capacity: dict[str, Any], endpoints: dict[str, Any]) -> dict[str, Any]:
    """pgbench's figures, with the ratios: capacity_ratio, the endpoint's ceiling against the database's (same
    clients, same transaction shape); load_ratio, how much of the database's ceiling the profile's own confirms
    used."""
    if pgbench.get("tps"):
        confirm = endpoints.get(CONFIRM, {})
        pgbench["confirm_capacity_rps"] = capacity.get("rps")
        pgbench["capacity_ratio"] = round(capacity["rps"] / pgbench["tps"], 4) if capacity.get("rps") else None
        pgbench["confirm_rps"] = confirm.get("rps")
        pgbench["load_ratio"] = round((confirm.get("rps") or 0.0) / pgbench["tps"], 5)
    return {k: v for k, v in pgbench.items() if k != "script"} | (
        {"script_file": "pgbench_confirm_shape.sql"} if "script" in pgbench else {})


def _fault_figures(run: LoadRun, load: dict[str, Any], verdicts: list[Any], requests: list[dict[str, Any]]) -> None:
    """The backlog's losses and duplicates, and the recovery from the fault, by the invariants that count them."""
    invariants = load["invariants"]
    if load["backlog"] is not None:
        load["backlog"]["lost"] = invariants.get("I3")
        load["backlog"]["duplicated"] = {"I1": invariants.get("I1"), "I6": invariants.get("I6")}
    windows = run.windows
    load["recovery"] = load_analysis.recovery(
        load["timeseries"], requests, windows[0] if windows else None, run.load_end, steady_from=run.ramp_s,
        latency=load["latency"], slo=run.profile.slo, grace_s=FAULT_GRACE_S, backlog_figures=load["backlog"],
        duplicates={v.invariant: len(v.violations) for v in verdicts
                    if v.invariant in load_analysis.DUPLICATE_INVARIANTS})
    if load["recovery"] is not None:
        load["recovery"]["lost"] = {"I3": invariants.get("I3")}


def _sorted(history: Any) -> Any:
    from harness.history import History

    h = History()
    for op in sorted(history.ops, key=lambda o: o.time):
        h.add(op.time, op.process, op.type, op.f, op.value)
    return h


def _xact(admin: Any) -> int:
    from sqlalchemy import text

    with admin.connect() as conn:
        return int(conn.execute(text(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")).scalar_one())


def _webhooks_steady(deliveries: dict[str, Any] | None, t0_epoch: float,
                     window: tuple[float, float]) -> dict[str, Any]:
    """The platform's webhooks in the steady window as an endpoint (load_analysis.webhook_endpoint)."""
    figures = load_analysis.webhook_endpoint(deliveries, t0_epoch, window) if deliveries is not None else {}
    return {load_analysis.WEBHOOK_ENDPOINT: figures} if figures else {}


def missing_figures(load: dict[str, Any]) -> list[str]:
    """What a load run must have produced; CI fails on any of these (SLO verdicts are only reported)."""
    miss = []
    for name in (CONFIRM, "POST /v1/drafts", "GET /v1/tasks/{id}"):
        e = load["endpoints"].get(name)
        if not e or not e.get("requests") or e.get("p95_ms") is None:
            miss.append(f"endpoint {name}")
    for stage in ("dispatching", "executing"):
        if not load["lifecycle_ms"].get(stage, {}).get("n"):
            miss.append(f"lifecycle {stage}")
    ts = load["timeseries"]
    if len(ts["t"]) < 3:
        miss.append("timeseries")
    if not ts["cpu_pct"] or not ts["rss_mb"]:
        miss.append("process CPU/RSS")
    if not load["invariants"]:
        miss.append("invariants")
    if load.get("pgbench") and not load["pgbench"].get("tps"):  # ran and failed ({} when skipped by 0 s)
        miss.append("pgbench")
    if load.get("confirm_capacity") and not load["confirm_capacity"].get("rps"):
        miss.append("confirm capacity")
    hooks = load.get("webhook_deliveries")
    if hooks is None or not (load.get("endpoints_steady") or {}).get(load_analysis.WEBHOOK_ENDPOINT):
        miss.append(f"endpoint {load_analysis.WEBHOOK_ENDPOINT}")
    elif hooks["missed"]:
        miss.append(f"webhook deliveries ({hooks['missed']} dropped from the simulator's log before they were read)")
    return miss


# ---------------------------------------------------------------------------------------------- entry point


def check_options(opts: LoadOptions) -> None:
    """ValueError for options the Copilot's load does not take, before anything starts."""
    if opts.stack != "native":
        raise ValueError(f"--stack {opts.stack}: only the native provider runs load (no Docker engine here)")
    if opts.fault is not None and opts.fault not in FAULTS:
        raise ValueError(f"--fault {opts.fault}: one of {', '.join(FAULTS)}")
    if opts.baseline is not None:
        from loadtests.run import baseline_file

        baseline_file(Path(opts.baseline))  # before the run: a wrong path is a usage error, not a lost hour
    if opts.arrivals not in ARRIVALS:
        raise ValueError(f"--arrivals {opts.arrivals}: one of {', '.join(ARRIVALS)}")
    if opts.connections < 0:
        raise ValueError(f"--connections {opts.connections}: a count of connections (0: no limit)")
    if opts.arrival_rate is not None and (opts.arrival_rate <= 0 or opts.find_max):
        raise ValueError(f"--arrival-rate {opts.arrival_rate}: a positive rate of confirms per second, without "
                         "--find-max (which chooses the rates itself)")


def profile_of(opts: LoadOptions) -> tuple[Any, float]:
    """The profile the options ask for and its multiple of 1x (--arrival-rate scales every rate of it)."""
    profile, multiple = resolve_profile(opts.profile)
    if opts.arrival_rate is not None:
        k = opts.arrival_rate / profile.confirms_per_s
        profile, multiple = scale_profile(profile, k), multiple * k
        profile = dataclasses.replace(profile, name=f"{multiple:.3g}x ({opts.arrival_rate:g} confirms/s)")
    return profile, multiple


def write_capacity_json(out: Path) -> None:
    """DIR/capacity.json: the figures a baseline compares (loadtests.analysis.capacity_json)."""
    load = json.loads((out / "load.json").read_text())
    (out / "capacity.json").write_text(json.dumps(load_analysis.capacity_json(load), indent=2, default=str) + "\n")


def main(opts: LoadOptions, console: Any = None) -> int:
    """Runs what the options ask through the load pipeline; prints the verdicts; returns the exit code
    (loadtests.run.exit_code; 3 also when --baseline finds a regression)."""
    check_options(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    report = opts.report
    opts = dataclasses.replace(opts, report=lambda out: _report(out, report))
    if opts.find_max:
        base, _ = resolve_profile("1x")
        load = find_max(CopilotLoad, lambda k: scale_profile(base, k), opts, console)["load"]
    else:
        profile, multiple = profile_of(opts)
        load = run_once(CopilotLoad(), opts, profile, multiple, opts.out, console)
    if load is None:
        return 1
    if console is not None:
        print_summary(load, console)
    code = exit_code(load, slo_asserted=not opts.find_max)
    if opts.baseline is not None and compare_with_baseline(opts, console) and code == 0:
        code = 3
    return code


def _report(out: Path, report: Any) -> None:
    write_capacity_json(out)
    if report is not None:
        report(out)


def print_summary(load: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    t = Table(title=f"load {load['profile']} ({load['multiple']:g}x), {load['duration_s']:g} s, {load['stack']}")
    for col in ("endpoint", "requests", "failures", "rps", "p50 ms", "p95 ms", "p99 ms"):
        t.add_column(col, justify="left" if col == "endpoint" else "right")
    for name, e in load["endpoints"].items():
        t.add_row(name, str(e["requests"]), str(e["failures"]), f"{e['rps']:.2f}", _f(e["p50_ms"]), _f(e["p95_ms"]),
                  _f(e["p99_ms"]))
    console.print(t)
    lat = load.get("latency") or {}
    if lat.get("endpoints"):
        c = lat.get("connections_per_process")
        pool = f", {c} connections per Locust process" if c else ""
        t = Table(title=f"latency, {lat['mode']} model{pool}: raw (from the send) and corrected (from the intended "
                        "send time), ms, HDR histograms")
        for col in ("endpoint", "n", "raw p50", "corr p50", "raw p95", "corr p95", "raw p99", "corr p99"):
            t.add_column(col, justify="left" if col == "endpoint" else "right")
        for name, e in lat["endpoints"].items():
            raw, cor = e["raw"], e["corrected"]
            t.add_row(name, str(raw["n"]), *(_f(x[f"p{q}_ms"]) for q in (50, 95, 99) for x in (raw, cor)))
        console.print(t)
    s = Table(title="SLO verdicts (docs/capacity.md; reported, not asserted)")
    for col in ("SLO", "target", "measured", "verdict"):
        s.add_column(col)
    for row in load["slo"]:
        verdict = "[green]held[/]" if row["held"] else "[red]failed[/]"
        source = f" ({row['source']})" if row.get("source") else ""
        s.add_row(row["name"], row["target"], f"{row['measured']}{source}", verdict)
    console.print(s)
    life = load["lifecycle_ms"]
    console.print("confirm-to-X (ms, database timestamps): " + "; ".join(
        f"{k} n={v['n']} p50={_f(v['p50'])} p95={_f(v['p95'])} p99={_f(v['p99'])}"
        for k, v in life.items() if k != "confirmed"))
    console.print("invariants: " + " ".join(f"{k}={v}" for k, v in load["invariants"].items()))
    sc = (load.get("endpoints_steady") or {}).get(CONFIRM) or {}
    if sc.get("server_cpu_n"):
        console.print(f"confirm inside the API (Server-Timing, steady window, n={sc['server_cpu_n']}): handler wall "
                      f"p50 {_f(sc.get('server_p50_ms'))} ms, p95 {_f(sc.get('server_p95_ms'))} ms; handler thread CPU "
                      f"p50 {_f(sc.get('server_cpu_p50_ms'))} ms, mean {_f(sc.get('server_cpu_mean_ms'))} ms")
    pg = load.get("pgbench") or {}
    if pg.get("tps"):
        cap = load.get("confirm_capacity") or {}
        console.print(f"pgbench confirm-shaped: {pg['tps']:.0f} tps ({pg.get('clients')} clients); confirm endpoint "
                      f"capacity {cap.get('rps')} confirms/s (same clients): ratio {pg.get('capacity_ratio')}; "
                      f"the profile's confirms used {pg.get('load_ratio')} of pgbench's tps")
    if load.get("backlog"):
        b = load["backlog"]
        console.print(f"backlog peak {b['peak']} (outbox {b.get('peak_outbox_depth')}, unsettled "
                      f"{b.get('peak_unsettled')}); drain {b['drain_s']} s after the fault; lost: I3 {b.get('lost')}; "
                      f"duplicated: {b.get('duplicated')}")
    if load.get("recovery"):
        r = load["recovery"]
        ans, ev = r["throughput"]["answers_per_s"], r["throughput"]["events_published_per_s"]
        console.print(
            f"recovery from {r['fault']} ({r['window_s']:g} s): answers/s back within 5% after {ans['recover_s']} s "
            f"(pre-fault {ans['pre_fault']}, lowest {ans['lowest_in_fault']}); published events/s after "
            f"{ev['recover_s']} s; confirm p99 under {r['confirm_p99_slo_ms']:g} ms after "
            f"{r['confirm_p99_recover_s']} s; backlog peak "
            f"{r['backlog_peak']}, drained {r['drain_s']} s after; in the window {r['requests_in_window']} requests, "
            f"{r['failed_in_window']} failed, {r['refused_in_window']} refused; duplicates {r['duplicates_total']}; "
            f"error budget spent {r['error_budget']['fraction']}")
    if load.get("saturation"):
        sat = load["saturation"]
        console.print(f"saturation: largest multiple that held {sat['max_multiple_held']}; failed at "
                      f"{sat['failed_multiple']} ({', '.join(sat['failed_slos'])}); bottleneck: {sat['bottleneck']}")
    if load["missing"]:
        console.print(f"[red]missing figures: {', '.join(load['missing'])}[/]")


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}" if isinstance(v, float) and v >= 10 else str(v)
