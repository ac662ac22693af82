"""The job system's invariants, checked on the final tables, the job log and the service's ledger (issue 12):

- J1 ``one_effect_per_job``: a job's work takes effect at most once, and a done job's did (the service's ledger);
- J2 ``outcomes_from_the_current_claim``: a job's outcome (done, failed, dead) is written by the claim that holds
  it: never by one whose job was reclaimed meanwhile (a stale worker's write, which fencing refuses);
- J3 ``retries_wait_their_backoff``: after a failure, the job is not claimed again before its next_run_at;
- J4 ``attempts_bounded``: a job is claimed at most ``max_retry + 1`` times, and one that failed or was reclaimed
  that often is dead: "dead exactly after MaxRetry" (seed 004 counts a failure as ``retry++``); counted afresh from
  an operator's re-drive;
- J5 ``log_agrees_with_job``: every status change has its job_log row (the rows chain from creation to the job's
  status now) and every transition in it is legal (dead -> pending only by an operator's re-drive);
- J6 ``no_lost_job``: at the end every job is terminal, or pending and due by the end plus its backoff cap;
- J7 ``one_job_per_key``: every enqueue of a key answered with the same job;
- J8 ``no_job_before_its_parents_allow``: a job with edges (seed 002) is first claimed only after each parent
  allowed it: a hard parent done, a soft parent ended, a time parent ended or past its timeout;
- J9 ``in_degree_agrees_with_edges``: a job's ``unmet`` is the number of its edges not released;
- J10 ``failed_hard_parent_cancels_descendants``: a job whose hard parent ended dead or cancelled is cancelled;
- J11 ``worker_loops_run_until_stopped``: a pool worker's or reclaimer's loop ends only when its instance drains or
  dies (the Copilot's I34);
- J12 ``retries_follow_the_backoff``: each failure's next_run_at is its time plus min(2^retry s, 1 h), retry counted
  before the failure: no sooner and no later (the Copilot's I19; seed 004 has no jitter);
- J13 ``every_dead_job_alerts_once``: every job gone dead raises one JOB_DEAD alert naming it, and nothing else
  does (seed 004: "置 dead(进告警 + 人工介入)"; the Copilot's I31);
- J14 ``no_defect_raised``: no error that only a defect raises (a TypeError, a KeyError...), carried on from by a
  pool loop or out of a process (the Copilot's I27);
- J16 ``unrunnable_jobs_die_at_once``: a job whose payload is not JSON or whose type has no handler goes dead at its
  first claim, without a retry (a reclaim only when the worker holding it was killed, stopped or cut off the
  database);
- J17 ``live_claims_are_not_reclaimed``: the reclaimer takes back only the claim of a worker that was killed or
  stopped, or cut off the database (the fixed variant renews a live claim; seed 004's threshold "must exceed the
  longest handler");
- J18 ``attempts_end_by_the_handler_timeout``: a worker ends each attempt (done, failed, buried) no later than the
  pool's handler timeout after its claim, unless it was killed, stopped or cut off the database;
- J19 ``failure_reasons_are_summaries``: a failure's reason in the job log is at most 256 characters (seed 004);
- J20 ``dead_jobs_spent_every_attempt``: a job dead of its attempts spent exactly ``max_retry + 1`` failures and
  reclaims since its creation or re-drive: a lost claim costs no retry (seed 004's Claim);
- J21 ``job_log_is_append_only``: every job_log row read during the run is at its end, unchanged (seed 002: the
  task log is append-only);
- J22 ``claims_follow_the_candidates``: a worker's candidates read answers at most ClaimBatch jobs in id order, and
  it claims them in that order (seed 004's Claimable: FIFO);
- J23 ``draining_workers_finish_what_they_hold``: a worker asked to stop (SIGTERM: seed 004's cancelled context)
  writes the outcome of the job it holds and claims nothing more until it is started again;
- J24 ``stale_claims_are_reclaimed_in_time``: a claim of a worker killed or stopped for good is taken back within
  stale_after_s plus two reclaim periods of the stop, however many rows stuck transactions hold meanwhile (the fixed
  variant's reclaim skips a locked row, SKIP LOCKED; seed 004's waits on it, and every stale claim behind it);
- J15 ``missions_are_dags_or_refused``: the stored edges form a DAG within each mission (no cycle, no self-edge, no
  duplicate, a known kind), a mission sent with such a defect is answered refused, and a refused one wrote nothing.

Each returns a Verdict (scenarios.verdicts): the violations name the job and what happened; INVARIANTS lists them."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from reference.jobs.models import CANCELLED, DEAD, DONE, PENDING, RUNNING, TERMINAL
from reference.jobs.pool import HANDLED_TYPES
from reference.jobs.repo import MAX_BACKOFF_S, OPERATOR_ACTOR, RECLAIMER
from scenarios.verdicts import Invariants, Verdict, Violation, judged, unchecked

LEGAL = {(None, PENDING), (PENDING, RUNNING), (PENDING, CANCELLED), (RUNNING, DONE), (RUNNING, PENDING),
         (RUNNING, DEAD)}
# An operator's re-drive (the job API's POST /v1/jobs/ID/redrive; seed 004: a dead job waits for a person): legal
# only by an operator, and the job's attempts count afresh from it.
REDRIVE = (DEAD, PENDING)


def _redriven(row: dict[str, Any]) -> bool:
    return (row["from_status"], row["to_status"]) == REDRIVE and str(row["actor"]).startswith(OPERATOR_ACTOR)


def _since_redrive(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's log rows after its last re-drive (all of them if it was never re-driven)."""
    last = max((i for i, r in enumerate(rows) if _redriven(r)), default=-1)
    return rows[last + 1:]


@dataclass(frozen=True)
class Stall:
    """A process that renewed nothing from ``at``: killed (``until`` None: the process its supervisor starts again
    does not know what it held), or stopped (SIGSTOP) or held in a transaction until ``until`` (None: not awake by
    the end). ``in_transaction``: stopped inside an open transaction, before its commit: the row it wrote stays
    locked (on PostgreSQL) until then."""

    at: float
    process: str
    until: float | None
    in_transaction: bool = False


