"""`sortie`: one console entry point with thin verbs over the scenarios, the simulation and reports."""

from __future__ import annotations

import contextlib
import json
import os
import platform as py_platform
import re
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scenarios.systems import DEFAULT_SYSTEM, CapacitySpec
from scenarios.verdicts import VIOLATED, unexercised_kind
from sortie.exits import (
    ENVIRONMENT,
    HARNESS,
    INTERRUPTED,
    OK,
    REGRESSION,
    EnvironmentMissing,
    HarnessFailure,
    InputError,
    SortieGroup,
)
from sortie.exits import VIOLATED as VIOLATED_EXIT
from sortie.measure import Footprint

# The RocketMQ client's gRPC core logs at INFO on every fork (process launches): keep the CLI readable.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
# Wide enough for the verdict table in CI logs, where there is no terminal to measure.
console = Console(width=None if sys.stdout.isatty() else 120)

INJECT_BUG = click.option(
    "--inject-bug", default=None, metavar="NAME",
    help="Switch on one known defect of the system's reference (its System.bug_names: an unknown name lists them; "
         "the job system's seed is its seed-faithful variant); the run is then expected to FAIL. `sortie selfcheck` "
         "runs them all.")
SCENARIO_IDS = click.option("--scenario", "ids", multiple=True, help="Scenario id (repeatable).")
TIME_FACTOR = click.option(
    "--time-factor", type=click.FloatRange(min=0, min_open=True), default=None,
    show_default="0.25; the job system's 0.1",
    help="Scale of the scenario's windows on the real stack (1 = the documented fault windows).")
SYSTEM_OPTION = click.option(
    "--system", "system_name", default=DEFAULT_SYSTEM, show_default=True, metavar="NAME",
    help="The system under test: a package under systems/ (copilot: seed 000's drone backend; jobs: seed 004's job "
         "table with seed 002's DAG), or the module path of one elsewhere (e.g. tests.example_system).")


VARIANT_OPTION = click.option(
    "--variant", default=None, metavar="NAME",
    help="A named variant of the system's reference (the job system's: fixed, the default, or seed, its "
         "seed-faithful port; the same as --inject-bug seed).")


def _variant_bug(system: Any, variant: str | None, bug: str | None, bug_flag: str) -> str | None:
    """The bug a --variant selects (a usage error for an unknown variant, or beside an explicit bug)."""
    if variant is None:
        return bug
    if variant not in system.variants:
        known = ", ".join(system.variants) or "none"
        raise click.BadParameter(f"{variant!r} is not a variant of {system.name}; variants: {known}",
                                 param_hint="--variant")
    if bug is not None:
        raise click.UsageError(f"--variant and {bug_flag} both choose the reference: give one")
    return system.variants[variant]


def _system(name: str, inject_bug: str | None = None) -> Any:
    """The system named, with an injected bug checked against its own list (a usage error otherwise)."""
    from scenarios.systems import load_system, system_names

    try:
        system = load_system(name)
    except KeyError:
        raise click.BadParameter(f"unknown system {name!r}; installed: {', '.join(system_names())}",
                                 param_hint="--system") from None
    if inject_bug is not None and inject_bug not in system.bug_names():
        raise click.BadParameter(f"{inject_bug!r} is not a known bug of {name}; known: "
                                 f"{', '.join(system.bug_names())}", param_hint="--inject-bug")
    return system


