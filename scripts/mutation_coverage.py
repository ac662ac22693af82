"""Coverage-guided selection for scripts/mutation.sh (run with the project's Python, in the copy of the tree: the cwd
and PYTHONPATH are the copy, so the reference measured is the one the mutants are made from). Two commands:

  record OUT SYSTEM SEED JOBS   the catalogue under coverage.py, measuring reference/SYSTEM/ only, each scenario in
      its own dynamic context (its id); JOBS processes, each simulating its share one scenario after another
      (shares balanced by OUT/baseline/summary.json's wall times); writes OUT/coverage/part-K.sqlite
  judges OUT TREE SYSTEM SEED JOBS PYTHON   from OUT/coverage/ (the record), OUT/baseline/summary.json
      (each scenario's wall time in the clean run), OUT/plan.json (the sampled mutants and their lines) and the
      system's mutation.yaml (extra judges per module), each sampled mutant's judge: OUT/judges.json

A mutant is judged by the scenarios that execute its line, fastest first, with --fail-fast; a line run once, at
import, by those that run where what it makes is used (a function's default or decorator: its body; a constant no
other file names and only functions read: those reads), else by the whole catalogue when the simulation imports the
module at all (a class body, a constant another module imports); a mutant no scenario reaches costs nothing and is
reported as "not reached". A module
that systems/SYSTEM/mutation.yaml gives a judge (``judges: {path or folder/: {command, why}}``, e.g. the HTTP
layer's in-process tests) is judged by that command as well: before the scenarios that reach the line when its
``seconds`` (its clean time) is less than theirs, else after them.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import yaml

IMPORT_CONTEXT = ""  # coverage.py's context before the first switch: the modules imported up front


def baseline_seconds(out: Path) -> dict[str, float]:
    """Each scenario's wall time in the clean run (scripts/mutation.sh's baseline, simulated at its --jobs)."""
    summary = json.loads((out / "baseline" / "summary.json").read_text())
    return {s["id"]: s["wall_seconds"] for s in summary["scenarios"]}


def record(out: Path, system: str, seed: int, jobs: int) -> int:
    import subprocess

    wall = baseline_seconds(out)
    shares: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(wall))))]
    for sid in sorted(wall, key=lambda s: -wall[s]):  # longest first, each to the lightest share
        min(shares, key=lambda share: sum(wall[s] for s in share)).append(sid)
    (out / "coverage").mkdir(exist_ok=True)
    procs = [subprocess.Popen([sys.executable, __file__, "record-part", system, str(seed),
                               str(out / "coverage" / f"part-{k}.sqlite"), *share])
             for k, share in enumerate(shares)]
    return max(p.wait() for p in procs)


def record_part(system: str, seed: int, data_file: Path, ids: list[str]) -> int:
    import coverage

    tree = Path.cwd()
    cov = coverage.Coverage(data_file=str(data_file), source=[str(tree / "reference" / system)],
                            concurrency=["greenlet", "thread"], config_file=False)
    cov.start()
    # Imported under coverage, before the first scenario's context: import-time lines land in IMPORT_CONTEXT, not
    # in whichever scenario happens to import a module first.
    from scenarios.catalogue import load_catalogue
    from scenarios.runner import simulate

    catalogue = load_catalogue(system)
    seconds = {}
    for sid in ids:
        cov.switch_context(sid)
        began = time.perf_counter()
        result = simulate(catalogue[sid], seed)
        seconds[sid] = {"seconds": round(time.perf_counter() - began, 3), "passed": result.passed}
    cov.stop()
    cov.save()
    Path(f"{data_file}.seconds.json").write_text(json.dumps(seconds, indent=1) + "\n")
    return 0 if all(s["passed"] for s in seconds.values()) else 1


def body_lines(source: str) -> set[int]:
    """The lines inside a function's body (run when the function is called); every other line runs at import."""
    inside: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            body = node.body if isinstance(node.body, list) else [node.body]
            for stmt in body:
                inside.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return inside


@cache
def module_facts(path: Path) -> tuple[set[int], dict[int, int]]:
    """A module's function-body lines, and each line's statement's first line (coverage.py records a statement
    that spans lines at its first)."""
    from coverage.parser import PythonParser

    source = path.read_text()
    parser = PythonParser(text=source, filename=str(path))
    parser.parse_source()
    first = {line: parser.first_line(line) for line in range(1, source.count("\n") + 2)}
    return body_lines(source), first


def judge_config(system: str, module: str, repo: Path) -> dict | None:
    """The extra judge mutation.yaml gives this module (by its path, or a folder the path is under)."""
    path = repo / "systems" / system / "mutation.yaml"
    judges = ((yaml.safe_load(path.read_text()) or {}) if path.exists() else {}).get("judges") or {}
    for where, judge in judges.items():
        if module == where or (where.endswith("/") and module.startswith(where)):
            return judge
    return None


def import_uses(source: str, line: int, named_elsewhere: Callable[[str], bool]) -> set[int] | None:
    """Where what a module-level line makes is used, when that is only inside this module's functions: a function's
    header (a default, a decorator) is used by its body; a constant assigned to plain names by the statements that
    read them. None when that cannot be told so narrowly (a class body, a name read at import or named in another
    file): the whole catalogue judges it then."""
    module = ast.parse(source)
    stmt = next((n for n in module.body if min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))])
                 <= line <= (n.end_lineno or n.lineno)), None)
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {n.lineno for body in stmt.body for n in ast.walk(body) if isinstance(n, ast.stmt)}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) \
        else None
    if not targets or not all(isinstance(t, ast.Name) for t in targets):
        return None
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    if any(named_elsewhere(name) for name in names):
        return None
    uses = {n.lineno for n in ast.walk(module) if isinstance(n, ast.Name) and n.id in names
            and isinstance(n.ctx, ast.Load)}
    inside = body_lines(source)
    return uses if uses <= inside else None  # a use at import (a derived constant): anything may depend on it


