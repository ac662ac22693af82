"""``DIR/report.html``: one self-contained page for a run directory written by ``sortie simulate`` or
``sortie run``, rebuilt at any time from the stored files (``sortie report DIR``).

Inputs: ``summary.json`` (verdicts), ``histories/ID.jsonl`` (operations and fault windows) and
``states/ID.json`` (audited task transitions, see ``reports.states``). Output: the scenario table, then per
scenario an invariant table, a timeline of operations and task states, and Jepsen-style latency and
throughput plots, every chart with the fault windows shaded.

Nothing is fetched when the page is viewed: the charts are inline SVG drawn by matplotlib (its object API:
no pyplot, no GUI backend, no JavaScript), the styles are inline, and a Content-Security-Policy forbids every
external load, so a page that tried one would fail loudly in the browser's console rather than quietly
depend on the network.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np  # matplotlib's own dependency
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullLocator
from matplotlib.typing import RcKeyType

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, FaultWindow, History, Op
from reports.states import read_task_states

REPORT_NAME = "report.html"
# Above this many operations a history's charts are downsampled (every failed or indeterminate op is kept).
DOWNSAMPLE_ABOVE = 20_000
MAX_POINTS = 6_000  # latency points / timeline bars drawn per chart once downsampled
MAX_LANES = 30  # process lanes in the timeline
MAX_TASK_ROWS = 60  # task rows in the timeline
RASTERIZE_ABOVE = 1_500  # more marks than this in one chart: embed them as a bitmap inside the SVG

OUTCOME_COLOURS = {OK: "#2ca02c", FAIL: "#d62728", INFO: "#ff7f0e"}
OUTCOME_LABELS = {OK: "ok", FAIL: "fail", INFO: "info (indeterminate)"}
STATUS_COLOURS = {
    "CREATED": "#c7c7c7", "QUEUED": "#9edae5", "VALIDATING": "#17becf", "DISPATCHING": "#1f77b4",
    "EXECUTING": "#aec7e8", "COMPLETED": "#2ca02c", "DISPATCH_FAILED": "#ff9896", "FAILED": "#d62728",
    "CANCEL_PENDING": "#c5b0d5", "CANCELLED": "#9467bd", "MANUAL_REVIEW": "#ff7f0e",
}
FAULT_COLOURS = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#17becf", "#1f77b4"]
# Text stays text (the browser's sans-serif font), which keeps every label small and searchable.
CHART_RC: dict[RcKeyType, Any] = {"font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"],
                                  "svg.fonttype": "none"}
MARKERS = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*", "h", "p"]


class ReportError(Exception):
    """The run directory cannot be turned into a report (no summary.json, unreadable files)."""


# ---------------------------------------------------------------------------- history analysis


@dataclass
class Pair:
    """A completed client operation: its invocation and the ok / fail / info that answered it."""

    process: str
    f: str
    start: float
    end: float
    outcome: str
    invoke_index: int
    complete_index: int

    @property
    def latency(self) -> float:
        return max(self.end - self.start, 0.0)


@dataclass
class Analysis:
    pairs: list[Pair] = field(default_factory=list)
    events: list[Op] = field(default_factory=list)  # completions with no invocation (deliveries, ...)
    open_invokes: list[Op] = field(default_factory=list)  # invocations never answered
    windows: list[FaultWindow] = field(default_factory=list)
    t_end: float = 0.0
    op_count: int = 0


def analyse(history: History, end_time: float | None = None) -> Analysis:
    """Pair each invocation with its completion by (process, f), first in first out, as Jepsen does."""
    a = Analysis(windows=history.fault_windows(), op_count=len(history.ops))
    pending: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.process == NEMESIS:
            continue
        key = (op.process, op.f)
        if op.type == INVOKE:
            pending[key].append(op)
        elif op.type in (OK, FAIL, INFO):
            queue = pending.get(key)
            if queue:
                inv = queue.pop(0)
                a.pairs.append(Pair(op.process, op.f, inv.time, op.time, op.type, inv.index, op.index))
            else:
                a.events.append(op)
    a.open_invokes = sorted((op for q in pending.values() for op in q), key=lambda o: o.index)
    last = max((op.time for op in history.ops), default=0.0)
    a.t_end = max([last, end_time or 0.0] + [w.end or 0.0 for w in a.windows])
    return a


def _downsample(items: list[Any], keep: Any, cap: int) -> list[Any]:
    """Every item ``keep`` selects, plus an even stride over the rest, at most ``cap`` in all (deterministic)."""
    if len(items) <= cap:
        return items
    kept = [x for x in items if keep(x)]
    rest = [x for x in items if not keep(x)]
    room = max(cap - len(kept), 0)
    if room and rest:
        step = len(rest) / room
        rest = [rest[int(i * step)] for i in range(min(room, len(rest)))]
    else:
        rest = []
    return kept[:cap] + rest


# ---------------------------------------------------------------------------- charts


def _svg(fig: Figure, salt: str) -> str:
    """Render a figure to an inline <svg> element. The salt keeps matplotlib's generated element ids (clip
    paths) unique across the many figures of one page; no date is written, so a rebuild is byte-stable."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    start = text.find("<svg")
    text = text[start:]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    # Coordinates with two decimals (a hundredth of a point), path data on one line: far fewer bytes.
    text = _ATTRIBUTE.sub(lambda m: '="' + _NUMBER.sub(_round2, " ".join(m.group(1).split())) + '"', text)
    return re.sub(r"\n\s+", "\n", text)


