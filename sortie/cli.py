"""`sortie`: one console entry point with thin verbs over the scenarios, the simulation and reports."""

from __future__ import annotations

import json
import platform as py_platform
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scenarios.catalogue import CATALOGUE
from scenarios.checkers import VIOLATED

# Wide enough for the verdict table in CI logs, where there is no terminal to measure.
console = Console(width=None if sys.stdout.isatty() else 120)


@click.group()
@click.version_option(package_name="sortie")
def main() -> None:
    """Simulation and fault-injection harness for the drone Copilot task/dispatch backend."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def scenarios(as_json: bool) -> None:
    """List the scenario catalogue."""
    rows = [{"id": s.id, "slug": s.slug, "shells": list(s.shells), "title": s.title} for s in CATALOGUE.values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="Sortie scenarios")
    for col in ("id", "slug", "shells", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], r["slug"], ",".join(r["shells"]), r["title"])
    console.print(table)


@main.command()
@click.option("--all", "run_all", is_flag=True, help="Run every scenario that exists in simulation.")
@click.option("--scenario", "ids", multiple=True, help="Scenario id (repeatable).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/sim"), show_default=True)
def simulate(run_all: bool, ids: tuple[str, ...], seed: int, out: Path) -> None:
    """Run scenarios in deterministic simulation (no services). Exit 0 only if every invariant holds."""
    from reports.results import write_junit, write_summary
    from scenarios.runner import simulate as run_one

    if run_all == bool(ids):
        raise click.UsageError("give --all or at least one --scenario ID")
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise click.BadParameter(f"unknown scenario(s): {', '.join(unknown)}; see `sortie scenarios`",
                                 param_hint="--scenario")
    chosen = [s for s in CATALOGUE.values() if "sim" in s.shells and (run_all or s.id in ids)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "histories").mkdir(exist_ok=True)
    results = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task("simulating", total=len(chosen))
        for scn in chosen:
            progress.update(bar, description=f"simulating {scn.id} {scn.slug}")
            result = run_one(scn, seed)
            result.history.write_jsonl(out / "histories" / f"{scn.id}.jsonl")
            results.append(result)
            progress.advance(bar)
    meta = {"shell": "sim", "seed": seed, "python": py_platform.python_version()}
    write_summary(out, results, meta)
    write_junit(out, results, "sim")
    _print_results(results)
    console.print(f"wrote {out / 'summary.json'}, {out / 'junit.xml'} and {out / 'histories'}/")
    sys.exit(0 if all(r.passed for r in results) else 1)


def _print_results(results: list) -> None:  # type: ignore[type-arg]
    table = Table(title="Scenario verdicts")
    for col, justify in (("id", "left"), ("scenario", "left"), ("result", "left"), ("fault fired", "left"),
                         ("invariants", "left"), ("tasks", "right"), ("digest", "left"), ("wall s", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        held = [v.invariant for v in r.verdicts if v.status == "held"]
        bad = [v.invariant for v in r.verdicts if v.status == VIOLATED]
        invariants = f"[red]violated {' '.join(bad)}[/]" if bad else f"{held[0]}-{held[-1]} held" if held else "-"
        table.add_row(r.id, r.slug, "[green]PASS[/]" if r.passed else "[red]FAIL[/]",
                      "yes" if r.exercised is None else f"[red]no[/]: {r.exercised}", invariants,
                      str(r.counts.get("tasks", 0)), r.history_digest[:12], f"{r.wall_s:.1f}")
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


@main.command()
@click.option("--profile", default="1x", show_default=True, help="Profile name in loadtests/profiles or a path.")
@click.option("--hours", type=float, default=1.0, show_default=True, help="Simulated hours.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--profile-code", is_flag=True, help="Also print where the wall time goes (cProfile).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the figures as JSON.")
def bench(profile: str, hours: float, seed: int, profile_code: bool, out: Path | None) -> None:
    """Benchmark the simulation: a traffic profile for N simulated hours (no faults)."""
    from scenarios.bench import run_profile
    from scenarios.workload import load_profile

    with console.status(f"simulating {hours:g} h of the {profile} profile"):
        result = run_profile(load_profile(profile), hours=hours, seed=seed, profile_code=profile_code)
    figures = result.as_json()
    table = Table(title=f"Simulation benchmark: {profile}, {hours:g} simulated hour(s)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in figures.items():
        table.add_row(k, str(v))
    console.print(table)
    if profile_code:
        console.print(result.hotspots)
    if out is not None:
        out.write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(0 if result.invariants_held else 1)


if __name__ == "__main__":
    main()
