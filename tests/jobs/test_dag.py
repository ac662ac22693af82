"""Seed 002's DAG over the job table: refused shapes, idempotent creation, and in simulation the release rules
(hard: after the parent is done; soft: after it ended; time: after its timeout) with a diamond join, a failing step
whose hard descendants are cancelled, and the in-degree kept equal to the unreleased edges."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from kernel.sqlite import real_transactions
from reference.jobs.dag import Mission, MissionConflict, MissionRefused, Step, check_acyclic, create_mission
from reference.jobs.models import Job, JobBase, JobDependency
from reference.jobs.pool import PoolConfig
from reference.jobs.repo import REPOS
from reference.jobs.rows import NewJob
from systems.jobs.sim import MISSION_EDGES, MISSION_STEPS, JobsSpec, simulate_jobs

FAST = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)


def _mission(edges: tuple[tuple[str, str, str], ...], names: str = "abcd") -> Mission:
    return Mission("m", tuple(Step(n, "survey") for n in names), edges)


@pytest.mark.parametrize(("edges", "says"), [
    ((("a", "b", "hard"), ("b", "c", "hard"), ("c", "a", "soft")), "cycle"),
    ((("a", "a", "hard"),), "itself"),
    ((("a", "b", "hard"), ("a", "b", "soft")), "twice"),
    ((("a", "x", "hard"),), "outside"),
    ((("a", "b", "later"),), "kind"),
])
def test_a_mission_that_is_not_a_dag_over_its_own_jobs_is_refused(edges: tuple, says: str) -> None:
    with pytest.raises(MissionRefused, match=says):
        check_acyclic(_mission(edges))


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=20))
def test_edges_that_only_point_back_in_a_fixed_order_are_always_accepted(pairs: list[tuple[int, int]]) -> None:
    edges = tuple({(f"j{max(a, b)}", f"j{min(a, b)}", "hard") for a, b in pairs if a != b})
    check_acyclic(Mission("m", tuple(Step(f"j{i}", "survey") for i in range(8)), edges))


def test_the_mission_shape_of_the_simulation_is_a_dag() -> None:
    check_acyclic(Mission("m", tuple(Step(n, k) for n, k, _ in MISSION_STEPS), MISSION_EDGES))


@pytest.mark.parametrize("variant", ["seed", "fixed"])
def test_missions_run_in_dependency_order_with_a_diamond_join(variant: str) -> None:
    run = simulate_jobs(JobsSpec(jobs=0, missions=8, fail_rate=0.1, work_median_s=10.0), 1, variant, cfg=FAST)
    assert [v for v in run.violated if v in ("J8", "J9", "J10")] == []
    assert Counter(j["status"] for j in run.state.jobs) == Counter({"done": 48})
    assert all(e["released_at"] is not None for e in run.state.edges)


def test_a_failing_step_cancels_its_hard_descendants_and_releases_its_soft_ones() -> None:
    """Every mission's first inspection always fails: it goes dead after MaxRetry, the report (hard on it) is
    cancelled, and the notification (soft on the report) still runs, as does the other inspection."""
    spec = JobsSpec(jobs=0, missions=3, failing_steps=("inspect-1",), work_median_s=5.0)
    run = simulate_jobs(spec, 2, "fixed", cfg=FAST)
    assert run.violated == []
    by_step = Counter((j["idempotent_key"].split(":")[1], j["status"]) for j in run.state.jobs)
    assert by_step == Counter({("survey", "done"): 3, ("inspect-1", "dead"): 3, ("inspect-2", "done"): 3,
                               ("report", "cancelled"): 3, ("notify", "done"): 3, ("escalate", "done"): 3})


def test_a_time_edge_releases_its_child_while_the_parent_still_runs() -> None:
    """The survey takes 400 s against its 120 s timeout: the escalation starts before the survey ends."""
    spec = JobsSpec(jobs=0, missions=1, work_median_s=400.0, work_sigma=0.0)
    run = simulate_jobs(spec, 3, "fixed", cfg=PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0,
                                                        handler_timeout_s=1000.0))
    assert run.violated == []
    ids = {j["idempotent_key"].split(":")[1]: j["id"] for j in run.state.jobs}
    logs = run.state.logs_by_job
    escalated = next(r["created_at"] for r in logs[ids["escalate"]] if r["to_status"] == "running")
    survey_done = next(r["created_at"] for r in logs[ids["survey"]] if r["to_status"] == "done")
    assert escalated < survey_done


def test_a_mission_whose_step_key_another_job_holds_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """create_mission: a step's key taken by a job outside the mission (seed 004's idempotent key answers that job)
    makes the mission a conflict, refused whole: no job of it, no edge."""
    # (pysqlite opens no transaction before the enqueue's SAVEPOINT: kernel.sqlite says why and how)
    engine = real_transactions(create_engine(f"sqlite:///{tmp_path / 'jobs.db'}"))
    JobBase.metadata.create_all(engine)
    repo = REPOS["fixed"]

    def tx(fn: Callable[[Tx], Any]) -> Any:
        with Session(engine) as session, session.begin():
            return fn(Tx(session, datetime.now(UTC), uuid.uuid4))

    tx(lambda t: repo.enqueue(t, NewJob("report", "m:b")))  # a plain job holds step b's key
    mission = Mission("m", (Step("a", "survey"), Step("b", "report")), (("b", "a", "hard"),))
    with pytest.raises(MissionConflict):
        tx(lambda t: create_mission(t, mission, repo.enqueue))
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job)).scalar_one() == 1
        assert conn.execute(select(func.count()).select_from(JobDependency)).scalar_one() == 0
    engine.dispose()


def test_a_step_or_a_job_that_names_no_timeout_gets_seed_002s_default() -> None:
    """Seed 002's task table: ``timeout_seconds INT NOT NULL DEFAULT 300`` (it releases a time edge's child)."""
    seed_default_s = 300
    assert Step("a", "survey").timeout_s == seed_default_s
    assert NewJob("survey", "k").timeout_s == seed_default_s
