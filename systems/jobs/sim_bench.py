"""`sortie bench --system jobs`: the job system's simulation under one of its load profiles (systems/jobs/profiles)
for N simulated hours, no faults: wall time, wall time per 10,000 jobs, peak memory, every invariant checked.

The profile's rates become the simulation's workload (its JobsSpec): single jobs and missions arrive over the
window at the profile's rates, with its work times, failure rate, double clicks and workers per instance. A mission
is the simulation's own DAG shape (systems.jobs.sim.MISSION_STEPS, six steps with hard, soft and time edges), not
the load's width."""

from __future__ import annotations

import cProfile
import io
import pstats
import resource
import time
from dataclasses import dataclass
from typing import Any

from systems.jobs.sim import MISSION_STEPS, JobsSpec


@dataclass
class JobsSimBench:
    profile: str
    simulated_s: float
    wall_s: float
    jobs: int
    settled: int
    transactions: int
    peak_rss_mb: float
    invariants_held: bool
    violated: list[str]
    hotspots: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"system": "jobs", "profile": self.profile, "simulated_seconds": self.simulated_s,
                "wall_seconds": round(self.wall_s, 3), "jobs": self.jobs, "settled_jobs": self.settled,
                "wall_seconds_per_10000_jobs": round(self.wall_s / max(1, self.jobs) * 10_000, 2),
                "speedup_over_real_time": round(self.simulated_s / self.wall_s, 1), "transactions": self.transactions,
                "peak_rss_mb": round(self.peak_rss_mb, 1), "invariants_held": self.invariants_held,
                "violated": self.violated}


def run_profile(name: str, *, hours: float = 1.0, seed: int = 1, profile_code: bool = False) -> JobsSimBench:
    from scenarios.runner import simulate
    from systems.jobs.explore import case
    from systems.jobs.load import load_profile

    p = load_profile(name)
    duration = 3600.0 * hours
    spec = JobsSpec(jobs=max(1, round(p.jobs_per_s * duration)), window_s=duration,
                    workers_per_instance=p.workers_per_instance, same_key_ratio=p.same_key_ratio,
                    work_median_s=p.work_median_s, work_sigma=p.work_sigma, fail_rate=p.fail_rate,
                    missions=round(p.missions_per_s * duration))
    scenario = case("BENCH", spec, (), {})
    profiler = cProfile.Profile() if profile_code else None
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    result = simulate(scenario, seed)
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - t0
    hotspots = ""
    if profiler:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(25)
        hotspots = buf.getvalue()
    counts = result.counts
    violated = [v.invariant for v in result.verdicts if v.status == "violated"]
    return JobsSimBench(p.name, duration, wall, spec.jobs + len(MISSION_STEPS) * spec.missions,
                        counts.get("done", 0) + counts.get("dead", 0) + counts.get("cancelled", 0),
                        int(result.stats.get("transactions", 0)),
                        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, not violated, violated, hotspots)