def stalls_from(events: Iterable[tuple[float, str, Mapping[str, Any]]],
                names: Callable[[str], Iterable[str]] = lambda p: (p,)) -> list[Stall]:
    """The stalls of (time, f, value) events in time order, either shell's record: ``kill``, ``pause`` (a SIGSTOP:
    until the process's next ``resume``), ``hold`` (a transaction held ``seconds``). ``names``: every process a
    stall of the named one stops (the stack's SIGSTOP stops the whole instance: each of its workers and its
    reclaimer); only the named one is inside the transaction its point stopped."""
    events = list(events)
    out: list[Stall] = []
    for i, (t, f, value) in enumerate(events):
        process = str(value.get("process"))
        if f == "kill":
            until = None
        elif f == "pause":
            until = next((u for u, g, v in events[i + 1:] if g == "resume" and v.get("process") == process), None)
        elif f == "hold":
            until = t + float(value.get("seconds", 0.0))
        else:
            continue
        inside = f == "pause" and str(value.get("why", "")).startswith("before-commit")
        out += [Stall(t, name, until, inside and name == process) for name in names(process)]
    return out


@dataclass
class JobsState:
    """What a run left: the job rows, their log, the service's ledger and effects, the enqueue answers."""

    jobs: list[dict[str, Any]]
    log: list[dict[str, Any]]  # ordered by id
    ledger: list[dict[str, Any]]
    effects: dict[str, int]
    enqueued: list[dict[str, Any]]  # {"key", "job_id"} per answered enqueue
    edges: list[dict[str, Any]]  # job_dependency rows
    end: datetime
    max_retry: int
    t0: float = 0.0  # epoch seconds of history time 0 (the report's clock)
    heal_time: float = 0.0
    end_time: float = 0.0
    # The pool loops the run started (workers and reclaimers), and each that ended on its own: not drained, not
    # killed ({"process", "error"}; the shells record these as ``loop-ended``).
    loops: int = 0
    loop_ends: list[dict[str, Any]] = field(default_factory=list)
    logs_by_job: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # The dead-job alerts the pool raised ({"code", "job_id", "at"}), or None where the shell does not hear them.
    alerts: list[dict[str, Any]] | None = None
    # (history time, process) of each kill or SIGSTOP of a process, or None where the shell does not record them.
    kills: list[tuple[float, str]] | None = None
    # The defects the code raised and carried on from or died of ({"t", "logger", "error", "where"}: a TypeError,
    # a KeyError...), or None where the shell does not observe them.
    defects: list[dict[str, Any]] | None = None
    # What each planner sent and was answered (systems.jobs.sim.mission_answers): {"mission", "defect", "answer",
    # "refused"}.
    missions: list[dict[str, Any]] = field(default_factory=list)
    # (start, end) of each fault window that cuts the workers off the database (a db outage: no heartbeat gets
    # through), in history time; end None: still open at the end.
    outages: list[tuple[float, float | None]] = field(default_factory=list)
    # Each worker's candidates reads in order ({"process", "at", "candidates", "claimed"}: the ids read, then those
    # it won before its next read), or None where the shell does not observe them (J22); the pool's ClaimBatch.
    rounds: list[dict[str, Any]] | None = None
    claim_batch: int = 0
    # The job_log rows the harness read during the run, as they were then (J21), or None where the shell reads none.
    log_seen: list[dict[str, Any]] | None = None
    # Each drain of a process ({"process", "at", "until": when it was started again, None: not by the end}) in the
    # seconds since t0 the rows are read in, or None where the shell drains nothing (drain_windows).
    drains: list[dict[str, Any]] | None = None
    handler_timeout_s: float | None = None  # the pool's (PoolConfig.handler_timeout_s), None where not judged
    heartbeat_s: float | None = None  # the pool's: a worker waits for its handler a heartbeat at a time
    # Each stall of a process (stalls_from: killed, stopped, held in a transaction), or None where the shell does not
    # record how long they lasted; the pool's stale threshold and reclaim period (J24); the processes that reclaim
    # (the simulation's reclaimer-a..., the stack's instances, whose reclaimer thread writes as the instance).
    stalls: list[Stall] | None = None
    stale_after_s: float | None = None
    reclaim_every_s: float | None = None
    reclaimers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for row in self.log:
            self.logs_by_job.setdefault(row["job_id"], []).append(row)

    # What the runner and the report read of any system's final state: counts, subjects, their transitions.

    def counts(self) -> dict[str, int]:
        by_status: dict[str, int] = defaultdict(int)
        for j in self.jobs:
            by_status[j["status"]] += 1
        return {"jobs": len(self.jobs), **dict(sorted(by_status.items()))}

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return [{"id": str(j["id"]), "status": j["status"], "created_at": _at(j["created_at"]).timestamp()}
                for j in self.jobs]

    @property
    def audit(self) -> list[dict[str, Any]]:
        return [{"task_id": str(r["job_id"]), "from": r["from_status"], "to": r["to_status"],
                 "at": _at(r["created_at"]).timestamp(), "actor": r["actor"], "action": r["message"] or "status"}
                for r in self.log]


def _v(job_id: Any, message: str) -> Violation:
    return Violation(str(job_id), message, [])


def one_effect_per_job(s: JobsState) -> Verdict:
    bad = []
    for job in s.jobs:
        n = s.effects.get(job["idempotent_key"], 0)
        if n > 1:
            bad.append(_v(job["id"], f"its work took effect {n} times"))
        elif job["status"] == DONE and n == 0:
            bad.append(_v(job["id"], "done, but its work never took effect"))
    return judged(len(s.jobs), bad)


def _claim_token(row: dict[str, Any]) -> int | None:
    token = (row.get("detail") or {}).get("token")
    return int(token) if isinstance(token, int) else None


def outcomes_from_the_current_claim(s: JobsState) -> Verdict:
    bad = []
    for job_id, rows in s.logs_by_job.items():
        current: int | None = None
        for row in rows:
            frm, to = row["from_status"], row["to_status"]
            if frm == PENDING and to == RUNNING:
                current = _claim_token(row)
            elif frm == RUNNING and row["actor"] == RECLAIMER:
                current = None
            elif frm == RUNNING:
                token = _claim_token(row)
                if token != current:
                    held = "no claim" if current is None else f"claim {current}"
                    bad.append(_v(job_id, f"{to} written by claim {token} ({row['actor']}) while {held} held it "
                                          f"(log row {row['id']})"))
                current = None
    return judged(len(s.jobs), bad)


