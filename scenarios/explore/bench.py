"""How well `sortie explore` finds the injected bugs of a system (its System.bugs; the default system's unless one is
named): per bug and explore seed, the runs to the first run that catches it (``--until-found``), the size of its
shrunk case and the shrink time; per bug, the median over the seeds. Measured and reported (`sortie explore-bench`),
never asserted: the goals (every bug within 1,000 runs, shrunk cases of at most 3 faults and 100 operations, shrinking
under 5 minutes) are read off the table."""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from scenarios.explore import explore
from scenarios.systems import DEFAULT_SYSTEM, load_system


def _trial(bug: str, seed: int, runs: int, scheduler: str, shrink_budget_s: float, shrink_steps: int,
           system: str = DEFAULT_SYSTEM) -> dict[str, Any]:
    wall0 = time.perf_counter()
    result = explore(runs, seed, bug=bug, scheduler=scheduler, until_found=True, shrink_budget_s=shrink_budget_s,
                     shrink_steps=shrink_steps, system=system)
    body = result.as_json()
    expected = set(load_system(system).bugs[bug].invariants)
    shown = next((f for f in result.failures if f["invariant"] in expected), None)
    return {
        "bug": bug, "seed": seed, "found": bool(result.finds), "runs_to_first_find": body["runs_to_first_failure"],
        "runs_done": body["runs"], "invariant": shown and shown["invariant"], "shrunk": shown and shown["shrunk"],
        "repro": shown and shown["repro"], "errors": len(body["errors"]),
        "shrink_steps": shown and shown["shrink_steps"], "shrink_stopped": shown and shown["shrink_stopped"],
        "shrink_s": shown and round(shown["cost"]["shrink_wall_s"], 1), "wall_s": round(time.perf_counter() - wall0, 1),
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(trials: list[dict[str, Any]], runs: int) -> dict[str, dict[str, Any]]:
    """Per bug: medians over its seeds. A seed that did not find the bug counts as more than ``runs`` runs, so the
    median says "not found" (None) when half the seeds or more missed it."""
    table: dict[str, dict[str, Any]] = {}
    for bug in dict.fromkeys(t["bug"] for t in trials):
        mine = [t for t in trials if t["bug"] == bug]
        found = [t for t in mine if t["found"]]
        firsts = sorted(t["runs_to_first_find"] if t["found"] else runs + 1 for t in mine)
        median_first = statistics.median(firsts)
        table[bug] = {
            "seeds": [t["seed"] for t in mine], "found": len(found),
            "runs_to_first_find": [t["runs_to_first_find"] for t in mine],
            "median_runs_to_first_find": None if median_first > runs else median_first,
            "median_faults": _median([t["shrunk"]["faults"] for t in found]),
            "median_size": _median([t["shrunk"]["size"] for t in found]),
            "median_operations": _median([t["shrunk"]["operations"] for t in found]),
            "max_faults": max((t["shrunk"]["faults"] for t in found), default=None),
            "max_shrink_s": max((t["shrink_s"] for t in found), default=None),
            # "time budget" here means the shrunk size depended on the machine's speed: rerun with more minutes
            "shrinks_stopped_by": dict(Counter(t["shrink_stopped"] for t in found)),
            "invariants": sorted({t["invariant"] for t in found}),
        }
    return table


def bench_body(trials: list[dict[str, Any]], runs: int, shrink_budget_s: float, shrink_steps: int, wall_s: float,
               interrupted: str | None = None) -> dict[str, Any]:
    return {"runs": runs, "shrink_budget_s": shrink_budget_s, "shrink_steps": shrink_steps,
            "wall_s": round(wall_s, 1), "interrupted": interrupted, "bugs": summarize(trials, runs),
            "trials": trials}


def bench_bugs(names: Iterable[str], seeds: Iterable[int], runs: int, *, workers: int = 1,
               scheduler: str | None = None, shrink_budget_s: float = 300.0, shrink_steps: int = 400,
               on_trial: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
               system: str = DEFAULT_SYSTEM) -> dict[str, Any]:
    """Every (bug, seed) explore on one Dask cluster (a LocalCluster of ``workers`` unless ``scheduler``).
    ``on_trial(trial, body so far)`` after each; Ctrl-C stops and returns what finished (``interrupted``)."""
    from dask.distributed import LocalCluster

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR)
        scheduler = cluster.scheduler_address
    wall0 = time.perf_counter()
    trials: list[dict[str, Any]] = []
    interrupted = None
    try:
        for bug in names:
            for seed in seeds:
                trials.append(_trial(bug, seed, runs, scheduler, shrink_budget_s, shrink_steps, system))
                if on_trial:
                    on_trial(trials[-1], bench_body(trials, runs, shrink_budget_s, shrink_steps,
                                                    time.perf_counter() - wall0, "still running"))
    except KeyboardInterrupt:
        interrupted = f"interrupted (Ctrl-C) after {len(trials)} trial(s)"
    finally:
        if cluster is not None:
            cluster.close()
    return bench_body(trials, runs, shrink_budget_s, shrink_steps, time.perf_counter() - wall0, interrupted)