@click.group(cls=SortieGroup)
@click.version_option(package_name="sortie")
def main() -> None:
    """Simulation and fault-injection harness for backend systems (--system): the drone Copilot's task/dispatch
    backend by default, the job table with its DAG, or any system added under systems/. Exit codes, every verb:
    0 all held; 1 an invariant was violated (or a scenario failed); 2 a usage or input error; 3 an SLO missed or a
    baseline regression; 4 the environment is missing something; 5 a harness error; 130 stopped by Ctrl-C."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", is_flag=True,
              help="As Markdown: every system's catalogue (docs/scenarios.md), or --system's.")
@SYSTEM_OPTION
def scenarios(as_json: bool, markdown: bool, system_name: str) -> None:
    """List the scenario catalogue (of --system)."""
    from scenarios.catalogue import load_catalogue

    _system(system_name)
    if markdown:
        from scenarios import pages

        page = pages.scenarios_section(system_name) if _given("system_name") else pages.scenarios_page()
        click.echo(page, nl=False)
        return
    rows: list[dict[str, Any]] = [
        {"id": s.id, "slug": s.slug, "shells": list(s.shells), "title": s.title, "why_not": s.why_not,
         "file": Path(s.source).name} for s in load_catalogue(system_name).values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"Sortie scenarios ({system_name})")
    for col in ("id", "slug", "shells", "description"):
        table.add_column(col)
    for r in rows:
        why = "".join(f" [dim](not {k}: {v})[/]" for k, v in r["why_not"].items())
        table.add_row(r["id"], r["slug"], ",".join(r["shells"]), r["title"] + why)
    console.print(table)


@main.command()
@click.option("--markdown", is_flag=True,
              help="As Markdown: every system's invariants (docs/invariants.md), or --system's.")
@SYSTEM_OPTION
def invariants(markdown: bool, system_name: str) -> None:
    """List the invariants of --system: id, checker, what must hold."""
    from scenarios import pages

    system = _system(system_name)
    if markdown:
        page = pages.invariants_section(system_name) if _given("system_name") else pages.invariants_page()
        click.echo(page, nl=False)
        return
    table = Table(title=f"Sortie invariants ({system_name})")
    for col in ("id", "checker", "what must hold"):
        table.add_column(col)
    for i in system.invariants.values():
        table.add_row(i.id, i.checker.__name__, i.title)
    console.print(table)


@main.command()
@click.option("--markdown", is_flag=True, help="As Markdown: the page docs/systems/NAME-rules.md of --system.")
@SYSTEM_OPTION
def rules(markdown: bool, system_name: str) -> None:
    """The rule-traceability matrix of --system: each rule of its seed and reference, the invariants that judge it,
    the scenarios that exercise it per shell, the bugs that break it, or why nothing judges it (a reason, a gap)."""
    from scenarios import rules as matrix

    system = _system(system_name)
    if not system.rules:
        raise click.BadParameter(f"{system_name} has no rule matrix (System.rules)", param_hint="--system")
    if markdown:
        click.echo(matrix.rules_page(system_name), nl=False)
        return
    n = matrix.counts(system.rules)
    table = Table(title=f"Sortie rules ({system_name}): {n['rows']} rows, {n['checked']} judged by an invariant, "
                        f"{n['reason']} with a reason, {n['gap']} gaps")
    for col in ("#", "seed", "rule", "kind", "invariants", "sim", "native", "bugs", "reason or gap"):
        table.add_column(col)
    for i, r in enumerate(system.rules, 1):
        why = r.reason or (f"[bold]gap:[/] {r.gap}" if r.gap else "")
        table.add_row(str(i), r.section, r.rule, r.kind, ",".join(r.invariants), ",".join(r.sim), ",".join(r.native),
                      ",".join(r.bugs), why)
    console.print(table)


def _given(param: str) -> bool:
    """The option was given on the command line (not its default)."""
    return click.get_current_context().get_parameter_source(param) is not click.core.ParameterSource.DEFAULT


def _choose(shell: str, run_all: bool, ids: tuple[str, ...], incidents: tuple[Path, ...],
            system: str = DEFAULT_SYSTEM) -> list:
    """The scenarios a run asked for: catalogue ids, incident files (each names its system), or --all (every one
    of the system's catalogue that the shell runs)."""
    from scenarios.catalogue import load_catalogue
    from scenarios.incident import IncidentError, load_incidents

    catalogue = load_catalogue(system)
    if run_all == bool(ids or incidents):
        raise click.UsageError("give --all, or at least one --scenario ID or incident file")
    unknown = [i for i in ids if i not in catalogue]
    if unknown:
        hint = "" if system == DEFAULT_SYSTEM else f" --system {system}"
        raise click.BadParameter(f"unknown scenario(s) of {system}: {', '.join(unknown)}; see `sortie scenarios"
                                 f"{hint}`", param_hint="--scenario")
    try:
        loaded = load_incidents(incidents)  # every file's mistakes at once
    except IncidentError as err:
        raise InputError(str(err)) from None
    if run_all:
        return [s for s in catalogue.values() if shell in s.shells]
    chosen = [catalogue[i] for i in ids] + loaded
    elsewhere = [f"{s.id} ({s.why_not.get(shell) or 'its faults have no ' + shell + ' form'})" for s in chosen
                 if shell not in s.shells]
    if elsewhere:
        where = "in simulation" if shell == "sim" else "on the real stack"
        raise InputError(f"does not run {where}: {'; '.join(elsewhere)}")
    return chosen


@main.command()
@click.argument("incidents", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--all", "run_all", is_flag=True, help="Run every scenario that exists in simulation.")
@SCENARIO_IDS
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/sim"), show_default=True)
@INJECT_BUG
@SYSTEM_OPTION
@VARIANT_OPTION
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="CPU count",
              help="Scenarios simulated at once, one process each (results do not depend on it).")
@click.option("--no-report", is_flag=True,
              help="Skip report.html (a third of a whole catalogue's wall time; `sortie report DIR` writes it later "
                   "from the stored files): for runs whose verdict is all that is wanted, as scripts/mutation.sh's.")
@click.option("--fail-fast", is_flag=True,
              help="Stop at the first scenario that does not pass (the summary then has only those that ended).")
def simulate(incidents: tuple[Path, ...], run_all: bool, ids: tuple[str, ...], seed: int, out: Path,
             inject_bug: str | None, system_name: str, variant: str | None, jobs: int, no_report: bool,
             fail_fast: bool) -> None:
    """Run scenarios in deterministic simulation (no services): catalogue ids (--scenario), incident files
    (INCIDENTS...), or --all, of the system under test (--system). Exit 0 only if every invariant holds."""
    from reports.results import write_junit, write_summary
    from reports.states import write_task_states
    from scenarios.runner import simulate_many

    inject_bug = _variant_bug(_system(system_name), variant, inject_bug, "--inject-bug")
    system = _system(system_name, inject_bug)
    chosen = _choose("sim", run_all, ids, incidents, system.name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "histories").mkdir(exist_ok=True)
    footprint = Footprint("sortie and its simulation worker processes").__enter__()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"simulating ({jobs} process{'es' if jobs > 1 else ''})", total=len(chosen))

        def done(result: Any) -> None:
            result.history.write_jsonl(out / "histories" / f"{result.id}.jsonl")
            write_task_states(out, result)
            progress.update(bar, description=f"simulated {result.id} {result.slug}")
            progress.advance(bar)

        results = simulate_many(chosen, seed, inject_bug=inject_bug, jobs=jobs, on_result=done, fail_fast=fail_fast)
    footprint.__exit__()
    not_run = sorted({s.id for s in chosen} - {r.id for r in results})
    meta = {"shell": "sim", "system": system.name, "seed": seed, "python": py_platform.python_version(),
            "jobs": jobs, **footprint.as_json(), **({"inject_bug": inject_bug} if inject_bug else {}),
            **({"not_run_after_first_failure": not_run} if not_run else {})}
    write_summary(out, results, meta)
    write_junit(out, results, "sim")
    _print_results(results)
    if not_run:
        console.print(f"--fail-fast: stopped at the first scenario that did not pass; not run: {', '.join(not_run)}")
    console.print(f"simulation: {footprint.line()}")
    if not no_report:
        _write_report(out, jobs)
    console.print(f"wrote {out / 'summary.json'}, {out / 'junit.xml'} and {out / 'histories'}/")
    _bug_verdict(system, inject_bug, results)
    sys.exit(0 if all(r.passed for r in results) else 1)


def _bug_verdict(system: Any, inject_bug: str | None, results: list) -> None:
    """With a bug injected, failing is the expected outcome: say so, and say what caught it."""
    if not inject_bug:
        return
    caught = {r.id: [v.invariant for v in r.verdicts if v.status == VIOLATED] for r in results}
    caught = {k: v for k, v in caught.items() if v}
    entry = system.bugs.get(inject_bug)
    title = entry.title if entry is not None else f"a named variant of the {system.name} system"
    console.print(f"[bold yellow]bug {inject_bug!r} was injected[/] ({title}): this run is EXPECTED to fail.")
    if caught:
        console.print("[green]caught[/] by " + "; ".join(f"{k} ({', '.join(v)} violated)" for k, v in caught.items()))
    else:
        console.print("[red]NOT caught[/]: no invariant was violated in the scenarios run")


def _ranges(invariants: list[str]) -> str:
    """I1 I2 I3 I5 -> I1-I3,I5 (runs of consecutive numbers of one prefix; J1 J2 J3 -> J1-J3); an id that does
    not end in a number stands alone."""
    runs: list[tuple[str, list[int]]] = []
    alone: list[str] = []
    for inv in invariants:
        m = re.fullmatch(r"(.*?)(\d+)", inv)
        if m is None:
            alone.append(inv)
            continue
        prefix, n = m[1], int(m[2])
        if runs and runs[-1][0] == prefix and n == runs[-1][1][-1] + 1:
            runs[-1][1].append(n)
        else:
            runs.append((prefix, [n]))
    parts = [f"{p}{r[0]}-{p}{r[-1]}" if len(r) > 2 else ",".join(f"{p}{n}" for n in r) for p, r in runs]
    return ",".join(parts + alone)


def _print_results(results: list) -> None:
    table = Table(title="Scenario verdicts")
    subjects = next(iter(results[0].counts), "tasks") if results else "tasks"  # what the system counts: tasks, jobs
    for col, justify in (("id", "left"), ("scenario", "left"), ("result", "left"), ("fault fired", "left"),
                         ("invariants", "left"), (subjects, "right"), ("digest", "left"), ("wall s", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        held = [v.invariant for v in r.verdicts if v.status == "held"]
        bad = [v.invariant for v in r.verdicts if v.status == VIOLATED]
        skipped = [v.invariant for v in r.verdicts if v.status == "unchecked"]
        invariants = f"[red]violated {' '.join(bad)}[/]" if bad else \
            f"{_ranges(held)} held" + (f", {_ranges(skipped)} unchecked" if skipped else "") if held else "-"
        table.add_row(r.id, r.slug, "[green]PASS[/]" if r.passed else "[red]FAIL[/]",
                      "yes" if r.exercised is None else f"[red]{unexercised_kind(r.exercised)}[/]: {r.exercised}",
                      invariants,
                      str(next(iter(r.counts.values()), 0)), r.history_digest[:12], f"{r.wall_s:.1f}")
    console.print(table)
    for r in results:
        for v in r.verdicts:
            if v.status == VIOLATED:
                console.print(f"[red]{r.id} {v.invariant}[/] {v.title}")
                for x in v.violations[:10]:
                    console.print(f"   task {x.task_id}: {x.message}  ops {x.ops}")
    unchecked = [v for v in results[0].verdicts if v.status == "unchecked"] if results else []
    for v in unchecked:
        console.print(f"[dim]{v.invariant} not checked: {v.note}[/]")


def _write_report(out: Path, jobs: int = os.cpu_count() or 1, baseline: Path | None = None) -> Path:
    """report.html from the run directory's stored files (the same function `sortie report` calls)."""
    import time

    from reports.baseline import BaselineError
    from reports.html import ReportError, build_report

    started = time.perf_counter()
    try:
        path = build_report(out, jobs, baseline)
    except (ReportError, BaselineError) as e:
        raise InputError(str(e)) from None
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s)")
    return path


@main.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="CPU count",
              help="Processes drawing the scenarios' plots (the page does not depend on it).")