def retries_wait_their_backoff(s: JobsState) -> Verdict:
    bad = []
    for job_id, rows in s.logs_by_job.items():
        due: str | None = None
        for row in rows:
            if row["from_status"] == RUNNING and row["to_status"] == PENDING and row["actor"] != RECLAIMER:
                due = (row.get("detail") or {}).get("next_run_at")
            elif row["from_status"] == PENDING and row["to_status"] == RUNNING:
                if due is not None and _at(row["created_at"]) < datetime.fromisoformat(due):
                    early = (datetime.fromisoformat(due) - _at(row["created_at"])).total_seconds()
                    bad.append(_v(job_id, f"claimed {early:.3f} s before its backoff ended (log row {row['id']})"))
                due = None
    return judged(len(s.jobs), bad)


BURIAL_REASONS = ("payload", "no handler")  # a burial at the claim (J16) spends no retries


def _buried(row: dict[str, Any]) -> bool:
    return row["actor"] != RECLAIMER and str(row["message"] or "").startswith(BURIAL_REASONS)


def attempts_bounded(s: JobsState) -> Verdict:
    bad = []
    most = s.max_retry + 1
    for job in s.jobs:
        rows = _since_redrive(s.logs_by_job.get(job["id"], []))
        claims = sum(1 for r in rows if r["from_status"] == PENDING and r["to_status"] == RUNNING)
        if claims > most:
            bad.append(_v(job["id"], f"claimed {claims} times (MaxRetry {s.max_retry} allows {most})"))
        spent = sum(1 for r in rows if r["from_status"] == RUNNING and r["to_status"] in (PENDING, DEAD)
                    and not (r["to_status"] == DEAD and _buried(r)))
        if spent >= most and job["status"] != DEAD:
            bad.append(_v(job["id"], f"{spent} attempts failed or were reclaimed, and it is {job['status']}, not dead"))
    return judged(len(s.jobs), bad)


def dead_jobs_spent_every_attempt(s: JobsState) -> Verdict:
    """J20: a job that died of its attempts (a failure past MaxRetry, or a reclaim with its attempts spent) spent
    exactly MaxRetry + 1 of them since its creation or last re-drive: failures and reclaims, each with its log row.
    J4 bounds the attempts from above; this judges them from below too: a lost claim (another instance won it, seed
    004's Claim) is no attempt and costs no retry, so a job that died after fewer failures lost retries to something
    the log does not show."""
    bad = []
    checked = 0
    most = s.max_retry + 1
    for job_id, rows in s.logs_by_job.items():
        spent = 0
        for r in rows:
            if _redriven(r):
                spent = 0
            elif r["from_status"] == RUNNING and r["to_status"] == PENDING:
                spent += 1
            elif r["from_status"] == RUNNING and r["to_status"] == DEAD and not _buried(r):
                spent += 1
                checked += 1
                if spent != most:
                    bad.append(_v(job_id, f"dead after {spent} attempts (log row {r['id']}); MaxRetry "
                                          f"{s.max_retry} gives {most}, failures and reclaims alike"))
    return judged(checked, bad)


def log_agrees_with_job(s: JobsState) -> Verdict:
    bad = []
    for job in s.jobs:
        rows = s.logs_by_job.get(job["id"], [])
        if not rows or rows[0]["from_status"] is not None:
            bad.append(_v(job["id"], "its log does not start with its creation"))
            continue
        for a, b in zip(rows, rows[1:], strict=False):
            if b["from_status"] != a["to_status"]:
                bad.append(_v(job["id"], f"log row {b['id']} moves from {b['from_status']}, but the job was "
                                         f"{a['to_status']} (a change without its log row)"))
        for r in rows:
            if (r["from_status"], r["to_status"]) not in LEGAL and not _redriven(r):
                bad.append(_v(job["id"], f"illegal transition {r['from_status']} -> {r['to_status']}"))
        if rows[-1]["to_status"] != job["status"]:
            bad.append(_v(job["id"], f"is {job['status']}, but its last log row says {rows[-1]['to_status']}"))
    return judged(len(s.jobs), bad)


def no_lost_job(s: JobsState) -> Verdict:
    bad = []
    for job in s.jobs:
        if job["status"] in TERMINAL:
            continue
        if job["status"] == PENDING and (_at(job["next_run_at"]) - s.end).total_seconds() <= MAX_BACKOFF_S:
            continue  # still claimable
        bad.append(_v(job["id"], f"left {job['status']} (claimed by {job['owner'] or 'nobody'}) at the end"))
    return judged(len(s.jobs), bad)


def one_job_per_key(s: JobsState) -> Verdict:
    ids: dict[str, set[int]] = defaultdict(set)
    for e in s.enqueued:
        ids[e["key"]].add(e["job_id"])
    bad = [_v(key, f"enqueues of one key answered jobs {sorted(v)}") for key, v in ids.items() if len(v) > 1]
    return judged(len(ids), bad)


def _first(rows: list[dict[str, Any]], pred: Callable[[dict[str, Any]], bool]) -> datetime | None:
    return next((_at(r["created_at"]) for r in rows if pred(r)), None)


def no_job_before_its_parents_allow(s: JobsState) -> Verdict:
    bad = []
    by_id = {j["id"]: j for j in s.jobs}
    for e in s.edges:
        claimed = _first(s.logs_by_job.get(e["job_id"], []), lambda r: r["to_status"] == RUNNING)
        if claimed is None:
            continue
        prows = s.logs_by_job.get(e["parent_id"], [])
        ended = _first(prows, lambda r: r["to_status"] in TERMINAL)
        done = _first(prows, lambda r: r["to_status"] == DONE)
        if e["kind"] == "hard":
            allowed = done
        elif e["kind"] == "soft":
            allowed = ended
        else:
            parent = by_id.get(e["parent_id"], {})
            started = parent.get("started_at")
            timed_out = (_at(started) + timedelta(seconds=parent.get("timeout_s", 0))) if started else None
            allowed = min((t for t in (ended, timed_out) if t is not None), default=None)
        if allowed is None or claimed < allowed:
            bad.append(_v(e["job_id"], f"claimed before its {e['kind']} parent {e['parent_id']} allowed it"))
    return judged(len(s.edges), bad)


def in_degree_agrees_with_edges(s: JobsState) -> Verdict:
    waiting: dict[int, int] = defaultdict(int)
    for e in s.edges:
        if e["released_at"] is None:
            waiting[e["job_id"]] += 1
    bad = [_v(j["id"], f"unmet is {j['unmet']}, but {waiting[j['id']]} of its edges are not released")
           for j in s.jobs if j["unmet"] != waiting[j["id"]]]
    return judged(len(s.jobs), bad)