_ATTRIBUTE = re.compile(r'="([^"]*)"')
_NUMBER = re.compile(r"-?\d+\.\d{3,}")


def _round2(m: re.Match[str]) -> str:
    return f"{float(m.group(0)):.2f}"


# Fixed margins in inches (labels on the left, legend on the right): no "tight" layout pass, which would
# draw every figure twice.
LEFT_IN, RIGHT_IN, TOP_IN, BOTTOM_IN, WIDTH_IN = 1.1, 2.0, 0.3, 0.5, 10.0


def _new_figure(height: float) -> Figure:
    fig = Figure(figsize=(WIDTH_IN, height), dpi=90)
    fig.subplots_adjust(left=LEFT_IN / WIDTH_IN, right=1 - RIGHT_IN / WIDTH_IN, top=1 - TOP_IN / height,
                        bottom=BOTTOM_IN / height)
    return fig


# Titles, axis labels and row labels at fixed places: matplotlib would otherwise measure every tick label
# of every axis to place them, which is most of the drawing time.
def _title(ax: Any, text: str) -> None:
    ax.text(0.0, 1.0 + 0.05 / _axes_height_in(ax), text, transform=ax.transAxes, fontsize=9, va="bottom")


def _xlabel(ax: Any, text: str) -> None:
    ax.set_xlabel(text, fontsize=8)
    ax.xaxis.set_label_coords(0.5, -0.3 / _axes_height_in(ax))


def _ylabel(ax: Any, text: str) -> None:
    ax.set_ylabel(text, fontsize=8)
    ax.yaxis.set_label_coords(-0.55 / (ax.get_position().width * ax.figure.get_figwidth()), 0.5)


def _axes_height_in(ax: Any) -> float:
    return max(ax.get_position().height * ax.figure.get_figheight(), 0.1)


def _row_labels(ax: Any, labels: list[str], size: float) -> None:
    """One text per row at the left edge, instead of one tick object (two lines, two texts) per row."""
    ax.set_yticks([])
    trans = ax.get_yaxis_transform()
    for y, label in enumerate(labels):
        ax.text(-0.006, y, label, transform=trans, fontsize=size, ha="right", va="center")


def _fault_colours(windows: Iterable[FaultWindow]) -> dict[str, str]:
    names: list[str] = []
    for w in windows:
        if w.fault not in names:
            names.append(w.fault)
    return {n: FAULT_COLOURS[i % len(FAULT_COLOURS)] for i, n in enumerate(names)}


