"""Figures of a load run from what was measured: Locust's CSV stats, the database's own timestamps, the
sampler's series. Nothing here is a constant figure: every number comes from the run's measurements."""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from loadtests.quantiles import percentile, percentile_ci

CONFIRM = "POST /v1/drafts/{id}/confirm"  # the endpoint whose latency the confirm SLO judges

LIFECYCLE_SQL = text("""
SELECT c.task_id,
       EXTRACT(EPOCH FROM c.created_at) AS confirmed,
       EXTRACT(EPOCH FROM min(a.created_at) FILTER (WHERE a.to_status = 'DISPATCHING')) AS dispatching,
       EXTRACT(EPOCH FROM min(a.created_at) FILTER (WHERE a.to_status = 'EXECUTING')) AS executing,
       EXTRACT(EPOCH FROM min(a.created_at) FILTER (WHERE a.to_status = 'COMPLETED')) AS completed
FROM task_audit_log c JOIN task_audit_log a ON a.task_id = c.task_id
WHERE c.from_status IS NULL AND c.to_status = 'CREATED'
GROUP BY c.task_id, c.created_at
""")


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


# The platform's webhook POSTs to the API, as the simulator logged them (no load client sends them).
WEBHOOK_ENDPOINT = "POST /v1/platform/events (simulator)"


def _webhook_requests(deliveries: dict[str, Any], t0_epoch: float) -> list[dict[str, Any]]:
    """The simulator's delivery log (``GET /control/webhook-deliveries``: columns and items) as request records with
    ``t`` in seconds since the load's start; [] when the log lacks a column."""
    col = {name: i for i, name in enumerate(deliveries.get("columns") or [])}
    if not {"sent_at", "events", "round_trip_ms", "server_ms", "server_cpu_ms"} <= col.keys():
        return []
    return [{"name": WEBHOOK_ENDPOINT, "t": r[col["sent_at"]] - t0_epoch, "ms": r[col["round_trip_ms"]],
             "failed": False, "events": r[col["events"]], "server_ms": r[col["server_ms"]],
             "cpu_ms": r[col["server_cpu_ms"]]} for r in deliveries.get("items") or []]


def webhook_posts(deliveries: dict[str, Any], t0_epoch: float, until_s: float) -> int:
    """The webhook POSTs the API answered up to ``until_s`` (seconds since the load's start): the logged ones and
    those the bounded log dropped before they were read (``missed``: the oldest, so all before ``until_s``)."""
    return sum(1 for r in _webhook_requests(deliveries, t0_epoch) if r["t"] <= until_s) + deliveries.get("missed", 0)


def webhook_endpoint(deliveries: dict[str, Any], t0_epoch: float, window: tuple[float, float]) -> dict[str, Any]:
    """The platform simulator's webhook deliveries in ``window`` (seconds since the load's start), as one endpoint's
    figures: rate, round-trip latency and the API's Server-Timing per batch (``server_cpu_*``: the API's CPU for the
    platform's own traffic), plus ``events_per_request``. {} without deliveries in the window.
    ``deliveries``: the simulator's ``GET /control/webhook-deliveries``."""
    rows = [r for r in _webhook_requests(deliveries, t0_epoch) if window[0] <= r["t"] <= window[1]]
    if not rows:
        return {}
    figures = endpoints_from_requests(rows, window)[WEBHOOK_ENDPOINT]
    return figures | {"events_per_request": round(sum(r["events"] for r in rows) / len(rows), 2)}


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


def lifecycle(admin: Engine) -> dict[str, dict[str, Any]]:
    """Confirm (the creation audit row) to the first DISPATCHING, EXECUTING and COMPLETED audit rows, in ms."""
    with admin.connect() as conn:
        rows = conn.execute(LIFECYCLE_SQL).mappings().all()
    out = {}
    for stage in ("dispatching", "executing", "completed"):
        out[stage] = distribution([float(r[stage]) - float(r["confirmed"]) for r in rows if r[stage] is not None],
                                  1000.0)
    out["confirmed"] = {"n": len(rows)}
    return out