def failed_hard_parent_cancels_descendants(s: JobsState) -> Verdict:
    status = {j["id"]: j["status"] for j in s.jobs}
    bad = [_v(e["job_id"], f"its hard parent {e['parent_id']} is {status.get(e['parent_id'])}, and it is "
                           f"{status.get(e['job_id'])}, not cancelled")
           for e in s.edges if e["kind"] == "hard" and status.get(e["parent_id"]) in (DEAD, CANCELLED)
           and status.get(e["job_id"]) != CANCELLED]
    return judged(len(s.edges), bad)


def worker_loops_run_until_stopped(s: JobsState) -> Verdict:
    """J11: a pool worker's or reclaimer's loop runs until its instance drains (SIGTERM) or dies. A loop that returns or
    raises on its own stops taking work, and no other check notices while the other threads carry the load (the
    instance's health check counts its live threads; nothing read that)."""
    bad = [Violation(str(e.get("process")), f"its loop ended while its instance ran: {e.get('error') or 'returned'}",
                     []) for e in s.loop_ends]
    return judged(s.loops, bad)


# Seed 004's backoff (Fail: next_run_at = now + min(2^retry s, 3600 s)), stated here and not imported from the
# reference: a reference whose formula or cap drifted is judged against the seed, not against itself.
SEED_BACKOFF_BASE_S = 1.0
SEED_BACKOFF_CAP_S = 3600.0
BACKOFF_TOLERANCE_S = 1e-3  # next_run_at is stored to the microsecond; the formula's steps are whole seconds


def seed_backoff_s(retry_before: int) -> float:
    """The seed's wait after a failure whose job had ``retry_before`` retries (the first failure waits 1 s)."""
    return min(SEED_BACKOFF_BASE_S * 2.0 ** min(retry_before, 32), SEED_BACKOFF_CAP_S)


def retries_follow_the_backoff(s: JobsState) -> Verdict:
    """J12: a failure that puts its job back (running -> pending, not a reclaim) records retry (counted after it) and
    next_run_at; next_run_at must be the row's time plus seed_backoff_s(retry - 1). J3 judges that no claim comes
    before next_run_at; this judges next_run_at itself, from below (a retry too soon) and above (one too late)."""
    bad = []
    checked = 0
    for job_id, rows in s.logs_by_job.items():
        for row in rows:
            if row["from_status"] != RUNNING or row["to_status"] != PENDING or row["actor"] == RECLAIMER:
                continue
            checked += 1
            detail = row.get("detail") or {}
            retry, due = detail.get("retry"), detail.get("next_run_at")
            if not isinstance(retry, int) or retry < 1 or due is None:
                bad.append(_v(job_id, f"its failure (log row {row['id']}) records no retry count and next_run_at"))
                continue
            wait = (datetime.fromisoformat(due) - _at(row["created_at"])).total_seconds()
            want = seed_backoff_s(retry - 1)
            if abs(wait - want) > BACKOFF_TOLERANCE_S:
                bad.append(_v(job_id, f"its failure {retry} (log row {row['id']}) waits {wait:.3f} s before the "
                                      f"retry; seed 004 says min(2^{retry - 1} s, 1 h) = {want:g} s"))
    return judged(checked, bad)


DEAD_ALERT = "JOB_DEAD"
# The alert is said after the dead job's transaction commits: a process killed in between leaves it unsaid (the
# dead job_log row is the durable record), excused within this long of the commit.
ALERT_AFTER_COMMIT_S = 5.0


def every_dead_job_alerts_once(s: JobsState) -> Verdict:
    """J13: one JOB_DEAD alert per death of a job (a failure past MaxRetry, a poison payload or an unhandled type, a
    reclaim with the attempts spent; again after an operator's re-drive), naming it; none for a job that never died.
    Mutation testing (2026-12-07) found the pool's alert could go unsaid or be said for a job still alive with every
    other check green."""
    if s.alerts is None:
        return unchecked("this shell does not hear the pool's alerts")
    said: dict[int, int] = defaultdict(int)
    for a in s.alerts:
        if a.get("code") == DEAD_ALERT:
            said[int(a["job_id"])] += 1
    bad = []
    # One alert per death: a job an operator re-drove may die again (its log has a dead row per death).
    deaths = {j["id"]: max(sum(1 for r in s.logs_by_job.get(j["id"], []) if r["to_status"] == DEAD),
                           1 if j["status"] == DEAD else 0) for j in s.jobs}
    dead = [j for j in s.jobs if deaths[j["id"]]]
    for job in dead:
        n, due = said.pop(job["id"], 0), deaths[job["id"]]
        if n > due:
            bad.append(_v(job["id"], f"dead {due} time(s), and {n} JOB_DEAD alerts named it (one per death is due)"))
        elif n < due and not _killed_before_its_alert(s, job["id"]):
            bad.append(_v(job["id"], f"dead {due} time(s), and {n} JOB_DEAD alert(s) named it"))
    bad += [_v(job_id, f"{n} JOB_DEAD alert(s) named it, and it never died") for job_id, n in sorted(said.items())]
    return judged(len(dead), bad, note=f"a process killed within {ALERT_AFTER_COMMIT_S:g} s of the dead row is "
                                       "excused")


def _killed_before_its_alert(s: JobsState, job_id: int) -> bool:
    """The process that wrote the job's dead row (a worker by its owner name, a reclaimer by its instance) was killed
    right after its commit. The row is stamped when written; a database slowed or down then holds the commit back
    until as late as the fault window's end (nightly J13-run632: written at 35 s under a 1000 ms db-latency, committed
    and killed at 43 s), so the excuse runs from that end; a window still open when the run ended, from the run's end
    (the row is in the tables read then: its commit had landed)."""
    row = next((r for r in s.logs_by_job.get(job_id, []) if r["to_status"] == DEAD), None)
    if row is None:
        return False
    at = _at(row["created_at"]).timestamp() - s.t0
    committed_by = max([at] + [s.end_time if end is None else end for start, end in s.outages
                               if start <= at and (end is None or at <= end)])
    writer = (row.get("detail") or {}).get("by") if row["actor"] == RECLAIMER else row["actor"]
    return any(at - 1.0 <= t <= committed_by + ALERT_AFTER_COMMIT_S and (who == writer or (
        row["actor"] == RECLAIMER and who == f"reclaimer-{str(writer)[-1]}")) for t, who in s.kills or ())


