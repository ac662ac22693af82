"""A scenario run beside an older one (``sortie report DIR --baseline OLD``): per scenario, what changed and whether
it regressed.

Verdicts, invariant statuses, task counts and history digests are deterministic for a seed in simulation, so any
change is real: a scenario that passed and now fails, or an invariant that held and is now violated, regresses.
Wall time is the one noisy figure, and a single run has no interval of its own: it regresses only past
``WALL_TOLERANCE`` (and ``WALL_SLACK_S``), which is said beside it."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

WALL_TOLERANCE = 0.5  # a scenario's wall time may rise 50%...
WALL_SLACK_S = 1.0  # ...and a second (shared machines: a short scenario's time is mostly noise)


class BaselineError(ValueError):
    """The baseline is not a run directory with a summary.json."""


def read_summary(path: Path) -> dict[str, Any]:
    file = path / "summary.json" if path.is_dir() else path
    try:
        return dict(json.loads(file.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise BaselineError(f"--baseline {path}: no readable summary.json ({exc})") from None


def compare_runs(now: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario of either run: outcomes, invariant changes, task counts, digests, wall times."""
    old = {s["id"]: s for s in base.get("scenarios") or []}
    new = {s["id"]: s for s in now.get("scenarios") or []}
    rows = []
    for sid in sorted(old.keys() | new.keys()):
        b, n = old.get(sid), new.get(sid)
        if b is None or n is None:
            rows.append({"id": sid, "base": b and b.get("outcome"), "now": n and n.get("outcome"),
                         "change": "only in the baseline" if n is None else "new", "regressed": n is None,
                         "invariants": {}, "digest_same": None, "wall": None})
            continue
        inv = {k: [b["invariants"].get(k), v] for k, v in (n.get("invariants") or {}).items()
               if b.get("invariants", {}).get(k) != v}
        broke = [k for k, (was, is_) in inv.items() if was == "held" and is_ == "violated"]
        wall_b, wall_n = float(b.get("wall_seconds") or 0.0), float(n.get("wall_seconds") or 0.0)
        slower = wall_n > wall_b * (1 + WALL_TOLERANCE) + WALL_SLACK_S
        counts = {k: [b.get("task_counts", {}).get(k), v] for k, v in (n.get("task_counts") or {}).items()
                  if b.get("task_counts", {}).get(k) != v}
        rows.append({
            "id": sid, "base": b.get("outcome"), "now": n.get("outcome"),
            "regressed": bool((b.get("passed") and not n.get("passed")) or broke or slower),
            "invariants": inv, "broken": broke, "task_counts": counts,
            "digest_same": b.get("history_digest") == n.get("history_digest"),
            "wall": {"base": wall_b, "now": wall_n, "regressed": slower,
                     "allowed": round(wall_b * (1 + WALL_TOLERANCE) + WALL_SLACK_S, 3)},
            "change": "same" if b.get("outcome") == n.get("outcome") else f"{b.get('outcome')} → {n.get('outcome')}"})
    return rows


def section(rows: list[dict[str, Any]], base_path: Path, base: dict[str, Any], plot_svg: str) -> str:
    e = html.escape
    body = []
    for r in rows:
        inv = ", ".join(f"{k} {was}→{is_}" for k, (was, is_) in r["invariants"].items()) or "–"
        counts = ", ".join(f"{k} {was}→{is_}" for k, (was, is_) in (r.get("task_counts") or {}).items()) or "–"
        w = r.get("wall")
        wall = "–" if w is None else (f"{w['base']:.2f} → {w['now']:.2f} s (allowed ≤ {w['allowed']:.2f}; "
                                      f"{'slower' if w['regressed'] else 'ok'})")
        digest = "–" if r["digest_same"] is None else "same" if r["digest_same"] else "changed"
        verdict = '<td class="fail">regressed</td>' if r["regressed"] else "<td>ok</td>"
        body.append(f"<tr><td>{e(r['id'])}</td><td>{e(str(r['base']))}</td><td>{e(str(r['now']))}</td>"
                    f"<td>{e(inv)}</td><td>{e(counts)}</td><td>{digest}</td><td>{e(wall)}</td>{verdict}</tr>")
    head = ("<tr><th>scenario</th><th>baseline</th><th>this run</th><th>invariants changed</th>"
            "<th>task counts changed</th><th>history</th><th>wall time</th><th>verdict</th></tr>")
    regressed = sum(1 for r in rows if r["regressed"])
    meta = f"seed {base.get('seed', '?')}, {base.get('shell', '?')}, {base.get('system', '?')}"
    return (f'<section id="baseline"><h2>Against the baseline</h2><p class="meta">Baseline {e(str(base_path))} '
            f"({e(meta)}). {regressed} of {len(rows)} scenarios regressed: a pass turned into a fail, an invariant "
            f"that held is violated, or the wall time rose past {WALL_TOLERANCE:.0%} and {WALL_SLACK_S:g} s (the "
            f"one noisy figure; verdicts, counts and digests are deterministic for a seed).</p>"
            f'<table class="baseline">{head}{"".join(body)}</table>{plot_svg}</section>')
