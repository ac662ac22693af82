"""The job system (seed 004 + 002) in the simulation shell: the fixed variant keeps every invariant under
failures, kills, zombies, a database outage and handlers longer than the reclaim threshold; the seed-faithful
variant breaks the invariants its defects predict, each with a schedule written out here (docs/systems/jobs.md
tells them in words). Virtual time; deterministic per seed."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from reference.jobs.pool import ALERTS, PoolConfig
from systems.jobs.sim import JobsSpec, pause, simulate_jobs

FAST = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)


def _statuses(run: Any) -> Counter[str]:
    return Counter(j["status"] for j in run.state.jobs)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fixed_variant_keeps_every_invariant_under_failures(seed: int) -> None:
    spec = JobsSpec(jobs=60, fail_rate=0.2, failing=2, hanging=1, poison=1, unregistered=1, same_key_ratio=0.2)
    run = simulate_jobs(spec, seed, "fixed", cfg=FAST)
    assert run.violated == []
    assert _statuses(run) == Counter({"done": 55, "dead": 5})  # failing, hanging (timed out), poison, unregistered
    assert len({e["key"] for e in run.state.enqueued}) == 60 and len(run.state.enqueued) > 60  # double clicks


def test_one_seed_gives_one_log() -> None:
    spec = JobsSpec(jobs=30, fail_rate=0.2)
    a, b = (simulate_jobs(spec, 7, "seed").state.log for _ in range(2))
    assert a == b


def test_the_seed_claims_a_retry_before_its_backoff_ends() -> None:
    """Seed 004's Claim re-checks only the status: a worker that read its batch of candidates before another
    failed one of them and put it back with a backoff claims it at once (J3)."""
    spec = JobsSpec(jobs=60, fail_rate=0.2)
    seed, fixed = simulate_jobs(spec, 1, "seed"), simulate_jobs(spec, 1, "fixed")
    assert "J3" in seed.violated and fixed.violated == []


def test_the_seed_reclaims_a_job_that_kills_its_worker_forever() -> None:
    """ReclaimStale puts a stale job back without counting an attempt: a job whose work kills its worker is claimed
    again after every reclaim, never dead (J4, and J6: still not settled at the end); the fixed variant buries it
    after MaxRetry + 1 attempts."""
    spec = JobsSpec(jobs=4, crashing=1)
    seed = simulate_jobs(spec, 1, "seed", cfg=FAST, until_s=3600.0)
    fixed = simulate_jobs(spec, 1, "fixed", cfg=FAST, until_s=3600.0)
    assert {"J4", "J6"} <= set(seed.violated)
    assert fixed.violated == [] and _statuses(fixed) == Counter({"done": 3, "dead": 1})


def test_the_seed_buries_a_job_past_max_retry_with_its_log_row() -> None:
    """Seed 004's Fail: past MaxRetry the job goes dead, and the port writes that change's job_log row in the same
    transaction (seed 002 §4.4), as the fixed variant does (mutation testing at 5986760: an inverted row count in the
    seed's dead branch survived, every seed test green)."""
    run = simulate_jobs(JobsSpec(jobs=3, failing=1), 1, "seed", cfg=PoolConfig(max_retry=2))
    dead = [j["id"] for j in run.state.jobs if j["status"] == "dead"]
    assert len(dead) == 1 and "J5" not in run.violated
    last = run.state.logs_by_job[dead[0]][-1]
    assert (last["from_status"], last["to_status"], last["detail"]["retry"]) == ("running", "dead", 3)


def test_a_stale_workers_outcome_lands_on_a_job_another_claim_holds_in_the_seed() -> None:
    """A job's work takes 100 s, its first fails, and each worker that reads the retry count of a failure then stops
    (SIGSTOP) for 120 s. The reclaim threshold is 60 s: the seed (no heartbeat) reclaims the job while its worker
    still runs it, another worker claims it, and when the first one's answer comes its Done or Fail, by id and status
    only, writes over the claim that holds the job now (J2). The fixed variant renews its claim while it works, the
    paused worker's claim is reclaimed once, and fencing refuses that zombie's late write."""
    spec = JobsSpec(jobs=1, work_median_s=100.0, work_sigma=0.0)

    def zombies(world: Any, service: Any, history: Any) -> None:
        service.fail_first = {key: 1 for key in _keys(spec)}
        for instance in ("instance-a", "instance-b"):
            pause(world, instance, "job.fail.read", "after", seconds=120.0)

    seed = simulate_jobs(spec, 1, "seed", cfg=FAST, faults=zombies)
    fixed = simulate_jobs(spec, 1, "fixed", cfg=FAST, faults=zombies)
    assert "J2" in seed.violated
    assert fixed.violated == [] and _statuses(fixed) == Counter({"done": 1})
    assert any(op.f == "pause" for op in fixed.history.ops)
    assert [r["actor"] for r in fixed.state.log if r["from_status"] == "running"].count("reclaimer") == 1


def test_a_handler_longer_than_the_reclaim_threshold_keeps_its_claim_in_the_fixed_variant() -> None:
    """The fixed variant renews a running claim (heartbeat): work of 200 s under a 60 s threshold is not reclaimed,
    each job is claimed once; the seed reclaims it mid-run."""
    spec = JobsSpec(jobs=6, work_median_s=200.0, work_sigma=0.0)
    fixed = simulate_jobs(spec, 1, "fixed", cfg=FAST)
    seed = simulate_jobs(spec, 1, "seed", cfg=FAST)
    assert fixed.violated == []
    assert all(Counter(r["job_id"] for r in fixed.state.log if r["to_status"] == "running")[j["id"]] == 1
               for j in fixed.state.jobs)
    assert any(r["actor"] == "reclaimer" for r in seed.state.log)  # the seed took running work away


def test_kills_and_a_database_outage_lose_nothing_in_the_fixed_variant() -> None:
    spec = JobsSpec(jobs=40, fail_rate=0.1)

    def faults(world: Any, service: Any, history: Any) -> None:
        from kernel.failpoints import CrashPoint

        world.arm(CrashPoint("instance-b", "execute", "after", "kill", 3))  # done work, outcome never written
        world.arm(CrashPoint("instance-a", "job.claim", "after", "kill", 2))  # claimed, never run
        world.env.process(_outage(world, at_s=30.0, for_s=20.0))

    run = simulate_jobs(spec, 2, "fixed", cfg=FAST, faults=faults)
    assert run.violated == []
    assert _statuses(run) == Counter({"done": 40})
    kills = [op for op in run.history.ops if op.f == "kill"]
    assert len(kills) == 5


def _outage(world: Any, at_s: float, for_s: float) -> Any:
    """A simpy process: the database is away from ``at_s`` for ``for_s`` simulated seconds, its window recorded in
    the history as the runner's faults are (J17 and J18 excuse a worker cut off the database during it)."""
    yield world.env.timeout(at_s)
    world.db_down = True
    world.history.fault_start(world.env.now, "db-outage")
    yield world.env.timeout(for_s)
    world.db_down = False
    world.history.fault_stop(world.env.now, "db-outage")


def _keys(spec: JobsSpec) -> list[str]:
    import random

    from systems.jobs.sim import _jobs

    return [n.idempotent_key for n in _jobs(spec, random.Random("1:jobs"))]


@pytest.mark.sim
def test_the_simulation_bench_runs_a_load_profile_and_checks_every_invariant(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`sortie bench --system jobs`: the 1x profile's rates for 36 simulated seconds (about 340 jobs)."""
    import json

    from click.testing import CliRunner

    from sortie.cli import main

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--system", "jobs", "--hours", "0.01", "--out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["jobs"] == round(6 * 36) + 6 * round(0.5 * 36)  # singles + missions of six steps
    assert figures["settled_jobs"] == figures["jobs"] and figures["invariants_held"] and figures["transactions"] > 0
    assert figures["wall_seconds_per_10000_jobs"] > 0
    unknown = CliRunner().invoke(main, ["bench", "--system", "jobs", "--profile", "nope"])
    assert unknown.exit_code == 2 and "no job-system profile" in unknown.output


def test_each_job_gone_dead_is_alerted_once_and_only_those(caplog: pytest.LogCaptureFixture) -> None:
    """Seed 004: a job gone dead "进告警 + 人工介入". One JOB_DEAD alert per dead job, whichever way it died (retries
    spent, a poison payload, an unregistered type, a reclaim past MaxRetry), and none for a job that lived."""
    spec = JobsSpec(jobs=30, fail_rate=0.2, failing=2, poison=1, unregistered=1, crashing=1)
    with caplog.at_level(logging.ERROR, logger=ALERTS):
        run = simulate_jobs(spec, 1, "fixed", cfg=FAST, until_s=3600.0)
    dead = sorted(j["id"] for j in run.state.jobs if j["status"] == "dead")
    alerts = [r for r in caplog.records if r.name == ALERTS]
    assert len(dead) == 5 and sorted(r.alert_fields["job_id"] for r in alerts) == dead
    assert {r.alert for r in alerts} == {"JOB_DEAD"}
    reasons = " ".join(r.alert_fields["reason"] for r in alerts)
    assert "payload is not JSON" in reasons and "no handler" in reasons and "attempts spent" in reasons


def test_a_round_lost_to_a_database_outage_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The seed: a failed Claimable skips the round "+ 记 WARN"; the pool says which worker and why, in one line."""
    def outage(world: Any, service: Any, history: Any) -> None:
        world.env.process(_outage(world, at_s=5.0, for_s=10.0))

    with caplog.at_level(logging.INFO, logger="reference.jobs.pool"):
        run = simulate_jobs(JobsSpec(jobs=10), 1, "fixed", cfg=FAST, faults=outage)
    assert run.violated == []
    skipped = [r.getMessage() for r in caplog.records if "candidates read failed" in r.getMessage()]
    assert skipped and all("\n" not in m for m in skipped)
    # Said at each doubling of a worker's failures in a row (1, 2, 4...), not once per poll of the outage, and its
    # first round that works again is said once.
    said: dict[str, list[int]] = {}
    for m in skipped:
        worker, _, rest = m.partition(":")
        said.setdefault(worker, []).append(int(rest.split("(")[1].split()[0]))
    assert all(counts == [2 ** i for i in range(len(counts))] for counts in said.values()), said
    assert max(len(c) for c in said.values()) >= 3, said  # the outage outlasted a few polls
    again = Counter(r.getMessage().partition(":")[0] for r in caplog.records
                    if "candidates read succeeded again" in r.getMessage())
    assert again == Counter(said.keys()), (again, said)