def no_defect_raised(s: JobsState) -> Verdict:
    """J14: the pool's loops carry on from a failed round or a failed write (the seed: skip the round, reclaim
    settles the job), so a defect in the code (an exception no outage raises) is logged and nothing else shows it:
    its job stays as it was, a later round or the reclaimer repairs it. Mutation testing (2026-12-07): a mutant that
    compares a naive time with an aware one fails every reclaim round with a TypeError, and every other check held."""
    if s.defects is None:
        return unchecked("this shell does not observe the defects its code carries on from")
    bad = [Violation(d.get("where") or d.get("logger", ""), f"{d.get('error')} at {d.get('t')} s "
                     f"(logger {d.get('logger')})", []) for d in s.defects]
    return judged(s.loops, bad)


EDGE_KINDS = ("hard", "soft", "time")  # seed 002's dependency_type


def _cycle(edges: list[dict[str, Any]]) -> list[int]:
    """The jobs on or behind a cycle of the edges (Kahn's algorithm: what never comes out), none for a DAG."""
    children: dict[int, list[int]] = defaultdict(list)
    indegree: dict[int, int] = defaultdict(int)
    for e in edges:
        children[e["parent_id"]].append(e["job_id"])
        indegree[e["job_id"]] += 1
        indegree.setdefault(e["parent_id"], 0)
    ready = [n for n, d in indegree.items() if d == 0]
    while ready:
        for c in children[ready.pop()]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    return sorted(n for n, d in indegree.items() if d > 0)


def missions_are_dags_or_refused(s: JobsState) -> Verdict:
    """J15: seed 002 §4.3's task_dependency is a DAG (refused at creation: a cycle, a self-edge, a duplicate edge, an
    unknown kind; the reference adds: an edge outside its mission, two steps of one name). On the stored edges, and
    on what the planners were answered: a mission sent with a defect is refused (not accepted, not failed with an
    error), a sound one (a repeat of a stored mission too) is not, and a refused mission left no job (its
    transaction wrote nothing; a conflicting re-post of a stored mission adds nothing to it: its edges stay a DAG
    and J7 sees any other jobs it answered)."""
    bad = []
    mission_of = {j["id"]: j.get("mission_id", "") for j in s.jobs}
    seen: set[tuple[int, int]] = set()
    for e in s.edges:
        pair = (e["job_id"], e["parent_id"])
        if e["job_id"] == e["parent_id"]:
            bad.append(_v(e["job_id"], "depends on itself"))
        if pair in seen:
            bad.append(_v(e["job_id"], f"has two edges to parent {e['parent_id']}"))
        seen.add(pair)
        if e["kind"] not in EDGE_KINDS:
            bad.append(_v(e["job_id"], f"has an edge of kind {e['kind']!r}"))
        if mission_of.get(e["job_id"]) != mission_of.get(e["parent_id"]):
            bad.append(_v(e["job_id"], f"depends on job {e['parent_id']} of another mission"))
    if stuck := _cycle(s.edges):
        bad.append(_v(stuck[0], f"the stored edges form a cycle through jobs {stuck}"))
    written = {m for m in mission_of.values() if m}
    created = {m["mission"] for m in s.missions if not m["defect"] and m["answer"] == "ok"}
    for m in s.missions:
        if m["defect"] and m["answer"] != "refused":
            bad.append(_v(m["mission"], f"sent with a {m['defect']}, answered {m['answer']}, not refused"))
        elif not m["defect"] and m["answer"] == "refused":
            what = "a repeat of the stored mission" if m["repost"] else "a sound mission"
            bad.append(_v(m["mission"], f"{what}, refused ({m['refused']})"))
        if m["answer"] == "refused" and m["mission"] in written - created:
            bad.append(_v(m["mission"], f"refused ({m['refused']}), and its jobs were written"))
    return judged(len(s.edges) + len(s.missions), bad)


def _unrunnable(job: dict[str, Any]) -> str | None:
    """Why no handler can run the job (seed 004: an unregistered type, a payload that does not parse), or None."""
    if job["type"] not in HANDLED_TYPES:
        return f"its type {job['type']!r} has no handler"
    try:
        json.loads(job["payload"])
    except (TypeError, ValueError):
        return "its payload is not JSON"
    return None


# A claim row is stamped inside its transaction, after the transaction began: a stall recorded when it began (a
# hold-transaction fault on job.claim: nightly J17-run1134, held 0.4 ms before the row) is the claim's own.
CLAIM_TX_BEFORE_ROW_S = 1.0


def _renewed_nothing(s: JobsState, worker: str, since: float, at: float) -> bool:
    """The worker that claimed at ``since`` was killed, stopped or stalled in a held transaction from its claim's
    transaction on, or cut off the database (a db fault window) before ``at``: its claim may legitimately go stale."""
    stopped = any(since - CLAIM_TX_BEFORE_ROW_S <= t <= at and who == worker for t, who in s.kills or ())
    return stopped or any(start <= at and (end is None or end >= since) for start, end in s.outages)


def unrunnable_jobs_die_at_once(s: JobsState) -> Verdict:
    """J16: seed 004 buries a job no handler can run at once ("未注册类型消费时直接置 dead", "载荷损坏重试也不会好"):
    never done, never put back by a failure, and reclaimed only when the worker that held it was killed, stopped or
    cut off the database in between (its burial's write failed: the pool skips it, the reclaimer settles the job, and
    the next claim buries it). Mutation testing (2026-12-07): a payload error the pool let escape
    left the job running until the reclaimer buried it after MaxRetry reclaims, with every other check green."""
    bad = []
    checked = 0
    for job in s.jobs:
        why = _unrunnable(job)
        if why is None:
            continue
        checked += 1
        holder: tuple[str, float] | None = None
        for r in s.logs_by_job.get(job["id"], []):
            at = _at(r["created_at"]).timestamp() - s.t0
            if r["from_status"] == PENDING and r["to_status"] == RUNNING:
                holder = (r["actor"], at)
            elif r["from_status"] == RUNNING and r["to_status"] in (DONE, PENDING) and r["actor"] != RECLAIMER:
                bad.append(_v(job["id"], f"{why}, and a worker moved it {r['from_status']} -> {r['to_status']} "
                                         f"(log row {r['id']}) instead of burying it"))
            elif r["from_status"] == RUNNING and r["actor"] == RECLAIMER and holder is not None and \
                    s.kills is not None and not _renewed_nothing(s, holder[0], holder[1], at):
                bad.append(_v(job["id"], f"{why}, and it was reclaimed from {holder[0]}, which was neither killed, "
                                         f"stopped nor cut off the database, instead of buried at its claim (log row "
                                         f"{r['id']})"))
    return judged(checked, bad)


