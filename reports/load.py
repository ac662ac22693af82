"""DIR/load.html for a system's load run from its DIR/load.json, whatever the system, from the fields every such
file has: ``slo`` rows, ``endpoints`` (with ``over_time`` percentiles), ``series`` (``t`` and named columns),
``faults`` windows (shaded on every plot), ``invariants``, ``recovery`` and ``assumptions``. (The Copilot's load
has its own capacity report too, with its model: systems/copilot/capacity_report.py.)"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from reports import plots


def _plots(load: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faults = [f for f in load.get("faults") or [] if f.get("start") is not None]
    out = []
    s = load.get("series") or {}
    for column in [c for c in s if c != "t"]:
        fig, ax = plt.subplots(figsize=(7, 2.4))
        ax.plot(s["t"], [v if v is not None else float("nan") for v in s[column]], lw=1.2)
        plots.shade_faults(ax, faults)
        ax.set_xlabel("s into the run")
        ax.set_ylabel(column)
        if faults:
            ax.legend(loc="upper right", fontsize=7)
        out.append(plots.figure("series", column.replace("_", " "), plots.svg(fig)))
    for name, e in (load.get("endpoints") or {}).items():
        points = e.get("over_time") or []
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(7, 2.4))
        t = [p["t"] for p in points]
        for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("corrected_p99_ms", "p99 from intended send")):
            ax.plot(t, [p.get(key) if p.get(key) is not None else float("nan") for p in points], lw=1.2, label=label)
        plots.shade_faults(ax, faults)
        ax.set_xlabel("s into the run")
        ax.set_ylabel("ms")
        ax.legend(loc="upper right", fontsize=7)
        out.append(plots.figure("latency", f"{name}: latency per 10 s", plots.svg(fig)))
    return out


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, list | dict):
        return json.dumps(v)
    return "" if v is None else str(v)


def render(load: dict[str, Any]) -> str:
    title = f"Load: {load.get('system', '')} {load.get('profile', '')}, {load.get('duration_s', 0):g} s"
    endpoints = [{"endpoint": k, **{c: v for c, v in e.items() if c != "over_time"}}
                 for k, e in (load.get("endpoints") or {}).items()]
    parts = [f"<h1>{html.escape(title)}</h1>",
             "<h2>SLOs and invariants</h2>", _table(load.get("slo") or [], ["name", "target", "measured", "held", "n"]),
             "<h2>Endpoints</h2>",
             _table(endpoints, ["endpoint", "requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "p99_ci_ms",
                                "corrected_p50_ms", "corrected_p99_ms", "corrected_p99_ci_ms", "max_ms"]),
             "<p>Latency is measured from the actual send and, as <em>corrected</em>, from the arrival's intended "
             "send time (open arrivals: the difference is time the client fell behind).</p>"]
    completion = [{"figure": name, **d} for name, d in (load.get("completion") or {}).items()
                  if isinstance(d, dict) and "n" in d]
    if completion:  # a system that measures completion (the job system's jobs and missions), faults in and out
        parts += ["<h2>Completion, seconds</h2>", _table(completion, ["figure", "n", "p50", "p95", "p99", "max"])]
    if load.get("recovery"):
        parts += ["<h2>Fault recovery</h2>", _table([{"fault": f.get("fault"), "start": f.get("start"),
                                                       "end": f.get("end"), **load["recovery"]}
                                                      for f in load.get("faults") or []][:1],
                                                     ["fault", "start", "end", *load["recovery"]])]
    parts += ["<h2>Over time</h2>", *_plots(load),
              "<h2>Invariants</h2>", _table([{"invariant": k, "status": v} for k, v in
                                             (load.get("invariants") or {}).items()], ["invariant", "status"]),
              "<h2>Counts</h2>", _table([load.get("counts") or {}], list(load.get("counts") or {})),
              "<h2>Assumptions</h2><ul>" + "".join(f"<li>{html.escape(a)}</li>" for a in load.get("assumptions") or [])
              + "</ul>"]
    style = ("body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}"
             "table{border-collapse:collapse;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f4f4f4}"
             "figure{margin:1em 0}figcaption{font-weight:600}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


def write_load_report(out_dir: Path) -> Path:
    load = json.loads((Path(out_dir) / "load.json").read_text())
    path = Path(out_dir) / "load.html"
    path.write_text(render(load))
    return path
