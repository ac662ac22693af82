"""`sortie load`: one load pipeline for every system. :func:`run_once` starts the system's real stack, warms it, runs
Locust headless as its own process(es) (Locust's gevent monkey-patching stays out of the harness) for the profile's
duration with a step ramp-up (or lets the system's own producers run it: hooks with no locustfile), injects the
optional fault under load, lets the backlog drain, checks the invariants and writes DIR/load.json and the report;
:func:`find_max` searches for the multiple that saturates, :func:`exit_code` turns a load.json into the verb's exit
code, and a baseline run is compared beside it. What differs between systems (its stack, its locustfile, its
sampler, its faults, its figures) comes from the system's :class:`LoadHooks` (systems/<name>/load.py); the CLI verb
(sortie/cli.py) only parses options and calls the system's ``load``."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loadtests import analysis

log = logging.getLogger("sortie.load")
HERE = Path(__file__).resolve().parent
FIND_MAX_MULTIPLES = (1, 2, 3, 5, 8, 13, 21, 34, 55)
LOCUST_GRACE_S = 120.0  # Locust ends by itself at the duration; this long past it, it is stopped


# ---------------------------------------------------------------------------------------------- options


@dataclass
class LoadOptions:
    """The options of `sortie load`; a system's hooks refuse those it has no use for."""

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
    idle_streams: int = 0  # extra SSE streams held open (and read) for the whole load by the Copilot's idle_streams.py
    dispatchers: int = 2
    pgbench_s: float = 10.0
    capacity_confirms: int = 1000  # the confirm-capacity burst after the load (0 skips it)
    capacity_clients: int = 4  # closed-loop clients of both pgbench and the confirm burst
    drain_s: float | None = None
    ramp_steps: int = 4
    sample_interval_s: float = 1.5
    extra: dict[str, Any] = field(default_factory=dict)
    # Called with each output directory once load.json is written: the system's report (its load() passes it;
    # reports/ sits above loadtests/, pyproject.toml [tool.importlinter]).
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


def window_s(base: float, spec: str | None) -> float:
    """A fault's window: ``base`` (the system's), scaled by a factor ("0.5") or replaced by a duration ("30s")."""
    if spec is None:
        return base
    if re.fullmatch(r"[0-9.]+", spec.strip()):
        return base * float(spec)
    return parse_duration(spec)


def refuse_options(opts: LoadOptions, not_here: tuple[str, ...], load: str, faults: Any = None) -> None:
    """What every system's load refuses before it starts anything: an option of ``not_here`` given (away from its
    default), a stack other than the native one, and a fault not among ``faults`` (None: a load that takes none).
    ``load`` names the load in the error ("the job system's load")."""
    defaults = LoadOptions(out=opts.out)
    given = [n for n in not_here if getattr(opts, n) != getattr(defaults, n)]
    if given:
        raise ValueError(f"{load} takes no " + ", ".join("--" + n.replace("_", "-") for n in given))
    if opts.stack != "native":
        raise ValueError(f"--stack {opts.stack}: {load} runs on the native stack")
    if opts.fault is not None and opts.fault not in (faults or ()):
        raise ValueError(f"--fault {opts.fault}: {load} takes {', '.join(faults or ()) or 'no fault'}")


# ---------------------------------------------------------------------------------------------- faults

class FaultWindow(threading.Thread):
    """One fault under load on its own thread: held by the system's ``hold`` from ``start_s`` (seconds from the
    load's time 0, ``t0``) for ``window_s``. ``hold(window)`` turns the fault on, waits with ``window.until(
    window.end_s)`` (or acts meanwhile, as repeated kills), turns it off in a finally and may return figures, which
    join ``window``: when it was on, in the load's seconds ({"fault", "start", "end", ...})."""

    def __init__(self, fault: str, start_s: float, window_s: float, t0: float,
                 hold: Callable[[FaultWindow], dict[str, Any] | None]) -> None:
        super().__init__(name=f"fault-{fault}", daemon=True)
        self.fault, self.start_s, self.window_s, self.t0, self.hold = fault, start_s, window_s, t0, hold
        self.end_s = start_s + window_s
        self.window: dict[str, Any] = {"fault": fault, "start": None, "end": None}

    def now(self) -> float:
        """Seconds of the load."""
        return time.time() - self.t0

    def until(self, t: float) -> None:
        """Sleep until ``t`` seconds of the load (in steps of at most 0.2 s)."""
        while (left := t - self.now()) > 0:
            time.sleep(min(0.2, left))

    def run(self) -> None:
        self.until(self.start_s)
        self.start_s = self.now()  # late when the thread was: the window holds its full length from here
        self.end_s = self.start_s + self.window_s
        self.window["start"] = round(self.start_s, 2)
        try:
            self.window.update(self.hold(self) or {})
        finally:
            self.window["end"] = round(self.now(), 2)


