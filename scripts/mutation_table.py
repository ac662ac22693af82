"""The project's side of scripts/mutation.sh (run with the project's Python; cosmic-ray's side is
scripts/mutation_session.py, in its own venv). Two commands:

  modules TREE SYSTEM OUT [PATH...]   which modules of TREE/reference/SYSTEM/ to mutate (all, or PATH...), and
                                      which are skipped and why: OUT/modules.json (and those to mutate on stdout)
  table OUT [--publish DOCS_DIR] [--earlier DIR...]
                                      the per-module table from OUT/results.json and the system's triaged
                                      equivalents: OUT/table.md and OUT/table.json (and DOCS_DIR/<system>-mutation.*);
                                      a module an earlier session (DIR/results.json) judged more of than OUT's takes
                                      its figures from it, and the page names the commit each module's come from

A system's triaged file, systems/<system>/mutation.yaml, is committed so that it survives reruns:
  skip:        {module path: why it is not mutated}   (pure data or schema modules)
  equivalent:  [{module, operator, occurrence, reason}] or [{module, diff, reason}]
               (diff: the mutant's removed and added lines, "- old" / "+ new", as DIR/survivors.md shows them)
  killed_since: [{module, diff, by}] or [{module, operator, occurrence, by}]: survivors of a published table that
               a checker or scenario added since kills (by: which, and the test that shows it); the table still counts
               them as survivors until a run (or --rejudge) judges them again, and says so beside each
  judges:      {module path or folder/: {command, why, seconds}}: a judge besides the simulated catalogue for the
               modules the simulation does not run (scripts/mutation_coverage.py runs it in the mutated copy)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

SKIPPED_BY_RULE = {
    "__init__.py": "package __init__: the package's docstring and logger set-up, no rule of the system",
}
MIGRATIONS_REASON = "schema migration: DDL the native stack runs once; the simulation builds its schema from the models"


REPO = Path(__file__).resolve().parent.parent


def triage_file(system: str) -> dict:
    """The working tree's (not the mutated copy's): a triage added after a run applies when the table is remade."""
    import yaml  # here: scripts/mutation_session.py (the mutation venv, no PyYAML) imports this module's matching

    path = REPO / "systems" / system / "mutation.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def skip_reason(module: str, declared: dict[str, str]) -> str | None:
    name = Path(module).name
    if name in SKIPPED_BY_RULE:
        return SKIPPED_BY_RULE[name]
    if "/migrations/" in module or name == "migrations.py":
        return MIGRATIONS_REASON
    return declared.get(module)


def select_modules(tree: Path, system: str, asked: list[str]) -> dict:
    """Every module of reference/<system>/ (or the ones asked for), split into those to mutate and those skipped
    with their reason. A module asked for by name is mutated even where the default would skip it."""
    base = tree / "reference" / system
    if not base.is_dir():
        raise SystemExit(f"no reference/{system}/ in {tree}")
    declared = triage_file(system).get("skip") or {}
    if asked:
        missing = [m for m in asked if not (tree / m).is_file()]
        if missing:
            raise SystemExit(f"not in HEAD: {', '.join(missing)}")
        return {"system": system, "mutate": sorted(asked), "skipped": {}}
    every = sorted(str(p.relative_to(tree)) for p in base.rglob("*.py"))
    skipped = {m: r for m in every if (r := skip_reason(m, declared))}
    return {"system": system, "mutate": [m for m in every if m not in skipped], "skipped": skipped}


def changed_lines(diff: str) -> list[str]:
    """A mutant's identity that survives a rerun and moved line numbers: its removed and added lines, stripped."""
    return [f"{line[0]} {line[1:].strip()}" for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def same_change(a: str, b: str) -> bool:
    """Whether two diffs make the same change, whatever the spacing (cosmic-ray prints ``String( 7)``)."""
    def squeezed(diff: str) -> list[str]:
        return ["".join(line.split()) for line in changed_lines(diff)]
    return squeezed(a) == squeezed(b)


def names(entry: dict, mutant: dict) -> bool:
    """Whether a mutation.yaml entry names this mutant: by its diff, or by operator and occurrence (for a line the
    module has more than once, where the diff alone would name every copy)."""
    if entry.get("module") != mutant["module"]:
        return False
    if "diff" in entry:
        return same_change(entry["diff"], mutant["diff"])
    return entry.get("operator") == mutant["operator"] and entry.get("occurrence") == mutant["occurrence"]


def equivalence(mutant: dict, triaged: list[dict]) -> str | None:
    """The reason a mutant was triaged equivalent, or None."""
    return next((entry["reason"] for entry in triaged if names(entry, mutant)), None)


@dataclass
class Row:
    module: str
    candidates: int  # mutants of the kept operators in the module, before sampling
    mutants: int  # sampled and run
    killed: int  # red or timed out
    survived: int  # not killed and not triaged equivalent
    not_reached: int  # of the survivors: no judge executes the mutant's line (never run)
    equivalent: int
    timed_out: int  # of the killed
    errors: int  # the mutant could not be run (cosmic-ray's own failure): neither killed nor survived
    pending: int  # sampled, not run yet (an interrupted session)
    score: float | None  # killed / (mutants - equivalent - errors - pending)
    commit: str = ""  # of the session the figures come from


def tabulate(results: dict, triaged: list[dict]) -> tuple[list[Row], list[dict], list[dict]]:
    """Rows per module, the survivors (to triage) and the equivalents (with their reasons)."""
    tally: dict[str, Counter] = {m: Counter() for m in results["candidates"]}
    survivors, equivalents = [], []
    for mutant in results["mutants"]:
        counts = tally.setdefault(mutant["module"], Counter())
        counts["mutants"] += 1
        outcome = mutant["outcome"]
        reason = equivalence(mutant, triaged)
        if reason and outcome not in ("survived", "not reached"):
            print(f"stale triage: {mutant['module']}:{mutant['line']} {mutant['operator']} #{mutant['occurrence']} is "
                  f"recorded as equivalent but was {outcome}", file=sys.stderr)
            reason = None
        if reason:
            counts["equivalent"] += 1
            equivalents.append({**mutant, "reason": reason})
        elif outcome in ("survived", "not reached"):
            counts["survived"] += 1
            counts["not_reached"] += outcome == "not reached"
            survivors.append(mutant)
        elif outcome in ("killed", "timeout"):
            counts["killed"] += 1
            counts["timed_out"] += outcome == "timeout"
        else:
            counts[outcome if outcome == "pending" else "errors"] += 1
    rows = []
    for module, c in sorted(tally.items()):
        judged = c["mutants"] - c["equivalent"] - c["errors"] - c["pending"]
        rows.append(Row(module, results["candidates"].get(module, 0), c["mutants"], c["killed"], c["survived"],
                        c["not_reached"], c["equivalent"], c["timed_out"], c["errors"], c["pending"],
                        round(c["killed"] / judged, 3) if judged else None))
    return rows, survivors, equivalents


def combine(results: dict, earlier: list[dict]) -> tuple[dict, dict[str, dict]]:
    """The session's results with each module taken from the session that judged most of its mutants (this one on
    a tie, then the earlier sessions in the order given), and the meta of the session each module's figures come
    from. A session stopped early then publishes the figures an earlier one left for the modules it did not finish,
    each named by its commit, not as pending."""
    def judged(session: dict, module: str) -> int:
        return sum(1 for m in session["mutants"] if m["module"] == module and m["outcome"] != "pending")

    candidates, mutants, source = dict(results["candidates"]), [], {}
    sessions = [results, *earlier]
    for module in sorted({*results["candidates"], *(m["module"] for m in results["mutants"])}):
        donor = max(sessions, key=lambda s: (judged(s, module), -sessions.index(s)))
        source[module] = donor["meta"]
        candidates[module] = donor["candidates"].get(module, candidates.get(module, 0))
        mutants += [m | {"commit": donor["meta"]["commit"]} if donor is not results else m
                    for m in donor["mutants"] if m["module"] == module]
    return {**results, "candidates": candidates, "mutants": mutants}, source


def earlier_sessions(meta: dict, source: dict[str, dict]) -> list[dict]:
    """The meta of each earlier session some module's figures come from, by commit."""
    by_commit = {m["commit"]: m for m in source.values() if m["commit"] != meta["commit"]}
    return [by_commit[c] for c in sorted(by_commit)]


def provenance(meta: dict, source: dict[str, dict]) -> list[str]:
    """Which modules' figures come from which earlier session (none: every figure is this session's)."""
    lines = []
    for earlier in earlier_sessions(meta, source):
        commit = earlier["commit"]
        modules = ", ".join(sorted(Path(module).name for module, m in source.items() if m["commit"] == commit))
        rejudged = "".join(f"; its survivors judged again (`--rejudge`) at `{r['commit']}`"
                           for r in earlier.get("rejudged", []))
        lines.append(f"- at commit `{commit}` ({earlier['date']}{rejudged}), by `{earlier['command']}`: {modules}")
    if not lines:
        return []
    return ["", f"**Figures from earlier sessions**: this session (commit `{meta['commit']}`) judged fewer of the "
                "following modules' mutants than an earlier one, so their rows are that session's (the reference and "
                "its judges as they were at its commit; the column *at* names it):", "", *lines]


def timing(meta: dict, mutants: list[dict]) -> list[str]:
    """The wall time, and the median time a killed mutant and a survivor took (a survivor runs the whole
    catalogue; fail-fast ends a killed one at its first red scenario)."""
    mutants = [m for m in mutants if "commit" not in m]  # this session's only (not those of an earlier one)
    run = [m for m in mutants if m["outcome"] != "pending" and not m.get("trusted")]
    trusted = sum(1 for m in mutants if m.get("trusted"))
    wall = meta.get("exec_seconds")
    if not wall or not run:
        return []
    coverage = meta.get("coverage_seconds")
    medians = []
    for name, outcomes in (("killed", ("killed", "timeout")), ("survivor", ("survived",))):
        took = sorted(m["seconds"] for m in run if m["outcome"] in outcomes and m.get("seconds") is not None)
        if took:
            medians.append(f"median {took[len(took) // 2]:.0f} s per {name}")
    per_minute = f", {60 * len(run) / wall:.1f} mutants per minute" if wall else ""
    return ["", f"{len(run)} mutants in {wall:.0f} s on {meta['workers']} worker(s), {os.cpu_count()} cores"
            + per_minute + (f" ({', '.join(medians)})" if medians else "")
            + (f"; the coverage record took {coverage:.0f} s more, once per session." if coverage else ".")
            + (f" {trusted} more, triaged equivalent in mutation.yaml, were not judged again (--trust-triage)."
               if trusted else "")]


def judging(meta: dict, judges: dict) -> list[str]:
    """The legend's paragraph on how a mutant is judged, with the modules that have a judge of their own."""
    system = meta["system"]
    lines = [
        f"Each mutant is judged by the scenarios of the system's catalogue in simulation that execute its line "
        f"(`sortie simulate --system {system} --scenario ... --fail-fast --no-report --seed {meta['seed']}`, fastest "
        "first; which scenario executes which line comes from one run of the clean catalogue under coverage.py, a "
        "context per scenario); a line run at import (a constant, a default, a decorator) by the scenarios that run "
        "where what it makes is used when only this module's functions use it, else by the whole catalogue. A "
        "mutant of a line no scenario executes is a survivor at no cost, counted as *not reached*. Killed when a "
        f"judge goes red or runs past 5x its clean time (at most {meta['timeout_s']:.0f} s; timed out, counted among "
        f"the killed); equivalents come from systems/{system}/mutation.yaml. Score = killed / (mutants - "
        "equivalent); candidates = the module's mutants of the kept operators (scripts/mutation.sh) before "
        "sampling.",
    ]
    if judges:
        lines += ["", "Modules judged by more than the simulated catalogue (mutation.yaml `judges:`; run in the "
                      "mutated copy after the scenarios that reach the line, if any):", ""]
        lines += [f"- {where}: `{j['command']}`: {j.get('why', '')}" for where, j in judges.items()]
    return lines


def killed_since(mutant: dict, triaged: list[dict]) -> str | None:
    """What kills a survivor since its run (mutation.yaml killed_since), or None."""
    return next((entry["by"] for entry in triaged if names(entry, mutant)), None)


def markdown(meta: dict, rows: list[Row], skipped: dict[str, str], equivalents: list[dict],
             mutants: list[dict], survivors: list[dict], judges: dict, since: list[dict] | None = None,
             source: dict[str, dict] | None = None) -> str:
    total = Row("**all**", *(sum(getattr(r, f) for r in rows) for f in
                             ("candidates", "mutants", "killed", "survived", "not_reached", "equivalent", "timed_out",
                              "errors",
                              "pending")), None)
    judged = total.mutants - total.equivalent - total.errors - total.pending
    total.score = round(total.killed / judged, 3) if judged else None
    scope = "every module of the reference" if not meta["modules_asked"] else "the modules asked for only"
    unfinished = ([f"**Unfinished**: {total.pending} of {total.mutants} sampled mutants not run yet (the run was "
                   "stopped; the same command resumes it and remakes this page)."] if total.pending else [])
    lines = [
        f"# Mutation testing of reference/{meta['system']}/",
        "",
        f"Generated by `{meta['command']}` on {meta['date']}, at commit `{meta['commit']}`."
        + "".join(f" Its {r['survivors']} survivors judged again (`--rejudge`) on {r['date']} by the harness of commit "
                  f"`{r['commit']}` (the reference unchanged)." for r in meta.get("rejudged", [])),
        (f"**A sample**: at most {meta['sample']} mutants per module (sample seed {meta['seed']}), over {scope}; "
         "the whole table needs at least 30 per module." if meta["sample"] < 30 else
         f"**The whole table**: {meta['sample']} mutants per module (all where a module has fewer; sample seed "
         f"{meta['seed']}), over {scope}."),
        *unfinished,
        *provenance(meta, source or {}),
        "",
        *judging(meta, judges),
        *timing(meta, mutants),
        "",
        *(["A score *with N killed since* also counts the module's survivors that a test or checker added after the "
           "run kills (mutation.yaml killed_since, each shown by applying the mutant; listed under Survivors): what "
           "a rerun or `--rejudge` would count.", ""] if since else []),
    ]
    mixed = any(r.commit and r.commit != meta["commit"] for r in rows)  # then a column says where each row is from
    lines += ["| module | candidates | mutants | killed | survived | not reached | equivalent | timed out | score |"
              + (" at |" if mixed else ""),
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" --- |" if mixed else "")]
    since_by_module = Counter(s["module"] for s in survivors if killed_since(s, since or []))
    since_by_module[total.module] = sum(since_by_module.values())
    for r in [*rows, total]:
        score = "-" if r.score is None else f"{r.score:.0%}"
        if r.score is not None and (n := since_by_module[r.module]):  # what a rejudge would count, beside the score
            judged = r.mutants - r.equivalent - r.errors - r.pending
            score += f" ({(r.killed + n) / judged:.0%} with {n} killed since)"
        extra = "".join(f" ({n} {what})" for n, what in ((r.errors, "errors"), (r.pending, "pending")) if n)
        at = (f" `{r.commit}` |" if r.commit else " (several) |") if mixed else ""
        lines.append(f"| {r.module} | {r.candidates} | {r.mutants}{extra} | {r.killed} | {r.survived} | "
                     f"{r.not_reached} | {r.equivalent} | {r.timed_out} | {score} |{at}")
    if skipped:
        lines += ["", "## Modules not mutated", ""]
        lines += [f"- {m}: {why}" for m, why in sorted(skipped.items())]
    if equivalents:
        lines += ["", "## Equivalent mutants", ""]
        lines += [f"- {e['module']}:{e['line']}{at_commit(e)} {e['operator']} #{e['occurrence']}: {e['reason']}"
                  for e in equivalents]
    if survivors:
        lines += ["", "## Survivors (to triage: a checker or scenario that kills each, or a reason it is equivalent)",
                  ""]
        lines += [f"- {s['module']}:{s['line']}{at_commit(s)} {s['operator']} #{s['occurrence']}"
                  + (" (not reached)" if s["outcome"] == "not reached" else "") + ": `"
                  + " / ".join(changed_lines(s["diff"])) + "`"
                  + (f" **killed since** by {by}" if (by := killed_since(s, since or [])) else "")
                  for s in survivors]
    return "\n".join(lines) + "\n"