@click.option("--baseline", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="An older run directory: compared scenario by scenario in the page; exit 3 if one regressed.")
def report(run_dir: Path, jobs: int, baseline: Path | None) -> None:
    """Rebuild DIR/report.html from a run directory's summary.json, histories/ and states/. With --baseline, the
    older run beside this one: exit 3 when a scenario regressed (a pass turned into a fail, an invariant that held
    is violated, or its wall time rose past the tolerance)."""
    path = _write_report(run_dir, jobs, baseline)
    click.echo(str(path))
    if baseline is not None:
        from reports.baseline import compare_runs, read_summary

        rows = compare_runs(read_summary(run_dir), read_summary(baseline))
        for r in rows:
            if r["regressed"]:
                console.print(f"[red]{r['id']} regressed[/]: {r['change']}; invariants {r['invariants'] or '-'}; "
                              f"wall {r['wall']}")
        if any(r["regressed"] for r in rows):
            sys.exit(REGRESSION)


def _run_each(chosen: list[Any], seed: int, out: Path, run_one: Any) -> list[Any]:
    """Each scenario on a started real stack, in turn, with its history and task states written as it ends."""
    from reports.states import write_task_states

    results = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("running", total=len(chosen))
        for scn in chosen:
            progress.update(bar, description=f"running {scn.id} {scn.slug} on the native stack")
            result = run_one(scn, seed)
            result.history.write_jsonl(out / "histories" / f"{scn.id}.jsonl")
            write_task_states(out, result)
            results.append(result)
            progress.advance(bar)
    return results


def _report_stack_run(system: Any, out: Path, results: list[Any], meta: dict[str, Any], footprint: Any,
                      inject_bug: str | None) -> None:
    """summary.json, junit.xml, the verdict table and report.html of a real-stack run; exits with its verdict."""
    from reports.results import write_junit, write_summary

    write_summary(out, results, {"shell": "native", **meta, **footprint.as_json(),
                                 **({"inject_bug": inject_bug} if inject_bug else {})})
    write_junit(out, results, "native")
    _print_results(results)
    console.print(f"stack start, scenarios and stop: {footprint.line()}")
    _write_report(out)
    _bug_verdict(system, inject_bug, results)
    sys.exit(0 if results and all(r.passed for r in results) else 1)


def _run_on_stack(system: Any, chosen: list[Any], req: Any, out: Path) -> None:
    """`sortie run`: the chosen scenarios on the system's real stack (System.stack_runner), one after another."""
    from scenarios.systems import StackUnavailable

    if system.stack_runner is None:
        raise click.UsageError(f"the {system.name} system has no real stack: use `sortie simulate`")
    out.mkdir(parents=True, exist_ok=True)
    (out / "histories").mkdir(exist_ok=True)
    runner: Any = None
    footprint = Footprint(f"sortie and the {system.name} system's stack: servers, components, PostgreSQL",
                          lambda: runner.outside_pids() if runner is not None else [])
    with contextlib.ExitStack() as running:  # unwinds in reverse: the stack stops, then the footprint ends
        running.enter_context(footprint)
        with console.status(f"starting the {system.name} system's {req.kind} stack"):
            try:
                runner = running.enter_context(system.stack_runner(req))
            except StackUnavailable as exc:
                raise EnvironmentMissing(str(exc)) from None
        results = _run_each(chosen, req.seed, out, runner.run)
    meta = {"system": system.name, "seed": req.seed, "time_factor": runner.time_factor}
    _report_stack_run(system, out, results, meta, footprint, req.inject_bug)


@main.command()
@click.option("--profile", default="1x", show_default=True,
              help="Profile name in systems/copilot/profiles (the job system: systems/jobs/profiles), a path, or (the "
                   "Copilot) a multiple of 1x like 3x.")
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Simulated hours.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--profile-code", is_flag=True, help="Also print where the wall time goes (cProfile).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the figures as JSON.")
@SYSTEM_OPTION
def bench(profile: str, hours: float, seed: int, profile_code: bool, out: Path | None, system_name: str) -> None:
    """Benchmark the simulation: a traffic profile of the system (the Copilot's systems/copilot/profiles, the job
    system's systems/jobs/profiles) for N simulated hours (no faults). Exit 1 when an invariant was violated."""
    system = _system(system_name)
    if system.bench is None:
        raise click.UsageError(f"the {system.name} system has no simulation benchmark")
    with console.status(f"simulating {hours:g} h of the {system.name} system's {profile} profile"):
        try:
            result = system.bench(profile, hours, seed, profile_code)
        except ValueError as exc:  # an unknown profile
            raise click.UsageError(str(exc)) from None
    figures = result.as_json()
    table = Table(title=f"Simulation benchmark ({system.name}): {profile}, {hours:g} simulated hour(s)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    by_name = figures.get("transactions_by_name") or []
    for k, v in figures.items():
        if k != "transactions_by_name":
            table.add_row(k, str(v))
    console.print(table)
    spread = getattr(result, "floor_spread", 1.0)
    if spread > 1.25:
        lo, hi = min(result.floor_us_samples), max(result.floor_us_samples)
        console.print(f"[yellow]the floor moved during the run (probes from {lo:.0f} to {hi:.0f} µs, "
                      f"upper quartile {spread:.2f}x the lower): the machine's speed changed, so compare runs by "
                      f"wall_in_floor_transactions (the window over the probes' median), not by wall seconds[/yellow]")
    if profile_code:
        console.print(result.hotspots)
        if by_name:
            spent = Table(title="Simulated transactions by name: wall time inside them (--profile-code)")
            for col in ("transaction", "count", "statements", "seconds", "µs each"):
                spent.add_column(col, justify="left" if col == "transaction" else "right")
            for row in by_name:
                spent.add_row(row["name"], str(row["transactions"]), str(row["statements"]),
                              str(row.get("seconds", "")), str(row.get("us_per_transaction", "")))
            console.print(spent)
    if out is not None:
        out.write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(0 if result.invariants_held else 1)


# ---------------------------------------------------------------------- the real stack

STACK_CHOICES = click.Choice(["native", "containers", "external"])
EXTERNAL_CONFIG = click.option(
    "--external-config", type=click.Path(dir_okay=False, path_type=Path), default=None,
    envvar="SORTIE_EXTERNAL_CONFIG",
    help="--stack external: YAML/JSON file with the services' URLs (or SORTIE_EXTERNAL_* variables).")
ALLOW_FOREIGN_DATABASE = click.option(
    "--allow-foreign-database", is_flag=True,
    help="--stack external: migrate a non-empty database that has no Sortie migration history.")


@main.group()
def stack() -> None:
    """Install, start, inspect and stop the real stack (PostgreSQL, MariaDB, Redis, RocketMQ, S3, Toxiproxy,
    Centrifugo)."""


@stack.command("install")
def stack_install() -> None:
    """Build or fetch every binary and jar into the cache (idempotent; a second run reuses them)."""
    from stack.native import install

    with console.status("installing the native stack (cached by version)"):
        where = install()
    for part, path in where.items():
        console.print(f"{part:14s} {path}")


def _default_run_dir() -> Path:
    return Path("out/stack")


@stack.command("up")
@SYSTEM_OPTION
@click.option("--stack", "kind", type=STACK_CHOICES, default="native", show_default=True, envvar="SORTIE_STACK",
              help="Provider (or the SORTIE_STACK environment variable).")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=_default_run_dir(),
              show_default=True)