def start_fault(run: LoadRun, window_s: float, hold: Callable[[FaultWindow], dict[str, Any] | None],
                default_at_s: float | None = None) -> FaultWindow:
    """``run.opts.fault`` started under load: at ``--fault-at`` if given, else ``default_at_s``, else a quarter of
    the way through the steady part (after the ramp)."""
    opts = run.opts
    at = opts.fault_at_s if opts.fault_at_s is not None else (
        default_at_s if default_at_s is not None else run.ramp_s + 0.25 * (run.duration_s - run.ramp_s))
    fault = FaultWindow(str(opts.fault), at, window_s, run.t0, hold)
    fault.start()
    return fault


# ---------------------------------------------------------------------------------------------- one run


@dataclass
class LoadRun:
    """One run of the pipeline as its steps fill it in; the hooks read and add to it."""

    opts: LoadOptions
    profile: Any  # the system's profile (its name, rates and SLOs)
    multiple: float
    out: Path
    say: Callable[[str], None]
    wall0: float = field(default_factory=time.perf_counter)
    notes: list[str] = field(default_factory=list)  # what went wrong on the harness's side, for load.json
    host: str = ""  # where Locust sends its requests
    t0: float = 0.0  # epoch of Locust's start: the load's time 0 (the ramp, the fault, every series count from it)
    load_end: float = 0.0  # seconds from t0 when Locust ended
    locust: LocustProcesses | None = None
    locust_code: int | None = None
    fault: Any = None  # a started thread whose ``window`` is {"fault", "start", "end", ...}; None: no fault

    @property
    def duration_s(self) -> float:
        return self.opts.duration_s

    @property
    def ramp_s(self) -> float:
        return min(60.0, self.opts.duration_s / 4.0)

    @property
    def client_dir(self) -> Path:
        return self.out / "client"

    @property
    def windows(self) -> list[dict[str, Any]]:
        return [self.fault.window] if self.fault is not None else []


class LoadHooks(Protocol):
    """What one system supplies to the pipeline, in the order the pipeline calls it. One object per run: it keeps
    what it started (stack, sampler) between the steps."""

    @property
    def locustfile(self) -> Path | None:
        """Locust's users. None: no Locust; the system's own producers make the load (IS nodes inspecting their
        fleet), started by warm() from ``run.t0`` (which warm() sets) until ``run.t0 + duration``."""

    def stack(self, run: LoadRun) -> AbstractContextManager[Any]:
        """Starts the system's real stack for the run and stops it on the way out (whatever happened)."""

    def warm(self, run: LoadRun) -> dict[str, Any]:
        """Seeds the stack and sets ``run.host``; returns the locustfile's configuration (SORTIE_LOAD_CONFIG). With no
        locustfile: starts the system's own producers and sets ``run.t0``."""

    def sample(self, run: LoadRun) -> None:
        """Starts sampling the stack from ``run.t0`` on."""

    def fault(self, run: LoadRun) -> Any:
        """The fault under load (``run.opts.fault``) as a started thread with a ``window``, or None."""

    def after_load(self, run: LoadRun) -> None:
        """Locust has ended: stops what ran beside it."""

    def drain(self, run: LoadRun) -> None:
        """Lets the backlog settle (bounded), then stops sampling."""

    def check(self, run: LoadRun) -> None:
        """Checks the system's invariants on what the run left and what the clients were told."""

    def figures(self, run: LoadRun) -> dict[str, Any]:
        """load.json: every figure of the run, ``invariants``, ``slo`` (rows with ``held``) and ``missing``."""


