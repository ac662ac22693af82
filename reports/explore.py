"""explore.html: one self-contained page (the same style and policy as report.html) for a `sortie explore`
directory: the runs, the coverage targets, and each shrunk failure with its schedule, its repro line and the
timeline of the shrunk run (simulated again here: it is deterministic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

from reports.html import CHART_RC, CSP, CSS, _e, analyse, timeline_svg
from reports.states import task_states
from scenarios.systems import DEFAULT_SYSTEM

NAME = "explore.html"


def _coverage_table(body: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr><td><code>{_e(name)}</code></td><td class="{"HELD" if c["runs_reached"] else "VIOLATED"}">'
        f'{c["runs_reached"]}</td><td>{c["hits"]}</td><td>{_e(c["doc"])}</td></tr>'
        for name, c in body["coverage"].items())
    note = "" if body["coverage_checked"] else \
        '<p class="note">Fewer than 500 runs: an unreached target is reported, not failed.</p>'
    return ("<table><thead><tr><th>target</th><th>runs that reached it</th><th>hits</th><th>what it means</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>{note}")


def _timeline(out: Path, f: dict[str, Any]) -> str:
    from scenarios.incident import load_incident
    from scenarios.runner import simulate

    path = out / "failures" / f"{f['name']}.yaml"
    if not path.exists():
        return f'<p class="note missing">{_e(path)} is missing: no timeline.</p>'
    result = simulate(load_incident(path), f["seed"], inject_bug=f["bug"])
    flagged = {str(v.task_id) for verdict in result.verdicts if verdict.invariant == f["invariant"]
               for v in verdict.violations if v.task_id}
    a = analyse(result.history, end_time=result.virtual_s)
    with matplotlib.rc_context(CHART_RC):
        svg, note = timeline_svg(f["name"], a, task_states(result), flagged)
    extra = f' <span class="note">{_e(note)}</span>' if note else ""
    return (f'<figure class="timeline" id="timeline-{_e(f["name"])}">{svg}<figcaption>Timeline of the shrunk run: '
            f"operations by process, task states, fault windows shaded; the tasks that violate "
            f"{_e(f['invariant'])} are flagged.{extra}</figcaption></figure>")


def _failure(out: Path, f: dict[str, Any], body: dict[str, Any]) -> str:
    shrunk, original, unit = f["shrunk"], f["original"], body.get("size_unit", "confirms")
    system = body.get("system", DEFAULT_SYSTEM)
    violations = "".join(f"<li>{_e(v['message'])}</li>" for v in f["violations"])
    return (f'<section class="scenario" id="failure-{_e(f["name"])}"><h2>{_e(f["invariant"])} violated '
            f'<span class="fail">(run {f["run"]})</span></h2>'
            f'<p class="meta">shrunk from {original["faults"]} fault(s) and {original["size"]} {unit} to '
            f'{shrunk["faults"]} fault(s) ({_e(", ".join(shrunk["fault_kinds"]) or "none")}), {shrunk["size"]} '
            f'{unit}, {shrunk["operations"]} operations, in {f["shrink_steps"]} shrinking steps '
            f'(stopped: {_e(f["shrink_stopped"])})</p>'
            f'<p>Repro: <code>sortie simulate {_e(out / "failures" / (f["name"] + ".yaml"))} --seed {f["seed"]}'
            f'{" --inject-bug " + _e(f["bug"]) if f["bug"] else ""}'
            f'{" --system " + _e(system) if system != DEFAULT_SYSTEM else ""}'
            f'</code> (commit <code>{_e(f["commit"])}</code>)</p>'
            f"<ul>{violations}</ul><details><summary>The shrunk schedule</summary><pre>{_e(f['incident'])}</pre>"
            f"</details>{_timeline(out, f)}</section>")


def render(out: Path, body: dict[str, Any]) -> str:
    t = body["timings"]
    ok = body["exit_code"] == 0
    bug = body["inject_bug"]
    verdict = (f"bug {bug} {'found' if body['failures'] else 'NOT found'}" if bug else
               "PASS: every invariant held" if ok else "FAIL")
    title = (f"Sortie explore — {body.get('system', DEFAULT_SYSTEM)}, seed {body['seed']}"
             + (f", bug {bug}" if bug else ""))
    head = (f"<header><h1>{_e(title)}</h1><p class=\"meta\">{_e(out.resolve())} · {body['runs']} of "
            f"{body['runs_requested']} runs · {body['failing_runs']} failing · runs to first failure "
            f"{_e(body['runs_to_first_failure'])} · {t['workers']} worker(s) · wall {t['wall_s']} s · "
            f"{_e(t['runs_per_cpu_minute'])} runs per CPU-minute · peak {t['peak_rss_mb_per_worker']} MB per worker"
            + (f" · stopped early: {_e(body['interrupted'])}" if body["interrupted"] else "") + "</p>"
            f'<p id="verdict" class="{"pass" if ok else "fail"}">{_e(verdict)}</p></header>')
    violated = "".join(f"<tr><td>{_e(k)}</td><td>{v}</td></tr>" for k, v in body["violated"].items())
    parts = [head, "<h2>Coverage targets</h2>", _coverage_table(body)]
    if violated:
        parts.append("<h2>Invariants violated (runs)</h2><table><tbody>" + violated + "</tbody></table>")
    parts += [_failure(out, f, body) for f in body["failures"]]
    if body["errors"]:
        parts.append("<h2>Harness errors</h2>" + "".join(
            f"<h3>run {e['run']} (seed {e['seed']})</h3><pre>{_e(e['error'])}</pre>" for e in body["errors"]))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def write_explore_report(out: Path, body: dict[str, Any]) -> Path:
    path = out / NAME
    path.write_text(render(out, body), encoding="utf-8")
    return path
