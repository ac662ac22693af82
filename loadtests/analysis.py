"""Figures of any system's load run from what was measured: Locust's CSV stats and the clients' own records as
endpoints, distributions with their intervals, errors outside the fault windows, throughput recovery, the resources
that look exhausted, and the comparison of capacity.json against a baseline. A system's own figures are its own
(the Copilot's: systems/copilot/load_analysis.py). Every number comes from the run's measurements."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from loadtests.quantiles import percentile, percentile_ci


def distribution(values: list[float], scale: float = 1.0) -> dict[str, Any]:
    vals = [v * scale for v in values if v is not None and v >= 0]

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    return {"n": len(vals), "p50": r(percentile(vals, 50)), "p95": r(percentile(vals, 95)),
            "p99": r(percentile(vals, 99)), "mean": r(sum(vals) / len(vals)) if vals else None,
            "max": r(max(vals)) if vals else None, **_cis(vals, "")}


def _cis(vals: list[float], suffix: str) -> dict[str, list[float | None] | None]:
    """~95% intervals of p50, p95 and p99 (quantiles.percentile_ci): how far a few hundred samples pin them down
    (p50's for `sortie parity --load`, whose goal is on p50 and p99)."""
    out: dict[str, list[float | None] | None] = {}
    for q in (50, 95, 99):
        ci = percentile_ci(vals, q)
        out[f"p{q}_ci{suffix}"] = None if ci is None else [round(ci[0], 2), None if ci[1] is None else round(ci[1], 2)]
    return out


# ---------------------------------------------------------------------------------------------- Locust CSV


def read_locust_stats(prefix: Path) -> dict[str, dict[str, Any]]:
    """{name: {requests, failures, rps, p50_ms, p95_ms, p99_ms, avg_ms, max_ms}} from ``<prefix>_stats.csv``."""
    path = Path(f"{prefix}_stats.csv")
    if not path.exists():
        return {}
    out: dict[str, dict[str, Any]] = {}

    def num(row: dict[str, str], key: str) -> float | None:
        v = (row.get(key) or "").strip()
        try:
            return float(v)
        except ValueError:
            return None

    with path.open() as fh:
        for row in csv.DictReader(fh):
            name = row["Name"] if row.get("Type") else "Aggregated"
            out[name] = {"requests": int(num(row, "Request Count") or 0),
                         "failures": int(num(row, "Failure Count") or 0),
                         "rps": round(num(row, "Requests/s") or 0.0, 4), "p50_ms": num(row, "50%"),
                         "p95_ms": num(row, "95%"), "p99_ms": num(row, "99%"),
                         "avg_ms": round(num(row, "Average Response Time") or 0.0, 2), "max_ms": num(row, "Max")}
    return out


def endpoints_from_requests(requests: list[dict[str, Any]], window: tuple[float, float]) -> dict[str, dict[str, Any]]:
    """The same figures from the clients' own request log (used when Locust's CSV is missing, and for the
    steady-state window)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        by.setdefault(r["name"], []).append(r)
    span = max(1e-6, window[1] - window[0])
    out = {}
    for name, rs in sorted(by.items()):
        ms = [r["ms"] for r in rs]
        out[name] = {"requests": len(rs), "failures": sum(1 for r in rs if r["failed"]),
                     "rps": round(sum(1 for r in rs if window[0] <= r["t"] <= window[1]) / span, 4),
                     "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "p99_ms": percentile(ms, 99),
                     **_cis(ms, "_ms"), **_server_side(rs)}
    return out


def _server_side(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The API's own figures for these requests, from its Server-Timing header (client log ``server_ms``, ``cpu_ms``):
    the handler's wall time and its thread's CPU time, p50/p95 and mean. What the client's latency adds on top is
    the network, Toxiproxy, gunicorn's queue and the client; the CPU is what the request itself held a core for."""
    out: dict[str, Any] = {}
    for key, label in (("server_ms", "server"), ("cpu_ms", "server_cpu")):
        xs = [float(r[key]) for r in requests if r.get(key) is not None]
        if xs:
            out |= {f"{label}_p50_ms": percentile(xs, 50), f"{label}_p95_ms": percentile(xs, 95),
                    f"{label}_mean_ms": round(sum(xs) / len(xs), 3), f"{label}_n": len(xs)}
    return out


# ---------------------------------------------------------------------------------------------- database


# ---------------------------------------------------------------------------------------------- verdicts


def in_windows(t: float, windows: list[dict[str, Any]], grace_s: float) -> bool:
    return any(w["start"] <= t <= (w["end"] if w["end"] is not None else math.inf) + grace_s for w in windows)


def error_summary(requests: list[dict[str, Any]], windows: list[dict[str, Any]], grace_s: float) -> dict[str, Any]:
    by_code: dict[str, dict[str, int]] = {}
    total = failed = total_out = failed_out = 0
    for r in requests:
        inside = in_windows(r["t"], windows, grace_s)
        total += 1
        failed += r["failed"]
        if not inside:
            total_out += 1
            failed_out += r["failed"]
        if r["failed"] or (r.get("code") and r["status"] >= 400):
            key = r.get("code") or f"HTTP_{r['status']}"
            row = by_code.setdefault(key, {"count": 0, "in_fault_window": 0, "counted_as_error": 0})
            row["count"] += 1
            row["in_fault_window"] += inside
            row["counted_as_error"] += r["failed"]
    return {"requests": total, "failed": failed, "error_rate": failed / total if total else None,
            "requests_outside_faults": total_out, "failed_outside_faults": failed_out,
            "error_rate_excluding_faults": failed_out / total_out if total_out else None,
            "by_code": dict(sorted(by_code.items())), "fault_grace_s": grace_s}


TRAILING_S = 10.0  # the throughput series' window
PRE_FAULT_S = 30.0  # the steady state a fault's recovery is measured against


def trailing_rates(series: dict[str, Any], requests: list[dict[str, Any]], window_s: float = TRAILING_S
                   ) -> dict[str, list[float | None]]:
    """Per sample time: answers (status < 500, not failed) per second and outbox events published per second, each
    over the trailing ``window_s``: what the clients got through the API and what the pipeline behind it moved."""
    t = series["t"]
    done = sorted(r["t"] for r in requests if not r["failed"] and 0 < r["status"] < 500)
    sent = series.get("outbox_sent") or []
    answers, events = [], []
    lo = hi = 0
    for i, x in enumerate(t):
        while hi < len(done) and done[hi] <= x:
            hi += 1
        while lo < hi and done[lo] <= x - window_s:
            lo += 1
        answers.append(round((hi - lo) / window_s, 3) if x >= window_s else None)
        j = next((k for k in range(i, -1, -1) if t[k] <= x - window_s), None)
        events.append(None if j is None or i >= len(sent) or sent[i] is None or sent[j] is None
                      else round((sent[i] - sent[j]) / (x - t[j]), 3))
    return {"answers_per_s": answers, "events_published_per_s": events}


def throughput_recovery(t: list[float], rate: list[float | None], start: float, end: float, load_end: float,
                        steady_from: float, offered: float | None = None) -> dict[str, Any]:
    """A throughput series around a fault: its median over the PRE_FAULT_S before the fault (from ``steady_from``
    on), the lowest in the fault, and the seconds from the fault's end until it is back within 5% of the target
    (None: not while the load ran). The target is the pre-fault median, or the ``offered`` rate when that is
    lower: a median above the offered rate was a backlog being worked off, and once the fault's backlog is gone
    nothing completes faster than work arrives (a 40 s jobs load in CI measured 16.5 done/s in its 5 s pre-fault
    window at 9.5 offered, and never saw 15.7 again)."""
    pre = [r for x, r in zip(t, rate, strict=False)
           if max(steady_from, start - PRE_FAULT_S) <= x < start and r is not None]
    base = percentile(pre, 50)
    target = None if base is None else (base if offered is None else min(base, offered))
    dip = [r for x, r in zip(t, rate, strict=False) if start <= x <= end and r is not None]
    back = None if target is None else next(
        (x for x, r in zip(t, rate, strict=False) if end <= x <= load_end and r is not None and r >= 0.95 * target),
        None)
    return {"pre_fault": base, "target": target, "lowest_in_fault": min(dip) if dip else None,
            "recover_s": None if back is None else round(back - end, 2)}


# ---------------------------------------------------------------------------------------------- saturation


def _slope(xs: list[float], ys: list[float]) -> float:
    pts = [(x, y) for x, y in zip(xs, ys, strict=False) if y is not None]
    if len(pts) < 3:
        return 0.0
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else 0.0


def resource_signals(load: dict[str, Any]) -> list[dict[str, Any]]:
    """Which resources look exhausted in a run's steady state (after the ramp, before the load stopped), most
    decisive first: each with its evidence from the samples."""
    ts = load["timeseries"]
    t = ts["t"]
    lo, hi = load.get("steady_window", [0.0, load.get("duration_s", 0.0)])
    idx = [i for i, x in enumerate(t) if lo <= x <= hi] or list(range(len(t)))

    def mean(col: list[Any]) -> float:
        vals = [col[i] for i in idx if i < len(col) and col[i] is not None]
        return sum(vals) / len(vals) if vals else 0.0

    cores = load.get("machine", {}).get("cpus", 1)
    signals: list[dict[str, Any]] = []
    machine = mean(ts.get("machine_cpu_pct", []))
    procs = sorted(((mean(col), name) for name, col in ts.get("cpu_pct", {}).items()), reverse=True)
    top = procs[0] if procs else (0.0, "-")
    if machine >= 85.0:
        signals.append({"resource": "machine CPU", "evidence": f"mean machine CPU {machine:.0f}% of {cores} cores; "
                        f"largest consumer {top[1]} at {top[0]:.0f}% of one core", "score": machine / 100})
    for pct, name in procs:
        if pct >= 85.0 and name not in ("api", "postgres", "locust"):  # single-threaded (or GIL-bound) processes
            signals.append({"resource": f"{name} CPU (one core)", "evidence": f"{name} at {pct:.0f}% of one core",
                            "score": pct / 100})
    api = next((p for p, n in procs if n == "api"), 0.0)
    workers = load.get("workers", {}).get("api_workers", 1)
    if api >= 85.0 * workers:
        signals.append({"resource": "API workers CPU", "evidence": f"gunicorn at {api:.0f}% over {workers} workers",
                        "score": api / 100 / workers})
    conns = [ts["db_connections"][i] for i in idx if ts["db_connections"][i] is not None]
    max_conn = load.get("db", {}).get("max_connections")
    if conns and max_conn and max(conns) >= 0.9 * max_conn:
        signals.append({"resource": "PostgreSQL connections", "evidence": f"{max(conns)} of {max_conn} connections",
                        "score": max(conns) / max_conn})
    for key, what in (("outbox_oldest_s", "outbox publisher (oldest unpublished age growing)"),
                      ("consumer_lag", "consumers (published-but-unconsumed growing)"),
                      ("unsettled", "dispatch pipeline (unsettled tasks growing)")):
        col = ts.get(key, [])
        slope = _slope([t[i] for i in idx], [col[i] for i in idx if i < len(col)])
        if slope > 0.05 and key != "unsettled" or key == "unsettled" and slope > 0.2:
            signals.append({"resource": what, "evidence": f"{key} grows {slope:.2f}/s over the steady state",
                            "score": min(1.0, slope)})
    signals.sort(key=lambda s: -s["score"])
    return signals


# ---------------------------------------------------------------------------------------------- capacity.json

# Regression tolerances for --baseline (documented in docs/capacity.md).
TOLERANCES: dict[str, dict[str, Any]] = {
    "throughput": {"better": "higher", "rel": 0.20, "abs": 0.0},  # rps may drop at most 20%
    "latency_ms": {"better": "lower", "rel": 0.50, "abs": 5.0},  # percentiles may rise 50% (and 5 ms)
    "lifecycle_ms": {"better": "lower", "rel": 0.50, "abs": 100.0},  # confirm-to-X may rise 50% (and 100 ms)
    "error_rate": {"better": "lower", "rel": 0.0, "abs": 0.001},  # may rise by 0.1 percentage point
    "cpu_ms": {"better": "lower", "rel": 0.50, "abs": 0.5},  # CPU per unit of work may rise 50%
    "ratio": {"better": "higher", "rel": 0.30, "abs": 0.0},  # confirm capacity / pgbench tps
    "multiple": {"better": "higher", "rel": 0.0, "abs": 0.0},  # the saturation multiple may not drop
    "backlog_s": {"better": "lower", "rel": 0.50, "abs": 10.0},  # drain time may rise 50% (and 10 s)
    "recovery_s": {"better": "lower", "rel": 0.50, "abs": 10.0},  # time to recover may rise 50% (and 10 s)
    "count": {"better": "lower", "rel": 0.50, "abs": 5.0},  # backlog peak, failures in a fault window
    "duplicates": {"better": "lower", "rel": 0.0, "abs": 0.0},  # duplicate effects: any rise regresses
    "budget_fraction": {"better": "lower", "rel": 0.50, "abs": 0.05},  # error budget a fault consumed
}


def _beyond_noise(better: str, base_ci: Any, now_ci: Any) -> bool | None:
    """Whether the two ~95% intervals are apart in the worse direction (None: a figure without intervals). An open
    upper end (too few samples) reaches to infinity."""
    if not base_ci or not now_ci:
        return None
    b_lo, b_hi = base_ci[0], math.inf if base_ci[1] is None else base_ci[1]
    n_lo, n_hi = now_ci[0], math.inf if now_ci[1] is None else now_ci[1]
    return n_lo > b_hi if better == "lower" else n_hi < b_lo


def compare(current: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per baseline figure: base, now, change, allowed, regressed. A figure regresses when it moved past
    its kind's tolerance in the worse direction and, where both runs measured an interval (percentiles), the
    intervals are apart: a p99 whose intervals overlap is within the noise of the runs (``noise`` says which).
    Invariants: held -> violated regresses."""
    rows = []
    for name, b in sorted(baseline.get("figures", {}).items()):
        tol = TOLERANCES.get(b.get("kind", ""), {"better": "lower", "rel": 0.5, "abs": 0.0})
        cur = current.get("figures", {}).get(name)
        if cur is None:
            rows.append({"figure": name, "base": b["value"], "now": None, "change": "missing", "allowed": "-",
                         "regressed": True})
            continue
        base, now = float(b["value"]), float(cur["value"])
        if tol["better"] == "higher":
            limit = base * (1 - tol["rel"]) - tol["abs"]
            bad = now < limit
            allowed = f">= {limit:.4g}"
        else:
            limit = base * (1 + tol["rel"]) + tol["abs"]
            bad = now > limit
            allowed = f"<= {limit:.4g}"
        change = f"{(now - base) / base * 100:+.0f}%" if base else f"{now - base:+.4g}"
        apart = _beyond_noise(tol["better"], b.get("ci"), cur.get("ci"))
        noise = ("no interval" if apart is None else "beyond the noise" if apart else "within the noise")
        rows.append({"figure": name, "base": base, "now": now, "change": change, "allowed": allowed,
                     "base_ci": b.get("ci"), "now_ci": cur.get("ci"), "noise": noise,
                     "regressed": bad and apart is not False})
    for inv, was in sorted(baseline.get("invariants", {}).items()):
        now_v = current.get("invariants", {}).get(inv)
        if was == "held" and now_v == "violated":
            rows.append({"figure": f"invariant.{inv}", "base": was, "now": now_v, "change": "violated",
                         "allowed": "held", "regressed": True})
    return rows
