"""The job table and worker pool of seed 004 with the task DAG of seed 002 (reference: reference/jobs/): its
deployment in simulation (systems.jobs.sim), its invariants J1-J11 (systems.jobs.checkers), its catalogue
(catalogue/*.yaml).

Scenarios run the fixed variant unless their ``params`` say ``variant: seed``; ``--inject-bug seed`` runs any of
them on the seed-faithful variant (it is expected to fail where docs/systems/jobs.md says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The faults: imported with the system, which registers them (chaos.faults.registry("jobs")).
import systems.jobs.faults  # noqa: F401
from harness.history import History
from reference.jobs import bugs
from reference.jobs.repo import REPOS
from scenarios.systems import System
from systems.jobs.checkers import (
    INVARIANTS,
    JobsState,
    claims_beside_stuck_transactions,
    held_at_drains,
    outclaimed_workers,
)
from systems.jobs.explore import EXPLORE
from systems.jobs.fuzz import FUZZ
from systems.jobs.rules import RULES
from systems.jobs.sim import JobsSpec
from systems.jobs.variants import SEED, forced_variant, injected, pool_config


def _check_overrides(which: str, value: dict[str, Any]) -> None:
    if which == "policy":
        pool_config(value)
    elif set(value) - {"variant"} or value.get("variant", "fixed") not in REPOS:
        raise ValueError(f"params: only variant, one of {', '.join(sorted(REPOS))}")


def _deploy(scenario: Any, seed: int, **overrides: Any) -> Any:
    from systems.jobs.sim import JobsDeployment

    variant = forced_variant() or overrides.pop("variant", None) or scenario.params.get("variant", "fixed")
    return JobsDeployment(scenario.workload, seed, variant, pool_config(scenario.policy))


def _stack_runner(req: Any) -> Any:
    from systems.jobs.stack import stack_runner

    return stack_runner(req)


def _bench(profile: str, hours: float, seed: int, profile_code: bool) -> Any:
    from systems.jobs.sim_bench import run_profile

    return run_profile(profile, hours=hours, seed=seed, profile_code=profile_code)


def _commands() -> Any:
    from systems.jobs.commands import commands

    return commands()


def _load(opts: Any, console: Any) -> int:
    from systems.jobs.load import run_load

    return run_load(opts, console)


def _reclaimed(h: History, s: JobsState) -> str | None:
    """A stale claim was taken back (a killed or paused worker's job was reclaimed)."""
    return None if any(r["actor"] == "reclaimer" for r in s.log) else "no job was reclaimed"


def _zombie_outclaimed(h: History, s: JobsState) -> str | None:
    """A paused worker (a zombie) lost a claim to the reclaimer and another worker claimed that job next: the late
    write it makes on waking meets someone else's claim, the situation the fencing exists for."""
    paused = {o.value["process"] for o in h.ops if o.f == "pause"}
    outclaimed = outclaimed_workers(sorted(s.log, key=lambda r: r["id"]))
    return None if paused & outclaimed else f"no job of a paused worker ({sorted(paused)}) was claimed by another"


def _same_key_enqueued(h: History, s: JobsState) -> str | None:
    """Some key was enqueued twice at once (a double click), and both were answered."""
    keys = [e["key"] for e in s.enqueued]
    return None if len(keys) > len(set(keys)) else "no key was enqueued twice"


def _retried(h: History, s: JobsState) -> str | None:
    return None if any(r["from_status"] == "running" and r["to_status"] == "pending" and r["actor"] != "reclaimer"
                       for r in s.log) else "no job failed and was retried"


def _redriven(h: History, s: JobsState) -> str | None:
    """An operator re-drove a dead job, and a worker claimed it again."""
    again = [r["job_id"] for r in s.log if r["from_status"] == "dead" and r["to_status"] == "pending"
             and any(c["job_id"] == r["job_id"] and c["id"] > r["id"] and c["to_status"] == "running" for c in s.log)]
    return None if again else "no dead job was re-driven and claimed again"


def _time_edge_released_by_timeout(h: History, s: JobsState) -> str | None:
    """A time edge was released while its parent still ran, by its timeout (not by the parent's end)."""
    ended: dict[int, Any] = {}
    for r in s.log:
        if r["to_status"] in ("done", "dead", "cancelled"):
            ended.setdefault(r["job_id"], r["created_at"])
    early = [e for e in s.edges if e["kind"] == "time" and e["released_at"] is not None
             and (e["parent_id"] not in ended or e["released_at"] < ended[e["parent_id"]])]
    return None if early else "no time edge was released before its parent ended"


def _drained_holding(h: History, s: JobsState) -> str | None:
    """A worker was drained while it held a job (J23 then judges that it wrote that job's outcome)."""
    return None if held_at_drains(s) else f"no worker held a job when its drain began ({len(s.drains or ())} drains)"


def _stuck_beside_claims(h: History, s: JobsState) -> str | None:
    """A worker was stopped inside an open transaction (its row locked) while another worker stopped with it held a
    claim (J24 then judges that the claim was reclaimed in time, past the locked row)."""
    return None if claims_beside_stuck_transactions(s) else "no claim was held beside a stuck transaction"


def _missions_refused(h: History, s: JobsState) -> str | None:
    """Missions with a defect were sent, and answered (refused, J15 judges)."""
    sent = [m for m in s.missions if m["defect"]]
    return None if sent and all(m["answer"] != "none" for m in sent) else "no mission with a defect was answered"


SYSTEM = System(
    name="jobs", title="the job table and worker pool of seed 004 with the task DAG of seed 002",
    catalogue_dir=Path(__file__).resolve().parent / "catalogue", catalogue_order="J",
    workload_type=JobsSpec, invariants=INVARIANTS,
    expectations={"reclaimed": _reclaimed, "zombie-outclaimed": _zombie_outclaimed,
                  "same-key-enqueued": _same_key_enqueued, "retried": _retried, "redriven": _redriven,
                  "time-edge-released-by-timeout": _time_edge_released_by_timeout,
                  "missions-refused": _missions_refused, "drained-holding": _drained_holding,
                  "stuck-beside-claims": _stuck_beside_claims},
    deploy=_deploy, injected=injected, bug_names=lambda: (SEED, *bugs.NAMES), bugs=bugs.BUGS.bugs,
    check_overrides=_check_overrides, explore=EXPLORE,
    variants={"fixed": None, SEED: SEED}, stack_runner=_stack_runner, load=_load, bench=_bench,
    commands=_commands, rules=RULES,
    # J2 kills two instances at crash points (after their work, after a claim), J3 stops one (a zombie whose late
    # outcome is fenced), J7 cuts PostgreSQL's link.
    ci_stack_scenarios=("J2", "J3", "J7"),
    fuzz=FUZZ,
)