def reaching(line: int, path: Path, contexts: dict[int, list[str]], catalogue: list[str],
             named_elsewhere: Callable[[str], bool] = lambda name: True) -> tuple[str, list[str]]:
    """How a mutant on ``line`` of the module at ``path`` is reached, and by which scenarios (``catalogue`` is
    every scenario, fastest first; ``contexts`` the module's lines and the contexts that executed each): inside a
    function, by the scenarios that executed its statement ("scenarios"; all of them where it also ran at import);
    at module level, by those that ran the lines using what it makes (import_uses) when that is known, else by the
    whole catalogue when the simulation imports the module ("import"); else by none ("none").
    ``named_elsewhere(name)``: whether another file of the tree names the identifier (default: assume so)."""
    inside, first = module_facts(path)

    def ran_by(lines: set[int]) -> list[str]:
        ran = {c for n in lines for c in contexts.get(first.get(n, n), [])}
        return catalogue if IMPORT_CONTEXT in ran else [s for s in catalogue if s in ran]

    if line in inside:
        scenarios = ran_by({line})
        return ("scenarios" if scenarios else "none"), scenarios
    if not contexts:
        return "none", []  # a module never imported has no line recorded
    uses = import_uses(path.read_text(), line, named_elsewhere)
    if uses is None:
        return "import", catalogue
    scenarios = ran_by(uses)
    return ("scenarios" if scenarios else "none"), scenarios


def identifier_index(tree: Path) -> Callable[[Path, str], bool]:
    """named_elsewhere for reaching: whether a .py file of the tree other than ``module`` has the identifier."""
    texts = {p: p.read_text(errors="replace") for p in tree.rglob("*.py") if ".venv" not in p.parts}

    def named_elsewhere(module: Path, name: str) -> bool:
        word = re.compile(rf"\b{re.escape(name)}\b")
        return any(word.search(text) for p, text in texts.items() if p != module)
    return named_elsewhere


def judge_command(system: str, seed: int, jobs: int, python: str, scenarios: list[str],
                  extra: dict | None, scenario_seconds: float = 0.0) -> str | None:
    """The command that judges a mutant in a worker's copy ({worker}): its scenarios with --fail-fast and the
    module's extra judge, the cheaper first (the extra's ``seconds`` against ``scenario_seconds``, the scenarios'
    clean time: a red first step ends the judging); None when there is neither."""
    steps = []
    if scenarios:
        ids = " ".join(f"--scenario {s}" for s in scenarios)
        steps.append(f"env -C {{worker}}/tree PYTHONPATH={{worker}}/tree {python} -m sortie.cli simulate "
                     f"--system {system} {ids} --fail-fast --no-report --seed {seed} --jobs {jobs} "
                     "--out {worker}/run")
    if extra:
        command = extra["command"]
        if command.startswith("python "):
            command = python + command[len("python"):]
        cheaper = scenarios and extra.get("seconds", float("inf")) < scenario_seconds
        steps.insert(0 if cheaper else len(steps), f"env -C {{worker}}/tree PYTHONPATH={{worker}}/tree {command}")
    if len(steps) <= 1:
        return steps[0] if steps else None
    return f"bash -c {shlex.quote(' && '.join(steps))}"


def judges(out: Path, tree: Path, system: str, seed: int, jobs: int, python: str) -> int:
    from coverage import CoverageData

    data = CoverageData(no_disk=True)
    for part in sorted((out / "coverage").glob("part-*.sqlite")):
        one = CoverageData(basename=str(part))
        one.read()
        data.update(one)
    wall = baseline_seconds(out)
    catalogue = sorted(wall, key=lambda sid: (wall[sid], sid))  # fastest first
    plan = json.loads((out / "plan.json").read_text())
    repo = Path(__file__).resolve().parent.parent
    by_file = {str(Path(name).relative_to(tree)): data.contexts_by_lineno(name) for name in data.measured_files()}
    elsewhere = identifier_index(tree)
    chosen = {}
    for module, operator, occurrence, line in plan["sampled"]:
        reach, scenarios = reaching(line, tree / module, by_file.get(module, {}), catalogue,
                                    functools.partial(elsewhere, tree / module))
        extra = judge_config(system, module, repo)
        if extra and reach == "none":
            reach = "judge"
        # A mutant that loops or waits forever: 5x its judges' clean time (a shared machine's load varies)
        scenario_seconds = sum(wall[s] for s in scenarios) / max(1, min(jobs, len(scenarios)))
        seconds = scenario_seconds + (extra or {}).get("seconds", 0)
        chosen[f"{module}:{operator}:{occurrence}"] = {
            "reach": reach, "scenarios": scenarios,
            "command": judge_command(system, seed, jobs, python, scenarios, extra, scenario_seconds),
            "timeout_s": round(min(plan["meta"]["timeout_s"], 5 * seconds + 120))}
    (out / "judges.json").write_text(json.dumps(chosen, indent=1) + "\n")
    reached = sum(j["command"] is not None for j in chosen.values())
    print(f"{reached} of {len(chosen)} sampled mutants reached by a judge; the others cost nothing (not reached)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"] and len(argv) == 5:
        return record(Path(argv[1]), argv[2], int(argv[3]), int(argv[4]))
    if argv[:1] == ["record-part"] and len(argv) >= 5:
        return record_part(argv[1], int(argv[2]), Path(argv[3]), argv[4:])
    if argv[:1] == ["judges"] and len(argv) == 7:
        return judges(Path(argv[1]), Path(argv[2]), argv[3], int(argv[4]), int(argv[5]), argv[6])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