def at_commit(mutant: dict) -> str:
    """Where an earlier session's mutant is (its line numbers are its commit's)."""
    return f" (at `{mutant['commit']}`)" if "commit" in mutant else ""


def survivors_md(survivors: list[dict]) -> str:
    return "".join(f"## {s['module']}:{s['line']}{at_commit(s)} {s['operator']} #{s['occurrence']}"
                   f"{' (not reached)' if s['outcome'] == 'not reached' else ''}\n\n```diff\n"
                   f"{chr(10).join(changed_lines(s['diff']))}\n```\n\n" for s in survivors)


def table(out: Path, publish: Path | None, earlier: Sequence[Path] = ()) -> int:
    results = json.loads((out / "results.json").read_text())
    modules = json.loads((out / "modules.json").read_text())
    meta = results["meta"]
    results, source = combine(results, [json.loads((d / "results.json").read_text()) for d in earlier])
    triage = triage_file(meta["system"])
    rows, survivors, equivalents = tabulate(results, triage.get("equivalent") or [])
    for row in rows:
        row.commit = source[row.module]["commit"]
    page = markdown(meta, rows, modules["skipped"], equivalents, results["mutants"], survivors,
                    triage.get("judges") or {}, triage.get("killed_since") or [], source)
    where = ("module", "line", "operator", "occurrence")
    data = {"meta": meta, "rows": [asdict(r) for r in rows], "skipped": modules["skipped"],
            "earlier": earlier_sessions(meta, source),
            "equivalents": [{k: e[k] for k in (*where, "reason")} | ({"commit": e["commit"]} if "commit" in e else {})
                            for e in equivalents],
            "survivors": [{k: s[k] for k in (*where, "outcome")} | ({"commit": s["commit"]} if "commit" in s else {})
                          | {"diff": changed_lines(s["diff"])} for s in survivors]}
    (out / "table.md").write_text(page)
    (out / "table.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "survivors.md").write_text(survivors_md(survivors))
    if publish:
        (publish / f"{meta['system']}-mutation.md").write_text(page)
        (publish / f"{meta['system']}-mutation.json").write_text(json.dumps(data, indent=1) + "\n")
    print(page)
    print(f"{len(survivors)} survivor(s) to triage: {out / 'survivors.md'}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["modules"] and len(argv) >= 4:
        tree, system, out = Path(argv[1]), argv[2], Path(argv[3])
        selected = select_modules(tree, system, argv[4:])
        (out / "modules.json").write_text(json.dumps(selected, indent=1) + "\n")
        for module, why in selected["skipped"].items():
            print(f"not mutated: {module}: {why}", file=sys.stderr)
        print(*selected["mutate"], sep="\n")  # for scripts/mutation.sh
        return 0
    if argv[:1] == ["equivalents"] and len(argv) == 3:  # the triage's equivalents, for `run --trust-triage`
        (Path(argv[2]) / "triaged.json").write_text(json.dumps(triage_file(argv[1]).get("equivalent") or []) + "\n")
        return 0
    if argv[:1] == ["table"] and len(argv) >= 2:
        parser = argparse.ArgumentParser(prog="mutation_table.py table")
        parser.add_argument("out", type=Path)
        parser.add_argument("--publish", type=Path)
        parser.add_argument("--earlier", type=Path, action="append", default=[],
                            help="an earlier session's DIR: the modules OUT judged none of take their figures from it")
        args = parser.parse_args(argv[1:])
        return table(args.out, args.publish, args.earlier)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
