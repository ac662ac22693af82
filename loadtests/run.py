"""`sortie load`: a traffic profile against the native stack with Locust, Sortie's own measurements, the
invariants at the end, an optional fault under load, a saturation search, capacity.json and a baseline
comparison. The CLI verb (sortie/cli.py) only parses options and calls :func:`main`.

One run: start a NativeStack sized for the profile, seed the fleet, run Locust headless as its own
process(es) (Locust's gevent monkey-patching stays out of the harness), sample every ~1.5 s, let the
backlog drain, check the invariants and take the figures; then, back to back on the same PostgreSQL, pgbench
with a confirm-shaped transaction (the database's ceiling for that shape) and a closed-loop burst of confirms
with the same number of clients (the endpoint's ceiling); write DIR/load.json, DIR/capacity.json and Locust's
CSV files (DIR/locust_*.csv)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from loadtests import analysis
from loadtests.idle_streams import OPEN_RATE as IDLE_OPEN_RATE
from loadtests.sampler import CONFIRM, Sampler, WebhookDeliveries
from scenarios.workload import resolve_profile, scale_profile

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
    from reference.copilot.http.app import HEARTBEAT_S

    return math.ceil(streams * (1.0 + HEARTBEAT_S / SSE_MEAN_HOLD_S)) + API_THREAD_HEADROOM


# ---------------------------------------------------------------------------------------------- options


@dataclass
class LoadOptions:
    out: Path
    profile: str = "1x"
    duration_s: float = 600.0
    stack: str = "native"
    workers: int = 0  # Locust worker processes (0: one local process, no master)
    fault: str | None = None
    fault_window: str | None = None  # a factor of the catalogue's window ("0.5") or a duration ("5m", "30s")
    fault_at_s: float | None = None
    arrivals: str = "open"  # open: on schedule whatever the answers; closed: each Locust user waits for its last
    connections: int = 32  # client connections per Locust process, open model (0: no limit)
    arrival_rate: float | None = None  # confirms/s offered: every rate of the profile scaled to it
    find_max: bool = False
    max_multiple: float = 55.0
    baseline: Path | None = None
    seed: int = 1
    time_scale: float = 60.0
    api_workers: int = 2
    api_threads: int | None = None
    stream_tier: bool = True  # GET /v1/stream from the async stream tier (its own process), not the API's threads
    idle_streams: int = 0  # extra SSE streams held open (and read) for the whole load by loadtests/idle_streams.py
    dispatchers: int = 2
    pgbench_s: float = 10.0
    capacity_confirms: int = 1000  # the confirm-capacity burst after the load (0 skips it)
    capacity_clients: int = 4  # closed-loop clients of both pgbench and the confirm burst
    drain_s: float | None = None
    ramp_steps: int = 4
    sample_interval_s: float = 1.5
    extra: dict[str, Any] = field(default_factory=dict)
    # Called with each output directory once its files are written: `sortie load` passes
    # reports.capacity.write_capacity (reports/ sits above loadtests/, pyproject.toml [tool.importlinter]).
    report: Callable[[Path], Any] | None = None


def parse_duration(value: str | float) -> float:
    """'90s', '10m', '1h', '1m30s' or plain seconds."""
    if isinstance(value, int | float):
        return float(value)
    s = str(value).strip().lower()
    if re.fullmatch(r"[0-9.]+", s):
        return float(s)
    parts = re.findall(r"([0-9.]+)\s*([hms])", s)
    if not parts or "".join(a + b for a, b in parts) != s.replace(" ", ""):
        raise ValueError(f"not a duration: {value!r} (use 90s, 10m, 1h or seconds)")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def fault_window_s(fault: str, spec: str | None) -> float:
    """The catalogue's window for the fault (first scenario with a step of that fault), scaled or replaced."""
    base = DEFAULT_WINDOWS_S[fault]
    try:
        from scenarios.catalogue import CATALOGUE

        for scn in CATALOGUE.values():
            step = next((s for s in scn.faults if s.fault == fault and s.duration), None)
            if step is not None:
                base = float(step.duration)
                break
    except Exception:  # the catalogue is someone else's moving part: fall back to the documented windows
        log.debug("catalogue lookup failed", exc_info=True)
    if spec is None:
        return base
    if re.fullmatch(r"[0-9.]+", spec.strip()):
        return base * float(spec)
    return parse_duration(spec)