def db_service_times(admin: Engine) -> dict[str, dict[str, Any]]:
    with admin.connect() as conn:
        platform = [float(x) for (x,) in conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM finished_at - started_at) FROM dispatch_attempt WHERE finished_at IS NOT NULL"))]
        publish = [float(x) for (x,) in conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM sent_at - created_at) FROM task_event_outbox WHERE sent_at IS NOT NULL"))]
        consume = [float(x) for (x,) in conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM p.processed_at - o.sent_at) FROM processed_event p "
            "JOIN task_event_outbox o ON o.id = p.event_id WHERE o.sent_at IS NOT NULL"))]
        report = [float(x) for (x,) in conn.execute(text(
            "SELECT EXTRACT(EPOCH FROM uploaded_at - created_at) FROM task_report WHERE uploaded_at IS NOT NULL"))]
        counts: dict[str, int] = dict(conn.execute(text(
            "SELECT 'sent', count(*) FROM task_event_outbox WHERE status = 'SENT' UNION ALL "
            "SELECT 'attempts', count(*) FROM dispatch_attempt UNION ALL "
            "SELECT 'processed', count(*) FROM processed_event UNION ALL "
            "SELECT 'platform_events', count(*) FROM platform_event UNION ALL "
            "SELECT 'reports', count(*) FROM task_report WHERE status = 'UPLOADED'")).all())
    return {
        "platform_call": {**distribution(platform, 1000.0), "source": "dispatch_attempt finished_at - started_at: the "
                          "platform create call plus the attempt's write-back transaction"},
        "outbox_publish_latency": {**distribution(publish, 1000.0), "source": "outbox sent_at - created_at (queueing + "
                                   "publish; not a pure service time)"},
        "consume_latency": {**distribution(consume, 1000.0), "source": "processed_at - sent_at: broker delivery + "
                            "handler (queueing included)"},
        "report_latency": {**distribution(report, 1000.0), "source": "report uploaded_at - created_at"},
        "_counts": {k: int(v) for k, v in counts.items()},
    }


PLATFORM_CALLS = ("get_device", "create_flight")  # the dispatcher's calls the capacity model charges one by one