def live_claims_are_not_reclaimed(s: JobsState) -> Verdict:
    """J17: a claim goes stale only when its worker stops renewing it: killed (or crashed by its job), stopped
    (SIGSTOP), or cut off the database while it held the claim. A reclaim of any other claim takes a job from a
    worker still running it, which then runs twice (the service's dedup hides the second run from J1). The seed
    renews no claim, so its reclaim of a handler longer than the threshold violates this (seed 004's own warning:
    "必须大于 handler 最长执行时间,否则健康任务会被误回收重复执行")."""
    if s.kills is None:
        return unchecked("this shell does not record the kills and stops of its processes")
    bad = []
    checked = 0
    for job_id, rows in s.logs_by_job.items():
        holder: tuple[str, float] | None = None
        for r in rows:
            at = _at(r["created_at"]).timestamp() - s.t0
            if r["from_status"] == PENDING and r["to_status"] == RUNNING:
                holder = (r["actor"], at)
            elif r["from_status"] == RUNNING and r["actor"] == RECLAIMER and holder is not None:
                checked += 1
                worker, since = holder
                if not _renewed_nothing(s, worker, since, at):
                    bad.append(_v(job_id, f"reclaimed {at - since:.1f} s after {worker} claimed it, and {worker} "
                                          f"was neither killed, stopped nor cut off the database (log row {r['id']})"))
                holder = None
    return judged(checked, bad)


OUTCOME_SLACK_S = 1.0  # the outcome's own transactions after the handler's call gave up


def attempts_end_by_the_handler_timeout(s: JobsState) -> Verdict:
    """J18: the pool gives a handler's call up at its timeout (a hung agent: seed 004 bounds the stale threshold by
    the call's timeout, "同步调用超时 60s × 重试 2"), checked at the first heartbeat that reaches it, so a worker
    writes each attempt's outcome no later than that after its claim, unless the worker was killed, stopped or cut
    off the database meanwhile, as J16 and J17 excuse it (then the reclaimer ends the attempt). Mutation testing
    (2026-12-07): a handler given up one heartbeat late was green."""
    if s.kills is None or s.handler_timeout_s is None:
        return unchecked("this shell does not record the kills and stops of its processes")
    # The worker waits a heartbeat at a time (the seed: the whole timeout at once) and gives up at the first wait that
    # reaches the timeout.
    step = min(s.heartbeat_s or s.handler_timeout_s, s.handler_timeout_s)
    deadline = math.ceil(s.handler_timeout_s / step - 1e-9) * step
    bad = []
    checked = 0
    for job_id, rows in s.logs_by_job.items():
        claim: tuple[str, float] | None = None
        for r in rows:
            at = _at(r["created_at"]).timestamp() - s.t0
            if r["from_status"] == PENDING and r["to_status"] == RUNNING:
                claim = (r["actor"], at)
                continue
            if r["from_status"] != RUNNING or claim is None:
                continue
            worker, since = claim
            claim = None
            if r["actor"] == RECLAIMER:
                continue
            checked += 1
            if at - since - deadline > OUTCOME_SLACK_S and not _renewed_nothing(s, worker, since, at):
                bad.append(_v(job_id, f"{worker} wrote its {r['to_status']} {at - since:.1f} s after its claim, "
                                      f"past the handler timeout of {s.handler_timeout_s:g} s, given up at the "
                                      f"{deadline:g} s heartbeat (log row {r['id']})"))
    return judged(checked, bad)


SEED_REASON_CHARS = 256  # seed 004 Fail: "reason string:失败原因摘要(≤256 字符,进日志/告警;禁止塞堆栈全文)"


def failure_reasons_are_summaries(s: JobsState) -> Verdict:
    """J19: what a worker writes as a failure's reason (a retry or a burial) is a summary of at most 256 characters,
    never the handler's whole answer (seed 004: no full stack in the log or the alert). Mutation testing
    (2026-12-07): a reason cut at 257 characters was green."""
    bad = []
    checked = 0
    for job_id, rows in s.logs_by_job.items():
        for r in rows:
            if r["from_status"] != RUNNING or r["to_status"] not in (PENDING, DEAD) or r["actor"] == RECLAIMER:
                continue
            checked += 1
            if len(r["message"] or "") > SEED_REASON_CHARS:
                bad.append(_v(job_id, f"its failure's reason is {len(r['message'])} characters, over seed 004's "
                                      f"{SEED_REASON_CHARS} (log row {r['id']})"))
    return judged(checked, bad)


def job_log_is_append_only(s: JobsState) -> Verdict:
    """J21: seed 002 §4.2/§4.6's task_log is append-only (no UPDATE, no DELETE; the application role's grants refuse
    both on PostgreSQL): every job_log row the harness read during the run is at the end, unchanged."""
    if s.log_seen is None:
        return unchecked("this shell does not read the job log during the run")
    final = {r["id"]: r for r in s.log}
    bad = []
    for seen in s.log_seen:
        now = final.get(seen["id"])
        if now is None:
            bad.append(_v(seen["job_id"], f"log row {seen['id']} ({seen['from_status']} -> {seen['to_status']}) was "
                                          "deleted"))
        elif now != seen:
            changed = sorted(k for k in seen if now.get(k) != seen[k])
            bad.append(_v(seen["job_id"], f"log row {seen['id']} was rewritten after it was read: "
                                          f"{', '.join(changed)}"))
    return judged(len(s.log_seen), bad)


def claims_follow_the_candidates(s: JobsState) -> Verdict:
    """J22: seed 004's Claimable reads at most ClaimBatch candidates FIFO by id, and the worker claims them in that
    order: each read's candidates ascend by id, number at most ClaimBatch, and the jobs the worker won before its next
    read are candidates of this one, in id order (a candidate is not a claim: another worker may win it)."""
    if s.rounds is None:
        return unchecked("this shell does not observe the workers' candidates reads")
    bad = []
    for r in s.rounds:
        ids, claimed, who = r["candidates"], r["claimed"], f"{r['process']}'s read at {r['at']:.3f} s"
        if ids != sorted(set(ids)):
            bad.append(_v(r["process"], f"{who} answered candidates {ids}, not in id order"))
        if s.claim_batch and len(ids) > s.claim_batch:
            bad.append(_v(r["process"], f"{who} answered {len(ids)} candidates, over ClaimBatch {s.claim_batch}"))
        if [i for i in claimed if i not in ids] or claimed != sorted(claimed):
            bad.append(_v(r["process"], f"{who}: claimed {claimed} of candidates {ids}, not in their order"))
    return judged(len(s.rounds), bad)