# ---------------------------------------------------------------------------------------------- one run


def _first_line(path: Path) -> str:
    with path.open() as fh:
        return fh.readline()


class LocustProcesses:
    """Locust headless as processes: one local runner, or a master plus N workers (distributed mode)."""

    def __init__(self, out: Path, host: str, config_path: Path, workers: int, locustfile: Path = LOCUSTFILE) -> None:
        self.out, self.host, self.config_path, self.workers = out, host, config_path, workers
        self.locustfile = locustfile
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = {**os.environ, "SORTIE_LOAD_CONFIG": str(self.config_path), "GRPC_VERBOSITY": "ERROR",
               "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        base = [sys.executable, "-m", "locust", "-f", str(self.locustfile), "--host", self.host,
                "--loglevel", "WARNING"]
        master = [*base, "--headless", "--csv", str(self.out / "locust"), "--csv-full-history",
                  "--html", str(self.out / "locust.html"), "--exit-code-on-error", "0", "--stop-timeout", "5",
                  "--logfile", str(self.out / "locust.log")]
        if self.workers > 0:
            from stack.common import free_port

            port = free_port()
            master += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                       "--expect-workers", str(self.workers)]
        log_fh = (self.out / "locust.out").open("ab")
        self.procs.append(subprocess.Popen(master, env=env, stdout=log_fh, stderr=subprocess.STDOUT))
        for i in range(self.workers):
            worker = [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                      "--logfile", str(self.out / f"locust-worker-{i + 1}.log")]
            self.procs.append(subprocess.Popen(worker, env=env, stdout=log_fh, stderr=subprocess.STDOUT))

    def wait_started(self, client_dir: Path, timeout_s: float = 180.0) -> float | None:
        """The epoch at which Locust started its test (the earliest ``start`` record its locustfile wrote to a client
        log at ``test_start``), waiting for it: the load's time 0, so a fault due t s into the load meets the users
        that were due then, however long Locust took to import and spawn on a busy machine. None: Locust exited or
        did not start within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            firsts = [_first_line(path) for path in client_dir.glob("*.jsonl")]  # (nothing comes before it)
            starts = [json.loads(line)["t"] for line in firsts  # (a whole line: its newline was written)
                      if line.startswith('{"k":"start"') and line.endswith("\n")]
            if starts:
                return min(starts)
            if time.monotonic() >= deadline or self.procs[0].poll() is not None:
                return None
            time.sleep(0.1)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.procs[0].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


class IdleStreams:
    """``--idle-streams N``: loadtests/idle_streams.py as its own process, holding N streams for the load."""

    def __init__(self, out: Path, url: str, secret: str, count: int, users: list[str], duration_s: float) -> None:
        self.summary_path = out / "idle_streams.json"
        self.summary_path.unlink(missing_ok=True)
        self.cmd = [sys.executable, "-m", "loadtests.idle_streams", "--url", url, "--token-secret", secret,
                    "--count", str(count), "--users", ",".join(users), "--duration", f"{duration_s:g}",
                    "--out", str(self.summary_path)]
        self.count, self.url, self.out = count, url, out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])
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


class _FaultDriver(threading.Thread):
    def __init__(self, runner: Any, stack: Any, fault: str, start_s: float, window_s: float, t0: float,
                 history: Any) -> None:
        super().__init__(name=f"fault-{fault}", daemon=True)
        self.runner, self.stack, self.fault, self.start_s, self.window_s = runner, stack, fault, start_s, window_s
        self.t0, self.history = t0, history
        self.window: dict[str, Any] = {"fault": fault, "start": None, "end": None}
        self.kills = 0
        self.stalled: list[int] = []

    def _at(self, t: float) -> None:
        while time.time() - self.t0 < t:
            time.sleep(min(0.2, t - (time.time() - self.t0)))

    def run(self) -> None:
        self._at(self.start_s)
        start = time.time() - self.t0
        self.window["start"] = round(start, 2)
        self.history.fault_start(start, self.fault)
        try:
            if self.fault == "worker-kill":
                while time.time() - self.t0 < start + self.window_s:
                    for name in WORKER_KILL_TARGETS:
                        comp = self.stack.components.get(name)
                        if comp is not None and comp.running():
                            comp.kill()  # SIGKILL; the stack's supervisor restarts it
                            self.kills += 1
                    self._at(min(start + self.window_s, time.time() - self.t0 + WORKER_KILL_EVERY_S))
            elif self.fault == "api-stall":
                self.stalled = self.stack.components["api"].pause()  # gunicorn's master and its workers
                self._at(start + self.window_s)
            else:
                self.runner.nemesis.apply(self.fault, {}, on=True)
                self._at(start + self.window_s)
        finally:
            if self.fault == "api-stall":
                self.stack.components["api"].resume()
            elif self.fault != "worker-kill":
                self.runner.nemesis.apply(self.fault, {}, on=False)
            end = time.time() - self.t0
            self.window["end"] = round(end, 2)
            self.history.fault_stop(end, self.fault)


def run_once(opts: LoadOptions, profile: Any, multiple: float, out: Path, console: Any = None) -> dict[str, Any]:
    """One load run against a fresh native stack; writes out/load.json and out/capacity.json; returns load.json."""
    import psutil
    from sqlalchemy import create_engine, text

    from harness.history import History
    from reference.copilot.topology import Topology
    from scenarios.checkers import check_all
    from scenarios.stack_run import STACK_POLICY, StackClock, StackScenarioRunner
    from scenarios.workload import WorkloadSpec
    from stack.native import NativeOptions, NativeStack

    def say(msg: str) -> None:
        if console is not None:
            console.print(msg)
        log.info(msg)

    wall0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("locust*")) + list((out / "client").glob("*.jsonl")):
        old.unlink()
    duration = opts.duration_s
    ramp_s = min(60.0, duration / 4.0)
    readers = max(1, math.ceil(profile.snapshot_reads_per_s / 2.0))
    api_threads = opts.api_threads or api_threads_for(profile.sse_streams, opts.stream_tier)
    native_opts = NativeOptions(time_scale=opts.time_scale, devices=max(profile.devices, 1), seed=opts.seed,
                                api_workers=opts.api_workers, policy=STACK_POLICY, stream_tier=opts.stream_tier,
                                # one publisher: the capacity model's outbox stage is calibrated on one
                                topology=Topology(publishers=1, dispatchers=opts.dispatchers))
    if "api_threads" in {f.name for f in dataclasses.fields(NativeOptions)}:
        native_opts.api_threads = api_threads  # type: ignore[attr-defined]
    stack = NativeStack((out / "stack").resolve(), native_opts)
    say(f"[bold]{profile.name}[/]: starting the native stack ({opts.api_workers} API workers x {api_threads} threads, "
        f"{opts.dispatchers} dispatchers, simulator time_scale {opts.time_scale:g})")
    locust: LocustProcesses | None = None
    sampler: Sampler | None = None
    idle: IdleStreams | None = None
    stack.start()
    try:
        ep = stack.endpoints
        runner = StackScenarioRunner(stack, time_factor=1.0)
        admin = create_engine(ep.admin_database_url, pool_size=2, max_overflow=2)
        spec = WorkloadSpec.from_profile(profile, duration)
        fleet = runner.reset(opts.seed, spec)
        logs_at = stack.log_sizes()  # I27 reads the defects the components log from here on
        with admin.connect() as conn:
            max_connections = int(conn.execute(text("SHOW max_connections")).scalar_one())

        rates = {"operators": profile.operators, "drafts_per_s": profile.drafts_per_s,
                 "confirm_ratio": profile.confirms_per_s / profile.drafts_per_s,
                 "confirms_per_s": profile.confirms_per_s, "double_click_ratio": profile.double_click_ratio,
                 "cancel_ratio": profile.cancel_ratio, "snapshot_reads_per_s": profile.snapshot_reads_per_s,
                 "readers": readers, "sse_streams": profile.sse_streams,
                 "flight_wall_median_s": profile.flight_median_s / opts.time_scale}
        client_dir = out / "client"
        config = {"token_secret": ep.token_secret, "seed": opts.seed, "duration_s": duration,
                  "stream_url": ep.stream_url or ep.api_url,
                  "arrivals": opts.arrivals, "connections": opts.connections,
                  "ramp": {"steps": opts.ramp_steps, "ramp_s": ramp_s}, "rates": rates,
                  "client_log_dir": str(client_dir),
                  "fleet": {"areas": dict(fleet.areas), "devices_by_area": fleet.devices_by_area,
                            "operators": [list(o) for o in fleet.operators]}}
        config_path = out / "locust-config.json"
        config_path.write_text(json.dumps(config))
        client_dir.mkdir(exist_ok=True)

        if opts.idle_streams:  # opened before the load's clock starts: its windows measure the held streams only
            open_s = min(180.0, 2.0 * opts.idle_streams / IDLE_OPEN_RATE + 15.0)
            idle = IdleStreams(out, ep.stream_url or ep.api_url, ep.token_secret, opts.idle_streams,
                               [o[0] for o in fleet.operators], open_s + duration + 150.0)
            say(f"idle streams: opening {opts.idle_streams} at {ep.stream_url or ep.api_url} for the whole load")
            idle.start()
            held = idle.wait_open(open_s)
            say(f"idle streams: {held} held by the server before the load starts")
        history = History()
        locust = LocustProcesses(out, ep.api_url, config_path, opts.workers)
        cpu0 = {"xact": _xact(admin)}
        say(f"locust: {profile.operators} operators, {readers} readers, {profile.sse_streams} SSE streams; "
            f"{duration:g} s with a {opts.ramp_steps}-step ramp over {ramp_s:g} s"
            + (f"; {opts.workers} Locust workers" if opts.workers else ""))
        locust.start()
        started = locust.wait_started(client_dir)
        if started is None:
            say("[red]Locust did not start its test (see locust.out)[/]")
            started = time.time()
        # The load's time 0 is Locust's start: the ramp, the fault's time and every series count from it.
        t0_epoch, t0_mono = started, time.monotonic() - (time.time() - started)
        clock = StackClock(t0_mono, t0_epoch)
        harness_pid = os.getpid()
        lc = locust
        idle_pids = idle.pids if idle is not None else list
        webhook_log = WebhookDeliveries(ep.platform_control_url)
        sampler = Sampler(stack, admin, client_dir, t0_epoch, opts.sample_interval_s,
                          # the idle-stream client before the harness, whose child it is (a pid counts once)
                          extra_pids=lambda: {"locust": lc.pids(),
                                              **({"idle-streams": idle_pids()} if opts.idle_streams else {}),
                                              "harness": [harness_pid]},
                          webhook_deliveries=webhook_log)
        sampler.start()
        fault_driver = None
        if opts.fault:
            window = fault_window_s(opts.fault, opts.fault_window)
            at = opts.fault_at_s if opts.fault_at_s is not None else ramp_s + max(10.0, 0.15 * duration)
            fault_driver = _FaultDriver(runner, stack, opts.fault, at, window, t0_epoch, history)
            fault_driver.start()
            say(f"fault {opts.fault}: {window:g} s from t={at:g} s")
        code = locust.wait(duration + 120.0 + (60.0 if opts.workers else 0.0))
        load_end = time.time() - t0_epoch
        if code is None:
            say("[red]locust did not stop in time; stopping it[/]")
        locust.stop()
        idle_summary = idle.stop() if idle is not None else None
        if fault_driver is not None:
            fault_driver.join()
        heal = float(fault_driver.window["end"]) if fault_driver is not None else 0.0
        drain_timeout = opts.drain_s or (120.0 + 3.0 * profile.flight_median_s / opts.time_scale)
        say(f"load done at t={load_end:.0f} s; draining (up to {drain_timeout:.0f} s)")
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and runner._unsettled():
            time.sleep(1.0)
        drained_at = time.time() - t0_epoch
        sampler.sample()
        sampler.stop()
        xact_delta = _xact(admin) - cpu0["xact"]

        # --------------------------------------------------------------- invariants
        for op in sampler.ops:
            history.add(op["t"], op["process"], op["type"], op["f"], op["value"])
        merged = runner._merged(_sorted(history), clock)
        state = runner.final_state(clock, heal, logs_at)
        verdicts = check_all(runner.check_context(merged, state, drain_timeout + 60.0))
        merged.write_jsonl(out / "history.jsonl")
        invariants = {v.invariant: v.status for v in verdicts}

        # --------------------------------------------------------------- figures
        endpoints = analysis.read_locust_stats(out / "locust") or analysis.endpoints_from_requests(
            sampler.requests, (0.0, load_end))
        steady = [ramp_s, load_end]
        life = analysis.lifecycle(admin)
        svc = analysis.db_service_times(admin)
        counts = svc.pop("_counts")
        api_requests = len(sampler.requests)
        webhook_log.drain(force=True)
        deliveries = webhook_log.result()
        if deliveries is not None and deliveries["missed"]:
            say(f"[yellow]the simulator's delivery log dropped {deliveries['missed']} webhook deliveries before they "
                "were read: the webhook figures miss them[/]")
        webhook_posts = None if deliveries is None else analysis.webhook_posts(deliveries, t0_epoch, drained_at)
        svc.update(analysis.cpu_service_times(sampler.cpu_seconds, counts, api_requests, xact_delta, webhook_posts))
        svc.update(analysis.platform_call_times(merged.ops))
        confirm = endpoints.get(CONFIRM, {})
        svc["api_confirm"] = {"p50": confirm.get("p50_ms"), "p95": confirm.get("p95_ms"), "n": confirm.get(
            "requests", 0), "source": "Locust: confirm request latency at the client (API + 1 transaction)"}
        # ------------------------------------- the confirm endpoint's capacity against pgbench, back to back
        # After every figure above is taken, so neither adds rows or CPU to the load's own measurements.
        pgbench: dict[str, Any] = {}
        if opts.pgbench_s > 0:
            from loadtests.pgbench import run_pgbench

            say(f"pgbench: a confirm-shaped transaction, {opts.capacity_clients} clients for {opts.pgbench_s:g} s "
                f"on the stack's PostgreSQL")
            pgbench = run_pgbench(admin, stack.services["postgres"], seconds=opts.pgbench_s,
                                  clients=opts.capacity_clients, operators=profile.operators, area=fleet.areas[0][0])
            if pgbench.get("error"):  # a missing figure (exit 5): say why where the run's output goes
                log.warning("pgbench failed: %s", pgbench["error"])
        capacity: dict[str, Any] = {}
        if opts.capacity_confirms > 0:
            from loadtests import confirm_capacity
            from loadtests.sampler import cpu_seconds, process_groups

            say(f"confirm capacity: {opts.capacity_confirms} confirms by {opts.capacity_clients} closed-loop clients")
            publisher = stack.components.get("publisher")
            try:
                capacity = confirm_capacity.measure(
                    ep.api_url, ep.token_secret, fleet, confirms=opts.capacity_confirms,
                    clients=opts.capacity_clients, seed=opts.seed,
                    pause=publisher.pause if publisher else lambda: None,
                    resume=publisher.resume if publisher else lambda: None,
                    cpu_probe=lambda: cpu_seconds(process_groups(stack)) | {"harness (the clients)": sum(
                        psutil.Process().cpu_times()[:2])})
            except Exception as exc:  # the load's own figures are taken: report this one as failed, keep them
                log.warning("confirm capacity failed", exc_info=True)
                capacity = {"error": f"{type(exc).__name__}: {exc}"}
        if pgbench.get("latency_avg_ms") is not None:
            svc["db_tx"] = {"mean": pgbench["latency_avg_ms"], "n": pgbench.get("transactions"),
                                    "source": f"pgbench latency average, confirm-shaped transaction, "
                                              f"{pgbench['clients']} clients"}
        windows = [fault_driver.window] if fault_driver is not None else []
        from loadtests.latency import figures as latency_figures

        latency = latency_figures(sampler.hdr, mode=opts.arrivals,
                                  connections=opts.connections if opts.arrivals == "open" else None)
        errors = analysis.error_summary(sampler.requests, windows, FAULT_GRACE_S)
        if pgbench.get("tps"):
            # capacity_ratio: the endpoint's ceiling against the database's, same clients, same transaction shape.
            # load_ratio: how much of the database's ceiling the profile's own confirm traffic used.
            pgbench["confirm_capacity_rps"] = capacity.get("rps")
            pgbench["capacity_ratio"] = (round(capacity["rps"] / pgbench["tps"], 4) if capacity.get("rps")
                                         else None)
            pgbench["confirm_rps"] = confirm.get("rps")
            pgbench["load_ratio"] = round((confirm.get("rps") or 0.0) / pgbench["tps"], 5)
        slo = analysis.slo_verdicts(profile.slo, endpoints, life, errors, invariants, latency)
        ts = dict(sampler.series)
        load: dict[str, Any] = {
            "schema": "sortie.load/1",
            "profile": profile.name, "multiple": multiple, "duration_s": duration, "stack": opts.stack,
            "seed": opts.seed, "time_scale": opts.time_scale,
            "assumptions": [*profile.assumptions, *LOAD_ASSUMPTIONS],
            "rates": rates, "ramp": {"steps": opts.ramp_steps, "ramp_s": ramp_s}, "steady_window": steady,
            "t0_epoch": round(t0_epoch, 3),  # the run's time 0: the client log's epochs are relative to it
            "load_end_s": round(load_end, 2), "drained_at_s": round(drained_at, 2),
            "machine": {"cpus": psutil.cpu_count(), "hostname": os.uname().nodename,
                        "load_avg": [round(x, 2) for x in os.getloadavg()],
                        "note": "Locust and every stack process share this machine"},
            "workers": {"api_workers": opts.api_workers, "api_threads": api_threads,
                        "dispatchers": opts.dispatchers, "publisher": native_opts.topology.publishers,
                        "report_worker": 1, "reconciler": 1,
                        "locust_workers": opts.workers,
                        "db_pool_per_process": "5 + 5 overflow (reference/copilot/settings.py)"},
            "db": {"max_connections": max_connections, "commits": xact_delta},
            "endpoints": endpoints, "latency": latency,
            "endpoints_steady": analysis.endpoints_from_requests(
                [r for r in sampler.requests if steady[0] <= r["t"] <= steady[1]], (steady[0], steady[1]))
            | _webhooks_steady(deliveries, t0_epoch, (steady[0], steady[1])),
            "lifecycle_ms": life, "service_times_ms": svc, "timeseries": ts,
            "fault": opts.fault, "fault_windows": windows,
            "fault_detail": {"kills": fault_driver.kills} if fault_driver is not None and opts.fault == "worker-kill"
            else None,
            "errors": errors, "slo": slo, "slo_held": all(s["held"] for s in slo),
            "invariants": invariants,
            "invariant_details": [v.as_json() for v in verdicts if v.status != "held"],
            "backlog": analysis.backlog(ts, windows, load_end),
            "confirm_capacity": capacity,
            "pgbench": {k: v for k, v in pgbench.items() if k != "script"} | (
                {"script_file": "pgbench_confirm_shape.sql"} if "script" in pgbench else {}),
            "dead_letters": len(state.dead_letters), "counts": state.counts(),
            "sse": {"opened": endpoints.get("GET /v1/stream", {}).get("requests", 0),
                    "closed": len(sampler.sse), "events_received": sum(s["events"] for s in sampler.sse),
                    "broken": sum(1 for s in sampler.sse if s.get("broken")),
                    "stream_tier": opts.stream_tier, "idle_streams": idle_summary,
                    "resources": stream_resources(ts, steady)},
            "restarts": dict(stack.restarts), "locust_exit_code": code, "sampler_db_errors": sampler.db_errors,
            "webhook_deliveries": None if deliveries is None else {
                "logged": len(deliveries["items"]), "missed": deliveries["missed"],
                "unreadable_reads": webhook_log.unreadable},
            "wall_s": round(time.perf_counter() - wall0, 1),
        }
        if "script" in pgbench:
            (out / "pgbench_confirm_shape.sql").write_text(pgbench["script"])
        if load["backlog"] is not None:
            load["backlog"]["lost"] = invariants.get("I3")
            load["backlog"]["duplicated"] = {"I1": invariants.get("I1"), "I6": invariants.get("I6")}
        load["recovery"] = analysis.recovery(
            ts, sampler.requests, windows[0] if windows else None, load_end, steady_from=ramp_s, latency=latency,
            slo=profile.slo, grace_s=FAULT_GRACE_S, backlog_figures=load["backlog"],
            duplicates={v.invariant: len(v.violations) for v in verdicts
                        if v.invariant in analysis.DUPLICATE_INVARIANTS})
        if load["recovery"] is not None:
            load["recovery"]["lost"] = {"I3": invariants.get("I3")}
        load["missing"] = missing_figures(load)
        write_outputs(out, load, opts.report)
        admin.dispose()
        return load
    finally:
        if idle is not None:
            idle.stop()
        if locust is not None:
            locust.stop()
        if sampler is not None and sampler._thread.is_alive():
            sampler.stop()
        stack.stop()


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
    """The platform's webhooks in the steady window as an endpoint (analysis.webhook_endpoint)."""
    figures = analysis.webhook_endpoint(deliveries, t0_epoch, window) if deliveries is not None else {}
    return {analysis.WEBHOOK_ENDPOINT: figures} if figures else {}


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
    if hooks is None or not (load.get("endpoints_steady") or {}).get(analysis.WEBHOOK_ENDPOINT):
        miss.append(f"endpoint {analysis.WEBHOOK_ENDPOINT}")
    elif hooks["missed"]:
        miss.append(f"webhook deliveries ({hooks['missed']} dropped from the simulator's log before they were read)")
    return miss