@click.option("--time-scale", type=float, default=60.0, show_default=True,
              help="Simulator model seconds per wall second.")
@EXTERNAL_CONFIG
@ALLOW_FOREIGN_DATABASE
def stack_up(system_name: str, kind: str, run_dir: Path, time_scale: float, external_config: Path | None,
             allow_foreign_database: bool) -> None:
    """Start the system's stack, print its endpoints, and stay up until interrupted (Ctrl-C or `sortie stack
    down`)."""
    import logging

    # What the supervisor does while the stack is up (restarts) and how long each part takes to stop.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import os
    import signal
    import threading

    from scenarios.systems import StackRequest, StackUnavailable

    system = _system(system_name)
    if system.stack is None:
        raise click.UsageError(f"the {system.name} system has no stack to bring up")
    try:
        native = system.stack(StackRequest(run_dir.resolve(), kind=kind, external_config=external_config,
                                           allow_foreign_database=allow_foreign_database, time_scale=time_scale))
    except StackUnavailable as exc:
        raise EnvironmentMissing(str(exc)) from None
    with console.status(f"starting the {kind} stack"):
        endpoints = _start(native)
    (run_dir / "up.pid").write_text(str(os.getpid()))
    click.echo(json.dumps({k: v for k, v in endpoints.__dict__.items() if k != "pids"}, indent=2))
    console.print(f"stack is up (state in {run_dir / 'stack.json'}); Ctrl-C or `sortie stack down` stops it")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    with console.status("stopping"):
        native.stop()
    (run_dir / "up.pid").unlink(missing_ok=True)


@stack.command("status")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=_default_run_dir(),
              show_default=True)
def stack_status(run_dir: Path) -> None:
    """Health of a running stack started by `sortie stack up`. Exit 4 when a part is down."""
    import requests

    from stack.native import Endpoints

    path = run_dir / "stack.json"
    if not path.exists():
        raise EnvironmentMissing(f"no stack state in {path}: is a stack up?")
    ep = Endpoints.read(path)
    table = Table(title=f"stack in {run_dir}")
    table.add_column("part")
    table.add_column("endpoint")
    table.add_column("state")
    checks = {**ep.health, "toxiproxy": f"{ep.toxiproxy_api}/version"}
    down = False
    for name, url in checks.items():
        try:
            ok = requests.get(url, timeout=3).status_code == 200
        except requests.RequestException:
            ok = False
        table.add_row(name, url, "[green]up[/]" if ok else "[red]down[/]")
        down = down or not ok
    for name, addr in sorted(ep.proxies.items()):
        table.add_row(f"link {name}", addr, "proxied")
    console.print(table)
    sys.exit(ENVIRONMENT if down else 0)


@stack.command("down")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=_default_run_dir(),
              show_default=True)
def stack_down(run_dir: Path) -> None:
    """Stop a stack started by `sortie stack up` (its supervisor stops every part, in reverse order)."""
    import os
    import signal
    import time

    pid_file = run_dir / "up.pid"
    if not pid_file.exists():
        raise EnvironmentMissing(f"no running stack in {run_dir}")
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not _running(pid):
            console.print("stack stopped")
            return
        time.sleep(0.2)
    raise HarnessFailure(f"the stack supervisor {pid} did not stop within 120 s")


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited process its parent has not reaped yet has stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _start(stack_: Any) -> Any:
    """Start a provider's stack; a provider that turns out unusable (e.g. a foreign database) is one line."""
    from stack.common import ProviderUnavailable

    try:
        return stack_.start()
    except ProviderUnavailable as exc:
        raise EnvironmentMissing(str(exc)) from None


@main.command()
@click.argument("incidents", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--stack", "kind", type=STACK_CHOICES, default="native", show_default=True, envvar="SORTIE_STACK",
              help="Provider (or the SORTIE_STACK environment variable).")
@click.option("--all", "run_all", is_flag=True, help="Every scenario that runs on the real stack.")
@SCENARIO_IDS
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/native"),
              show_default=True)
@TIME_FACTOR
@EXTERNAL_CONFIG
@ALLOW_FOREIGN_DATABASE
@INJECT_BUG
@SYSTEM_OPTION
@VARIANT_OPTION
def run(incidents: tuple[Path, ...], kind: str, run_all: bool, ids: tuple[str, ...], seed: int, out: Path,
        time_factor: float | None, external_config: Path | None, allow_foreign_database: bool,
        inject_bug: str | None, system_name: str, variant: str | None) -> None:
    """Run scenarios against the real stack (catalogue ids, incident files, or --all) of the system under test
    (--system); same summary.json / junit.xml / histories as `simulate`."""
    from scenarios.systems import StackRequest

    inject_bug = _variant_bug(_system(system_name), variant, inject_bug, "--inject-bug")
    system = _system(system_name, inject_bug)
    chosen = _choose("native", run_all, ids, incidents, system.name)
    _run_on_stack(system, chosen, StackRequest((out / "stack").resolve(), seed, time_factor, inject_bug, kind,
                                               external_config, allow_foreign_database), out)


@main.command()
@click.argument("incidents", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--all", "run_all", is_flag=True, help="Every scenario that runs in both shells.")
@SCENARIO_IDS
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/parity"),
              show_default=True)
@TIME_FACTOR
@INJECT_BUG
@SYSTEM_OPTION
@click.option("--load", "load_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A measured `sortie load` run (or a directory of runs): the capacity model's simulated confirm and "
                   "confirm-to-EXECUTING p50/p99 against it, goal ±15%.")
@click.option("--calibrate", "calibrate_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="With --load: calibrate the model on this run (or directory of runs) instead of "
                                 "the measured one, so the comparison is out of sample.")
def parity(incidents: tuple[Path, ...], run_all: bool, ids: tuple[str, ...], seed: int, out: Path,
           time_factor: float | None, inject_bug: str | None, system_name: str, load_dir: Path | None,
           calibrate_dir: Path | None) -> None:
    """The same scenarios (catalogue ids, incident files, or --all of those in both shells) in simulation and on the
    native stack, side by side: outcome in each (must agree), invariants that differ, faults fired, task counts;
    with --load DIR, the capacity model's simulated latency against a measured load run (no stack needed).
    Writes DIR/parity.json. Exit 0 when everything agrees, 1 when a scenario's outcome does not, 3 when a
    simulated percentile misses the measured one by more than 15% and lies outside its ~95% interval."""
    if calibrate_dir is not None and load_dir is None:
        raise click.UsageError("--calibrate needs --load")
    result: dict[str, Any] = {}
    if load_dir is None or run_all or ids or incidents:
        result = _scenario_parity(incidents, run_all, ids, seed, out, time_factor, inject_bug, system_name)
    if load_dir is not None:
        result["load"] = _load_parity(_capacity_of(system_name), load_dir, calibrate_dir, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out / 'parity.json'}")
    if "agree" in result and not result["agree"]:
        sys.exit(1)  # an outcome that differs between the shells (exit 1, as before) outranks a latency miss
    sys.exit(REGRESSION if not result.get("load", {"held": True})["held"] else OK)