def _shade_faults(ax: Any, windows: list[FaultWindow], t_end: float, sid: str, kind: str) -> list[Any]:
    """Shade each fault window (an instant fault gets a dashed line); each shading carries the SVG id
    ``fault-<scenario>-<chart>-<n>`` so a reader (or a test) can find it. Returns legend handles."""
    colours = _fault_colours(windows)
    for i, w in enumerate(windows):
        end = t_end if w.end is None else w.end
        gid = f"fault-{sid}-{kind}-{i}"
        if end > w.start:
            artist = ax.axvspan(w.start, end, color=colours[w.fault], alpha=0.14, lw=0, zorder=0)
        else:  # an instant (a fault armed or fired at one moment): a dashed line and a mark above the axes
            artist = ax.axvline(w.start, color=colours[w.fault], alpha=0.8, lw=1.5, ls="--", zorder=0.5)
            ax.plot([w.start], [1.0], marker="v", ms=6, color=colours[w.fault], transform=ax.get_xaxis_transform(),
                    clip_on=False, zorder=4, gid=f"{gid}-mark")
        artist.set_gid(gid)
    return [Patch(facecolor=c, alpha=0.3, label=f"fault: {n}") for n, c in colours.items()]


def _rects(rects: list[tuple[float, float, float]], height: float, colour: str,
           rasterized: bool = False) -> PolyCollection:
    """One collection of bars (x, y-centre, width): a single SVG group however many bars there are."""
    h = height / 2
    verts = [[(x, y - h), (x + w, y - h), (x + w, y + h), (x, y + h)] for x, y, w in rects]
    coll = PolyCollection(verts, facecolors=colour, linewidths=0)
    coll.set_rasterized(rasterized)
    return coll


def _lane_of(processes: list[str]) -> dict[str, str]:
    """Map processes to timeline lanes; collapse client sub-processes (user-3.1 -> user-3), then numbered
    families (user-* , dispatcher-*) when there are still too many lanes."""
    lanes = {p: p for p in processes}
    if len(set(lanes.values())) > MAX_LANES:
        lanes = {p: re.sub(r"(\.\d+)+$", "", p) for p in processes}
    if len(set(lanes.values())) > MAX_LANES:
        lanes = {p: re.sub(r"-\d+(\.\d+)*$", "-*", p) for p in processes}
    return lanes


def _lane_order(lane: str) -> tuple[int, str]:
    rank = 0 if lane == NEMESIS else 2 if lane.startswith("user") else 1
    num = re.sub(r"\d+", lambda m: m.group(0).zfill(6), lane)
    return (rank, num)