def write_outputs(out: Path, load: dict[str, Any], report: Callable[[Path], Any] | None = None) -> None:
    (out / "load.json").write_text(json.dumps(load, indent=1, default=str) + "\n")
    (out / "capacity.json").write_text(json.dumps(analysis.capacity_json(load), indent=2, default=str) + "\n")
    if report is None:
        return
    try:
        report(out)
    except Exception:
        log.warning("the report for %s failed", out, exc_info=True)


# ---------------------------------------------------------------------------------------------- find-max


def find_max(opts: LoadOptions, console: Any = None) -> dict[str, Any]:
    """Raise the multiple step by step (1, 2, 3, 5, 8, ...) with short runs until an SLO fails."""
    steps: list[dict[str, Any]] = []
    held_load: dict[str, Any] | None = None
    failed_load: dict[str, Any] | None = None
    base, _ = resolve_profile("1x")
    for k in FIND_MAX_MULTIPLES:
        if k > opts.max_multiple:
            break
        profile = scale_profile(base, float(k))
        step_out = opts.out / f"step-{k}x"
        load = run_once(opts, profile, float(k), step_out, console)
        signals = analysis.resource_signals(load)
        steps.append({"multiple": k, "slo": {s["name"]: s["held"] for s in load["slo"]}, "slo_held": load["slo_held"],
                      "confirm_p99_ms": load["endpoints"].get(CONFIRM, {}).get("p99_ms"),
                      "executing_p99_ms": load["lifecycle_ms"]["executing"].get("p99"),
                      "error_rate": load["errors"].get("error_rate_excluding_faults"),
                      "signals": signals, "dir": str(step_out)})
        if console is not None:
            console.print(f"find-max: {k}x {'held' if load['slo_held'] else '[red]failed[/]'} "
                          f"{[s['name'] for s in load['slo'] if not s['held']] or ''}")
        if load["slo_held"]:
            held_load = load
        else:
            failed_load = load
            break
    bottleneck = None
    if failed_load is not None:
        signals = analysis.resource_signals(failed_load)
        bottleneck = signals[0] if signals else {
            "resource": "none saturated", "evidence": "an SLO failed but no resource crossed its threshold (CPU "
            ">= 85%, connections >= 90%, growing backlog): latency under contention on a shared machine"}
    sat = {"max_multiple_held": held_load["multiple"] if held_load else None,
           "failed_multiple": failed_load["multiple"] if failed_load else None,
           "failed_slos": [s["name"] for s in failed_load["slo"] if not s["held"]] if failed_load else [],
           "bottleneck": bottleneck, "steps": steps}
    (opts.out / "find_max.json").write_text(json.dumps(sat, indent=2, default=str) + "\n")
    top = held_load or failed_load
    if top is not None:
        top = {**top, "saturation": sat}
        write_outputs(opts.out, top, opts.report)
    return {"saturation": sat, "load": top}