def _capacity_of(system_name: str) -> CapacitySpec:
    system = _system(system_name)
    if system.capacity is None:
        raise click.UsageError(f"the {system.name} system has no capacity model")
    return system.capacity


def _load_parity(capacity: CapacitySpec, load_dir: Path, calibrate_dir: Path | None, seed: int) -> dict[str, Any]:
    """`parity --load`: the system's CapacitySpec.load_parity, printed as one table."""
    from rich.table import Table

    with console.status("calibrating the capacity model and simulating the measured runs"):
        try:
            res = capacity.load_parity(load_dir, calibrate_dir, seed=seed)
        except FileNotFoundError as exc:
            raise InputError(str(exc)) from None
    table = Table(title=f"load parity: model calibrated on {res['calibrated_on']['path']}, goal ±{res['goal_pct']:g}%")
    for col in ("run", "figure", "measured [~95% interval]", "simulated", "error", "verdict"):
        table.add_column(col)
    colour = {"held": "green", "noise": "yellow", "missed": "red", "unmeasured": "dim"}
    for r in res["runs"]:
        for x in r["rows"]:
            ci = x["measured_ci"]
            ci_txt = "" if not ci else f" [{ci[0]:g}, {'∞' if ci[1] is None else f'{ci[1]:g}'}]"
            meas = "-" if x["measured"] is None else f"{x['measured']:.1f}{ci_txt}"
            table.add_row(f"{r['run']} ({r['multiple']:g}x{', in sample' if r['in_sample'] else ''})",
                          x["figure"], meas, "-" if x["simulated"] is None else f"{x['simulated']:.1f}",
                          "-" if x["error_pct"] is None else f"{x['error_pct']:+.1f}%",
                          f"[{colour[x['verdict']]}]{x['verdict']}[/]")
    console.print(table)
    console.print(res["note"])
    for r in res["runs"]:
        speed = r.get("host_speed")
        if speed:
            console.print(f"{r['run']}: API CPU per request {speed['run_ms']:.2f} ms against "
                          f"{speed['calibration_ms']:.2f} ms in the calibration run ({speed['change_pct']:+.1f}%: "
                          "the host's speed, not the load's)")
    return res


def _scenario_parity(incidents: tuple[Path, ...], run_all: bool, ids: tuple[str, ...], seed: int, out: Path,
                     time_factor: float | None, inject_bug: str | None, system_name: str) -> dict[str, Any]:
    """The scenario part of `parity`: both shells, one table; the result parity.json holds."""
    from rich.table import Table

    from scenarios.parity import parity as run_parity
    from scenarios.runner import simulate_many
    from scenarios.systems import StackRequest, StackUnavailable

    system = _system(system_name, inject_bug)
    if system.stack_runner is None:
        raise click.UsageError(f"the {system.name} system has no real stack to compare with")
    chosen = _choose("sim", run_all, ids, incidents, system.name)
    if run_all:
        chosen = [scn for scn in chosen if "native" in scn.shells]
    else:  # one without a native form is a usage error, as in `sortie run`
        _choose("native", run_all, ids, incidents, system.name)
    out.mkdir(parents=True, exist_ok=True)
    req = StackRequest((out / "stack").resolve(), seed, time_factor, inject_bug, "native", None, False)
    with contextlib.ExitStack() as running:
        with console.status(f"starting the {system.name} system's native stack"):
            try:
                runner = running.enter_context(system.stack_runner(req))
            except StackUnavailable as exc:
                raise EnvironmentMissing(str(exc)) from None
        result = run_parity(chosen, seed, lambda scn, sd: simulate_many([scn], sd, inject_bug=inject_bug)[0],
                            runner.run, on_row=lambda r: console.print(
                                f"{r['id']}: sim {r['sim']}, native {r['native']}"
                                + ("" if r["agree"] else " [red](disagree)[/]")))
    result |= {"system": system.name, "inject_bug": inject_bug, "time_factor": runner.time_factor}
    table = Table(title=f"parity, {system.name}, seed {seed}")
    for col in ("scenario", "simulation", "native", "agree", "invariants differ", "faults fired (sim / native)",
                "tasks (sim / native)"):
        table.add_column(col)
    for r in result["scenarios"]:
        fired = r["faults_fired"]
        tasks = r["task_counts"]
        table.add_row(r["id"], r["sim"], r["native"], "yes" if r["agree"] else "[red]no[/]",
                      ", ".join(f"{k} {a}/{b}" for k, (a, b) in r["invariants_differ"].items()) or "-",
                      f"{fired['sim']} / {fired['native']}",
                      f"{tasks['sim'].get('tasks')} / {tasks['native'].get('tasks')}")
    console.print(table)
    return result


@main.command()
@click.option("--profile", default="1x", show_default=True,
              help="A profile of the system (the Copilot's systems/copilot/profiles: 1x, 2x, 5x or any multiple "
                   "like 3x; the job system's systems/jobs/profiles: 1x, 5x) or a path.")