def drain_windows(events: Iterable[tuple[float, str, str]]) -> list[dict[str, Any]]:
    """Each drain of a process and when it was started again, from (time, "drain" | "restart", process) in time
    order (either shell's record of them); a restart closes the process's open drain, whatever ended it."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for t, what, who in events:
        if what == "drain" and who not in open_:
            open_[who] = {"process": who, "at": t, "until": None}
            out.append(open_[who])
        elif what == "restart" and who in open_:
            open_.pop(who)["until"] = t
    return out


def _drained(s: JobsState, drain: dict[str, Any], job_id: int, rows: list[dict[str, Any]]) -> list[Violation]:
    """What the worker drained at ``drain`` did wrong with one job: claimed it while draining, or left it unfinished
    (reclaimed, or still its claim when the worker was started again or the run ended), unless it was killed, stopped
    or cut off the database meanwhile (explore, 2026-12-07: a drained worker killed at a crash point after its work)."""
    who, began, until = drain["process"], drain["at"], drain["until"]
    bad = []
    held: float | None = None  # when the drained worker claimed the job it holds
    for r in rows:
        t = _at(r["created_at"]).timestamp() - s.t0
        if until is not None and t >= until:
            break
        if r["from_status"] == PENDING and r["to_status"] == RUNNING:
            if r["actor"] == who and t > began:
                bad.append(_v(job_id, f"{who} claimed it {t - began:.1f} s after its drain began (log row {r['id']})"))
            held = t if r["actor"] == who else None
        elif r["from_status"] == RUNNING and held is not None:
            if t > began and r["actor"] != who and not _renewed_nothing(s, who, held, t):
                bad.append(_v(job_id, f"{who} held it when its drain began, and {r['actor']} moved it to "
                                      f"{r['to_status']} (log row {r['id']}) instead of {who} finishing it"))
            held = None
    if held is not None and held <= began and not _renewed_nothing(s, who, held, math.inf if until is None else until):
        bad.append(_v(job_id, f"{who} held it when its drain began and never wrote its outcome"))
    return bad


def held_at_drains(s: JobsState) -> list[tuple[str, int]]:
    """(worker, job) for each job a worker held (claimed, no outcome yet) when its drain began."""
    held = []
    for d in s.drains or ():
        for job_id, rows in s.logs_by_job.items():
            holder = None
            for r in rows:
                if _at(r["created_at"]).timestamp() - s.t0 > d["at"]:
                    break
                holder = r["actor"] if r["to_status"] == RUNNING else None
            if holder == d["process"]:
                held.append((holder, job_id))
    return held


def draining_workers_finish_what_they_hold(s: JobsState) -> Verdict:
    """J23: seed 004's Pool.Run drains on a cancelled context: the jobs in flight finish, then it exits. A worker
    asked to stop (SIGTERM, the drain fault) writes the outcome of the job it holds itself (not the reclaimer, after
    its claim went stale) and claims nothing after the drain began, until it is started again; a worker killed,
    stopped or cut off the database meanwhile is excused, as in J17."""
    if s.drains is None:
        return unchecked("this shell does not drain its processes")
    bad = [v for d in s.drains for job_id, rows in s.logs_by_job.items() for v in _drained(s, d, job_id, rows)]
    return judged(len(s.drains), bad)


def _claims_held(s: JobsState, worker: str, at: float) -> list[tuple[int, dict[str, Any] | None]]:
    """(job, the row that ended the claim or None) for each claim ``worker`` held at ``at``: claimed by then, not
    ended by then."""
    held = []
    for job_id, rows in s.logs_by_job.items():
        claim: int | None = None
        for i, r in enumerate(rows):
            if _at(r["created_at"]).timestamp() - s.t0 > at:
                break
            if r["from_status"] == PENDING and r["to_status"] == RUNNING:
                claim = i if r["actor"] == worker else None
            elif r["from_status"] == RUNNING:
                claim = None
        if claim is not None:
            end = next((r for r in rows[claim + 1:] if r["from_status"] == RUNNING), None)
            held.append((job_id, end))
    return held


def claims_beside_stuck_transactions(s: JobsState) -> list[tuple[str, int]]:
    """(worker, job) for each claim held by a worker stalled at the moment another was stopped inside an open
    transaction (the stack stops the whole instance): the claims J24 judges past a locked row."""
    stuck = {st.at for st in s.stalls or () if st.in_transaction}
    return [(st.process, job_id) for st in s.stalls or () if st.at in stuck and not st.in_transaction
            for job_id, _ in _claims_held(s, st.process, st.at)]


def _reclaimer_up(s: JobsState, start: float, end: float, bound: float) -> bool:
    """Some reclaimer ran through [start, end]: none of its stalls (a killed one restarts: ``bound``) or drains
    overlaps it (the stack's drains name its workers: ``instance-a.1`` drains reclaimer ``instance-a``)."""
    def down(r: str) -> bool:
        stalled = any(st.process == r and st.at <= end and (st.at + bound if st.until is None else st.until) >= start
                      for st in s.stalls or ())
        drained = any(r in (d["process"], d["process"].split(".")[0]) and d["at"] <= end
                      and (d["until"] is None or d["until"] >= start) for d in s.drains or ())
        return stalled or drained
    return any(not down(r) for r in s.reclaimers)


# A reclaim round's own transaction and its process's scheduling: on the real stack at CI's time factor two periods
# are 2 s of wall time, and a loaded machine delays a round by a second or more (the tightest margin seen was 1.75 s)
RECLAIM_SLACK_S = 2.0


def stale_claims_are_reclaimed_in_time(s: JobsState) -> Verdict:
    """J24: a worker killed, or stopped for longer than the bound, renews nothing: each claim it held goes stale at
    the latest stale_after_s after the stop, and the next reclaim (every reclaim_every_s) takes it back; so by
    stale_after_s plus two periods of the stop it has ended (seed 004's ReclaimStale, every 60 s), plus
    RECLAIM_SLACK_S. A row a stuck transaction holds (a worker stopped before its commit) holds none of the others
    up: the fixed reclaim skips it
    (SKIP LOCKED) and takes it in a later period; seed 004's UPDATE waits on the lock with every stale claim behind
    it (found natively, scenario J17). The stuck row itself is excused (its worker may renew or finish it once it
    wakes); so is a stall while the database was cut off or no reclaimer ran throughout."""
    if s.stalls is None or s.stale_after_s is None or s.reclaim_every_s is None:
        return unchecked("this shell does not record how long its processes stalled")
    bound = s.stale_after_s + 2 * s.reclaim_every_s
    allowed = bound + RECLAIM_SLACK_S
    end_of_run = _aware(s.end).timestamp() - s.t0
    bad = []
    checked = 0
    for stall in s.stalls:
        deadline = stall.at + bound
        if stall.in_transaction or deadline > end_of_run or (stall.until is not None and stall.until < deadline):
            continue  # the stuck row; a run over too soon; awake in time to renew its claims itself
        if any(start <= deadline and (end is None or end >= stall.at) for start, end in s.outages) or \
                not _reclaimer_up(s, stall.at, deadline, bound):
            continue
        for job_id, end in _claims_held(s, stall.process, stall.at):
            checked += 1
            ended = None if end is None else _at(end["created_at"]).timestamp() - s.t0
            if ended is None or ended > stall.at + allowed:
                when = "never" if ended is None else f"{ended - stall.at:.1f} s after"
                bad.append(_v(job_id, f"{stall.process} held it when it stalled at {stall.at:.1f} s, and its claim "
                                      f"ended {when}: past stale_after_s {s.stale_after_s:g} + 2 reclaim periods "
                                      f"({bound:g} s) + {RECLAIM_SLACK_S:g} s"))
    return judged(checked, bad)


# The job system's invariants, in the order they are checked and listed (docs/invariants.md).
INVARIANTS: Invariants[JobsState] = Invariants({
    "J1": (one_effect_per_job, "a job's work takes effect at most once, and a done job's did"),
    "J2": (outcomes_from_the_current_claim, "a job's outcome is written by the claim that holds it"),
    "J3": (retries_wait_their_backoff, "after a failure a job is not claimed before its backoff ends"),
    "J4": (attempts_bounded, "a job runs at most MaxRetry + 1 times and is dead after that many failed attempts"),
    "J5": (log_agrees_with_job, "every status change has its log row, and every transition is legal"),
    "J6": (no_lost_job, "every job reaches a terminal state or is still claimable"),
    "J7": (one_job_per_key, "every enqueue of a key answers the same job"),
    "J8": (no_job_before_its_parents_allow,
           "no job starts before its parents allow it (hard: done; soft: ended; time: timed out)"),
    "J9": (in_degree_agrees_with_edges, "a job's in-degree is the number of its edges not released"),
    "J10": (failed_hard_parent_cancels_descendants, "a job whose hard parent failed or was cancelled is cancelled"),
    "J11": (worker_loops_run_until_stopped, "pool loops run until their instance stops"),
    "J12": (retries_follow_the_backoff, "a failed job's retry is due min(2^retry s, 1 h) after the failure, no "
            "sooner, no later"),
    "J13": (every_dead_job_alerts_once, "every job gone dead raises one JOB_DEAD alert, and only such a job"),
    "J14": (no_defect_raised, "no error only a defect raises"),
    "J15": (missions_are_dags_or_refused,
            "the stored edges form a DAG within each mission; a mission with a cycle or a bad edge is refused whole"),
    "J16": (unrunnable_jobs_die_at_once, "a job with no handler or a payload that is not JSON goes dead at its claim"),
    "J17": (live_claims_are_not_reclaimed,
            "the reclaimer takes back only the claim of a worker killed, stopped or cut off the database"),
    "J18": (attempts_end_by_the_handler_timeout, "a worker ends each attempt by the handler timeout after its claim"),
    "J19": (failure_reasons_are_summaries, "a failure's reason in the job log is at most 256 characters"),
    "J20": (dead_jobs_spent_every_attempt, "a job dead of its attempts spent exactly MaxRetry + 1 (a lost claim "
            "costs none)"),
    "J21": (job_log_is_append_only, "a job_log row read during the run is at its end, unchanged"),
    "J22": (claims_follow_the_candidates, "a worker reads at most ClaimBatch candidates in id order and claims them "
            "in that order"),
    "J23": (draining_workers_finish_what_they_hold, "a draining worker writes the outcome of the job it holds and "
            "claims nothing more"),
    "J24": (stale_claims_are_reclaimed_in_time, "a stopped worker's claim is reclaimed within stale_after_s plus two "
            "reclaim periods; a row a stuck transaction holds holds up no other"),
})


class ReclaimedClaim(NamedTuple):
    job: int
    worker: str  # who held the claim the reclaimer took back
    token: int | None
    next_worker: str | None  # who claimed the job next, if anyone did


def reclaimed_claims(log: Iterable[Mapping[str, Any]]) -> list[ReclaimedClaim]:
    """Each claim the reclaimer took back, from job_log rows in id order."""
    holder: dict[int, tuple[str, int | None]] = {}
    taken: list[ReclaimedClaim] = []
    waiting: dict[int, list[int]] = {}  # job -> indexes in taken of its reclaims not yet followed by a claim
    for r in log:
        job = r["job_id"]
        if r["actor"] == RECLAIMER:
            if job in holder:
                waiting.setdefault(job, []).append(len(taken))
                taken.append(ReclaimedClaim(job, *holder.pop(job), None))
        elif r["to_status"] == RUNNING:
            holder[job] = (r["actor"], (r["detail"] or {}).get("token"))
            for i in waiting.pop(job, []):
                taken[i] = taken[i]._replace(next_worker=r["actor"])
    return taken


def outclaimed_workers(log: Iterable[Mapping[str, Any]]) -> set[str]:
    """The workers that lost a claim to the reclaimer and whose job another worker claimed next (a zombie's late write
    then meets someone else's claim)."""
    return {c.worker for c in reclaimed_claims(log) if c.next_worker not in (None, c.worker)}


def _aware(t: datetime) -> datetime:
    """SQLite hands timezone-aware columns back naive: they were written in UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _at(value: Any) -> datetime:
    return _aware(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))