# ---------------------------------------------------------------------------------------------- entry point


def main(opts: LoadOptions, console: Any = None) -> int:
    """Runs what the options ask; prints the verdicts; returns the exit code (sortie.exits): 1 when an invariant
    is violated, 3 when an SLO missed or --baseline finds a regression, 5 when a figure is missing (a measurement
    of the harness failed), else 0."""
    if opts.stack != "native":
        raise ValueError(f"--stack {opts.stack}: only the native provider runs load (no Docker engine here)")
    if opts.fault is not None and opts.fault not in FAULTS:
        raise ValueError(f"--fault {opts.fault}: one of {', '.join(FAULTS)}")
    if opts.baseline is not None:
        baseline_file(Path(opts.baseline))  # before the run: a wrong path is a usage error, not a lost hour
    if opts.arrivals not in ARRIVALS:
        raise ValueError(f"--arrivals {opts.arrivals}: one of {', '.join(ARRIVALS)}")
    if opts.connections < 0:
        raise ValueError(f"--connections {opts.connections}: a count of connections (0: no limit)")
    if opts.arrival_rate is not None and (opts.arrival_rate <= 0 or opts.find_max):
        raise ValueError(f"--arrival-rate {opts.arrival_rate}: a positive rate of confirms per second, without "
                         "--find-max (which chooses the rates itself)")
    opts.out.mkdir(parents=True, exist_ok=True)
    if opts.find_max:
        result = find_max(opts, console)
        load = result["load"]
    else:
        profile, multiple = resolve_profile(opts.profile)
        if opts.arrival_rate is not None:
            k = opts.arrival_rate / profile.confirms_per_s
            profile, multiple = scale_profile(profile, k), multiple * k
            profile = dataclasses.replace(profile, name=f"{multiple:.3g}x ({opts.arrival_rate:g} confirms/s)")
        load = run_once(opts, profile, multiple, opts.out, console)
    if load is None:
        return 1
    if console is not None:
        print_summary(load, console)
    code = 0
    if any(v == "violated" for v in load["invariants"].values()):
        code = 1
    elif load["missing"]:
        code = 5
    elif not opts.find_max and not all(row["held"] for row in load.get("slo") or []):
        code = 3  # (--find-max looks for the multiple that misses: that one is its answer, not a regression)
    if opts.baseline is not None:
        base_file = baseline_file(Path(opts.baseline))
        rows = analysis.compare(json.loads((opts.out / "capacity.json").read_text()),
                                json.loads(base_file.read_text()))
        (opts.out / "baseline_comparison.json").write_text(json.dumps(
            {"baseline": str(base_file.resolve()), "rows": rows}, indent=2) + "\n")
        if opts.report is not None:  # again, now with the baseline beside the run
            opts.report(opts.out)
        if console is not None:
            print_comparison(rows, console)
        if any(r["regressed"] for r in rows) and code == 0:
            code = 3
    return code


def baseline_file(path: Path) -> Path:
    """``--baseline``: an older run's directory (its capacity.json) or the capacity.json itself."""
    file = path / "capacity.json" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"--baseline {path}: no capacity.json there (give a load run's directory or its file)")
    return file


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


def print_comparison(rows: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    t = Table(title="against the baseline (tolerances: docs/capacity.md)")
    for col in ("figure", "baseline", "now", "change", "allowed", "noise", "verdict"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["figure"], str(r["base"]), str(r["now"]), r["change"], r["allowed"], r.get("noise", "-"),
                  "[red]REGRESSED[/]" if r["regressed"] else "ok")
    console.print(t)


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}" if isinstance(v, float) and v >= 10 else str(v)