def timeline_svg(sid: str, a: Analysis, states: dict[str, Any] | None, flagged: set[str]) -> tuple[str, str]:
    """Operations by process (top) and task states by task (bottom), fault windows shaded on both."""
    processes = sorted({p.process for p in a.pairs} | {o.process for o in a.events}
                       | {o.process for o in a.open_invokes})
    lane_of = _lane_of(processes)
    lanes = sorted(set(lane_of.values()), key=_lane_order)
    lane_y = {name: i for i, name in enumerate(lanes)}
    notes: list[str] = []

    pairs = a.pairs
    if a.op_count > DOWNSAMPLE_ABOVE:
        pairs = _downsample(pairs, lambda p: p.outcome != OK, MAX_POINTS)
        notes.append(f"operations downsampled: {len(pairs)} of {len(a.pairs)} drawn (every fail/info kept)")
    events = a.events if len(a.events) <= MAX_POINTS else _downsample(a.events, lambda o: False, MAX_POINTS)

    rows, segments, total_tasks = _task_rows(states, a.t_end, flagged)
    if states is None:
        notes.append("task states not stored for this run (no states/ file): operations only")
    elif total_tasks > len(rows):
        notes.append(f"task states: {len(rows)} of {total_tasks} tasks shown (tasks with violations first)")

    top_h = 0.6 + 0.2 * max(len(lanes), 1)
    bottom_h = 0.6 + 0.14 * max(len(rows), 1) if rows else 0.0
    fig = _new_figure(top_h + bottom_h + 0.8)
    if rows:
        ax_ops, ax_tasks = fig.subplots(2, 1, sharex=True,
                                        gridspec_kw={"height_ratios": [top_h, bottom_h], "hspace": 0.08})
    else:
        ax_ops, ax_tasks = fig.subplots(1, 1), None
    span = max(a.t_end, 1e-9)
    min_w = span * 0.002
    raster = len(pairs) > RASTERIZE_ABOVE
    bars: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for p in pairs:
        bars[p.outcome].append((p.start, lane_y[lane_of[p.process]], max(p.end - p.start, min_w)))
    for outcome, rects in bars.items():
        ax_ops.add_collection(_rects(rects, 0.7, OUTCOME_COLOURS[outcome], rasterized=raster))
    if events:
        ax_ops.scatter([o.time for o in events], [lane_y[lane_of[o.process]] for o in events], marker="|",
                       s=40, c="#555555", lw=0.8, rasterized=len(events) > RASTERIZE_ABOVE, zorder=3)
    if a.open_invokes:
        ax_ops.scatter([o.time for o in a.open_invokes], [lane_y[lane_of[o.process]] for o in a.open_invokes],
                       marker="x", s=14, c="#7f7f7f", lw=0.8, zorder=3)
    _row_labels(ax_ops, lanes, 7)
    ax_ops.set_ylim(len(lanes) - 0.5, -0.5)
    ax_ops.set_xlim(0, span)
    _title(ax_ops, "operations by process")
    fault_handles = _shade_faults(ax_ops, a.windows, a.t_end, sid, "timeline")
    handles: list[Any] = [Patch(facecolor=OUTCOME_COLOURS[k], label=v) for k, v in OUTCOME_LABELS.items()]
    handles.append(Line2D([], [], color="#555555", marker="|", ls="", label="event (no invocation)"))
    if a.open_invokes:
        handles.append(Line2D([], [], color="#7f7f7f", marker="x", ls="", label="invoked, never answered"))
    ax_ops.legend(handles=handles + fault_handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  frameon=False)

    if ax_tasks is not None:
        by_status: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        for row, (start, end, status) in segments:
            by_status[status].append((start, row, max(end - start, min_w)))
        for status, rects in by_status.items():
            ax_tasks.add_collection(_rects(rects, 0.8, STATUS_COLOURS.get(status, "#7f7f7f")))
        labels = [(("! " if tid in flagged else "") + tid[:8]) for tid in rows]
        _row_labels(ax_tasks, labels, 6)
        ax_tasks.set_ylim(len(rows) - 0.5, -0.5)
        _xlabel(ax_tasks, "seconds (history time)")
        _title(ax_tasks, "task states by task")
        _shade_faults(ax_tasks, a.windows, a.t_end, sid, "tasks")
        present = [s for s in STATUS_COLOURS if s in {st for _, (_, _, st) in segments}]
        ax_tasks.legend(handles=[Patch(facecolor=STATUS_COLOURS[s], label=s) for s in present], fontsize=7,
                        loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        _xlabel(ax_ops, "seconds (history time)")
    for ax in (ax_ops, ax_tasks):
        if ax is not None:
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", color="#eeeeee", lw=0.6)
    return _svg(fig, f"{sid}-timeline"), "; ".join(notes)


def _task_rows(states: dict[str, Any] | None, t_end: float,
               flagged: set[str]) -> tuple[list[str], list[tuple[int, tuple[float, float, str]]], int]:
    """Rows (task ids) and coloured segments (row, (start, end, status)) from the audited transitions."""
    if not states:
        return [], [], 0
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tr in states.get("transitions", []):
        if tr.get("at") is not None:
            by_task[tr["task_id"]].append(tr)
    end = max(t_end, float(states.get("end_time") or 0.0))
    first = {tid: min(t["at"] for t in trs) for tid, trs in by_task.items()}
    ordered = sorted(by_task, key=lambda t: (t not in flagged, first[t], t))
    rows = sorted(ordered[:MAX_TASK_ROWS], key=lambda t: (first[t], t))
    segments: list[tuple[int, tuple[float, float, str]]] = []
    for i, tid in enumerate(rows):
        trs = sorted(by_task[tid], key=lambda t: t["at"])
        for j, tr in enumerate(trs):
            stop = trs[j + 1]["at"] if j + 1 < len(trs) else end
            segments.append((i, (float(tr["at"]), float(stop), str(tr["to"]))))
    return rows, segments, len(by_task)


def latency_svg(sid: str, a: Analysis) -> tuple[str, str]:
    """One point per completed operation at its invocation time: latency (log scale), colour by outcome,
    marker by f; the fault windows shaded."""
    notes = []
    pairs = a.pairs
    if a.op_count > DOWNSAMPLE_ABOVE:
        pairs = _downsample(pairs, lambda p: p.outcome != OK, MAX_POINTS)
        notes.append(f"downsampled: {len(pairs)} of {len(a.pairs)} operations drawn (every fail/info kept)")
    fs = sorted({p.f for p in a.pairs})
    marker = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(fs)}
    fig = _new_figure(3.4)
    ax = fig.subplots()
    raster = len(pairs) > RASTERIZE_ABOVE
    floor = 1e-4
    for f in fs:
        for outcome in (OK, INFO, FAIL):
            pts = [p for p in pairs if p.f == f and p.outcome == outcome]
            if pts:
                ax.scatter([p.start for p in pts], [max(p.latency, floor) for p in pts], s=12,
                           marker=marker[f], c=OUTCOME_COLOURS[outcome], alpha=0.75, lw=0, rasterized=raster,
                           zorder=3)
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(NullLocator())  # decades only: minor log ticks cost many text layouts
    ax.set_xlim(0, max(a.t_end, 1e-9))
    if not a.pairs:
        ax.text(0.5, 0.5, "no completed operations", transform=ax.transAxes, ha="center", va="center")
    _xlabel(ax, "seconds (history time, at invocation)")
    _ylabel(ax, f"latency (s, floor {floor:g})")
    _title(ax, "latency of completed operations")
    ax.tick_params(labelsize=7)
    ax.grid(color="#eeeeee", lw=0.6)
    faults = _shade_faults(ax, a.windows, a.t_end, sid, "latency")
    handles: list[Any] = [Line2D([], [], color=OUTCOME_COLOURS[k], marker="o", ls="", label=v)
                          for k, v in OUTCOME_LABELS.items()]
    handles += [Line2D([], [], color="#333333", marker=marker[f], ls="", label=f) for f in fs]
    ax.legend(handles=handles + faults, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(fig, f"{sid}-latency"), "; ".join(notes)


NICE_BUCKETS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600]