def platform_call_times(ops: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """``platform_<method>`` -> the dispatcher's own platform call latency (ms), from each invoke/ok pair of the merged
    history (process, method, task, try): the call alone, where ``platform_call`` (dispatch_attempt started_at to
    finished_at) also holds the attempt's transactions. ``ops``: History ops or the dicts of history.jsonl."""
    started: dict[tuple[Any, ...], float] = {}
    out: dict[str, list[float]] = {}
    for op in ops:
        get: Callable[[str], Any] = op.get if isinstance(op, dict) else functools.partial(getattr, op)
        f = get("f")
        if f not in PLATFORM_CALLS:
            continue
        value = get("value") or {}
        key = (get("process"), f, value.get("task_id"), value.get("try"))
        if get("type") == "invoke":
            started[key] = float(get("time"))
        elif get("type") == "ok" and key in started:
            out.setdefault(f, []).append(float(get("time")) - started.pop(key))
    return {f"platform_{f}": {**distribution(v, 1000.0), "source": f"history: {f} invoke to ok, per call"}
            for f, v in out.items()}


def cpu_service_times(cpu_seconds: dict[str, float], counts: dict[str, int], api_requests: int,
                      db_commits: int, webhook_posts: int | None = None) -> dict[str, dict[str, Any]]:
    """CPU demand per unit of work: a process group's CPU seconds over the run divided by the work it did.
    Lower bounds (CPU of processes that exited between samples is lost). ``webhook_posts``: the platform's webhook
    requests as the simulator logged them; without it they are estimated as 10 events each."""

    def per(group_prefix: str, work: int, source: str) -> dict[str, Any]:
        secs = sum(v for k, v in cpu_seconds.items() if k == group_prefix or k.startswith(group_prefix + "-"))
        return {"mean": round(secs * 1000.0 / work, 3) if work else None, "n": work, "cpu_s": round(secs, 2),
                "source": source}

    return {
        "api_cpu_per_request": (
            per("api", api_requests + counts.get("platform_events", 0) // 10,
                "gunicorn CPU / (client requests + webhook events/10 as a rough batch count)") if webhook_posts is None
            else per("api", api_requests + webhook_posts,
                     "gunicorn CPU / (client requests + the platform's webhook requests, the simulator's log)")),
        "publisher_per_message": per("publisher", counts.get("sent", 0),
                                     "CPU demand: publisher CPU / outbox rows SENT"),
        "dispatcher_per_task": per("dispatcher", counts.get("attempts", 0),
                                   "CPU demand: dispatchers' CPU / dispatch attempts (includes cancels handled)"),
        "postgres_cpu_per_commit": per("postgres", db_commits, "PostgreSQL CPU / xact_commit delta"),
    }


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


def confirm_p99_for_slo(endpoints: dict[str, Any], latency: dict[str, Any] | None) -> tuple[float | None, int, str]:
    """(p99 ms, samples, source) of the confirm latency the SLO is judged on. The HDR histograms when the run has
    them: full resolution (Locust rounds its percentiles to 2 significant figures, which can flip a verdict near
    the target), and in the open model the *corrected* latency, from each request's intended send time: what a
    user arriving on the schedule waited, slow periods included (the raw one hides them, coordinated omission).
    Without histograms, Locust's figure."""
    hdr = ((latency or {}).get("endpoints") or {}).get(CONFIRM)
    if hdr:
        kind = "corrected" if (latency or {}).get("mode") == "open" else "raw"
        figures = hdr.get(kind) or {}
        if figures.get("n"):
            return figures.get("p99_ms"), figures["n"], f"HDR {kind} ({latency.get('mode')} model)"  # type: ignore[union-attr]
    confirm = endpoints.get(CONFIRM, {})
    return confirm.get("p99_ms"), confirm.get("requests", 0), "Locust (rounded)"


def slo_verdicts(profile_slo: dict[str, float], endpoints: dict[str, Any], life: dict[str, Any],
                 errors: dict[str, Any], invariants: dict[str, str], latency: dict[str, Any] | None = None
                 ) -> list[dict[str, Any]]:
    p99, n, source = confirm_p99_for_slo(endpoints, latency)
    exec_p99 = life.get("executing", {}).get("p99")
    rate = errors.get("error_rate_excluding_faults")
    violated = sorted(k for k, v in invariants.items() if v == "violated")
    rows = [
        {"name": "confirm_p99_ms", "target": f"< {profile_slo['confirm_p99_ms']:g} ms", "measured": p99,
         "held": p99 is not None and p99 < profile_slo["confirm_p99_ms"], "n": n, "source": source},
        {"name": "confirm_to_executing_p99_s", "target": f"< {profile_slo['confirm_to_executing_p99_s']:g} s",
         "measured": round(exec_p99 / 1000.0, 3) if exec_p99 is not None else None,
         "held": exec_p99 is not None and exec_p99 / 1000.0 < profile_slo["confirm_to_executing_p99_s"],
         "n": life.get("executing", {}).get("n", 0)},
        {"name": "invariants", "target": "no violation", "measured": ", ".join(violated) or "none violated",
         "held": not violated},
        {"name": "error_rate", "target": f"< {profile_slo['error_rate_max']:g} (excluding injected faults)",
         "measured": round(rate, 6) if rate is not None else None,
         "held": rate is not None and rate < profile_slo["error_rate_max"], "n": errors.get("requests_outside_faults")},
    ]
    return rows


def backlog(series: dict[str, Any], windows: list[dict[str, Any]], load_end: float) -> dict[str, Any] | None:
    """Backlog = outbox depth + unsettled tasks. Peak from the first fault's start; drain time from the last
    fault's end until outbox depth, consumer lag and unsettled tasks are back at or below their pre-fault
    95th percentiles (the steady state before the fault)."""
    if not windows:
        return None
    t = series["t"]
    depth = [v or 0 for v in series["outbox_depth"]]
    lag = [v or 0 for v in series["consumer_lag"]]
    unsettled = [v or 0 for v in series["unsettled"]]
    start = min(w["start"] for w in windows)
    end = max(w["end"] if w["end"] is not None else load_end for w in windows)
    pre = [i for i, x in enumerate(t) if start - 60.0 <= x < start]
    base = {k: (percentile([s[i] for i in pre], 95) or 0) for k, s in
            (("outbox_depth", depth), ("consumer_lag", lag), ("unsettled", unsettled))}
    after = [i for i, x in enumerate(t) if x >= start]
    if not after:
        return {"peak": None, "drain_s": None, "baseline": base}
    peak_i = max(after, key=lambda i: depth[i] + unsettled[i])
    drained = next((t[i] for i in after if t[i] >= end and depth[i] <= base["outbox_depth"]
                    and lag[i] <= base["consumer_lag"] and unsettled[i] <= base["unsettled"]), None)
    return {"peak": depth[peak_i] + unsettled[peak_i], "peak_outbox_depth": max(depth[i] for i in after),
            "peak_unsettled": max(unsettled[i] for i in after), "peak_consumer_lag": max(lag[i] for i in after),
            "peak_at": t[peak_i], "baseline": base, "fault_end": end,
            "drain_s": round(drained - end, 2) if drained is not None else None,
            "drained": drained is not None}


TRAILING_S = 10.0  # the throughput series' window
PRE_FAULT_S = 30.0  # the steady state a fault's recovery is measured against
DUPLICATE_INVARIANTS = ("I1", "I2", "I6")  # two flights for a task, two tasks for a key, an event taking effect twice


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


def _p99_back(starts: list[float], p99: list[float | None], step: float, end: float, load_end: float,
              slo_ms: float) -> tuple[float | None, int]:
    """(seconds from ``end`` until the p99 holds ``slo_ms`` in every later interval, intervals over it after the
    first one under it); intervals without a value are skipped."""
    after = [(s0, v) for s0, v in zip(starts, p99, strict=False)
             if s0 + step > end and s0 <= load_end and v is not None]
    back, first_under, relapses = None, None, 0
    for s0, v in after:
        if v < slo_ms:
            back = s0 if back is None else back
            first_under = s0 if first_under is None else first_under
        else:
            back = None
            relapses += first_under is not None
    return (None if back is None else max(0.0, back - end)), relapses


def recovery(series: dict[str, Any], requests: list[dict[str, Any]], window: dict[str, Any] | None, load_end: float,
             *, steady_from: float, latency: dict[str, Any], slo: dict[str, float], grace_s: float,
             duplicates: dict[str, int], backlog_figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """Every recovery figure of one fault under load (issue 13), from the run's own series:

    - throughput: the clients' answers/s and the pipeline's published events/s (trailing 10 s), each against its
      median over the 30 s before the fault (after the ramp): the lowest in the fault and the time from the
      fault's end until it is back within 5% (None: not while the load ran);
    - p99: from the fault's end until the confirm's corrected p99 (per 10 s interval, loadtests.latency) is back
      under the SLO *for good*: the first interval from which every later one with confirms holds it (0 when the
      interval holding the fault's end already does; None: not while the load ran); ``confirm_p99_relapses``
      counts the intervals over the SLO after the first one under it (a p99 of ~10 samples dips and rises);
    - backlog peak and drain (``backlog_figures``, analysis.backlog);
    - requests in the window (plus ``grace_s``): sent, failed, refused (answered 4xx/5xx), by code;
    - duplicate effects: violations of I1, I2, I6 (must be 0);
    - the error budget the fault consumed: failed requests in the window over the run's budget (the SLO's error
      rate times every request of the run); above 1, the fault alone spent more than the whole run may."""
    if window is None or window.get("start") is None:
        return None
    start, end = float(window["start"]), float(window["end"] if window.get("end") is not None else load_end)
    t = series["t"]
    rates = trailing_rates(series, requests)
    inside = [r for r in requests if in_windows(r["t"], [window], grace_s)]
    by_code: dict[str, int] = {}
    for r in inside:
        if r["failed"] or r["status"] >= 400:
            key = r.get("code") or ("CONNECTION_ERROR" if r["status"] == 0 else f"HTTP_{r['status']}")
            by_code[key] = by_code.get(key, 0) + 1
    failed = sum(1 for r in inside if r["failed"])
    budget = slo.get("error_rate_max", 0.0) * len(requests)
    per = ((latency.get("series") or {}).get("endpoints") or {}).get(CONFIRM) or {}
    starts = (latency.get("series") or {}).get("t") or []
    step = float(latency.get("interval_s") or 10.0)
    p99_back, relapses = _p99_back(starts, per.get("corrected_p99_ms") or [], step, end, load_end,
                                   slo["confirm_p99_ms"])
    b = backlog_figures or {}
    return {
        "fault": window.get("fault"), "start_s": start, "end_s": end, "window_s": round(end - start, 2),
        "throughput": {k: throughput_recovery(t, v, start, end, load_end, steady_from) for k, v in rates.items()},
        "confirm_p99_recover_s": None if p99_back is None else round(p99_back, 2),
        "confirm_p99_relapses": relapses,
        "confirm_p99_slo_ms": slo["confirm_p99_ms"],
        "backlog_peak": b.get("peak"), "drain_s": b.get("drain_s"),
        "requests_in_window": len(inside), "failed_in_window": failed,
        "refused_in_window": sum(1 for r in inside if r["status"] >= 400), "errors_in_window_by_code": by_code,
        "duplicate_effects": duplicates, "duplicates_total": sum(duplicates.values()),
        "error_budget": {"budget_requests": round(budget, 3), "spent_by_fault": failed,
                         "fraction": round(failed / budget, 3) if budget else None},
        "grace_s": grace_s,
    }


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


def capacity_json(load: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, dict[str, Any]] = {}

    def put(name: str, value: Any, kind: str, ci: Any = None) -> None:
        if value is not None:
            figures[name] = {"value": value, "kind": kind} | ({"ci": list(ci)} if ci else {})

    for name, e in load["endpoints"].items():
        if name == "Aggregated":
            continue
        put(f"endpoint.{name}.rps", e.get("rps"), "throughput")
        for q in ("p50_ms", "p95_ms", "p99_ms"):
            put(f"endpoint.{name}.{q}", e.get(q), "latency_ms")
    for stage, d in load["lifecycle_ms"].items():
        for q in ("p50", "p95", "p99"):
            put(f"lifecycle.confirm_to_{stage}.{q}_ms", d.get(q), "lifecycle_ms", d.get(f"{q}_ci"))
    put("errors.error_rate_excluding_faults", (load.get("errors") or {}).get("error_rate_excluding_faults"),
        "error_rate")
    for name, d in (load.get("service_times_ms") or {}).items():
        if "cpu_s" in d:  # CPU demand per unit of work
            put(f"service.{name}.mean_ms", d.get("mean"), "cpu_ms")
    pg = load.get("pgbench") or {}
    put("pgbench.tps", pg.get("tps"), "throughput")
    put("confirm_capacity.rps", (load.get("confirm_capacity") or {}).get("rps"), "throughput")
    put("pgbench.capacity_ratio", pg.get("capacity_ratio"), "ratio")
    if load.get("backlog"):
        put("backlog.drain_s", load["backlog"].get("drain_s"), "backlog_s")
    _recovery_figures(load.get("recovery") or {}, put)
    for name, e in ((load.get("latency") or {}).get("endpoints") or {}).items():
        for kind in ("raw", "corrected"):
            for q in ("p50", "p95", "p99"):
                put(f"latency.{name}.{kind}.{q}_ms", e[kind].get(f"{q}_ms"), "latency_ms", e[kind].get(f"{q}_ci"))
    sat = load.get("saturation") or {}
    put("saturation.max_multiple_held", sat.get("max_multiple_held"), "multiple")
    return {
        "schema": "sortie.capacity/1",
        "profile": load["profile"], "multiple": load["multiple"], "duration_s": load["duration_s"],
        "stack": load["stack"], "fault": load.get("fault"), "machine": load.get("machine"),
        "workers": load.get("workers"), "figures": dict(sorted(figures.items())),
        "slo": {s["name"]: {"held": s["held"], "measured": s["measured"], "target": s["target"]}
                for s in load.get("slo") or []},
        "invariants": load.get("invariants") or {}, "pgbench_ratio": pg.get("capacity_ratio"),
        "saturation": {k: sat.get(k) for k in ("max_multiple_held", "failed_multiple", "bottleneck")} if sat else None,
        "recovery": load.get("recovery"),
        "tolerances": TOLERANCES,
    }


def _recovery_figures(rec: dict[str, Any], put: Any) -> None:
    """A fault's recovery figures (analysis.recovery), when the run had one."""
    if not rec:
        return
    for k, v in rec["throughput"].items():
        put(f"recovery.{k}.recover_s", v.get("recover_s"), "recovery_s")
    put("recovery.confirm_p99_recover_s", rec.get("confirm_p99_recover_s"), "recovery_s")
    put("recovery.backlog_peak", rec.get("backlog_peak"), "count")
    put("recovery.failed_in_window", rec.get("failed_in_window"), "count")
    put("recovery.duplicates_total", rec.get("duplicates_total"), "duplicates")
    put("recovery.error_budget_fraction", rec["error_budget"].get("fraction"), "budget_fraction")


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
