"""The job system's own verbs (System.commands): `sortie stack bench-jobs`, its claims per second on the real
stack beside pgbench."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import click


@click.command("bench-jobs")
@click.option("--jobs", "jobs_n", type=click.IntRange(min=10), default=2000, show_default=True,
              help="Jobs enqueued up front, then claimed by two instances.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Workers per instance.")
@click.option("--pgbench-seconds", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="pgbench's run of the claim statement (0 skips it).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the figures as JSON.")
def stack_bench_jobs(jobs_n: int, workers: int, pgbench_seconds: float, out: Path | None) -> None:
    """The job system's claims per second on the real stack (two instances, PostgreSQL through Toxiproxy) beside
    pgbench running the same conditional UPDATE and log row, in one run on one PostgreSQL."""
    from rich.console import Console

    from systems.jobs.bench import bench_claims

    with Console().status(f"claiming {jobs_n} jobs with two instances, then pgbench"):
        figures = bench_claims(jobs_n, workers, pgbench_seconds)
    shown = {**figures, "pgbench": {k: v for k, v in figures["pgbench"].items() if k != "script"}}
    click.echo(json.dumps(shown, indent=2))
    if out:
        out.write_text(json.dumps(figures, indent=2) + "\n")


def commands() -> Mapping[str, Sequence[click.Command]]:
    return {"stack": [stack_bench_jobs]}
