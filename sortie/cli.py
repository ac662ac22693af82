"""`sortie`: one console entry point with thin verbs over the scenarios, the simulation and reports."""

from __future__ import annotations

import json
import os
import platform as py_platform
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scenarios.catalogue import CATALOGUE
from scenarios.checkers import VIOLATED

# The RocketMQ client's gRPC core logs at INFO on every fork (process launches): keep the CLI readable.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
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
    not_sim = [f"{i} ({CATALOGUE[i].title})" for i in ids if "sim" not in CATALOGUE[i].shells]
    if not_sim:
        raise click.ClickException(f"does not run in simulation: {'; '.join(not_sim)}")
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


# ---------------------------------------------------------------------- the real stack

STACK_CHOICES = click.Choice(["native", "containers", "external"])


@main.group()
def stack() -> None:
    """Install, start, inspect and stop the real stack (PostgreSQL, Redis, RocketMQ, S3, Toxiproxy)."""


@stack.command("install")
def stack_install() -> None:
    """Build or fetch every binary and jar into the cache (idempotent; a second run reuses them)."""
    from stack.native import install

    with console.status("installing the native stack (cached by version)"):
        where = install()
    for part, path in where.items():
        console.print(f"{part:10s} {path}")


def _default_run_dir() -> Path:
    return Path("out/stack")


@stack.command("up")
@click.option("--stack", "kind", type=STACK_CHOICES, default="native", show_default=True, envvar="SORTIE_STACK",
              help="Provider (or the SORTIE_STACK environment variable).")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=_default_run_dir(),
              show_default=True)
@click.option("--time-scale", type=float, default=60.0, show_default=True,
              help="Simulator model seconds per wall second.")
def stack_up(kind: str, run_dir: Path, time_scale: float) -> None:
    """Start the stack, print its endpoints, and stay up until interrupted (Ctrl-C or `sortie stack down`)."""
    import os
    import signal
    import threading

    from stack.native import NativeOptions, NativeStack

    _only_native(kind)
    native = NativeStack(run_dir.resolve(), NativeOptions(time_scale=time_scale))
    with console.status("starting the native stack"):
        endpoints = native.start()
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
    """Health of a running stack started by `sortie stack up`."""
    import requests

    from stack.native import Endpoints

    path = run_dir / "stack.json"
    if not path.exists():
        raise click.ClickException(f"no stack state in {path}: is a stack up?")
    ep = Endpoints.read(path)
    table = Table(title=f"stack in {run_dir}")
    table.add_column("part")
    table.add_column("endpoint")
    table.add_column("state")
    checks = {**ep.health, "toxiproxy": f"{ep.toxiproxy_api}/version"}
    for name, url in checks.items():
        try:
            ok = requests.get(url, timeout=3).status_code == 200
        except requests.RequestException:
            ok = False
        table.add_row(name, url, "[green]up[/]" if ok else "[red]down[/]")
    for name, addr in sorted(ep.proxies.items()):
        table.add_row(f"link {name}", addr, "proxied")
    console.print(table)


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
        raise click.ClickException(f"no running stack in {run_dir}")
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            console.print("stack stopped")
            return
        time.sleep(0.2)
    raise click.ClickException(f"the stack supervisor {pid} did not stop within 120 s")


def _only_native(kind: str) -> None:
    if kind == "containers":
        raise click.ClickException("the containers provider needs a Docker engine (none on this machine); "
                                   "use --stack native")
    if kind == "external":
        raise click.ClickException("the external provider is not built yet; use --stack native")


@main.command()
@click.option("--stack", "kind", type=STACK_CHOICES, default="native", show_default=True, envvar="SORTIE_STACK",
              help="Provider (or the SORTIE_STACK environment variable).")
@click.option("--all", "run_all", is_flag=True, help="Every scenario that runs on the real stack.")
@click.option("--scenario", "ids", multiple=True, help="Scenario id (repeatable).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/native"),
              show_default=True)
@click.option("--time-factor", type=float, default=0.25, show_default=True,
              help="Scale of the scenario's windows (1 = the documented fault windows).")
def run(kind: str, run_all: bool, ids: tuple[str, ...], seed: int, out: Path, time_factor: float) -> None:
    """Run scenarios against the real stack; same summary.json / junit.xml / histories as `simulate`."""
    from reports.results import write_junit, write_summary
    from scenarios.stack_run import StackScenarioRunner
    from stack.native import NativeOptions, NativeStack

    _only_native(kind)
    if run_all == bool(ids):
        raise click.UsageError("give --all or at least one --scenario ID")
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise click.BadParameter(f"unknown scenario(s): {', '.join(unknown)}", param_hint="--scenario")
    chosen = [s for s in CATALOGUE.values() if "native" in s.shells and (run_all or s.id in ids)]
    skipped = [s.id for s in CATALOGUE.values() if s.id in ids and "native" not in s.shells]
    if skipped:
        raise click.ClickException(f"not runnable on the real stack yet: {', '.join(skipped)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "histories").mkdir(exist_ok=True)
    results = []
    native = NativeStack((out / "stack").resolve(), NativeOptions(seed=seed, policy=STACK_POLICY))
    with console.status("starting the native stack"):
        native.start()
    try:
        runner = StackScenarioRunner(native, time_factor=time_factor)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as progress:
            bar = progress.add_task("running", total=len(chosen))
            for scn in chosen:
                progress.update(bar, description=f"running {scn.id} {scn.slug} on the native stack")
                result = runner.run(scn, seed)
                result.history.write_jsonl(out / "histories" / f"{scn.id}.jsonl")
                results.append(result)
                progress.advance(bar)
    finally:
        native.stop()
    write_summary(out, results, {"shell": "native", "seed": seed, "time_factor": time_factor})
    write_junit(out, results, "native")
    _print_results(results)
    sys.exit(0 if results and all(r.passed for r in results) else 1)


# Thresholds scaled for the real stack's shortened windows (the simulation keeps the defaults).
STACK_POLICY = {
    "reconcile_interval_s": 2.0,
    "stale_after_s": {"CREATED": 30, "QUEUED": 10, "VALIDATING": 10, "DISPATCHING": 8, "DISPATCH_FAILED": 5,
                      "EXECUTING": 60, "CANCEL_PENDING": 8},
    "invisible_s": 10.0,
    "report_retry": {"attempts": 20, "base_s": 1.0, "cap_s": 8.0},
}


if __name__ == "__main__":
    main()
