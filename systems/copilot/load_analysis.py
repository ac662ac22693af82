"""The Copilot's figures of a load run (the generic ones are loadtests.analysis): its confirm SLOs, the lifecycle
from confirm to EXECUTING in its audit log, the platform's webhooks, its service times and CPU per unit of work, its
backlog and a fault's recovery, and capacity.json, the figures a baseline compares. Every number comes from the
run's measurements."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine, text

from loadtests.analysis import (
    TOLERANCES,
    distribution,
    endpoints_from_requests,
    in_windows,
    throughput_recovery,
    trailing_rates,
)
from loadtests.quantiles import percentile

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


DUPLICATE_INVARIANTS = ("I1", "I2", "I6")  # two flights for a task, two tasks for a key, an event taking effect twice


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
    - backlog peak and drain (``backlog_figures``, load_analysis.backlog);
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
    """A fault's recovery figures (load_analysis.recovery), when the run had one."""
    if not rec:
        return
    for k, v in rec["throughput"].items():
        put(f"recovery.{k}.recover_s", v.get("recover_s"), "recovery_s")
    put("recovery.confirm_p99_recover_s", rec.get("confirm_p99_recover_s"), "recovery_s")
    put("recovery.backlog_peak", rec.get("backlog_peak"), "count")
    put("recovery.failed_in_window", rec.get("failed_in_window"), "count")
    put("recovery.duplicates_total", rec.get("duplicates_total"), "duplicates")
    put("recovery.error_budget_fraction", rec["error_budget"].get("fraction"), "budget_fraction")