def bucket_width(span: float, buckets: int = 60) -> float:
    target = span / buckets
    return next((w for w in NICE_BUCKETS if w >= target), NICE_BUCKETS[-1])


def throughput_svg(sid: str, a: Analysis) -> tuple[str, str]:
    """Completed operations per second by f, in fixed time buckets (every op counted, never sampled)."""
    times: dict[str, list[float]] = defaultdict(list)
    for p in a.pairs:
        times[p.f].append(p.end)
    for o in a.events:
        times[o.f].append(o.time)
    span = max(a.t_end, 1e-9)
    width = bucket_width(span)
    edges = np.arange(0.0, span + width, width)
    if len(edges) < 2:
        edges = np.array([0.0, width])
    fig = _new_figure(3.0)
    ax = fig.subplots()
    colours = matplotlib.colormaps["tab20"]
    for i, f in enumerate(sorted(times)):
        counts, _ = np.histogram(np.asarray(times[f]), bins=edges)
        ax.stairs(counts / width, edges, label=f, color=colours(i % 20), lw=1.2)
    if not times:
        ax.text(0.5, 0.5, "no completed operations", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlim(0, span)
    _xlabel(ax, f"seconds (history time, {width:g} s buckets)")
    _ylabel(ax, "completions / s")
    _title(ax, "throughput by f")
    ax.tick_params(labelsize=7)
    ax.grid(color="#eeeeee", lw=0.6)
    faults = _shade_faults(ax, a.windows, a.t_end, sid, "throughput")
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + faults, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(fig, f"{sid}-throughput"), ""


# ---------------------------------------------------------------------------- page


CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1250px;color:#222;
  padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .3em;border-top:2px solid #ddd;padding-top:.6em}
h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:13px}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass,.held{background:#e3f5e1;color:#1a5e1a}.fail,.violated{background:#fbe0e0;color:#8b1a1a;font-weight:bold}
.unchecked{background:#f1f1f1;color:#666}.no{background:#fdf0d5;color:#8a5300}
figure{margin:.6em 0 1.2em}figure svg{max-width:100%;height:auto}figcaption{font-size:12px;color:#555}
.meta{color:#555}.note{color:#8a5300}code{font-size:12px}details{margin:.3em 0}
pre{font-size:11px;background:#fafafa;border:1px solid #eee;padding:.4em;overflow-x:auto}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _status_cell(status: str, note: str = "") -> str:
    title = f' title="{_e(note)}"' if note else ""
    return f'<td class="{_e(status)}"{title}>{_e(status)}</td>'


def _unexercised(s: dict[str, Any]) -> str:
    """Fault did not fire, or it fired and the expected recovery was not seen (older summaries: "no")."""
    return str(s.get("not_exercised_kind") or "no")


def _scenario_table(scenarios: list[dict[str, Any]], invariants: list[str]) -> str:
    head = "".join(f"<th>{_e(i)}</th>" for i in invariants)
    out = ['<table id="scenarios"><thead><tr><th>id</th><th>slug</th><th>title</th><th>result</th>'
           '<th>fault fired</th><th>wall s</th><th>virtual s</th>' + head + "</tr></thead><tbody>"]
    for s in scenarios:
        verdicts = {v["invariant"]: v for v in s.get("verdicts", [])}
        fired = ('<td class="held">yes</td>' if s.get("exercised")
                 else f'<td class="no">{_e(_unexercised(s))}: {_e(s.get("not_exercised_reason"))}</td>')
        cells = []
        for inv in invariants:
            v = verdicts.get(inv)
            if v is None:
                cells.append('<td class="absent">-</td>')
                continue
            note = v.get("note", "")
            label = v["status"]
            if v["status"] == "violated":
                label = f"violated ({v.get('violation_count', len(v.get('violations', [])))})"
            title = f' title="{_e(note)}"' if note else ""
            cells.append(f'<td class="{_e(v["status"])}"{title}>{_e(label)}</td>')
        passed = s.get("passed")
        out.append(
            f'<tr data-scenario="{_e(s["id"])}"><td><a href="#scenario-{_e(s["id"])}">{_e(s["id"])}</a></td>'
            f'<td>{_e(s.get("slug"))}</td><td>{_e(s.get("title"))}</td>'
            f'<td class="{"pass" if passed else "fail"}">{"PASS" if passed else "FAIL"}</td>{fired}'
            f'<td class="num">{_e(s.get("wall_seconds"))}</td><td class="num">{_e(s.get("virtual_seconds"))}</td>'
            + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _unchecked_reasons(scenarios: list[dict[str, Any]]) -> str:
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s in scenarios:
        for v in s.get("verdicts", []):
            if v["status"] == "unchecked":
                reasons[(v["invariant"], v.get("note") or "no reason given")].append(s["id"])
    if not reasons:
        return ""
    items = "".join(f"<li><b>{_e(inv)}</b> unchecked in {_e(', '.join(ids))}: {_e(note)}</li>"
                    for (inv, note), ids in sorted(reasons.items(), key=lambda kv: _inv_key(kv[0][0])))
    return f'<section id="unchecked"><h3>Invariants not checked, and why</h3><ul>{items}</ul></section>'


def _inv_key(name: str) -> tuple[int, str]:
    m = re.match(r"I(\d+)$", name)
    return (int(m.group(1)) if m else 999, name)


def _invariant_table(s: dict[str, Any], history: History | None) -> str:
    sid = s["id"]
    rows = []
    for v in s.get("verdicts", []):
        viol = v.get("violations", [])
        count = v.get("violation_count", len(viol))
        if viol:
            items = "".join(
                f"<li>task <code>{_e(x.get('task_id'))}</code>: {_e(x.get('message'))}"
                f" (ops {_e(', '.join(str(i) for i in x.get('ops', [])))})</li>" for x in viol)
            more = f"<li>… {count - len(viol)} more (see summary.json)</li>" if count > len(viol) else ""
            ops_detail = _offending_ops(history, [i for x in viol for i in x.get("ops", [])])
            detail = f"<ul>{items}{more}</ul>{ops_detail}"
        else:
            detail = ""
        rows.append(
            f'<tr data-invariant="{_e(v["invariant"])}"><td>{_e(v["invariant"])}</td><td>{_e(v.get("title"))}</td>'
            f'{_status_cell(v["status"])}<td class="num">{_e(v.get("checked"))}</td>'
            f'<td class="num">{_e(count)}</td><td>{detail}</td><td>{_e(v.get("note"))}</td></tr>')
    return (f'<table class="invariants" id="invariants-{_e(sid)}"><thead><tr><th>invariant</th><th>property</th>'
            "<th>status</th><th>checked</th><th>violations</th><th>offending tasks and operations</th>"
            "<th>note</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _offending_ops(history: History | None, indices: list[int]) -> str:
    if history is None or not indices:
        return ""
    wanted = sorted(set(indices))[:200]
    lines = [json.dumps(history.ops[i].as_json(), sort_keys=True, default=str)
             for i in wanted if 0 <= i < len(history.ops)]
    return f"<details><summary>{len(lines)} operations</summary><pre>{_e(chr(10).join(lines))}</pre></details>"


def _fault_table(sid: str, windows: list[FaultWindow]) -> str:
    if not windows:
        return f'<p class="fault-windows" id="faults-{_e(sid)}">No fault window in this history.</p>'
    rows = "".join(
        f'<tr><td>{_e(w.fault)}</td><td class="num">{w.start:.3f}</td>'
        f'<td class="num">{"open" if w.end is None else f"{w.end:.3f}"}</td>'
        f'<td><code>{_e(json.dumps(w.detail, sort_keys=True, default=str))}</code></td></tr>' for w in windows)
    return (f'<table class="fault-windows" id="faults-{_e(sid)}"><thead><tr><th>fault</th><th>start s</th>'
            f"<th>end s</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table>")


def _flagged_tasks(s: dict[str, Any]) -> set[str]:
    return {str(x["task_id"]) for v in s.get("verdicts", []) for x in v.get("violations", []) if x.get("task_id")}


def _scenario_section(out: Path, s: dict[str, Any]) -> str:
    sid = s["id"]
    passed = s.get("passed")
    parts = [f'<section class="scenario" id="scenario-{_e(sid)}" data-passed="{str(bool(passed)).lower()}">',
             f'<h2>{_e(sid)} <code>{_e(s.get("slug"))}</code> — '
             f'<span class="{"pass" if passed else "fail"}">{"PASS" if passed else "FAIL"}</span></h2>',
             f"<p>{_e(s.get('title'))}</p>"]
    counts = ", ".join(f"{_e(k)} {_e(v)}" for k, v in (s.get("task_counts") or {}).items())
    fired = "yes" if s.get("exercised") else \
        f'<span class="note">{_e(_unexercised(s))}: {_e(s.get("not_exercised_reason"))}</span>'
    path = out / "histories" / f"{sid}.jsonl"
    history: History | None = None
    digest_note = ""
    if path.exists():
        history = History.read_jsonl(path)
        # write_jsonl writes exactly the lines the digest hashes, so the file's own hash is the digest
        if s.get("history_digest") and hashlib.sha256(path.read_bytes()).hexdigest() != s["history_digest"]:
            digest_note = (' <span class="note">the stored history does not match the digest in summary.json '
                           "(files from different runs?)</span>")
    parts.append(f'<p class="meta">seed {_e(s.get("seed"))} · {_e(s.get("operations"))} operations · '
                 f'digest <code>{_e((s.get("history_digest") or "")[:16])}</code>{digest_note} · fault fired: '
                 f'{fired} · tasks: {counts} · wall {_e(s.get("wall_seconds"))} s · virtual '
                 f'{_e(s.get("virtual_seconds"))} s</p>')
    parts.append(_invariant_table(s, history))
    if history is None:
        parts.append(f'<p class="note missing">No stored history ({_e(path.relative_to(out))}): no timeline or '
                     "plots for this scenario.</p></section>")
        return "".join(parts)
    states = read_task_states(out, sid)
    a = analyse(history, end_time=(states or {}).get("end_time"))
    parts.append("<h3>Fault windows</h3>" + _fault_table(sid, a.windows))
    with matplotlib.rc_context(CHART_RC):
        svg, note = timeline_svg(sid, a, states, _flagged_tasks(s))
        parts.append(_figure("timeline", sid, svg, "Timeline: operations by process (bars from invocation to "
                             "answer, coloured by outcome) and task states (audited transitions); fault windows "
                             "shaded.", note))
        svg, note = latency_svg(sid, a)
        parts.append(_figure("plot latency", sid, svg, "Latency: one point per completed operation.", note))
        svg, note = throughput_svg(sid, a)
        parts.append(_figure("plot throughput", sid, svg, "Throughput: completions per second by f.", note))
    parts.append("</section>")
    return "".join(parts)


def _figure(cls: str, sid: str, svg: str, caption: str, note: str) -> str:
    kind = cls.split()[-1]
    extra = f' <span class="note">{_e(note)}</span>' if note else ""
    return (f'<figure class="{cls}" id="{kind}-{_e(sid)}" data-scenario="{_e(sid)}">{svg}'
            f"<figcaption>{_e(caption)}{extra}</figcaption></figure>")


def wall_time_svg(rows: list[dict[str, Any]]) -> str:
    """Each scenario's wall time in the baseline and in this run, side by side."""
    timed = [r for r in rows if r.get("wall")]
    if not timed:
        return ""
    height = 0.9 + 0.18 * len(timed)
    fig = _new_figure(height)
    ax = fig.add_subplot()
    ys = np.arange(len(timed))
    ax.barh(ys - 0.2, [r["wall"]["base"] for r in timed], height=0.4, color="#9ecae1", label="baseline")
    ax.barh(ys + 0.2, [r["wall"]["now"] for r in timed], height=0.4,
            color=["#d62728" if r["wall"]["regressed"] else "#3182bd" for r in timed], label="this run")
    ax.set_ylim(-0.6, len(timed) - 0.4)
    ax.invert_yaxis()
    ax.yaxis.set_major_locator(NullLocator())
    _row_labels(ax, [r["id"] for r in timed], 7)
    _title(ax, "wall seconds per scenario (red: past the tolerance)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return f'<figure class="plot baseline">{_svg(fig, "baseline")}</figure>'


def render_report(out: Path, jobs: int = 1, baseline: Path | None = None) -> str:
    """The report page for run directory ``out``, as a string. ``jobs`` processes draw the scenarios' sections
    (plots are most of the time); the page does not depend on how many. ``baseline``: an older run directory,
    compared scenario by scenario (reports.baseline)."""
    summary_path = out / "summary.json"
    if not summary_path.exists():
        raise ReportError(f"{out} has no summary.json: not a run directory written by `sortie simulate` or "
                          "`sortie run`")
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"cannot read {summary_path}: {e}") from e
    scenarios = summary.get("scenarios")
    if not isinstance(scenarios, list):
        raise ReportError(f"{summary_path} has no scenario list")
    invariants = sorted({v["invariant"] for s in scenarios for v in s.get("verdicts", [])}, key=_inv_key)
    meta = {k: v for k, v in summary.items() if k not in ("scenarios", "passed")}
    passed = summary.get("passed")
    n_pass = sum(1 for s in scenarios if s.get("passed"))
    title = f"Sortie report — {meta.get('shell', 'run')} seed {meta.get('seed', '?')}"
    body = [
        f"<header><h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(out.resolve())} · ' + " · ".join(f"{_e(k)} {_e(v)}" for k, v in meta.items())
        + "</p>",
        f'<p id="verdict" class="{"pass" if passed else "fail"}">{"PASS" if passed else "FAIL"}: '
        f"{n_pass} of {len(scenarios)} scenarios passed</p></header>",
        "<h2>Scenarios</h2>",
        _scenario_table(scenarios, invariants),
        _unchecked_reasons(scenarios),
    ]
    if baseline is not None:
        from reports.baseline import compare_runs, read_summary, section

        base = read_summary(baseline)
        rows = compare_runs(summary, base)
        body.append(section(rows, baseline, base, wall_time_svg(rows)))
    body += _sections(out, scenarios, jobs)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _sections(out: Path, scenarios: list[dict[str, Any]], jobs: int) -> list[str]:
    if jobs <= 1 or len(scenarios) <= 1:
        return [_scenario_section(out, s) for s in scenarios]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(min(jobs, len(scenarios))) as pool:
        return pool.starmap(_scenario_section, [(out, s) for s in scenarios], chunksize=1)


def build_report(out: Path, jobs: int = 1, baseline: Path | None = None) -> Path:
    """Write ``out/report.html`` from the stored run files; returns its path. Raises ReportError."""
    page = render_report(out, jobs, baseline)
    path = out / REPORT_NAME
    path.write_text(page, encoding="utf-8")
    return path
