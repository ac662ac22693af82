"""`sortie load --system jobs`: a traffic profile of producers and planners against the job system's real stack, with
Locust (systems.jobs.locustfile), an optional fault under load, the invariants J1-J11 at the end, and the figures
a capacity planner asks for: enqueue latency (from the actual send and from the intended arrival), enqueue-to-done
of single jobs and of whole missions, throughput and backlog over time, errors by code, and, for a fault, the
backlog's peak, the drain time and the time until throughput is back. Writes DIR/load.json and DIR/load.html.

One run: PostgreSQL behind Toxiproxy, the service, two pool instances and the producer API (systems.jobs.stack);
Locust as its own process(es) for the profile's duration (step ramp-up); a sampler reads the job table every
second over the harness's own link (not through Toxiproxy); then every job is left to settle, the instances stop,
and J1-J11 are checked against the tables, the service's ledger and what the clients were told."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select, text

from loadtests.quantiles import percentile
from loadtests.sampling import PeriodicSampler
from reference.jobs.models import Job
from reference.jobs.pool import PoolConfig

log = logging.getLogger("sortie.load.jobs")
HERE = Path(__file__).resolve().parent
PROFILES_DIR = HERE / "profiles"
LOCUSTFILE = HERE / "locustfile.py"
FAULTS = ("db-outage", "worker-kill")
DEFAULT_WINDOW_S = {"db-outage": 30.0, "worker-kill": 30.0}
FAULT_GRACE_S = 10.0  # errors this long after a fault ends still count as the fault's
SAMPLE_S = 1.0
RATE_WINDOW_S = 5.0  # throughput is done jobs over this trailing window
SCALED = ("jobs_per_s", "missions_per_s", "producers", "planners")
# The Copilot's load options this system has no use for: given away from their defaults, they are refused.
NOT_HERE = ("find_max", "baseline", "time_scale", "api_workers", "api_threads", "dispatchers", "pgbench_s",
            "capacity_confirms", "capacity_clients", "arrivals", "connections", "arrival_rate")


@dataclass(frozen=True)
class JobsProfile:
    name: str
    jobs_per_s: float
    missions_per_s: float
    dag_width: int
    same_key_ratio: float
    producers: int
    planners: int
    work_median_s: float
    work_sigma: float
    fail_rate: float
    workers_per_instance: int
    slo: dict[str, float]
    assumptions: list[str] = field(default_factory=list)
    multiple: float = 1.0

    @property
    def jobs_per_mission(self) -> int:
        from systems.jobs.bodies import mission_request

        return len(mission_request("", self.dag_width)["steps"])

    @property
    def offered_jobs_per_s(self) -> float:
        return self.jobs_per_s + self.missions_per_s * self.jobs_per_mission


def load_profile(name: str) -> JobsProfile:
    """A profile file (systems/jobs/profiles/NAME.yaml or a path); ``extends`` + ``multiple`` scale another's rates.
    ValueError for an unknown profile or field."""
    path = Path(name)
    if not path.exists():
        path = PROFILES_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ValueError(f"no job-system profile {name!r}: one of {known}, or a path")
    data = yaml.safe_load(path.read_text()) or {}
    base: dict[str, Any] = {}
    if "extends" in data:
        parent = load_profile(str(path.parent / f"{data['extends']}.yaml"))
        base = dataclasses.asdict(parent)
        k = float(data.get("multiple", 1.0))
        for key in SCALED:
            base[key] = type(base[key])(base[key] * k)
        base["multiple"] = parent.multiple * k
    merged = {**base, **{k: v for k, v in data.items() if k != "extends"}}
    merged["assumptions"] = [*base.get("assumptions", []), *data.get("assumptions", [])]
    known_fields = {f.name for f in dataclasses.fields(JobsProfile)}
    if unknown := sorted(set(merged) - known_fields):
        raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}")
    try:
        return JobsProfile(**merged)
    except TypeError as err:
        raise ValueError(f"{path}: {err}") from None


def _refuse_other_options(opts: Any) -> None:
    from loadtests.run import refuse_options

    refuse_options(opts, NOT_HERE, "the job system's load", FAULTS)


# ---------------------------------------------------------------------------------------------- sampling


class _Sampler(PeriodicSampler):
    """The job table's counts by status, every SAMPLE_S, over the stack owner's direct link."""

    def __init__(self, engine: Any, t0: float) -> None:
        super().__init__("jobs-sampler", SAMPLE_S, t0)
        self.engine = engine

    def sample(self) -> dict[str, Any]:
        with self.engine.connect() as conn:
            counts = dict(conn.execute(select(Job.status, func.count()).group_by(Job.status)).all())
        return {k: int(v) for k, v in counts.items()}


def series(rows: list[dict[str, Any]], ops: list[dict[str, Any]] = ()) -> dict[str, list[Any]]:  # type: ignore[assignment]
    """t; backlog: jobs pending or running plus requests the clients are still retrying (enqueues and missions
    sent and not yet answered: during a database outage the work waits there, not in the table); done; done jobs
    per second over the trailing RATE_WINDOW_S."""
    t = [r["t"] for r in rows]
    done = [r.get("done", 0) for r in rows]
    waiting = _waiting_at(t, ops)
    backlog = [r.get("pending", 0) + r.get("running", 0) + w for r, w in zip(rows, waiting, strict=True)]
    rate: list[float | None] = []
    j = 0
    for i, now in enumerate(t):
        while t[j] < now - RATE_WINDOW_S:
            j += 1
        rate.append(None if i == j else round((done[i] - done[j]) / (now - t[j]), 3))
    return {"t": t, "backlog": backlog, "client_waiting": waiting, "done": done, "done_per_s": rate}


def _waiting_at(times: list[float], ops: list[dict[str, Any]]) -> list[int]:
    """Per sample time, the requests sent (first try) and not yet answered (ok, or given up)."""
    first: dict[tuple[str, str], float] = {}
    ended: dict[tuple[str, str], float] = {}
    for o in ops:  # in time order
        key = (o["process"], o["value"]["key"])
        if o["type"] == "invoke":
            first.setdefault(key, o["t"])
        elif o["type"] == "ok" or (o["type"] == "fail" and (o["value"].get("gave_up")
                                                            or 400 <= o["value"].get("status", 0) < 500)):
            ended.setdefault(key, o["t"])
    spans = [(start, ended.get(k, float("inf"))) for k, start in first.items()]
    return [sum(1 for a, b in spans if a <= t < b) for t in times]


def recovery(s: dict[str, list[Any]], window: dict[str, Any] | None, load_end: float, steady_from: float = 0.0,
             offered: float | None = None) -> dict[str, Any] | None:
    """For a fault: backlog peak from its start, drain time (backlog back at or below its pre-fault p95) and time
    to recover (done jobs/s back within 5% of the pre-fault median, or of the ``offered`` rate when that is lower,
    while load still runs: loadtests.analysis.throughput_recovery) from its end. Pre-fault is the 30 s before the
    fault, from ``steady_from`` on (the ramp-up is not the steady state)."""
    from loadtests.analysis import PRE_FAULT_S, throughput_recovery

    if window is None or window.get("start") is None:
        return None
    start, end = window["start"], window["end"] if window.get("end") is not None else load_end
    t, backlog = s["t"], s["backlog"]
    pre = [i for i, x in enumerate(t) if max(steady_from, start - PRE_FAULT_S) <= x < start]
    base_backlog = percentile([backlog[i] for i in pre], 95) or 0
    after = [i for i, x in enumerate(t) if x >= start]
    if not after:
        return {"peak_backlog": None, "drain_s": None, "recover_s": None}
    drained = next((t[i] for i in after if t[i] >= end and backlog[i] <= base_backlog), None)
    done = throughput_recovery(t, s["done_per_s"], start, end, load_end, steady_from, offered)
    return {"peak_backlog": max(backlog[i] for i in after), "baseline_backlog_p95": base_backlog,
            "drain_s": None if drained is None else round(drained - end, 2),
            "pre_fault_done_per_s": done["pre_fault"], "recovery_target_done_per_s": done["target"],
            "lowest_done_per_s_in_fault": done["lowest_in_fault"], "recover_s": done["recover_s"]}


# ---------------------------------------------------------------------------------------------- the clients' log


def read_client_logs(directory: Path, t0: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(requests, operations) of every Locust process, in time order, ``t`` in seconds from ``t0`` (epoch)."""
    reqs: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    for path in sorted(directory.glob("client-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a process killed mid-line
                continue
            rec["t"] = round(rec["t"] - t0, 4)
            {"req": reqs, "op": ops}.get(rec.get("k"), []).append(rec)  # (and each process's start record)
    return sorted(reqs, key=lambda r: r["t"]), sorted(ops, key=lambda r: r["t"])


def answered(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the clients were told: (key, job id) of every answered enqueue, and of each job of an answered mission."""
    out = []
    for o in ops:
        if o["type"] != "ok":
            continue
        v = o["value"]
        if o["f"] == "enqueue":
            out.append({"key": v["key"], "job_id": v["job_id"]})
        else:
            out.extend({"key": f"{v['key']}:{name}", "job_id": job_id} for name, job_id in v["jobs"].items())
    return out


def endpoint_figures(reqs: list[dict[str, Any]], duration_s: float) -> dict[str, dict[str, Any]]:
    from loadtests.analysis import distribution

    out: dict[str, dict[str, Any]] = {}
    for name in sorted({r["name"] for r in reqs}):
        mine = [r for r in reqs if r["name"] == name]
        ok = [r for r in mine if not r["failed"]]
        raw = distribution([r["ms"] for r in ok])
        corrected = distribution([r["corrected_ms"] for r in ok if r.get("corrected_ms") is not None])
        out[name] = {"requests": len(mine), "failures": len(mine) - len(ok), "rps": round(len(mine) / duration_s, 3),
                     "p50_ms": raw["p50"], "p95_ms": raw["p95"], "p99_ms": raw["p99"], "p99_ci_ms": raw["p99_ci"],
                     "max_ms": raw["max"], "corrected_p50_ms": corrected["p50"], "corrected_p95_ms": corrected["p95"],
                     "corrected_p99_ms": corrected["p99"], "corrected_p99_ci_ms": corrected["p99_ci"],
                     "over_time": _over_time(ok)}
    return out


def _over_time(reqs: list[dict[str, Any]], bucket_s: float = 10.0) -> list[dict[str, Any]]:
    buckets: dict[int, list[dict[str, Any]]] = {}
    for r in reqs:
        buckets.setdefault(int(r["t"] // bucket_s), []).append(r)
    return [{"t": round((b + 0.5) * bucket_s, 1), "n": len(rs), "p50_ms": percentile([r["ms"] for r in rs], 50),
             "p99_ms": percentile([r["ms"] for r in rs], 99),
             "corrected_p99_ms": percentile([r["corrected_ms"] for r in rs if r.get("corrected_ms") is not None], 99)}
            for b, rs in sorted(buckets.items())]


def completion_figures(engine: Any, t0: float = 0.0, windows: list[dict[str, Any]] | None = None,
                       grace_s: float = FAULT_GRACE_S) -> dict[str, Any]:
    """Enqueue-to-done of single jobs (created_at to the log row of done) and of missions (first job created to
    last job terminal, for missions whose jobs all ended), in seconds, from the database's own timestamps: of all of
    them, and (``..._outside_faults``) of those whose whole span, in seconds from ``t0`` (epoch), missed every fault
    window plus ``grace_s``: a mission in flight across a 10 s database outage takes 10 s longer, and in a 60 s run
    those are more than 1% of the missions, so the p99 of all of them is the outage's, not the system's."""
    with engine.connect() as conn:
        singles = conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM j.created_at), EXTRACT(EPOCH FROM max(l.created_at)) FROM job j "
            "JOIN job_log l ON l.job_id = j.id "
            "WHERE j.mission_id = '' AND j.status = 'done' AND l.to_status = 'done' GROUP BY j.id, j.created_at"
        )).all()
        missions = conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM min(j.created_at)), EXTRACT(EPOCH FROM max(l.created_at)) FROM job j "
            "JOIN job_log l ON l.job_id = j.id AND l.to_status IN ('done', 'dead', 'cancelled') "
            "WHERE j.mission_id <> '' GROUP BY j.mission_id "
            "HAVING bool_and(j.status IN ('done', 'dead', 'cancelled'))")).all()
        retried = conn.execute(text("SELECT count(*) FROM job WHERE retry > 0")).scalar_one()
    spans = {"job_done_s": [(float(a), float(b)) for a, b in singles],
             "mission_done_s": [(float(a), float(b)) for a, b in missions]}
    return {**completion_from_spans(spans, t0, windows or [], grace_s), "jobs_retried": int(retried)}


def completion_from_spans(spans: dict[str, list[tuple[float, float]]], t0: float, windows: list[dict[str, Any]],
                          grace_s: float) -> dict[str, Any]:
    """Per name, the distribution of (end - start) of its spans (epoch seconds), and of those outside faults."""
    from loadtests.analysis import distribution

    out: dict[str, Any] = {"fault_grace_s": grace_s}
    for name, items in spans.items():
        out[name] = distribution([b - a for a, b in items])
        out[f"{name}_outside_faults"] = distribution([b - a for a, b in items
                                                      if not _overlaps(a - t0, b - t0, windows, grace_s)])
    return out


def _overlaps(start: float, end: float, windows: list[dict[str, Any]], grace_s: float) -> bool:
    """Whether [start, end] meets a fault window (a window never closed lasts to the end of the run)."""
    return any(w["start"] is not None and start <= (math.inf if w["end"] is None else w["end"] + grace_s)
               and end >= w["start"] for w in windows)


def slo_rows(profile: JobsProfile, endpoints: dict[str, Any], completion: dict[str, Any], errors: dict[str, Any],
             invariants: dict[str, str], faults: bool = False) -> list[dict[str, Any]]:
    slo = profile.slo
    enqueue = endpoints.get("POST /v1/jobs", {})
    violated = sorted(k for k, v in invariants.items() if v == "violated")
    rate = errors.get("error_rate_excluding_faults")

    def row(name: str, measured: float | None, limit: float, unit: str, n: int | None) -> dict[str, Any]:
        return {"name": name, "target": f"< {limit:g} {unit}", "measured": measured,
                "held": measured is not None and measured < limit, "n": n}

    # Completion is judged outside fault windows, as the error rate is; with every fault included it is in
    # ``completion`` and the report (what a fault costs is the recovery figures' subject).
    judged = {name: completion[f"{name}_outside_faults" if faults else name]
              for name in ("job_done_s", "mission_done_s")}
    unit = "s (outside faults)" if faults else "s"
    return [
        row("enqueue_p99_ms", enqueue.get("p99_ms"), slo["enqueue_p99_ms"], "ms", enqueue.get("requests")),
        row("job_done_p99_s", judged["job_done_s"]["p99"], slo["job_done_p99_s"], unit, judged["job_done_s"]["n"]),
        row("mission_done_p99_s", judged["mission_done_s"]["p99"], slo["mission_done_p99_s"], unit,
            judged["mission_done_s"]["n"]),
        {"name": "invariants", "target": "no violation", "measured": ", ".join(violated) or "none violated",
         "held": not violated, "n": None},
        row("error_rate", None if rate is None else round(rate, 6), slo["error_rate_max"], "(excluding faults)",
            errors.get("requests_outside_faults")),
    ]


# ---------------------------------------------------------------------------------------------- one run


def _hold(stack: Any, fault: str) -> Any:
    """The fault by its name in the job system's registry (systems.jobs.faults), for loadtests.run.FaultWindow."""

    def hold(window: Any) -> dict[str, Any]:
        from systems.jobs.faults import JobsNemesis

        nemesis = JobsNemesis(stack)
        try:
            nemesis.apply(fault, {}, on=True)
            window.until(window.end_s)
        finally:
            nemesis.apply(fault, {}, on=False)
        return {"kills": nemesis.kills}

    return hold


def run_load(opts: Any, console: Any = None) -> int:
    """System.load of the job system: one run of the profile through the load pipeline (loadtests.run); returns
    its exit code (loadtests.run.exit_code). ValueError for options it does not take."""
    from loadtests.run import exit_code, run_once
    from reports.load import write_load_report

    _refuse_other_options(opts)
    profile = load_profile(opts.profile)
    variant = (opts.extra or {}).get("variant") or "fixed"
    opts = dataclasses.replace(opts, report=write_load_report)
    load = run_once(JobsLoad(variant), opts, profile, profile.multiple, Path(opts.out), console)
    if console is not None:
        print_summary(load, console)
    return exit_code(load)


class JobsLoad:
    """The pipeline's hooks for one run of the job system (loadtests.run.LoadHooks): the service, two pool
    instances and the producer API (systems.jobs.stack), a sampler of the job table, J1-J11 at the end."""

    locustfile = LOCUSTFILE

    def __init__(self, variant: str) -> None:
        from systems.jobs.stack import STACK_POOL

        self.variant = variant
        self.cfg = PoolConfig(**STACK_POOL)
        self.stack_: Any = None
        self.sampler: _Sampler | None = None
        self.settle_s = 0.0
        self.checked: Any = None
        self.reqs: list[dict[str, Any]] = []
        self.ops: list[dict[str, Any]] = []
        self.completion: dict[str, Any] = {}

    @contextmanager
    def stack(self, run: Any) -> Iterator[Any]:
        from systems.jobs.stack import JobsStack, NativeCase

        profile = run.profile
        with JobsStack((run.out / "stack").resolve()) as stack:
            self.stack_ = stack
            case = NativeCase(workers=profile.workers_per_instance, variant=self.variant)
            stack.reset(case)
            stack.reset_service({"work_s": profile.work_median_s, "work_sigma": profile.work_sigma,
                                 "fail_rate": profile.fail_rate, "seed": run.opts.seed})
            run.say(f"[bold]jobs {profile.name}[/]: {profile.offered_jobs_per_s:g} jobs/s offered "
                    f"({profile.jobs_per_s:g} single, {profile.missions_per_s:g} missions/s of "
                    f"{profile.jobs_per_mission}), 2 instances x {profile.workers_per_instance} workers, "
                    f"{self.variant} variant")
            stack.start_instances(case, self.cfg, history=stack.history_file())
            try:
                yield stack
            finally:
                if self.sampler is not None:
                    self.sampler.stop()
                stack.stop_instances()
                stack.stop_api()

    def warm(self, run: Any) -> dict[str, Any]:
        run.host = self.stack_.start_api(self.variant)
        return {"seed": run.opts.seed, "duration_s": run.duration_s, "token_secret": self.stack_.token_secret,
                "ramp": {"steps": run.opts.ramp_steps, "ramp_s": run.ramp_s}, "client_log_dir": str(run.client_dir),
                "rates": {k: getattr(run.profile, k) for k in ("jobs_per_s", "missions_per_s", "dag_width",
                                                               "same_key_ratio", "producers", "planners")}}

    def sample(self, run: Any) -> None:
        self.sampler = _Sampler(self.stack_.owner, run.t0)
        self.sampler.start()

    def fault(self, run: Any) -> Any:
        from loadtests.run import start_fault, window_s

        opts = run.opts
        if not opts.fault:
            return None
        return start_fault(run, window_s(DEFAULT_WINDOW_S[opts.fault], opts.fault_window),
                           _hold(self.stack_, opts.fault))

    def after_load(self, run: Any) -> None:
        pass

    def drain(self, run: Any) -> None:
        from systems.jobs.stack import NativeCase

        drain_s = run.opts.drain_s if run.opts.drain_s is not None else max(60.0, run.duration_s / 2.0)
        settle_started = time.time()
        self.stack_.settle(NativeCase(settle_s=drain_s), self.cfg, run.notes)
        self.settle_s = time.time() - settle_started
        assert self.sampler is not None
        self.sampler.stop()
        self.stack_.stop_instances()
        self.stack_.stop_api()

    def check(self, run: Any) -> None:
        """J1-J11 against the tables, the service's ledger and what the clients were told."""
        self.reqs, self.ops = read_client_logs(run.client_dir, run.t0)
        self.checked = self.stack_.check(self.cfg, answered(self.ops), run.notes)
        self.completion = completion_figures(self.stack_.owner, run.t0, run.windows)

    def figures(self, run: Any) -> dict[str, Any]:
        from loadtests.analysis import error_summary

        assert self.sampler is not None
        profile, windows, checked = run.profile, run.windows, self.checked
        endpoints = endpoint_figures(self.reqs, run.load_end)
        errors = error_summary(self.reqs, [w for w in windows if w["start"] is not None], FAULT_GRACE_S)
        invariants = {v.invariant: v.status for v in checked.verdicts}
        s = series(self.sampler.rows, self.ops)
        steady = [r for t, r in zip(s["t"], s["done_per_s"], strict=True)
                  if run.ramp_s <= t <= run.load_end and r is not None]
        completion = self.completion
        return {
            "system": "jobs", "profile": profile.name, "multiple": profile.multiple, "variant": self.variant,
            "duration_s": run.duration_s, "ramp_s": run.ramp_s, "seed": run.opts.seed, "stack": "native",
            "offered_jobs_per_s": round(profile.offered_jobs_per_s, 3),
            "done_per_s_steady_median": percentile(steady, 50), "settle_s": round(self.settle_s, 2),
            "wall_s": round(time.perf_counter() - run.wall0, 1), "endpoints": endpoints, "completion": completion,
            "errors": errors, "invariants": invariants,
            "violations": {v.invariant: [x.message for x in v.violations[:5]] for v in checked.verdicts
                           if v.status == "violated"},
            "counts": checked.state.counts(),
            "duplicate_effects": sum(1 for n in checked.state.effects.values() if n > 1), "faults": windows,
            "recovery": recovery(s, windows[0], run.load_end, run.ramp_s, profile.offered_jobs_per_s)
            if windows else None,
            "series": s, "notes": run.notes, "assumptions": profile.assumptions,
            "slo": slo_rows(profile, endpoints, completion, errors, invariants, faults=bool(windows)),
            "missing": [name for name, value in (
                ("POST /v1/jobs", endpoints.get("POST /v1/jobs")),
                ("POST /v1/missions", endpoints.get("POST /v1/missions")),
                ("job_done_s", completion["job_done_s"]["n"]), ("mission_done_s", completion["mission_done_s"]["n"]),
                ("series", s["t"])) if not value],
        }


def print_summary(load: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    t = Table(title=f"jobs load {load['profile']}, {load['duration_s']:g} s, {load['offered_jobs_per_s']:g} jobs/s "
              f"offered, {load['done_per_s_steady_median']} done/s (median, steady)")
    for col in ("endpoint", "requests", "failures", "p50 ms", "p99 ms", "p99 ms from intended send"):
        t.add_column(col, justify="left" if col == "endpoint" else "right")
    for name, e in load["endpoints"].items():
        t.add_row(name, str(e["requests"]), str(e["failures"]), str(e["p50_ms"]), str(e["p99_ms"]),
                  str(e["corrected_p99_ms"]))
    console.print(t)
    v = Table(title="SLOs and invariants")
    for col in ("name", "target", "measured", "held"):
        v.add_column(col)
    for r in load["slo"]:
        v.add_row(r["name"], r["target"], str(r["measured"]), "[green]yes[/]" if r["held"] else "[red]no[/]")
    console.print(v)
    figures = [f"{name} {d['p99']} (n {d['n']})" for name, d in (load.get("completion") or {}).items()
               if isinstance(d, dict) and "n" in d]
    if figures:
        console.print("completion p99, s: " + ", ".join(figures))
    if load["recovery"]:
        console.print(f"recovery from {load['faults'][0]['fault']}: {load['recovery']}")
    if load["missing"]:
        console.print(f"[red]missing figures: {', '.join(load['missing'])}[/]")
    for inv, msgs in load["violations"].items():
        console.print(f"[red]{inv} violated[/]: " + "; ".join(msgs))
