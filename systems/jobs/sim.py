"""The job system in the simulation shell: its schema on the simulation's interleaving database, two instances of
the worker pool and a reclaimer per instance as supervised processes (the seed's ADR-015: one machine, two
instances), clients that enqueue (some twice, concurrently, with one key), the service model, and the checks.

This drives one deployment for the job system's tests and benchmarks; the catalogue's generic runner takes it
over when the harness core learns to run any system (issue 12)."""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from kernel.effects import Transact
from kernel.failpoints import CrashPoint, register_roles
from kernel.runtime import LOOP_ENDED
from reference.jobs import coverage
from reference.jobs.dag import Mission, MissionConflict, MissionRefused, Step, create_mission
from reference.jobs.models import DEAD, TERMINAL, Job, JobBase, JobDependency, JobLog
from reference.jobs.pool import ALERTS, DEAD_ALERT, Execute, PoolConfig, reclaimer_loop, worker_loop
from reference.jobs.repo import OPERATOR_ACTOR, REPOS, NewJob, redrive
from scenarios.sim.world import EPOCH, Killed, SimWorld
from scenarios.verdicts import Verdict
from systems.jobs.checkers import INVARIANTS, JobsState, drain_windows, stalls_from
from systems.jobs.faults import PROCESS_FAULTS, reclaimer_process
from systems.jobs.service import ServiceModel

INSTANCES = ("instance-a", "instance-b")
OPERATOR = f"{OPERATOR_ACTOR}ops"  # the operator's job_log actor
REDRIVE_POLL_S = 30.0  # the operator looks for dead jobs this often
LOG_WATCH_S = 10.0  # how often the harness reads the job_log rows written since its last look (J21)
REDRIVE_POLLS = 240  # and gives up after this many looks (two hours) with fewer dead than it was to re-drive
CLIENT_ATTEMPTS = 6  # a producer's tries of one enqueue (2, 4, ... 32 s apart)
NOT_JSON = object()  # a poison job's payload: stored as text that does not parse
register_roles(*INSTANCES, "reclaimer")
register_roles(*INSTANCES, group="instance")  # a point for whichever instance reaches it first


@dataclass(frozen=True)
class JobsSpec:
    jobs: int = 40
    window_s: float = 60.0  # enqueues arrive over this window
    workers_per_instance: int = 2
    same_key_ratio: float = 0.1  # an enqueue repeated at once with the same key (a double click)
    work_median_s: float = 5.0
    work_sigma: float = 0.5  # lognormal spread of a work's duration
    fail_rate: float = 0.0  # each work fails with this probability (retried after its backoff)
    failing: int = 0  # jobs whose work always fails (go dead after MaxRetry)
    hanging: int = 0  # jobs whose work never ends (a handler that hangs: its call times out)
    crashing: int = 0  # jobs whose work kills the worker that runs it
    flaky: int = 0  # jobs whose first work fails (a retry then succeeds)
    poison: int = 0  # jobs whose payload is not JSON
    unregistered: int = 0  # jobs of a type nobody handles
    missions: int = 0  # DAGs of MISSION's shape, created in one transaction each (seed 002)
    failing_steps: tuple[str, ...] = ()  # steps of every mission whose work always fails (their hard descendants
    # are cancelled)
    survey_work_s: float = 0.0  # > 0: every mission's survey works this long (past its timeout: its time edge)
    refused_missions: int = 0  # missions with a defect the DAG must refuse (REFUSED, in turn), written nothing
    reposted_missions: int = 0  # posts of mission-dag-0 again after the window (REPOSTS, in turn): the same, answered
    # its jobs; other edges or steps, refused (MissionConflict) and written nothing
    redrives: int = 0  # dead jobs an operator re-drives, each once, as they die after the window (seed 004: dead
    # waits for a person; the job API's POST /v1/jobs/ID/redrive)


# A survey, two inspections of what it found (a diamond: both wait for it, the report waits for both), a
# notification once the report ended however it ended (soft), and an escalation when the survey overruns its
# timeout (time).
MISSION_STEPS = (("survey", "survey", 120), ("inspect-1", "inspect", 300), ("inspect-2", "inspect", 300),
                 ("report", "report", 300), ("notify", "report", 300), ("escalate", "report", 300))
