"""capacity.html and the `model` section of capacity.json, from the load.json files of `sortie load` runs.

Everything shown is computed from the stored load.json files and the capacity model calibrated on
them (systems/copilot/capacity_model.py); nothing is typed in. The HTML is one self-contained file: plots are inline
SVG drawn by matplotlib (Agg), the style sheet is inline, there is no script.
"""

from __future__ import annotations

import html
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.record import LoadRecord, read_load
from reports import plots
from systems.copilot.capacity_model import (
    SATURATION_UTIL,
    CapacityModel,
    at_offered_rates,
    calibrate,
    endpoint_kind,
    extrapolate,
    fit_cpu,
    saturation_multiple,
    steady_endpoints,
)
from systems.copilot.load_analysis import CONFIRM, platform_call_times

log = logging.getLogger("sortie.report")
MODEL_GOAL_PCT = 20.0  # issue 5: model within 20% of measurement on throughput and p95 latency
EXTRAPOLATE = (10, 20, 50)
# Virtual seconds of each model run compared with a measured one (~400 confirms at 1x; a few seconds of wall time).
COMPARE_DURATION_S = 1800.0
# A run whose API spent this much more or less CPU per request than the calibration run's ran on a host of another
# speed than the model was calibrated for (2026-12-04: -23% per confirm, the same code, 6 hours apart).
HOST_SPEED_NOTE_PCT = 10.0


@dataclass
class Run:
    label: str  # directory relative to the output directory ("." for DIR/load.json)
    path: Path
    record: LoadRecord

    @property
    def load(self) -> dict[str, Any]:
        """load.json as the run wrote it (validated: ``record``), for the tables the report reads."""
        return self.record.raw()

    @property
    def profile(self) -> str:
        return self.record.profile or self.label

    @property
    def multiple(self) -> float:
        return self.record.multiple

    @property
    def faults(self) -> list[dict[str, Any]]:
        return list(self.load.get("fault_windows") or [])

    @property
    def fault_names(self) -> str:
        return ", ".join(sorted({str(f.fault) for f in self.record.fault_windows})) or ""

    @property
    def find_max(self) -> dict[str, Any] | None:
        return self.record.find_max or self.record.saturation


def find_runs(out_dir: Path) -> list[Run]:
    """Every load.json under out_dir that the Copilot's capacity model reads (it has the confirm lifecycle the model
    is calibrated on; another system's load run has its own load.html): DIR/load.json and DIR/<run>/load.json."""
    runs = []
    for path in sorted(out_dir.rglob("load.json")):
        try:
            record = read_load(path)
        except (OSError, ValueError):
            log.warning("%s is not a load run's load.json: left out", path, exc_info=True)
            continue
        if not record.lifecycle_ms:
            continue
        _platform_calls_from_history(record.raw(), path.parent / "history.jsonl")
        rel = path.parent.relative_to(out_dir)
        runs.append(Run(str(rel) if str(rel) != "." else (out_dir.resolve().name or "."), path, record))
    # `--find-max` writes DIR/load.json as a copy of a step (with `saturation`) beside step-<k>x/load.json.
    if len(runs) > 1:
        runs = [r for r in runs if not (r.path.parent == out_dir and r.find_max)] or runs
    runs.sort(key=lambda r: (bool(r.faults), r.multiple, r.label))
    return runs


def _platform_calls_from_history(load: dict[str, Any], history: Path) -> None:
    """A run written before load.json carried the dispatcher's per-call platform latencies: take them from the same
    run's history.jsonl (loadtests.analysis.platform_call_times), as `sortie load` now does."""
    st = load.get("service_times_ms")  # (a dict when present: the record was validated)
    if st is None or any(k.startswith("platform_") and k != "platform_call" for k in st):
        return
    if history.exists():
        with history.open() as fh:
            st.update(platform_call_times(json.loads(line) for line in fh if line.strip()))


def find_max_result(out_dir: Path, runs: Sequence[Run]) -> dict[str, Any] | None:
    """The saturation search's result: DIR/find_max.json, else a load.json's `saturation`."""
    path = out_dir / "find_max.json"
    if path.exists():
        try:
            body = json.loads(path.read_text())
            if isinstance(body, dict):
                return body
        except json.JSONDecodeError:
            pass
    top = out_dir / "load.json"
    if top.exists():
        try:
            sat = read_load(top).saturation
        except ValueError:
            sat = None
        if sat is not None:
            return sat
    return next((r.find_max for r in runs if r.find_max), None)


def _bottleneck_name(sat: dict[str, Any]) -> str:
    b = sat.get("bottleneck") or sat.get("limited_by")
    if isinstance(b, dict):
        return str(b.get("resource") or "not named") + (f" ({b['evidence']})" if b.get("evidence") else "")
    return str(b) if b else "not named"