@click.option("--duration", default="10m", show_default=True, help="Load time per run: 90s, 10m, 1h.")
@click.option("--stack", "kind", type=click.Choice(["native"]), default="native", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/load"), show_default=True)
@click.option("--workers", type=int, default=0, show_default=True,
              help="Locust distributed mode: a master plus N worker processes (0: one process).")
@click.option("--fault", default=None, metavar="NAME",
              help="Inject this fault under load for a window: the Copilot's broker-outage, db-outage, worker-kill, "
                   "platform-partition, api-stall (SIGSTOP the API, 2 s); the job system's db-outage, worker-kill.")
@click.option("--fault-window", default=None,
              help="Scale the catalogue's window (0.5) or give it (5m, 30s).")
@click.option("--fault-at", type=float, default=None, help="Fault start, seconds into the load (default: after ramp).")
@click.option("--find-max", is_flag=True, help="Raise the multiple (1, 2, 3, 5, 8, ...) until an SLO fails.")
@click.option("--max-multiple", type=float, default=55.0, show_default=True, help="Upper bound of --find-max.")
@click.option("--baseline", type=click.Path(exists=True, path_type=Path), default=None,
              help="An older load run's directory (or its capacity.json): shown beside this run in capacity.html; "
                   "exit 3 when a figure regresses past its tolerance and beyond its noise interval.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--time-scale", type=float, default=60.0, show_default=True,
              help="Simulator model seconds per wall second (1: flights last the profile's real durations).")
@click.option("--api-workers", type=int, default=2, show_default=True)
@click.option("--api-threads", type=int, default=None,
              help="gthread threads per API worker (default: 16 with the stream tier; without it every worker can "
                   "hold all the profile's SSE streams, ceil(1.25 x streams) + 16).")
@click.option("--stream-tier/--no-stream-tier", default=True, show_default=True,
              help="Serve GET /v1/stream from the async stream tier (its own process); without it every open stream "
                   "holds an API thread.")
@click.option("--idle-streams", type=click.IntRange(min=0, max=20_000), default=0, show_default=True,
              help="Extra SSE streams held open for the whole load by one asyncio client process "
                   "(systems/copilot/idle_streams.py), spread over the profile's operators.")
@click.option("--dispatchers", type=int, default=2, show_default=True)
@click.option("--pgbench-seconds", type=float, default=10.0, show_default=True, help="0 skips pgbench.")
@click.option("--capacity-confirms", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Confirms in the closed-loop burst that measures the confirm endpoint's capacity against "
                   "pgbench after the load (0 skips it).")
@click.option("--capacity-clients", type=click.IntRange(min=1), default=4, show_default=True,
              help="Closed-loop clients of pgbench and of the confirm burst (the same for both).")
@click.option("--drain", default=None, help="Longest wait for the backlog to settle after the load (default scales).")
@click.option("--arrivals", type=click.Choice(["open", "closed"]), default="open", show_default=True,
              help="open: every arrival on its schedule whatever the answers (latency also from the intended send "
                   "time); closed: each Locust user waits for its last journey (for comparison).")
@click.option("--connections", type=click.IntRange(min=0), default=32, show_default=True,
              help="Open model: client connections per Locust process, shared by every request (0: no limit).")
@click.option("--arrival-rate", type=click.FloatRange(min=0, min_open=True), default=None, metavar="R",
              help="Confirms offered per second: every rate of the profile (drafts, reads, streams, fleet) scaled "
                   "so that confirms arrive at R/s.")
@SYSTEM_OPTION
@VARIANT_OPTION
def load(profile: str, duration: str, kind: str, out: Path, workers: int, fault: str | None,
         fault_window: str | None, fault_at: float | None, find_max: bool, max_multiple: float,
         baseline: Path | None, seed: int, time_scale: float, api_workers: int, api_threads: int | None,
         stream_tier: bool, idle_streams: int, dispatchers: int, pgbench_seconds: float, capacity_confirms: int,
         capacity_clients: int,
         drain: str | None, arrivals: str, connections: int, arrival_rate: float | None, system_name: str,
         variant: str | None) -> None:
    """Load a traffic profile into the system's native stack with Locust (the Copilot's profiles in
    systems/copilot/profiles, the job system's in systems/jobs/profiles); write load.json (the Copilot's also
    capacity.json, the job system's load.html), Locust CSVs. Exit 1 when figures are missing or an invariant is
    violated, 2 for an option the system does not take, 3 on a --baseline regression; SLO verdicts are reported,
    not asserted."""
    from loadtests.run import LoadOptions, parse_duration

    system = _system(system_name)
    _variant_bug(system, variant, None, "")
    if system.load is None:
        raise click.UsageError(f"the {system.name} system has no load runner")
    try:
        duration_s = parse_duration(duration)
        if duration_s <= 0:
            raise ValueError(f"--duration {duration!r}: a load runs for some time (90s, 10m, 1h)")
        opts = LoadOptions(out=out, profile=profile, duration_s=duration_s, stack=kind, workers=workers,
                           fault=fault, fault_window=fault_window, fault_at_s=fault_at, find_max=find_max,
                           max_multiple=max_multiple, baseline=baseline, seed=seed, time_scale=time_scale,
                           api_workers=api_workers, api_threads=api_threads, stream_tier=stream_tier,
                           idle_streams=idle_streams, dispatchers=dispatchers,
                           pgbench_s=pgbench_seconds, capacity_confirms=capacity_confirms,
                           capacity_clients=capacity_clients,
                           drain_s=parse_duration(drain) if drain else None, arrivals=arrivals,
                           connections=connections, arrival_rate=arrival_rate,
                           extra={"variant": variant} if variant else {})
        code = system.load(opts, console)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    sys.exit(code)

@main.command()
@click.option("--runs", type=click.IntRange(min=1), default=500, show_default=True, help="Runs to draw and check.")
@click.option("--seed", type=int, default=1, show_default=True, help="Run i draws its case from (seed, i).")
@click.option("--bug", default=None, metavar="NAME",
              help="Switch on one known defect of the system (its System.bug_names; the job system's seed is its "
                   "seed-faithful variant): exit 0 when a run violates an invariant its registry entry names.")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop drawing new runs after this long (what finished is kept and shrunk).")
@click.option("--workers", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="CPU count",
              help="Worker processes of the local Dask cluster (results do not depend on it).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:8786",
              help="An existing Dask scheduler to run on instead (workers started with `dask worker`).")
@click.option("--shrink-steps", type=click.IntRange(min=0), default=400, show_default=True,
              help="Budget for shrinking each failure, in candidate runs a one-at-a-time shrinker would make "
                   "(the same whatever the machine and the number of workers).")
@click.option("--shrink-minutes", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="Wall-clock cap on shrinking each failure (a safety net; when it binds, the result says so).")
@click.option("--until-found", is_flag=True,
              help="Stop drawing runs at the first failing one (with --bug: the first that catches it), then shrink.")
@click.option("--require-coverage", is_flag=True,
              help="Fail on an unreached coverage target whatever the number of runs (default: from 500 runs).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/explore"),
              show_default=True)