def _say(console: Any) -> Callable[[str], None]:
    def say(msg: str) -> None:
        if console is not None:
            console.print(msg)
        log.info(msg)

    return say


def _fresh(out: Path) -> None:
    """The output directory without an earlier run's Locust files and client logs."""
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("locust*"), *(out / "client").glob("*.jsonl")]:
        old.unlink()
    (out / "client").mkdir(exist_ok=True)


def _start_locust(hooks: LoadHooks, run: LoadRun, config: dict[str, Any]) -> None:
    """Locust as its own process(es), and the load's time 0 from its own start."""
    if hooks.locustfile is None:  # the system's producers, started by warm(): their start is time 0
        run.t0 = run.t0 or time.time()
        return
    config_path = run.out / "locust-config.json"
    config_path.write_text(json.dumps(config))
    run.locust = LocustProcesses(run.out, run.host, config_path, run.opts.workers, locustfile=hooks.locustfile)
    run.locust.start()
    started = run.locust.wait_started(run.client_dir)
    if started is None:
        run.notes.append("Locust did not start its test (see locust.out)")
        run.say("[red]Locust did not start its test (see locust.out)[/]")
    run.t0 = started or time.time()


def _await_locust(run: LoadRun) -> None:
    """Until Locust ends (at the duration, or stopped past it), then until the fault has healed."""
    if run.locust is None:  # the system's own producers stop by themselves at the duration
        while (left := run.t0 + run.duration_s - time.time()) > 0:
            time.sleep(min(1.0, left))
        run.load_end = time.time() - run.t0
        return
    run.locust_code = run.locust.wait(run.duration_s + LOCUST_GRACE_S + (60.0 if run.opts.workers else 0.0))
    run.load_end = time.time() - run.t0
    if run.locust_code is None:
        run.notes.append(f"Locust did not end within its duration + {LOCUST_GRACE_S:g} s: stopped")
        run.say("[red]locust did not stop in time; stopping it[/]")
    run.locust.stop()


def run_once(hooks: LoadHooks, opts: LoadOptions, profile: Any, multiple: float, out: Path,
             console: Any = None) -> dict[str, Any]:
    """One load run against a fresh stack of the system: start, warm, Locust, drain, invariants, figures; writes
    out/load.json (and the system's report) and returns it."""
    run = LoadRun(opts, profile, multiple, out, _say(console))
    _fresh(out)
    with hooks.stack(run):
        try:
            _start_locust(hooks, run, hooks.warm(run))
            hooks.sample(run)
            run.fault = hooks.fault(run)
            _await_locust(run)
            hooks.after_load(run)
            if run.fault is not None:
                run.fault.join()
            hooks.drain(run)
        finally:
            if run.locust is not None:
                run.locust.stop()
        hooks.check(run)
        load = hooks.figures(run)
    write_outputs(out, load, opts.report)
    return load


def _first_line(path: Path) -> str:
    with path.open() as fh:
        return fh.readline()


class LocustProcesses:
    """Locust headless as processes: one local runner, or a master plus N workers (distributed mode)."""

    def __init__(self, out: Path, host: str, config_path: Path, workers: int, locustfile: Path) -> None:
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


def write_outputs(out: Path, load: dict[str, Any], report: Callable[[Path], Any] | None = None) -> None:
    """DIR/load.json, then the system's report of the directory (capacity.json and capacity.html, or load.html)."""
    (out / "load.json").write_text(json.dumps(load, indent=1, default=str) + "\n")
    if report is None:
        return
    try:
        report(out)
    except Exception:
        log.warning("the report for %s failed", out, exc_info=True)


# ---------------------------------------------------------------------------------------------- find-max