def _confirm(endpoints: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    for name, e in endpoints.items():
        if endpoint_kind(name) == "confirm":
            return name, e
    return None, {}


def _err(model: float | None, measured: float | None) -> float | None:
    if model is None or measured is None or measured == 0:
        return None
    return 100.0 * (model - measured) / measured


def _within(value: float | None, ci: Sequence[float | None] | None) -> bool | None:
    """Whether a modelled figure lies inside the measurement's confidence interval (None: no interval)."""
    if value is None or not ci:
        return None
    lo, hi = ci[0], ci[1]
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _interval(ci: Sequence[float | None] | None) -> str:
    """[lo, hi] of a measured percentile; an open upper end (too few samples) is ∞."""
    if not ci:
        return "–"
    return f"[{_fmt(ci[0])}, {'∞' if ci[1] is None else _fmt(ci[1])}]"


def _base_run(runs: Sequence[Run]) -> Run | None:
    """Calibrate on the lowest fault-free multiple that has an endpoint table (else any run)."""
    clean = [r for r in runs if not r.faults and r.load.get("endpoints")]
    pool = clean or [r for r in runs if r.load.get("endpoints")] or list(runs)
    return min(pool, key=lambda r: (r.multiple, r.label)) if pool else None


def api_cpu_per_request_ms(load: dict[str, Any]) -> float | None:
    """The API's mean CPU per client request over the steady window (Server-Timing's thread CPU, weighted by each
    endpoint's requests; the platform's webhook batches left out: their size grows with the load). The same code
    costs the same CPU on the same host, so between two runs this is the host's speed, not the load's."""
    total = n = 0.0
    for name, e in steady_endpoints(load).items():
        if endpoint_kind(name) in ("aggregate", "stream", "platform"):
            continue
        if e.get("server_cpu_mean_ms") is not None and e.get("server_cpu_n"):
            total += float(e["server_cpu_mean_ms"]) * e["server_cpu_n"]
            n += e["server_cpu_n"]
    return total / n if n else None


def host_speed(calibration: dict[str, Any], run: dict[str, Any]) -> dict[str, Any] | None:
    """The run's API CPU per request against the calibration run's: a model calibrated on a slower host predicts
    every latency that follows CPU too high by about as much (a diagnostic; the model does not rescale)."""
    cal, now = api_cpu_per_request_ms(calibration), api_cpu_per_request_ms(run)
    if not cal or now is None:
        return None
    return {"calibration_ms": round(cal, 3), "run_ms": round(now, 3), "change_pct": round((now / cal - 1) * 100, 1)}


def calibrated_model(runs: Sequence[Run], *, seed: int = 1) -> tuple[Run, CapacityModel, set[Path]]:
    """The model calibrated on the lowest fault-free multiple of ``runs``, with CPU fitted as fixed + per-multiple
    when fault-free runs at several multiples exist (else linear, from that run). Also returns the runs (load.json
    paths, resolved) the CPU line was fitted on: none when it is the base run's linear CPU."""
    base = _base_run(runs)
    if base is None:
        raise FileNotFoundError("no load.json to calibrate the capacity model on")
    steady = [r for r in runs if not r.faults]
    model = fit_cpu(calibrate(base.record, seed=seed), [r.load for r in steady])
    return base, model, {r.path.resolve() for r in steady} if model.cpu_cores_fixed else set()


def compare(model: CapacityModel, r: Run, *, in_sample: bool, seed: int = 1,
            duration_s: float = COMPARE_DURATION_S, calibration: Run | None = None) -> dict[str, Any]:
    """The model at run ``r``'s multiple against what ``r`` measured: throughput, confirm and confirm-to-EXECUTING
    p50/p95/p99, each with the measured percentile's ~95% interval. The model runs ``duration_s`` of virtual time
    whatever the run's length: its own percentiles then carry little sampling noise (a 300 s model run at 1x has
    ~60 confirms, so its p99 is close to its slowest), and the measured interval is the comparison's noise.
    The model is offered the load ``r`` was offered (``at_offered_rates``): its throughput rows then test that
    nothing saturates or batches differently, and its latencies answer for the load, not for the arrival noise.
    ``calibration``: the run the model was calibrated on, for the host-speed diagnostic (``host_speed``)."""
    pred = at_offered_rates(model, r.load, r.multiple).predict(r.multiple, seed=seed, duration_s=duration_s)
    measured_eps = steady_endpoints(r.load)
    name, meas = _confirm(measured_eps)
    _, mod = _confirm(pred["endpoints"])
    life_m = (r.load.get("lifecycle_ms") or {}).get("executing") or {}
    life_p = pred["lifecycle_ms"]["executing"]
    # The endpoints both sides have: the platform's webhooks count only when both the calibration run and this one
    # logged them (the simulator's row, loadtests.analysis.WEBHOOK_ENDPOINT); the model's profile estimate of them
    # ("platform webhooks") has no measured counterpart.
    both = [n for n in measured_eps if n in pred["endpoints"] and endpoint_kind(n) not in ("aggregate", "stream")]
    meas_total = sum(float(measured_eps[n].get("rps") or 0) for n in both)
    mod_total = sum(float(pred["endpoints"][n].get("rps") or 0) for n in both)
    rows = [
        ("total throughput (req/s)", meas_total, mod_total, "throughput", None),
        ("confirm throughput (req/s)", meas.get("rps"), mod.get("rps"), "throughput", None),
        ("confirm p50 (ms)", meas.get("p50_ms"), mod.get("p50_ms"), "p50", meas.get("p50_ci_ms")),
        ("confirm p95 (ms)", meas.get("p95_ms"), mod.get("p95_ms"), "p95", meas.get("p95_ci_ms")),
        ("confirm p99 (ms)", meas.get("p99_ms"), mod.get("p99_ms"), "p99", meas.get("p99_ci_ms")),
        ("confirm-to-EXECUTING p50 (ms)", life_m.get("p50"), life_p.get("p50"), "p50", life_m.get("p50_ci")),
        ("confirm-to-EXECUTING p95 (ms)", life_m.get("p95"), life_p.get("p95"), "p95", life_m.get("p95_ci")),
        ("confirm-to-EXECUTING p99 (ms)", life_m.get("p99"), life_p.get("p99"), "p99", life_m.get("p99_ci")),
    ]
    figures = []
    for label, mv, pv, kind, ci in rows:
        e = _err(pv, mv)
        figures.append({"figure": label, "kind": kind, "measured": mv, "model": pv,
                        "error_pct": None if e is None else round(e, 1), "goal": kind in ("throughput", "p95"),
                        "within_goal": None if e is None else abs(e) <= MODEL_GOAL_PCT,
                        # the measured percentile's own ~95% interval (loadtests/quantiles.percentile_ci)
                        "measured_ci": ci, "model_within_ci": _within(pv, ci)})
    return {"run": r.label, "profile": r.profile, "multiple": r.multiple, "in_sample": in_sample,
            "confirm_endpoint": name, "model_duration_s": duration_s, "offered": "the run's steady-window rates",
            "figures": figures,
            "host_speed": None if calibration is None else host_speed(calibration.load, r.load),
            "utilisation": pred["utilisation"], "bottleneck": pred["bottleneck"],
            "counts_per_s": pred["counts_per_s"]}


def analyse(out_dir: Path, *, duration_s: float = COMPARE_DURATION_S, extrapolate_duration_s: float = 60.0,
            multiples: Sequence[float] = EXTRAPOLATE, seed: int = 1,
            calibrate_dir: Path | None = None) -> dict[str, Any]:
    """The model section: calibration, model vs measured, saturation, extrapolation, summary. ``calibrate_dir``:
    calibrate on those runs instead (latencies on their lowest multiple, the CPU line over all of them), so every
    run under ``out_dir`` is predicted out of sample, as a planner predicting 5x from runs at 1x and 2x would."""
    runs = find_runs(out_dir)
    if not runs:
        raise FileNotFoundError(f"no load.json of the Copilot under {out_dir} (another system's load run has its "
                                "own load.html)")
    cal_runs = runs if calibrate_dir is None else find_runs(calibrate_dir)
    if not cal_runs:
        raise FileNotFoundError(f"no load.json of the Copilot under {calibrate_dir} to calibrate on")
    base, model, cpu_fit = calibrated_model(cal_runs, seed=seed)
    # the model has no faults: compare steady runs only
    comparisons = [{**compare(model, r, in_sample=r.path.resolve() == base.path.resolve(), seed=seed,
                              duration_s=duration_s, calibration=base), "cpu_in_sample": r.path.resolve() in cpu_fit}
                   for r in runs if not r.faults]
    extra = extrapolate(model, multiples, seed=seed, duration_s=extrapolate_duration_s)
    measured_max = find_max_result(out_dir, runs)
    model_sat = extra[0]["saturation"] if extra else saturation_multiple(model, seed=seed)
    saturation = {"measured": measured_max, "model": model_sat,
                  "source": "measured (find-max run)" if measured_max else "model (no find-max run stored)"}
    out = {
        "calibrated_on": {"run": base.label, "profile": base.profile, "multiple": base.multiple,
                          "path": str(base.path.parent), "cpu_line_from": sorted(str(p.parent) for p in cpu_fit)},
        "parameters": model.as_json(),
        "assumptions": [s.as_json() for s in model.assumptions()],
        "comparisons": comparisons,
        "extrapolation": extra,
        "saturation": saturation,
        "goal_pct": MODEL_GOAL_PCT,
        "saturation_util": SATURATION_UTIL,
    }
    out["trust"] = _trust(model, comparisons, extra)
    out["summary"] = _summary(runs, out)
    return out


# ------------------------------------------------------------------------------------- load parity

PARITY_GOAL_PCT = 15.0  # issue 13: the simulated p50 and p99 at 1x within ±15% of the measured run
PARITY_FIGURES = ("confirm p50 (ms)", "confirm p99 (ms)", "confirm-to-EXECUTING p50 (ms)",
                  "confirm-to-EXECUTING p99 (ms)")


def _parity_verdict(f: dict[str, Any]) -> str:
    """held: within the goal; noise: outside it but inside the measured ~95% interval (the run's samples cannot tell
    model and measurement apart, as `--baseline` treats overlapping intervals); missed: outside both."""
    if f["error_pct"] is None:
        return "unmeasured"
    if abs(f["error_pct"]) <= PARITY_GOAL_PCT:
        return "held"
    return "noise" if f.get("model_within_ci") else "missed"


def load_parity(measured_dir: Path, calibrate_dir: Path | None = None, *, seed: int = 1,
                duration_s: float = COMPARE_DURATION_S) -> dict[str, Any]:
    """`sortie parity --load`: the capacity model's simulated confirm and confirm-to-EXECUTING p50/p99 against every
    fault-free run under ``measured_dir`` (`compare`, as capacity.json's model section does). The model is
    calibrated on ``calibrate_dir``'s runs when given (out of sample), else on ``measured_dir``'s own lowest
    multiple: that run is then in sample (its confirm p50/p95 fit the client overhead, its DISPATCHING p50 the
    broker hop), which each row says."""
    runs = [r for r in find_runs(measured_dir) if not r.faults]
    if not runs:
        raise FileNotFoundError(f"no fault-free load.json of the Copilot under {measured_dir}")
    cal_runs = find_runs(calibrate_dir) if calibrate_dir is not None else find_runs(measured_dir)
    base, model, cpu_fit = calibrated_model(cal_runs, seed=seed)
    out_runs = []
    for r in runs:
        in_sample = r.path.resolve() == base.path.resolve()
        c = compare(model, r, in_sample=in_sample, seed=seed, duration_s=duration_s, calibration=base)
        rows = [{"figure": f["figure"], "measured": f["measured"], "measured_ci": f["measured_ci"],
                 "simulated": f["model"], "error_pct": f["error_pct"], "model_within_ci": f["model_within_ci"],
                 "verdict": _parity_verdict(f)} for f in c["figures"] if f["figure"] in PARITY_FIGURES]
        out_runs.append({"run": r.label, "path": str(r.path.parent), "multiple": r.multiple,
                         "duration_s": r.record.duration_s, "load_avg": r.record.machine.load_avg,
                         "in_sample": in_sample,
                         "cpu_in_sample": r.path.resolve() in cpu_fit,
                         "host_speed": c["host_speed"], "rows": rows})
    missed = [f"{r['run']}: {x['figure']}" for r in out_runs for x in r["rows"] if x["verdict"] == "missed"]
    in_sample_runs = [r["run"] for r in out_runs if r["in_sample"]]
    return {"measured": str(measured_dir), "calibrated_on": {"run": base.label, "path": str(base.path.parent),
                                                             "multiple": base.multiple},
            "in_sample": in_sample_runs,
            "note": (f"calibrated on {base.label}, which is also compared: its p50s are fitted, not predicted; "
                     "give --calibrate with another run for an out-of-sample check") if in_sample_runs else
                    "out of sample: no compared run calibrated the model",
            "goal_pct": PARITY_GOAL_PCT, "model_duration_s": duration_s, "runs": out_runs,
            "held": not missed, "missed": missed}


def _trust(model: CapacityModel, comparisons: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[str]:
    """Where the model stops being trustworthy, from what the calibration and comparisons show."""
    notes = []
    measured = sorted({c["multiple"] for c in comparisons})
    if measured:
        notes.append(f"Measured multiples: {', '.join(f'{m:g}x' for m in measured)}. Between them the model "
                     "interpolates; beyond the largest it extrapolates linear per-request costs.")
    if len(measured) <= 1:
        notes.append("Only one steady run was measured, so the comparison is in-sample: it checks the "
                     "calibration, not the model's predictive power.")
    bad = [(c["run"], f["figure"], f["error_pct"], f.get("measured_ci"), f.get("model_within_ci"))
           for c in comparisons for f in c["figures"] if f["goal"] and f["within_goal"] is False]
    for run, fig, err, ci, inside in bad:
        why = (f"; inside the measurement's own ~95% interval {_interval(ci)}, so this run's samples cannot "
               "tell the two apart" if inside else "")
        notes.append(f"Run {run}: the model misses {fig} by {err:+.1f}% (goal ±{MODEL_GOAL_PCT:g}%){why}.")
    for c in comparisons:
        speed = c.get("host_speed")
        if speed and abs(speed["change_pct"]) >= HOST_SPEED_NOTE_PCT:
            notes.append(f"Run {c['run']}: its API spent {speed['run_ms']:.2f} ms of CPU per request against "
                         f"{speed['calibration_ms']:.2f} ms in the calibration run ({speed['change_pct']:+.1f}%, the "
                         f"same endpoints): the host ran {'faster' if speed['change_pct'] < 0 else 'slower'} than "
                         "when the model was calibrated, and latencies that follow CPU move with it. Calibrate "
                         "on runs taken in the same hour as the runs to predict.")
    if model.host_cores and model.cpu_cores_per_1x:
        rho1 = model.cpu_utilisation(1.0) or 0.0
        by_work = (f"; {', '.join(sorted(model.cpu_per_work))} charged per request the modelled run does, which "
                   "grow slower than the multiple as the webhook POSTs batch more events"
                   if model.cpu_per_work else "")
        notes.append(f"Host CPU is a processor-sharing stretch, fixed plus linear in the multiple ({rho1 * 100:.1f}% "
                     f"of {model.host_cores:g} cores at 1x{by_work}). Near and past {SATURATION_UTIL:.0%} CPU the "
                     "predicted latencies are orders of magnitude, not figures.")
    else:
        notes.append("No per-process CPU was measured, so the host's CPU is not modelled: predictions assume "
                     "unlimited cores.")
    notes.append("Past the first saturated resource queues grow without bound; the model reports lower bounds "
                 "(the age of unanswered requests when the run ends), not steady-state latencies.")
    notes.append("Not modelled: faults, retries and redeliveries, the reconciler, report uploads, Redis, "
                 "lock contention between transactions on one task, and the platform's own "
                 "capacity (its calls are pure latency). Database capacity is a count of concurrent "
                 "transactions, not a model of I/O.")
    assumed = [s.parameter for s in model.assumptions()]
    if assumed:
        notes.append("Stated defaults, not measurements: " + ", ".join(assumed) + ".")
    return notes


def _fmt(x: Any, nd: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            return "–"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{nd}f}" if isinstance(x, float) else str(x)
    return str(x)


def _summary(runs: Sequence[Run], a: dict[str, Any]) -> str:
    steady = [r for r in runs if not r.faults]
    parts = []
    top = max(steady or runs, key=lambda r: r.multiple)
    _, c = _confirm(top.load.get("endpoints") or {})
    ex = ((top.load.get("lifecycle_ms") or {}).get("executing") or {}).get("p99")
    slos = top.load.get("slo") or []
    held = [s for s in slos if s.get("held")]
    parts.append(f"At {top.multiple:g}x ({top.profile}, measured) the confirm p99 is {_fmt(c.get('p99_ms'), 0)} ms "
                 f"and confirm-to-EXECUTING p99 is {_fmt(None if ex is None else ex / 1000, 2)} s; "
                 f"{len(held)} of {len(slos)} SLOs held.")
    sat = a["saturation"]
    if sat["measured"]:
        m = sat["measured"]
        mult = m.get("max_multiple_held", m.get("multiple"))
        parts.append(f"The largest multiple that held every SLO in the find-max run is {_fmt(mult, 2)}x; "
                     f"the first resource to run out was {_bottleneck_name(m)}.")
    ms = sat["model"]
    if ms:
        limit = ms.get("limited_by") or "nothing within the search range"
        parts.append(f"With the measured deployment the model puts the first bottleneck at {limit}, which "
                     f"saturates at about {_fmt(ms.get('multiple'), 2)}x.")
    for e in a["extrapolation"][1:]:
        s = e.get("saturation") or {}
        parts.append(f"With {e['option']}: the model holds the SLOs up to about {_fmt(s.get('multiple'), 2)}x "
                     f"(then {s.get('limited_by') or 'beyond the search range'}).")
    for fr in (r for r in runs if r.faults and r.load.get("backlog")):
        b = fr.load["backlog"]
        parts.append(f"Under {fr.fault_names} at {fr.multiple:g}x the backlog peaked at {_fmt(b.get('peak'), 0)} "
                     f"and drained in {_fmt(b.get('drain_s'), 0)} s after recovery.")
    errs = [abs(f["error_pct"]) for c in a["comparisons"] for f in c["figures"]
            if f["goal"] and f["error_pct"] is not None and not c["in_sample"]]
    if errs:
        parts.append(f"Out of sample the model's worst error on throughput and p95 is {max(errs):.0f}% "
                     f"(goal {MODEL_GOAL_PCT:g}%).")
        noisy = [f for c in a["comparisons"] for f in c["figures"]
                 if f["goal"] and f["within_goal"] is False and f.get("model_within_ci")]
        if noisy:
            parts.append(f"{len(noisy)} of the misses lie inside the measured percentile's own ~95% interval "
                         "(too few samples in the run to tell model and measurement apart).")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------ plots

def _run_plots(run: Run) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "sortie"
    import matplotlib.pyplot as plt

    ts = run.load.get("timeseries") or {}
    t = ts.get("t") or []
    out = []

    def series(ax: Any, key: str, label: str) -> bool:
        ys = ts.get(key)
        if not t or not isinstance(ys, list) or not ys:
            return False
        n = min(len(t), len(ys))
        ax.plot(t[:n], [float("nan") if y is None else y for y in ys[:n]], label=label, lw=1.2)
        return True

    def new(ylabel: str) -> tuple[Any, Any]:
        fig, ax = plt.subplots(figsize=(7.5, 2.6))
        ax.set_xlabel("seconds into the run")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        return fig, ax

    specs = [
        ("latency", "Confirm latency p95 over time", "ms", [("confirm_p95_ms", "confirm p95"),
                                                           ("confirm_p99_ms", "confirm p99"),
                                                           ("confirm_p50_ms", "confirm p50")]),
        ("throughput", "Throughput", "requests/s", [("rps", "all endpoints")]),
        ("backlog", "Backlog: outbox, broker, unsettled tasks", "items",
         [("outbox_depth", "outbox depth"), ("consumer_lag", "consumer lag"), ("unsettled", "unsettled tasks")]),
        ("outbox-age", "Oldest unpublished outbox row", "s", [("outbox_oldest_s", "oldest age")]),
    ]
    for cls, title, ylabel, keys in specs:
        fig, ax = new(ylabel)
        drawn = [series(ax, k, lbl) for k, lbl in keys]
        if not any(drawn):
            plt.close(fig)
            continue
        plots.shade_faults(ax, run.faults)
        ax.legend(fontsize=7, loc="upper right")
        out.append(plots.figure(cls, f"{title} ({run.label})", plots.svg(fig)))
    lat = (run.load.get("latency") or {}).get("series") or {}
    lt, per = lat.get("t") or [], (lat.get("endpoints") or {})
    for name in [n for n in ("POST /v1/drafts/{id}/confirm", "GET /v1/tasks/{id}") if n in per]:
        fig, ax = new("ms")
        for key, label, style in (("corrected_p99_ms", "p99 from the intended send", "-"),
                                  ("raw_p99_ms", "p99 from the actual send", "--"),
                                  ("corrected_p50_ms", "p50 from the intended send", ":")):
            ys = per[name].get(key) or []
            ax.plot(lt[:len(ys)], [float("nan") if y is None else y for y in ys], style, label=label, lw=1.2,
                    drawstyle="steps-post")
        ax.set_yscale("log")
        plots.shade_faults(ax, run.faults)
        ax.legend(fontsize=7, loc="upper right")
        out.append(plots.figure("latency-corrected", f"{name}: latency per {lat_interval(run)} s, raw and corrected "
                                                f"({run.label})", plots.svg(fig)))
    for key, cls, title, ylabel in (("cpu_pct", "cpu", "CPU per process", "% of one core"),
                                    ("rss_mb", "rss", "Resident memory per process", "MB")):
        per = ts.get(key) or {}
        if not t or not isinstance(per, dict) or not per:
            continue
        fig, ax = new(ylabel)
        for proc, ys in sorted(per.items()):
            n = min(len(t), len(ys))
            ax.plot(t[:n], [float("nan") if y is None else y for y in ys[:n]], label=proc, lw=1)
        plots.shade_faults(ax, run.faults)
        ax.legend(fontsize=6, ncol=3, loc="upper left")
        out.append(plots.figure(cls, f"{title} ({run.label})", plots.svg(fig)))
    return out


def lat_interval(run: Run) -> str:
    return f"{float((run.load.get('latency') or {}).get('interval_s') or 10):g}"


def _latency_table(r: Run) -> str:
    """Raw (from the actual send) and corrected (from the intended send time) percentiles side by side."""
    lat = r.load.get("latency") or {}
    eps = lat.get("endpoints") or {}
    if not eps:
        return ""
    rows = []
    for name, e in eps.items():
        cells = []
        for q in (50, 95, 99):
            for kind in ("raw", "corrected"):
                v = e[kind]
                cells.append(f"<td>{_fmt(v.get(f'p{q}_ms'))}<br><small>{_interval(v.get(f'p{q}_ci'))}</small></td>")
        rows.append(f"<tr><td>{html.escape(name)}</td>{_td(e['raw'].get('n'), 0)}{''.join(cells)}</tr>")
    head = ("<tr><th>endpoint</th><th>n</th>" + "".join(f"<th>p{q} {k} ms</th>" for q in (50, 95, 99)
                                                        for k in ("raw", "corrected")) + "</tr>")
    pool = lat.get("connections_per_process")
    note = (f"{html.escape(str(lat.get('mode')))} model"
            + (f", {pool} client connections per Locust process" if pool else "")
            + ": raw latency runs from the actual send, corrected from the intended send time (the arrival's "
              "schedule, or the previous answer of the journey), so the wait for a connection or for the last "
              "answer is counted. HDR histograms of every sample of every Locust process; ~95% intervals below.")
    return f'<p class="note">{note}</p><table class="latency">{head}{"".join(rows)}</table>'


def _recovery_table(r: Run) -> str:
    """Every recovery figure of the run's fault (loadtests.analysis.recovery)."""
    rec = r.load.get("recovery") or {}
    if not rec:
        return ""
    ans, ev = rec["throughput"]["answers_per_s"], rec["throughput"]["events_published_per_s"]
    budget = rec.get("error_budget") or {}
    codes = ", ".join(f"{k} {v}" for k, v in (rec.get("errors_in_window_by_code") or {}).items()) or "none"
    rows = [
        ("fault window", f"{_fmt(rec.get('start_s'))}–{_fmt(rec.get('end_s'))} s ({_fmt(rec.get('window_s'))} s)"),
        ("answers/s: pre-fault median, lowest in the fault",
         f"{_fmt(ans.get('pre_fault'), 2)}, {_fmt(ans.get('lowest_in_fault'), 2)}"),
        ("answers/s back within 5% after the fault", _secs(ans.get("recover_s"))),
        ("published events/s: pre-fault median, lowest in the fault",
         f"{_fmt(ev.get('pre_fault'), 2)}, {_fmt(ev.get('lowest_in_fault'), 2)}"),
        ("published events/s back within 5% after the fault", _secs(ev.get("recover_s"))),
        (f"confirm p99 (corrected) back under {_fmt(rec.get('confirm_p99_slo_ms'), 0)} ms for good (10 s intervals "
         "over it after the first under it)",
         f"{_secs(rec.get('confirm_p99_recover_s'))} ({rec.get('confirm_p99_relapses', 0)})"),
        ("backlog peak (outbox + unsettled), drained after the fault",
         f"{_fmt(rec.get('backlog_peak'), 0)}, {_secs(rec.get('drain_s'))}"),
        (f"requests in the window (+{_fmt(rec.get('grace_s'), 0)} s): sent, failed, refused",
         f"{rec.get('requests_in_window')}, {rec.get('failed_in_window')}, {rec.get('refused_in_window')} ({codes})"),
        ("duplicate effects (I1, I2, I6 violations; must be 0)",
         f"{rec.get('duplicates_total')} {rec.get('duplicate_effects')}"),
        ("lost (I3)", str((rec.get("lost") or {}).get("I3"))),
        ("error budget the fault spent (failed in the window / the run's budget)",
         f"{_fmt(budget.get('fraction'), 3)} ({budget.get('spent_by_fault')} of "
         f"{_fmt(budget.get('budget_requests'))})"),
    ]
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    head = f'<tr><th>recovery from {html.escape(str(rec.get("fault")))}</th><th></th></tr>'
    return f'<table class="recovery">{head}{body}</table>'


def _secs(v: Any) -> str:
    return "not while the load ran" if v is None else f"{_fmt(v)} s"


def _baseline_section(out_dir: Path, runs: Sequence[Run]) -> str:
    """``sortie load --baseline``: the old run's figures beside this one's, per figure whether it regressed past its
    tolerance and beyond its noise interval, and the two runs' series on the same axes."""
    path = out_dir / "baseline_comparison.json"
    if not path.exists():
        return ""
    data = json.loads(path.read_text())
    rows_in = data["rows"] if isinstance(data, dict) else data
    base_dir = Path(data["baseline"]).parent if isinstance(data, dict) else None
    rows = []
    for r in rows_in:
        verdict = '<td class="bad">regressed</td>' if r["regressed"] else "<td>ok</td>"
        rows.append(f"<tr><td>{html.escape(r['figure'])}</td><td>{_fmt(r['base'])}<br><small>"
                    f"{_interval(r.get('base_ci'))}</small></td><td>{_fmt(r['now'])}<br><small>"
                    f"{_interval(r.get('now_ci'))}</small></td><td>{html.escape(str(r['change']))}</td>"
                    f"<td>{html.escape(str(r['allowed']))}</td><td>{html.escape(str(r.get('noise', '–')))}</td>"
                    f"{verdict}</tr>")
    head = ("<tr><th>figure</th><th>baseline</th><th>this run</th><th>change</th><th>allowed</th><th>noise</th>"
            "<th>verdict</th></tr>")
    regressed = sum(1 for r in rows_in if r["regressed"])
    plots = ""
    base_load = base_dir / "load.json" if base_dir is not None else None
    if base_load is not None and base_load.exists() and runs:
        plots = _baseline_plots(runs[-1].load, json.loads(base_load.read_text()))
    return (f'<section id="baseline"><h2>Against the baseline</h2><p class="note">Baseline: '
            f'{html.escape(str(data.get("baseline") if isinstance(data, dict) else "?"))}. {regressed} of '
            f'{len(rows_in)} figures regressed (past the kind\'s tolerance, docs/capacity.md, and, where both runs '
            f'measured a ~95% interval, with the intervals apart).</p><table class="baseline">{head}{"".join(rows)}'
            f'</table>{plots}</section>')


def _baseline_plots(now: dict[str, Any], base: dict[str, Any]) -> str:
    """The two runs on the same axes: the confirm's corrected p99 per interval, and the request throughput."""
    import matplotlib.pyplot as plt

    def confirm_p99(load: dict[str, Any]) -> tuple[list[float], list[Any]]:
        ser = (load.get("latency") or {}).get("series") or {}
        return ser.get("t") or [], ((ser.get("endpoints") or {}).get(CONFIRM) or {}).get("corrected_p99_ms") or []

    def throughput(load: dict[str, Any]) -> tuple[list[float], list[Any]]:
        ts = load.get("timeseries") or {}
        return ts.get("t") or [], ts.get("rps") or []

    out = []
    for title, ylabel, series in (("Confirm p99 from the intended send time, per interval", "ms", confirm_p99),
                                  ("Throughput, all endpoints", "requests/s", throughput)):
        fig, ax = plt.subplots(figsize=(7.5, 2.6))
        ax.set_xlabel("seconds into the run")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        drawn = False
        for label, load, style in (("this run", now, "-"), ("baseline", base, "--")):
            xs, ys = series(load)
            n = min(len(xs), len(ys))
            if n:
                ax.plot(xs[:n], [float("nan") if y is None else y for y in ys[:n]], style, label=label, lw=1.2)
                drawn = True
        if not drawn:
            plt.close(fig)
            continue
        plots.shade_faults(ax, list(now.get("fault_windows") or []))
        ax.legend(fontsize=7, loc="upper right")
        out.append(plots.figure("baseline", title, plots.svg(fig)))
    return "".join(out)


def _comparison_plot(comparisons: list[dict[str, Any]]) -> str:
    import matplotlib.pyplot as plt

    labels, meas, mod = [], [], []
    for c in comparisons:
        for f in c["figures"]:
            if f["goal"] and f["measured"] is not None and f["model"] is not None:
                labels.append(f"{c['multiple']:g}x {f['figure']}")
                meas.append(float(f["measured"]))
                mod.append(float(f["model"]))
    if not labels:
        return ""
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(labels) + 1.2))
    ys = range(len(labels))
    ratio_m = [1.0] * len(labels)
    ratio_p = [p / m if m else float("nan") for p, m in zip(mod, meas, strict=True)]
    ax.barh([y + 0.2 for y in ys], ratio_m, height=0.4, label="measured (= 1)")
    ax.barh([y - 0.2 for y in ys], ratio_p, height=0.4, label="model / measured")
    ax.axvspan(1 - MODEL_GOAL_PCT / 100, 1 + MODEL_GOAL_PCT / 100, color="tab:green", alpha=0.1,
               label=f"±{MODEL_GOAL_PCT:g}%")
    ax.set_yticks(list(ys), labels, fontsize=7)
    ax.set_xlabel("relative to measurement")
    ax.legend(fontsize=7, loc="lower right")
    return plots.figure("model-vs-measured", "Model against measurement", plots.svg(fig))