MISSION_EDGES = (("inspect-1", "survey", "hard"), ("inspect-2", "survey", "hard"), ("report", "inspect-1", "hard"),
                 ("report", "inspect-2", "hard"), ("notify", "report", "soft"), ("escalate", "survey", "time"))


# Missions the DAG must refuse, each MISSION with one defect (seed 002 §4.3: no self-dependency, no duplicate edge;
# the reference: no cycle, no edge outside the mission, no unknown kind, no two steps of one name).
REFUSED: tuple[tuple[str, tuple[tuple[str, str, int], ...], tuple[tuple[str, str, str], ...]], ...] = (
    ("cycle", MISSION_STEPS, (*MISSION_EDGES, ("survey", "report", "hard"))),  # the survey waits for its report
    ("self-edge", MISSION_STEPS, (*MISSION_EDGES, ("notify", "notify", "soft"))),
    ("duplicate-edge", MISSION_STEPS, (*MISSION_EDGES, ("report", "inspect-1", "soft"))),
    ("outside-parent", MISSION_STEPS, (*MISSION_EDGES, ("report", "audit", "hard"))),
    ("outside-child", MISSION_STEPS, (*MISSION_EDGES, ("audit", "report", "soft"))),
    ("unknown-kind", MISSION_STEPS, (*MISSION_EDGES, ("notify", "inspect-2", "maybe"))),
    ("twin-steps", (*MISSION_STEPS, ("report", "report", 300)), MISSION_EDGES),
)


# Posts of a stored mission again (reference.jobs.dag.create_mission: a mission is created once, whole): the same
# steps and edges (sound: answered the stored jobs), or other edges or steps (refused as a conflict).
REPOSTS: tuple[tuple[str, tuple[tuple[str, str, int], ...], tuple[tuple[str, str, str], ...]], ...] = (
    ("", MISSION_STEPS, MISSION_EDGES),
    ("conflict-edges", MISSION_STEPS, (*MISSION_EDGES, ("notify", "survey", "soft"))),
    ("conflict-steps", MISSION_STEPS[:-1], MISSION_EDGES[:-1]),  # without the escalation and its time edge
)
REPOST = "mission-dag-0"  # the mission the re-posts name


def missions(spec: JobsSpec, scale: float = 1.0) -> list[tuple[Mission, str]]:
    """The planners' missions, each with the defect it was sent with ("" for a sound one): ``spec.missions`` of
    MISSION's shape, then ``spec.refused_missions`` from REFUSED in turn. ``scale``: the stack's time factor (a
    step's timeout and work)."""
    def step(name: str, kind: str, timeout: int) -> Step:
        payload: dict[str, Any] = {"step": name}
        if name == "survey" and spec.survey_work_s > 0:
            payload["work_s"] = spec.survey_work_s * scale
        return Step(name, kind, payload, max(1, round(timeout * scale)) if scale != 1.0 else timeout)

    out = [(Mission(f"mission-dag-{m}", tuple(step(*s) for s in MISSION_STEPS), MISSION_EDGES), "")
           for m in range(spec.missions)]
    for r in range(spec.refused_missions):
        defect, steps, edges = REFUSED[r % len(REFUSED)]
        out.append((Mission(f"mission-refused-{r}", tuple(step(*s) for s in steps), edges), defect))
    for r in range(spec.reposted_missions if spec.missions else 0):
        defect, steps, edges = REPOSTS[r % len(REPOSTS)]
        out.append((Mission(REPOST, tuple(step(*s) for s in steps), edges), defect))
    return out


def plan_times(spec: JobsSpec, rng: random.Random) -> list[float]:
    """When each of ``missions(spec)`` is posted: a draw within the window, a re-post after the window (once the
    mission it repeats exists)."""
    first = spec.missions + spec.refused_missions
    return [rng.uniform(0.0, spec.window_s) if i < first else spec.window_s + 1.0 + (i - first)
            for i in range(len(missions(spec)))]


@dataclass
class JobsRun:
    world: SimWorld
    service: ServiceModel
    state: JobsState
    verdicts: list[Verdict]
    history: History = field(default_factory=History)

    @property
    def violated(self) -> list[str]:
        return [v.invariant for v in self.verdicts if v.status == "violated"]