@SYSTEM_OPTION
@VARIANT_OPTION
def explore(runs: int, seed: int, bug: str | None, minutes: float | None, workers: int, scheduler: str | None,
            shrink_steps: int, shrink_minutes: float, until_found: bool, require_coverage: bool, out: Path,
            system_name: str, variant: str | None) -> None:
    """Draw RUNS random workloads and fault schedules (swarm testing over the fault registry), check each run
    with every invariant, shrink the first failure of each violated invariant to an incident file with a
    one-line repro, and count the coverage targets reached. Writes DIR/explore.json, DIR/explore.html and
    DIR/failures/*.yaml. Exit 0: all held and every coverage target was reached (>= 500 runs), or with --bug,
    the bug was found; 1: a failure (or an unreached target, or --bug not found); 5: a harness error."""
    from reports.explore import write_explore_report
    from scenarios.explore import explore as run_explore
    from scenarios.explore import write_failures

    bug = _variant_bug(_system(system_name), variant, bug, "--bug")
    system = _system(system_name, bug)
    if system.explore is None:
        raise click.UsageError(f"the {system.name} system cannot be explored yet")
    out.mkdir(parents=True, exist_ok=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task(f"exploring ({'scheduler ' + scheduler if scheduler else str(workers) + ' workers'})",
                                total=runs)
        failing = [0]

        def on_run(r: dict[str, Any]) -> None:
            failing[0] += bool(r["violated"])
            progress.update(bar, description=f"exploring: {failing[0]} failing run(s)")
            progress.advance(bar)

        result = run_explore(runs, seed, bug=bug, workers=workers, scheduler=scheduler, minutes=minutes,
                             until_found=until_found, require_coverage=require_coverage, on_run=on_run,
                             on_phase=lambda what: progress.update(bar, description=what),
                             shrink_budget_s=shrink_minutes * 60.0, shrink_steps=shrink_steps, system=system.name)
    paths = write_failures(result, out)
    body = result.as_json()
    (out / "explore.json").write_text(json.dumps(body, indent=2, default=str) + "\n")
    html = write_explore_report(out, body)
    t = body["timings"]
    console.print(f"{body['runs']} runs ({body['failing_runs']} failing) in {t['wall_s']} s on {t['workers']} "
                  f"worker(s): {t['runs_per_cpu_minute']} runs per CPU-minute, peak {t['peak_rss_mb_per_worker']} MB "
                  f"per worker" + (f"; stopped early: {result.interrupted}" if result.interrupted else ""))
    table = Table(title="Coverage targets (runs that reached each)")
    for col in ("target", "runs", "hits"):
        table.add_column(col)
    for name, c in body["coverage"].items():
        table.add_row(name, str(c["runs_reached"]) if c["runs_reached"] else "[red]0[/]", str(c["hits"]))
    console.print(table)
    if body["unreached"]:
        verdict = "fails the run" if body["coverage_checked"] else "reported only: fewer than 500 runs"
        console.print(f"[yellow]never reached: {', '.join(body['unreached'])} ({verdict})[/]")
    for f, path in zip(result.failures, paths, strict=True):
        console.print(f"[red]{f['invariant']} violated[/] first in run {f['run']}; shrunk to "
                      f"{f['shrunk']['faults']} fault(s), {f['shrunk']['size']} {body['size_unit']}, "
                      f"{f['shrunk']['operations']} operations in {f['shrink_steps']} steps "
                      f"(stopped: {f['shrink_stopped']}): {path}")
        console.print(f"  repro: sortie simulate {path} --seed {f['seed']}"
                      + (f" --inject-bug {f['bug']}" if f["bug"] else "")
                      + (f" --system {system.name}" if system.name != DEFAULT_SYSTEM else "")
                      + f"   (commit {f['commit']})")
    for e in body["errors"][:3]:
        console.print(f"[red]harness error in run {e['run']} (seed {e['seed']}):[/]\n{e['error']}")
    if bug:
        console.print(f"bug {bug}: " + (f"[green]found[/] after {body['runs_to_first_failure']} run(s)"
                                        if result.finds else "[red]not found[/]"))
    console.print(f"wrote {out / 'explore.json'}, {html}" + (f" and {len(paths)} file(s) in {out / 'failures'}"
                                                             if paths else ""))
    sys.exit(result.exit_code())


@main.command("explore-bench")
@click.option("--bug", "names", multiple=True, metavar="NAME",
              help="Bugs to measure (repeatable; default: every registered bug of the system).")
@click.option("--seeds", type=click.IntRange(min=1), default=5, show_default=True,
              help="Explore seeds 1..N per bug (the medians are over these).")
@click.option("--runs", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Runs per explore before the bug counts as not found.")
@click.option("--workers", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="CPU count")
@click.option("--scheduler", default=None, metavar="tcp://HOST:8786", help="An existing Dask scheduler instead.")
@click.option("--shrink-steps", type=click.IntRange(min=0), default=400, show_default=True,
              help="Shrinking budget per find, in one-at-a-time candidate runs (see `sortie explore`).")
@click.option("--shrink-minutes", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="Wall-clock cap on each shrink (a safety net).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("out/explore-bench.json"),
              show_default=True)
@SYSTEM_OPTION
def explore_bench(names: tuple[str, ...], seeds: int, runs: int, workers: int, scheduler: str | None,
                  shrink_steps: int, shrink_minutes: float, out: Path, system_name: str) -> None:
    """How well `sortie explore` finds each injected bug: runs to the first run that catches it per explore seed
    (median over seeds 1..N), the shrunk case's faults, confirms and operations, and the shrink time. Writes OUT
    (JSON, rewritten after every trial, so a stopped bench keeps what finished) and prints the table. Exit 0 when
    every bug was found at the median, 1 otherwise, 5 on a harness error, 130 when stopped by Ctrl-C."""
    from scenarios.explore.bench import bench_bugs

    system = _system(system_name)
    if system.explore is None:
        raise click.UsageError(f"the {system.name} system has no explorer")
    if bad := [n for n in names if n not in system.bugs]:
        raise click.BadParameter(f"unknown bug(s) of {system.name}: {', '.join(bad)}; known: {', '.join(system.bugs)}",
                                 param_hint="--bug")
    chosen = list(names) or list(system.bugs)

    out.parent.mkdir(parents=True, exist_ok=True)

    def on_trial(t: dict[str, Any], so_far: dict[str, Any]) -> None:
        out.write_text(json.dumps(so_far, indent=2) + "\n")  # kept if the bench is stopped
        what = (f"found after {t['runs_to_first_find']} run(s), shrunk to {t['shrunk']['faults']} fault(s), "
                f"{t['shrunk']['operations']} ops in {t['shrink_steps']} steps, {t['shrink_s']} s "
                f"(stopped: {t['shrink_stopped']})" if t["found"] else "[red]not found[/]")
        console.print(f"{t['bug']} seed {t['seed']}: {what}")

    body = bench_bugs(chosen, range(1, seeds + 1), runs, workers=workers, scheduler=scheduler,
                      shrink_budget_s=shrink_minutes * 60.0, shrink_steps=shrink_steps, on_trial=on_trial,
                      system=system.name)
    out.write_text(json.dumps(body, indent=2) + "\n")
    table = Table(title=f"Runs to the first find (median over {seeds} seeds, {runs} runs max) and shrunk size")
    unit = system.explore.unit
    for col in ("bug", "found", "median runs", "runs per seed", "faults (median/max)", unit, "operations",
                "max shrink s"):
        table.add_column(col)
    for bug, b in body["bugs"].items():
        table.add_row(bug, f"{b['found']}/{len(b['seeds'])}", str(b["median_runs_to_first_find"] or "[red]none[/]"),
                      " ".join(str(r or "-") for r in b["runs_to_first_find"]),
                      f"{b['median_faults']}/{b['max_faults']}", str(b["median_size"]),
                      str(b["median_operations"]), str(b["max_shrink_s"]))
    console.print(table)
    console.print(f"wrote {out} ({body['wall_s']} s)" + (f"; {body['interrupted']}" if body["interrupted"] else ""))
    errors = [t for t in body["trials"] if t["errors"]]
    for t in errors:
        console.print(f"[red]harness error(s) exploring {t['bug']} at seed {t['seed']}: see `sortie explore --bug "
                      f"{t['bug']} --seed {t['seed']}"
                      + (f" --system {system.name}" if system.name != DEFAULT_SYSTEM else "") + "`[/]")
    if errors:
        sys.exit(HARNESS)
    if body["interrupted"]:
        sys.exit(INTERRUPTED)
    sys.exit(0 if all(b["median_runs_to_first_find"] for b in body["bugs"].values()) else 1)


@main.command()
@click.option("--stack", "kind", type=click.Choice(["sim", "native"]), default="sim", show_default=True,
              help="sim: every simulation scenario per bug (fast, CI); native: one real stack, switched from bug to "
                   "bug where the system can (slow).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/selfcheck"),
              show_default=True)
@click.option("--bug", "only_bugs", multiple=True, metavar="NAME",
              help="Only this bug (repeatable; default: every registered bug of the system).")
@click.option("--scenario", "ids", multiple=True, help="Only this scenario id (repeatable; default: all of the shell).")
@click.option("--workers", type=int, default=2, show_default=True, help="Parallel simulations (sim only).")
@click.option("--named", is_flag=True,
              help="Each bug only against the scenarios its registry entry names.")
@click.option("--time-factor", type=click.FloatRange(min=0, min_open=True), default=None,
              show_default="0.25; the job system's 0.1", help="native: scale of fault windows.")
@SYSTEM_OPTION
def selfcheck(kind: str, seed: int, out: Path, only_bugs: tuple[str, ...], ids: tuple[str, ...], workers: int,
              named: bool, time_factor: float | None, system_name: str) -> None:
    """Run the catalogue of the system (--system) with each of its known bugs injected; print which scenarios catch
    each bug and with which invariant. Exit 1 if any bug is caught by no scenario. Writes DIR/selfcheck.json."""
    from scenarios.catalogue import load_catalogue
    from scenarios.selfcheck import BugRun, selfcheck_native, selfcheck_sim

    system = _system(system_name)
    if kind != "sim" and system.stack_runner is None:
        raise click.UsageError(f"selfcheck --stack {kind}: the {system.name} system has no real stack")
    catalogue = load_catalogue(system.name)
    unknown = [i for i in ids if i not in catalogue]
    if unknown:
        raise click.BadParameter(f"unknown scenario(s): {', '.join(unknown)}; see `sortie scenarios`",
                                 param_hint="--scenario")
    if bad := [b for b in only_bugs if b not in system.bugs]:
        raise click.BadParameter(f"unknown bug(s) of {system.name}: {', '.join(bad)}; known: "
                                 f"{', '.join(system.bugs)}", param_hint="--bug")
    shell = "sim" if kind == "sim" else "native"
    runnable = [s.id for s in catalogue.values() if shell in s.shells and (not ids or s.id in ids)]
    total = sum(len([s for s in runnable if not named or s in system.bugs[b].scenarios])
                for b in only_bugs or system.bugs)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task(f"selfcheck ({kind})", total=total)

        def on_run(r: BugRun) -> None:
            progress.update(bar, description=f"{r.bug} x {r.scenario}: "
                            + (f"caught by {','.join(r.violated)}" if r.caught else "not caught"))
            progress.advance(bar)

        if kind == "sim":
            report = selfcheck_sim(only_bugs or None, ids or None, seed=seed, workers=workers, on_run=on_run,
                                   system=system.name, named=named)
        else:
            from scenarios.systems import StackRequest, StackUnavailable

            def open_runner(bug: str) -> Any:
                """A stack with the bug on in every process of it (one per run where its runner switches bugs)."""
                return system.stack_runner(StackRequest((out / "stacks" / bug).resolve(), seed, time_factor, bug))

            try:
                report = selfcheck_native(only_bugs or None, ids or None, seed=seed, open_runner=open_runner,
                                          on_run=on_run, system=system.name, named=named,
                                          on_stack=lambda b: progress.update(bar, description=f"the stack, for {b}"))
            except StackUnavailable as exc:
                raise EnvironmentMissing(str(exc)) from None
    table = Table(title=f"Selfcheck ({system.name}, {kind}, seed {seed}): is every injected bug caught?")
    for col in ("bug", "caught", "scenarios that caught it", "invariant(s) that fired", "not caught by"):
        table.add_column(col, overflow="fold")
    for v in report.verdicts:
        misses = [f"{r.scenario}" + (f" (error: {r.error})" if r.error else
                                     f" (not exercised: {r.not_exercised})" if r.not_exercised else "")
                  for r in v.runs if not r.caught]
        table.add_row(f"{v.bug.name}\n[dim]{v.bug.title}[/]", "[green]yes[/]" if v.caught else "[red]NO[/]",
                      ", ".join(f"{r.scenario} ({','.join(r.violated)})" for r in v.caught_by) or "-",
                      ", ".join(v.invariants()) or "[red]none[/]",
                      "; ".join(misses) if len(misses) <= 4 else f"{len(misses)} scenarios: "
                      + ", ".join(r.scenario for r in v.runs if not r.caught))
    console.print(table)
    path = report.write(out)
    console.print(f"{sum(len(v.runs) for v in report.verdicts)} runs in {report.wall_s:.1f} s; wrote {path}")
    missed = [v.bug.name for v in report.verdicts if not v.caught]
    if missed:
        console.print(f"[red]not caught by any scenario: {', '.join(missed)}[/]")
    if report.elsewhere:
        console.print(f"left out (no scenario its registry names runs in this shell): {', '.join(report.elsewhere)}")
    sys.exit(0 if report.all_caught else 1)




@main.command()
@SYSTEM_OPTION
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              help="Fuzzing time in all, shared equally by the system's roles.")
@click.option("--in-process", is_flag=True,
              help="Fuzz the system's app in this process (its in-process database) instead of its real stack.")