def _extrapolation_plot(extra: list[dict[str, Any]], slo_ms: float) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3))
    drawn = False
    for e in extra:
        xs = [r["multiple"] for r in e["predictions"] if r["confirm_p99_ms"] is not None]
        ys = [r["confirm_p99_ms"] for r in e["predictions"] if r["confirm_p99_ms"] is not None]
        if xs:
            ax.plot(xs, ys, marker="o", label=e["option"])
            drawn = True
    if not drawn:
        plt.close(fig)
        return ""
    ax.axhline(slo_ms, color="tab:red", ls="--", lw=1, label=f"SLO {slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("multiple of 1x")
    ax.set_ylabel("confirm p99 (ms, model)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    return plots.figure("extrapolation", "Model: confirm p99 by multiple and deployment", plots.svg(fig))


# ------------------------------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.4em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.held{color:#1a7f37;font-weight:600} .failed{color:#cf222e;font-weight:600} .na{color:#777}
figure.plot{margin:0.8em 0;padding:0.4em;border:1px solid #e5e5e5} figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:0.85em;color:#555} .summary{background:#f6f8fa;padding:0.8em 1em;border-left:4px solid #0969da}
.note{color:#555;font-size:0.9em}
"""


def _verdict(held: Any) -> str:
    if held is True:
        return '<td class="held">held</td>'
    if held is False:
        return '<td class="failed">failed</td>'
    return f'<td class="na">{html.escape(str(held))}</td>'


def _td(x: Any, nd: int = 1) -> str:
    return f'<td class="num">{html.escape(_fmt(x, nd))}</td>' if isinstance(x, int | float) and not \
        isinstance(x, bool) else f"<td>{html.escape(_fmt(x, nd))}</td>"


def _ids(invariants: dict[str, Any]) -> str:
    """I1 ... I17 -> "I1–I17": the span of invariant ids a run checked."""
    nums = sorted(int(k[1:]) for k in invariants if k[1:].isdigit())
    return f"I{nums[0]}–I{nums[-1]}" if nums else ", ".join(invariants)


def _slo_table(runs: Sequence[Run]) -> str:
    rows = []
    for r in sorted(runs, key=lambda r: (r.profile, r.multiple, r.label)):
        for s in r.load.get("slo") or []:
            rows.append(f"<tr><td>{html.escape(r.profile)}</td><td>{html.escape(r.label)}</td>{_td(r.multiple, 0)}"
                        f"<td>{html.escape(r.fault_names or '–')}</td><td>{html.escape(str(s.get('name')))}</td>"
                        f"{_td(s.get('target'), 3)}{_td(s.get('measured'), 3)}{_verdict(s.get('held'))}</tr>")
        inv = r.load.get("invariants") or {}
        if inv:
            bad = [k for k, v in inv.items() if v == "violated"]
            unchecked = [k for k, v in inv.items() if v == "unchecked"]
            text = ("violated: " + ", ".join(bad)) if bad else "none violated"
            if unchecked:
                text += f" (unchecked: {', '.join(unchecked)})"
            rows.append(f"<tr><td>{html.escape(r.profile)}</td><td>{html.escape(r.label)}</td>{_td(r.multiple, 0)}"
                        f"<td>{html.escape(r.fault_names or '–')}</td><td>invariants {html.escape(_ids(inv))}</td>"
                        "<td>none violated</td>"
                        f"<td>{html.escape(text)}</td>{_verdict(not bad)}</tr>")
    head = ("<tr><th>profile</th><th>run</th><th>multiple</th><th>fault</th><th>SLO</th><th>target</th>"
            "<th>measured</th><th>verdict</th></tr>")
    return f'<table id="slo" class="slo">{head}{"".join(rows)}</table>'


def _run_table(r: Run) -> str:
    eps = r.load.get("endpoints") or {}
    rows = []
    for name, e in eps.items():
        rows.append(f"<tr><td>{html.escape(name)}</td>{_td(e.get('requests'), 0)}{_td(e.get('failures'), 0)}"
                    f"{_td(e.get('rps'), 3)}{_td(e.get('p50_ms'))}{_td(e.get('p95_ms'))}{_td(e.get('p99_ms'))}</tr>")
    for stage, v in (r.load.get("lifecycle_ms") or {}).items():
        if not isinstance(v, dict) or v.get("p50") is None:
            continue
        rows.append(f"<tr><td>confirm → {html.escape(stage.upper())}</td>{_td(v.get('n'), 0)}<td>–</td><td>–</td>"
                    f"{_td(v.get('p50'))}{_td(v.get('p95'))}{_td(v.get('p99'))}</tr>")
    head = ("<tr><th>endpoint / stage</th><th>requests</th><th>failures</th><th>req/s</th><th>p50 ms</th>"
            "<th>p95 ms</th><th>p99 ms</th></tr>")
    extra = []
    b = r.load.get("backlog") or {}
    if b:
        extra.append(f"Backlog peak {_fmt(b.get('peak'), 0)}, drained {_fmt(b.get('drain_s'), 0)} s after recovery.")
    pg = r.load.get("pgbench") or {}
    if pg.get("error"):
        extra.append(f"pgbench did not run: {str(pg['error'])[:160]}")
    elif pg:
        cap = r.load.get("confirm_capacity") or {}
        extra.append(f"Confirm endpoint against the database, back to back with {_fmt(pg.get('clients'), 0)} "
                     f"closed-loop clients each: pgbench with the confirm's transaction shape "
                     f"{_fmt(pg.get('tps'))} tps; the confirm endpoint {_fmt(cap.get('rps'))} confirms/s "
                     f"(p99 {_fmt(cap.get('p99_ms'))} ms): ratio {_fmt(pg.get('capacity_ratio'), 3)}. "
                     f"The profile's own confirms used {_fmt(pg.get('load_ratio'), 4)} of pgbench's rate.")
        if cap.get("error"):
            extra.append(f"The confirm-capacity burst failed: {str(cap['error'])[:160]}")
        elif cap.get("cpu_cores"):
            extra.append("CPU during the confirm burst (cores): " + ", ".join(
                f"{k} {v:.2f}" for k, v in list(cap["cpu_cores"].items())[:6]) + ".")
    w = r.load.get("workers") or {}
    if w:
        extra.append("Workers: " + ", ".join(f"{k} {v}" for k, v in w.items()) + ".")
    notes = "".join(f'<p class="note">{html.escape(x)}</p>' for x in extra)
    return f'<table class="endpoints">{head}{"".join(rows)}</table>{notes}'


def _comparison_table(comparisons: list[dict[str, Any]]) -> str:
    rows = []
    for c in comparisons:
        for f in c["figures"]:
            e = f["error_pct"]
            cls = "na" if e is None or not f["goal"] else ("held" if f["within_goal"] else "failed")
            ci_txt = _interval(f.get("measured_ci"))
            inside = {True: "yes", False: "no", None: "–"}[f.get("model_within_ci")]
            rows.append(f"<tr><td>{html.escape(c['run'])}{' (calibration run)' if c['in_sample'] else ''}</td>"
                        f"{_td(c['multiple'], 0)}<td>{html.escape(f['figure'])}</td>{_td(f['measured'])}"
                        f"<td class=\"num\">{html.escape(ci_txt)}</td>"
                        f"{_td(f['model'])}<td class=\"num {cls}\">{'–' if e is None else f'{e:+.1f}%'}</td>"
                        f"<td>{inside}</td></tr>")
    head = ("<tr><th>run</th><th>multiple</th><th>figure</th><th>measured</th><th>measured ~95% interval</th>"
            "<th>model</th><th>error</th><th>model inside the interval</th></tr>")
    return f'<table id="model-table" class="model-vs-measured">{head}{"".join(rows)}</table>'


def _extrapolation_table(extra: list[dict[str, Any]]) -> str:
    rows = []
    for e in extra:
        cfg = ", ".join(f"{k} {v}" for k, v in e["config"].items())
        s = e.get("saturation") or {}
        for r in e["predictions"]:
            rows.append(f"<tr><td>{html.escape(e['option'])}<br><span class=\"note\">{html.escape(cfg)}</span></td>"
                        f"{_td(r['multiple'], 0)}{_td(r['confirm_rps'], 2)}{_td(r['confirm_p99_ms'])}"
                        f"{_td(r['executing_p99_ms'])}{_verdict(r['slo_held'])}"
                        f"<td>{html.escape(r['limited_by'] or '–')}</td>"
                        f"<td>{html.escape(r['bottleneck'])} {r['utilisation'][r['bottleneck']]:.0%}</td>"
                        f"{_td(s.get('multiple'), 2)}</tr>")
    head = ("<tr><th>deployment</th><th>multiple</th><th>confirm req/s</th><th>confirm p99 ms</th>"
            "<th>to EXECUTING p99 ms</th><th>SLOs</th><th>limited by</th><th>busiest resource</th>"
            "<th>saturates at (x)</th></tr>")
    return f'<table id="extrapolation-table" class="extrapolation">{head}{"".join(rows)}</table>'


def _dimensions_table(comparisons: list[dict[str, Any]], extra: list[dict[str, Any]]) -> str:
    rows = []
    for c in comparisons:
        d = c["counts_per_s"]
        rows.append(f"<tr><td>{html.escape(c['run'])}</td>{_td(c['multiple'], 0)}{_td(d['connections'], 0)}"
                    f"{_td(d['state_changes'], 2)}{_td(d['db_write_tx'], 1)}{_td(d['db_read_tx'], 1)}</tr>")
    if extra:
        for r in extra[0]["predictions"]:
            d = r["counts_per_s"]
            rows.append(f"<tr><td>model ({html.escape(extra[0]['option'])})</td>{_td(r['multiple'], 0)}"
                        f"{_td(d['connections'], 0)}{_td(d['state_changes'], 2)}{_td(d['db_write_tx'], 1)}"
                        f"{_td(d['db_read_tx'], 1)}</tr>")
    head = ("<tr><th>run</th><th>multiple</th><th>connections</th><th>state changes/s</th>"
            "<th>DB write tx/s</th><th>DB read tx/s</th></tr>")
    return f'<table id="dimensions" class="dimensions">{head}{"".join(rows)}</table>'


def _assumptions_table(a: dict[str, Any]) -> str:
    rows = []
    for s in a["parameters"]["sources"]:
        v = s["value"]
        vtxt = ", ".join(f"{k} {x}" for k, x in v.items()) if isinstance(v, dict) else _fmt(v, 3)
        rows.append(f"<tr><td>{html.escape(s['parameter'])}</td><td>{html.escape(vtxt)}</td>"
                    f"<td>{html.escape(s['source'])}</td>{_verdict('assumed' if s['assumed'] else 'measured')}</tr>")
    head = "<tr><th>parameter</th><th>value</th><th>from</th><th>kind</th></tr>"
    return f'<table id="parameters" class="parameters">{head}{"".join(rows)}</table>'


def _stack_name(load: dict[str, Any]) -> str:
    st = load.get("stack")
    return str(st.get("kind", "?")) if isinstance(st, dict) else str(st or "?")


def render(out_dir: Path, a: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "sortie"
    runs = find_runs(out_dir)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sortie capacity report</title>"
             f"<style>{CSS}</style></head><body>",
             "<h1>Sortie capacity report</h1>",
             f'<section id="summary"><h2>Summary</h2><p class="summary">{html.escape(a["summary"])}</p>'
             f'<p class="note">Model calibrated on run {html.escape(a["calibrated_on"]["run"])} '
             f'({a["calibrated_on"]["multiple"]:g}x, {html.escape(a["calibrated_on"].get("path", ""))}); its CPU line '
             f'fitted over: {html.escape(", ".join(a["calibrated_on"].get("cpu_line_from") or ["that run alone"]))}. '
             f'Runs read: {html.escape(", ".join(r.label for r in runs))}.</p></section>',
             f'<section id="slo-verdicts"><h2>SLO verdicts</h2>{_slo_table(runs)}</section>']
    sat = a["saturation"]
    ms = sat["model"] or {}
    sat_rows = []
    if sat["measured"]:
        m = sat["measured"]
        sat_rows.append(f"<tr><td>measured (find-max)</td><td>held up to "
                        f"{_fmt(m.get('max_multiple_held', m.get('multiple')), 2)}x; failed at "
                        f"{_fmt(m.get('failed_multiple'), 2)}x ({html.escape(', '.join(m.get('failed_slos') or []))}); "
                        f"bottleneck {html.escape(_bottleneck_name(m))}</td></tr>")
    sat_rows.append(f"<tr><td>model, as measured</td><td>{_fmt(ms.get('multiple'), 2)}x, limited by "
                    f"{html.escape(str(ms.get('limited_by')))}</td></tr>")
    parts.append(f'<section id="saturation"><h2>Saturation point</h2><p>Source: {html.escape(sat["source"])}.</p>'
                 f'<table id="saturation-table">{"".join(sat_rows)}</table></section>')
    parts.append('<section id="runs"><h2>Runs</h2>')
    for r in runs:
        title = f"{r.label}: {r.profile} at {r.multiple:g}x" + (f", fault {r.fault_names}" if r.faults else "")
        rid = "run-" + "".join(ch if ch.isalnum() else "-" for ch in r.label)
        parts.append(f'<section class="run" id="{html.escape(rid)}"><h3>{html.escape(title)}</h3>'
                     f'<p class="note">{html.escape(str(r.load.get("duration_s", "?")))} s on the '
                     f'{html.escape(_stack_name(r.load))} stack'
                     f'{" — " + html.escape(str(r.load["fixture"])) if r.load.get("fixture") else ""}</p>'
                     f'{_run_table(r)}{_recovery_table(r)}{_latency_table(r)}{"".join(_run_plots(r))}</section>')
    parts.append("</section>")
    parts.append(_baseline_section(out_dir, runs))
    parts.append(f'<section id="model-vs-measured"><h2>Model against measurement</h2>'
                 f'<p class="note">Goal: within ±{a["goal_pct"]:g}% on throughput and p95 latency. p99 is shown '
                 f'for information. Each run is predicted at the load it was offered (its steady window\'s '
                 f'request and webhook event rates), so the arrivals\' own noise is not counted as the model\'s '
                 f'error.</p>{_comparison_table(a["comparisons"])}{_comparison_plot(a["comparisons"])}'
                 f'</section>')
    slo_ms = a["parameters"]["slo"].get("confirm_p99_ms")
    parts.append(f'<section id="extrapolation"><h2>Extrapolation, 10x–50x</h2>'
                 f'{_extrapolation_table(a["extrapolation"])}'
                 f'{_extrapolation_plot(a["extrapolation"], slo_ms or 300.0)}</section>')
    parts.append(f'<section id="capacity-dimensions"><h2>Connections, state changes and writes</h2>'
                 f'<p class="note">Counted separately (seed 003 §15), from the model at each multiple.</p>'
                 f'{_dimensions_table(a["comparisons"], a["extrapolation"])}</section>')
    trust = "".join(f"<li>{html.escape(t)}</li>" for t in a["trust"])
    parts.append(f'<section id="assumptions"><h2>Model parameters and assumptions</h2>{_assumptions_table(a)}'
                 f'<h3>Where the model stops being trustworthy</h3><ul id="limits">{trust}</ul></section>')
    parts.append("</body></html>")
    return "\n".join(parts)


def write_capacity(out_dir: Path, **kw: Any) -> Path:
    """Writes DIR/capacity.html and merges a `model` section into DIR/capacity.json."""
    out_dir = Path(out_dir)
    a = analyse(out_dir, **kw)
    path = out_dir / "capacity.html"
    path.write_text(render(out_dir, a), encoding="utf-8")
    cj = out_dir / "capacity.json"
    body: dict[str, Any] = {}
    if cj.exists():
        try:
            body = json.loads(cj.read_text())
        except json.JSONDecodeError:
            body = {}
        if not isinstance(body, dict):
            body = {}
    body["model"] = a
    cj.write_text(json.dumps(body, indent=2, default=str) + "\n")
    return path