def _jobs(spec: JobsSpec, rng: random.Random) -> list[NewJob]:
    kinds = ["failing"] * spec.failing + ["hanging"] * spec.hanging + ["crashing"] * spec.crashing + \
        ["flaky"] * spec.flaky + ["poison"] * spec.poison + ["unregistered"] * spec.unregistered
    kinds += ["ok"] * max(0, spec.jobs - len(kinds))
    rng.shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        key = f"survey:mission-{i // 3}:{i}:{kind}"
        job_type = "unregistered-type" if kind == "unregistered" else ("survey", "inspect", "report")[i % 3]
        payload: Any = {"mission": f"mission-{i // 3}", "step": i % 3}
        out.append(NewJob(job_type, key, NOT_JSON if kind == "poison" else payload, mission_id=f"mission-{i // 3}"))
    return out


class JobsWorld(SimWorld):
    """The simulation's world, which also hears the pool's dead-job alerts (reference.jobs.pool.alert_dead; J13)."""

    watched_loggers = (*SimWorld.watched_loggers, ALERTS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.alerts: list[dict[str, Any]] = []
        # Each worker's candidates reads ({"process", "at", "candidates", "claimed": the ids it won after it}).
        self.rounds: list[dict[str, Any]] = []
        self._round: dict[str, int] = {}  # process -> its latest round in ``rounds``

    def perform(self, process: str, effect: Any) -> Generator[Any, Any, Any]:
        """As SimWorld's, and notes each worker's candidates read and the claims it won after it (J22)."""
        result = yield from super().perform(process, effect)
        if isinstance(effect, Transact) and effect.name == "job.claimable":
            self._round[process] = len(self.rounds)
            self.rounds.append({"process": process, "at": self.env.now, "candidates": [c.id for c in result],
                                "claimed": []})
        elif isinstance(effect, Transact) and effect.name == "job.claim" and result is not None \
                and process in self._round:
            self.rounds[self._round[process]]["claimed"].append(result.job_id)
        return result

    def heard(self, record: logging.LogRecord) -> None:
        if getattr(record, "alert", None) == DEAD_ALERT:
            fields = getattr(record, "alert_fields", {})
            self.alerts.append({"code": DEAD_ALERT, "job_id": fields.get("job_id"), "at": self.env.now})


class JobsDeployment:
    """The job system deployed in simulation for one run (scenarios.systems.Deployment): its schema on the
    interleaving database, the service model, two pool instances and their reclaimers as supervised processes,
    producers that enqueue (a share twice at once with one key, and again while the database is away) and planners
    that create missions (seed 002's DAGs)."""

    def __init__(self, spec: JobsSpec, seed: int, variant: str, cfg: PoolConfig) -> None:
        self.spec, self.seed, self.variant, self.cfg = spec, seed, variant, cfg
        self.world = JobsWorld(seed, metadata=JobBase.metadata, targets=coverage.COVERAGE)
        self.rng = random.Random(f"{seed}:jobs")
        self.news = _jobs(spec, self.rng)
        news = self.news

        def keys(kind: str) -> frozenset[str]:
            singles = {n.idempotent_key for n in news if n.idempotent_key.endswith(f":{kind}")}
            steps = {f"mission-dag-{m}:{step}" for m in range(spec.missions) for step in spec.failing_steps} \
                if kind == "failing" else set()
            return frozenset(singles | steps)

        self.service = ServiceModel(self.world.env, random.Random(f"{seed}:service"),
                                    work_median_s=spec.work_median_s, work_sigma=spec.work_sigma,
                                    fail_rate=spec.fail_rate, failing_keys=keys("failing"),
                                    hanging_keys=keys("hanging"), crashing_keys=keys("crashing"),
                                    fail_first=dict.fromkeys(keys("flaky"), 1))
        self.enqueued: list[dict[str, Any]] = []
        self.log_seen: list[dict[str, Any]] = []  # job_log rows as the harness read them during the run
        self._producers = 0  # producers and planners still working

    def start(self) -> None:
        world, spec, variant, cfg, rng = self.world, self.spec, self.variant, self.cfg, self.rng

        def crash(process: str) -> None:
            world.kill_note(process, "its job crashed it")
            raise Killed(process)

        self.service.on_crash = crash
        world.performers[Execute] = self.service.perform
        for instance in INSTANCES:
            for w in range(1, spec.workers_per_instance + 1):
                name = f"{instance}.{w}"
                world.supervise(name, functools.partial(worker_loop, variant, cfg, name))
            world.supervise(reclaimer_process(instance),
                            functools.partial(reclaimer_loop, variant, cfg, instance))
        for i, new in enumerate(self.news):
            at = rng.uniform(0.0, spec.window_s)
            self._spawn(self._producer(i, new, at))
            if rng.random() < spec.same_key_ratio:
                self._spawn(self._producer(10_000 + i, new, at))  # the second click, at the same moment
        for m, ((mission, defect), at) in enumerate(zip(missions(spec), plan_times(spec, rng), strict=True)):
            self._spawn(self._planner(m, mission, defect, at))
        if spec.redrives:
            self._spawn(self._operator())
        world.env.process(self._watch_log())

    def _spawn(self, gen: Generator[Any, Any, None]) -> None:
        self._producers += 1

        def counted() -> Generator[Any, Any, None]:
            try:
                yield from gen
            finally:
                self._producers -= 1

        self.world.env.process(counted())

    def _producer(self, i: int, new: NewJob, at: float) -> Generator[Any, Any, None]:
        """Enqueue, and on no answer (the database away) the same again, with the same key."""
        world, history = self.world, self.world.history
        yield world.env.timeout(at)
        process = f"client-{i}"
        for attempt in range(CLIENT_ATTEMPTS):
            history.add(world.env.now, process, INVOKE, "enqueue", {"key": new.idempotent_key, "try": attempt})
            job_id = yield world.drive(process, _enqueue(REPOS[self.variant], new))  # None: it failed
            if job_id is not None:
                history.add(world.env.now, process, OK, "enqueue", {"key": new.idempotent_key, "job_id": job_id})
                self.enqueued.append({"key": new.idempotent_key, "job_id": job_id})
                return
            history.add(world.env.now, process, FAIL, "enqueue", {"key": new.idempotent_key, "try": attempt})
            yield world.env.timeout(2.0 * 2 ** attempt)

    def _planner(self, m: int, mission: Mission, defect: str, at: float) -> Generator[Any, Any, None]:
        world, history = self.world, self.world.history
        yield world.env.timeout(at)
        process = f"planner-{m}"
        history.add(world.env.now, process, INVOKE, "create-mission", mission_post(mission, defect, m, self.spec))
        ids = yield world.drive(process, _create(REPOS[self.variant], mission))
        if isinstance(ids, MissionRefused | MissionConflict):
            history.add(world.env.now, process, FAIL, "create-mission", {"mission": mission.id, "refused": str(ids)})
        elif ids is not None:
            history.add(world.env.now, process, OK, "create-mission", {"mission": mission.id, "jobs": ids})
            self.enqueued.extend({"key": f"{mission.id}:{name}", "job_id": job_id} for name, job_id in ids.items())

    def _watch_log(self) -> Generator[Any, Any, None]:
        """Every LOG_WATCH_S, the job_log rows written since the last look, as they were then (J21 compares them with
        the rows at the end). Read outside virtual time, as the end's tables are: no statement of the run waits."""
        from sqlalchemy import select

        while True:
            yield self.world.env.timeout(LOG_WATCH_S)
            last = self.log_seen[-1]["id"] if self.log_seen else 0
            with self.world.sessions() as session:
                self.log_seen.extend(_plain(session.execute(select(JobLog.__table__).where(JobLog.id > last)
                                                            .order_by(JobLog.id))))

    def _operator(self) -> Generator[Any, Any, None]:
        """After the window, every REDRIVE_POLL_S: the dead jobs, and a re-drive of each not re-driven yet, until
        ``spec.redrives`` were (a re-driven job that dies again stays dead)."""
        world, history = self.world, self.world.history
        yield world.env.timeout(self.spec.window_s)
        done: set[int] = set()
        for _ in range(REDRIVE_POLLS):
            dead = yield world.drive(OPERATOR, _dead_jobs())  # None: the database is away
            for job_id in [j for j in dead or () if j not in done][:self.spec.redrives - len(done)]:
                history.add(world.env.now, OPERATOR, INVOKE, "redrive", {"job_id": job_id})
                changed = yield world.drive(OPERATOR, _redrive(job_id))
                if changed is None:
                    history.add(world.env.now, OPERATOR, FAIL, "redrive", {"job_id": job_id})
                    continue
                history.add(world.env.now, OPERATOR, OK, "redrive", {"job_id": job_id, "changed": changed})
                done.add(job_id)
            if len(done) >= self.spec.redrives:
                return
            yield world.env.timeout(REDRIVE_POLL_S)

    def workload_done(self) -> bool:
        return self._producers == 0

    def unsettled(self) -> int:
        return _left(self.world)

    def busy_until(self) -> float | None:
        return None

    def final_state(self, heal_time: float) -> JobsState:
        state = read_state(self.world, self.service, self.enqueued, self.cfg.max_retry, heal_time, self.cfg)
        state.log_seen = list(self.log_seen)
        state.rounds, state.claim_batch = list(self.world.rounds), self.cfg.claim_batch
        return state

    def verdicts(self, state: JobsState, scenario: Any) -> list[Verdict]:
        wanted = set(scenario.invariants)
        return [v for v in INVARIANTS.check(state) if v.invariant in wanted]

    def stats(self) -> dict[str, Any]:
        world = self.world
        return {**world.stats, "variant": self.variant, "service_calls": len(self.service.ledger),
                "restarts": {n: s.restarts for n, s in world.supervised.items() if s.restarts},
                "db": dict(world.db.stats)}


def simulate_jobs(spec: JobsSpec, seed: int, variant: str, *, cfg: PoolConfig | None = None,
                  faults: Callable[[SimWorld, ServiceModel, History], None] | None = None,
                  until_s: float = 6 * 3600.0) -> JobsRun:
    """One deployment driven directly (the tests' schedules in Python), run until every job settled (or
    ``until_s``), then checked. Catalogue scenarios go through scenarios.runner instead."""
    dep = JobsDeployment(spec, seed, variant, cfg or PoolConfig())
    world = dep.world
    if faults is not None:
        faults(world, dep.service, world.history)
    dep.start()
    while world.env.now < until_s:
        world.env.run(until=world.env.now + 10.0)
        if dep.workload_done() and world.env.now > spec.window_s and dep.unsettled() == 0:
            break
    state = dep.final_state(0.0)
    world.close()
    return JobsRun(world, dep.service, state, INVARIANTS.check(state), world.history)


def _create(repo: Any, mission: Mission) -> Generator[Any, Any, dict[str, int] | MissionRefused | MissionConflict]:
    """The mission's jobs by step name, or its refusal (its transaction rolled back whole)."""
    try:
        return (yield Transact(lambda tx: create_mission(tx, mission, repo.enqueue), "mission.create"))
    except (MissionRefused, MissionConflict) as refused:
        return refused


def _dead_jobs() -> Generator[Any, Any, list[int]]:
    from sqlalchemy import select

    return (yield Transact(lambda tx: list(tx.conn.execute(select(Job.id).where(Job.status == DEAD)
                                                           .order_by(Job.id)).scalars()), "job.read_dead"))


def _redrive(job_id: int) -> Generator[Any, Any, bool]:
    return (yield Transact(lambda tx: redrive(tx, job_id, OPERATOR), "job.redrive"))


def _enqueue(repo: Any, new: NewJob) -> Generator[Any, Any, int]:
    return (yield Transact(lambda tx: _enqueue_job(repo, tx, new), "job.enqueue"))


def _enqueue_job(repo: Any, tx: Any, new: NewJob) -> int:
    """Enqueue (either shell); a poison job is enqueued, then its stored payload overwritten with text that is not
    JSON (what a broken producer leaves: the seed stores payload strings as given)."""
    if new.payload is not NOT_JSON:
        return int(repo.enqueue(tx, new))
    from sqlalchemy import update

    job_id = repo.enqueue(tx, NewJob(new.type, new.idempotent_key, None, new.mission_id))
    tx.session.execute(update(Job).where(Job.id == job_id).values(payload="{not json")
                       .execution_options(synchronize_session=False))
    return job_id


def _left(world: SimWorld) -> int:
    """Jobs not in a terminal status."""
    from sqlalchemy import func, select

    with world.sessions() as s:
        return int(s.execute(select(func.count()).select_from(Job).where(Job.status.not_in(sorted(TERMINAL))))
                   .scalar() or 0)


def read_rows(session: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The job, job_log and job_dependency rows, in id order, as plain dicts (either shell's database)."""
    from sqlalchemy import select

    jobs = [dict(r._mapping) for r in session.execute(select(Job.__table__).order_by(Job.id))]
    log = _plain(session.execute(select(JobLog.__table__).order_by(JobLog.id)))
    edges = [dict(r._mapping) for r in session.execute(select(JobDependency.__table__).order_by(JobDependency.id))]
    return jobs, log, edges


def _plain(log_rows: Any) -> list[dict[str, Any]]:
    """job_log rows as plain dicts, their detail parsed."""
    log = [dict(r._mapping) for r in log_rows]
    for row in log:
        if isinstance(row["detail"], str):
            row["detail"] = json.loads(row["detail"])
    return log


def read_state(world: JobsWorld, service: ServiceModel, enqueued: list[dict[str, Any]], max_retry: int,
               heal_time: float = 0.0, cfg: PoolConfig | None = None) -> JobsState:
    with world.sessions() as s:
        jobs, log, edges = read_rows(s)
    return JobsState(jobs, log, list(service.ledger), dict(service.effects), enqueued, edges, world.now_dt(),
                     max_retry, t0=EPOCH.timestamp(), heal_time=heal_time, end_time=world.env.now,
                     loops=len(world.supervised),
                     loop_ends=[dict(op.value) for op in world.history.ops if op.f == LOOP_ENDED],
                     alerts=list(world.alerts), defects=list(world.defects),
                     # killed, stopped, or stalled in a held transaction (a hold-transaction fault): a process that
                     # renews nothing meanwhile, whose claim may go stale (J17, J18)
                     kills=[(op.time, str(op.value.get("process"))) for op in world.history.ops
                            if op.process == NEMESIS and op.f in ("kill", "pause", "hold")],
                     missions=mission_answers(world.history),
                     outages=[(w.start, w.end) for w in world.history.fault_windows() if w.fault not in PROCESS_FAULTS],
                     drains=drain_windows((op.time, op.f, str(op.value.get("process"))) for op in world.history.ops
                                          if op.process == NEMESIS and op.f in ("drain", "restart")),
                     handler_timeout_s=cfg.handler_timeout_s if cfg else None,
                     heartbeat_s=cfg.heartbeat_s if cfg else None,
                     stalls=stalls_from((op.time, op.f, op.value) for op in world.history.ops if op.process == NEMESIS),
                     stale_after_s=cfg.stale_after_s if cfg else None,
                     reclaim_every_s=cfg.reclaim_every_s if cfg else None,
                     reclaimers=tuple(reclaimer_process(i) for i in INSTANCES))


def mission_post(mission: Mission, defect: str, m: int, spec: JobsSpec) -> dict[str, Any]:
    """A planner's create-mission invoke: the mission, the defect it was sent with, whether it re-posts one."""
    repost = m >= spec.missions + spec.refused_missions
    return {"mission": mission.id, **({"defect": defect} if defect else {}), **({"repost": True} if repost else {})}


def mission_answers(history: History) -> list[dict[str, Any]]:
    """What each planner sent and was last answered, from the history (either shell): {"mission", "defect" (its
    workload defect, "" for a sound one), "repost", "answer": "ok", "refused" or "none" (no answer: an error, the
    database away), "refused" (the refusal's message)}."""
    out: dict[str, dict[str, Any]] = {}
    for op in history.ops:
        if op.f != "create-mission":
            continue
        row = out.setdefault(op.process, {"mission": str(op.value.get("mission")), "defect": "", "repost": False,
                                          "answer": "none", "refused": ""})
        if op.type == INVOKE:
            row["defect"], row["repost"] = str(op.value.get("defect") or ""), bool(op.value.get("repost"))
        elif op.type == OK:
            row["answer"] = "ok"
        elif "refused" in op.value:
            row["answer"], row["refused"] = "refused", str(op.value["refused"])
    return list(out.values())


def pause(world: SimWorld, role: str, effect: str, when: str, seconds: float, count: int = 1) -> None:
    """Arm a SIGSTOP-like pause of the first process of ``role`` to reach ``effect`` (a zombie when it outlasts the
    reclaim threshold)."""
    world.arm(CrashPoint(role, effect, when, "stop", count, seconds))
    world.history.add(world.env.now, NEMESIS, INFO, "arm", {"role": role, "effect": effect, "when": when,
                                                            "seconds": seconds})


__all__ = ["EPOCH", "JobsRun", "JobsSpec", "pause", "read_rows", "read_state", "simulate_jobs"]