def find_max(hooks_for: Callable[[], LoadHooks], scaled: Callable[[float], Any], opts: LoadOptions,
             console: Any = None) -> dict[str, Any]:
    """Raise the multiple step by step (1, 2, 3, 5, 8, ...) with short runs until an SLO fails; ``scaled(k)`` is
    the system's 1x profile times k."""
    steps: list[dict[str, Any]] = []
    held: dict[str, Any] | None = None
    failed: dict[str, Any] | None = None
    for k in (k for k in FIND_MAX_MULTIPLES if k <= opts.max_multiple):
        step_out = opts.out / f"step-{k}x"
        load = run_once(hooks_for(), opts, scaled(float(k)), float(k), step_out, console)
        steps.append(_find_max_step(k, load, step_out))
        if console is not None:
            console.print(f"find-max: {k}x {'held' if load['slo_held'] else '[red]failed[/]'} "
                          f"{[s['name'] for s in load['slo'] if not s['held']] or ''}")
        if not load["slo_held"]:
            failed = load
            break
        held = load
    sat = _saturation(held, failed, steps)
    (opts.out / "find_max.json").write_text(json.dumps(sat, indent=2, default=str) + "\n")
    top = held or failed
    if top is not None:
        top = {**top, "saturation": sat}
        write_outputs(opts.out, top, opts.report)
    return {"saturation": sat, "load": top}


def _find_max_step(k: int, load: dict[str, Any], step_out: Path) -> dict[str, Any]:
    """One multiple of the saturation search: each SLO of the system's profile, held and measured."""
    return {"multiple": k, "slo": {s["name"]: s["held"] for s in load["slo"]}, "slo_held": load["slo_held"],
            "measured": {s["name"]: s["measured"] for s in load["slo"]},
            "signals": analysis.resource_signals(load), "dir": str(step_out)}


def _saturation(held: dict[str, Any] | None, failed: dict[str, Any] | None,
                steps: list[dict[str, Any]]) -> dict[str, Any]:
    bottleneck = None
    if failed is not None:
        signals = analysis.resource_signals(failed)
        bottleneck = signals[0] if signals else {
            "resource": "none saturated", "evidence": "an SLO failed but no resource crossed its threshold (CPU "
            ">= 85%, connections >= 90%, growing backlog): latency under contention on a shared machine"}
    return {"max_multiple_held": held["multiple"] if held else None,
            "failed_multiple": failed["multiple"] if failed else None,
            "failed_slos": [s["name"] for s in failed["slo"] if not s["held"]] if failed else [],
            "bottleneck": bottleneck, "steps": steps}


# ---------------------------------------------------------------------------------------------- verdicts


def exit_code(load: dict[str, Any], slo_asserted: bool = True) -> int:
    """sortie.exits: 1 when an invariant is violated, 5 when a figure is missing (a measurement of the harness
    failed), 3 when an SLO missed (unless ``slo_asserted`` is off: --find-max looks for the multiple that misses),
    else 0."""
    if any(v == "violated" for v in load["invariants"].values()):
        return 1
    if load["missing"]:
        return 5
    if slo_asserted and not all(row["held"] for row in load.get("slo") or []):
        return 3
    return 0


def compare_with_baseline(opts: LoadOptions, console: Any = None) -> bool:
    """``--baseline``: this run's capacity.json against the baseline's, written beside the run (and into its report);
    whether a figure regressed."""
    assert opts.baseline is not None
    base_file = baseline_file(Path(opts.baseline))
    rows = analysis.compare(json.loads((opts.out / "capacity.json").read_text()), json.loads(base_file.read_text()))
    (opts.out / "baseline_comparison.json").write_text(json.dumps(
        {"baseline": str(base_file.resolve()), "rows": rows}, indent=2) + "\n")
    if opts.report is not None:  # again, now with the baseline beside the run
        opts.report(opts.out)
    if console is not None:
        print_comparison(rows, console)
    return any(r["regressed"] for r in rows)


def baseline_file(path: Path) -> Path:
    """``--baseline``: an older run's directory (its capacity.json) or the capacity.json itself."""
    file = path / "capacity.json" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"--baseline {path}: no capacity.json there (give a load run's directory or its file)")
    return file


def print_comparison(rows: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    t = Table(title="against the baseline (tolerances: docs/capacity.md)")
    for col in ("figure", "baseline", "now", "change", "allowed", "noise", "verdict"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["figure"], str(r["base"]), str(r["now"]), r["change"], r["allowed"], r.get("noise", "-"),
                  "[red]REGRESSED[/]" if r["regressed"] else "ok")
    console.print(t)