@click.option("--max-examples", type=click.IntRange(min=1), default=None, metavar="N",
              help="Instead of a time budget: at most N generated examples per operation in each phase (a run "
                   "bounded by work, reproducible from its seed).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              show_default="out/fuzz-NAME", help="Where fuzz.json and fuzz.md are written.")
def fuzz(system_name: str, minutes: float, in_process: bool, max_examples: int | None, seed: int,
         out: Path | None) -> None:
    """The system's API against its OpenAPI document (docs/fuzz.md): Schemathesis with every check, each role's
    credential, stateful sequences; then its invariants on the database the fuzzing left. Exit 1 on any 5xx,
    schema violation, request without an answer or invariant violated; writes OUT/fuzz.md and OUT/fuzz.json, each
    failure with a curl that reproduces it."""
    from scenarios.fuzz import fuzz as run_fuzz

    system = _system(system_name)
    if system.fuzz is None:
        raise InputError(f"the {system.name} system supplies no OpenAPI document to fuzz (its System.fuzz is None): "
                         "nothing for `sortie fuzz` to run")
    out = out or Path(f"out/fuzz-{system.name}")
    with console.status(f"fuzzing {system.name}") as status:
        report = run_fuzz(system.name, system.fuzz, minutes=minutes, in_process=in_process, seed=seed, out=out,
                          on_pass=lambda role: status.update(f"fuzzing {system.name} as {role}"),
                          max_examples=max_examples)
    json_path, md_path = report.write(out)
    table = Table(title=f"sortie fuzz: {system.name} ({report.mode}, seed {seed})")
    for col in ("role", "cases", "seconds", "failures", "no answer"):
        table.add_column(col)
    for p in report.passes:
        table.add_row(p.role, f"{p.cases:,}", f"{p.seconds:.0f}", str(len(p.findings)), str(len(p.unanswered)))
    console.print(table)
    for f in report.findings:
        console.print(f"[red]{f.operation}[/]: {f.title} ({f.check}, as {f.role}, answer {f.status}, {f.count}x)")
    for v in report.violated:
        console.print(f"[red]{v.invariant} violated[/]: {v.title} ({len(v.violations)})")
    console.print(f"{report.cases:,} cases, {len(report.findings)} distinct failures, {len(report.violated)} "
                  f"invariants violated in {report.wall_s:.0f} s; wrote {md_path} and {json_path}")
    if report.harness_errors:
        raise HarnessFailure("Schemathesis failed: " + "; ".join(report.harness_errors[:5]))
    sys.exit(VIOLATED_EXIT if report.failed else OK)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the capacity model's runs.")
@click.option("--calibrate", "calibrate_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Calibrate on these runs (e.g. 1x and 2x) and predict every run under RUN_DIR out of sample.")
@SYSTEM_OPTION
def capacity(run_dir: Path, seed: int, calibrate_dir: Path | None, system_name: str) -> None:
    """Rebuild RUN_DIR/capacity.html and the model section of capacity.json from stored load.json files, with the
    system's capacity model (--system; the Copilot's by default)."""
    spec = _capacity_of(system_name)
    with console.status("calibrating the capacity model and writing the report"):
        try:
            page = spec.write_report(run_dir, seed=seed, calibrate_dir=calibrate_dir)
        except FileNotFoundError as exc:
            raise InputError(str(exc)) from None
    summary = json.loads((run_dir / "capacity.json").read_text())["model"]["summary"]
    console.print(summary)
    console.print(f"wrote {page} and {run_dir / 'capacity.json'}")


def _add_system_commands() -> None:
    """The verbs each installed system contributes (System.commands): `sortie` verbs and `sortie stack` ones."""
    from scenarios.systems import load_system, system_names

    groups: dict[str, click.Group] = {"sortie": main, "stack": stack}
    for name in system_names():
        contribute = load_system(name).commands
        for group, commands in (contribute() if contribute is not None else {}).items():
            for command in commands:
                if command.name in groups[group].commands:
                    raise RuntimeError(f"the {name} system's verb {command.name!r} is already a verb of {group}")
                groups[group].add_command(command)


_add_system_commands()


if __name__ == "__main__":
    main()
