"""Seed 002's DAG over the job table: a mission is a set of jobs and edges (``job_dependency``) created in one
transaction; a job is claimable when it is pending, due, and has no unreleased edge left (``job.unmet``, 002's
in-degree, kept in the same transactions that release edges).

When a parent reaches a terminal status, in that transaction (002 §4.4: "依赖解析使用行级锁", resolved in the
transaction that changes the parent):
- ``done`` releases every edge to its children;
- ``dead`` or ``cancelled`` releases its soft and time edges (a soft dependency only needs the parent to end) and
  cancels the children that waited on it through a hard edge, and their hard descendants in turn;
- a time edge is also released once the parent has run for its ``timeout_s`` (002: "前置任务超时后自动触发"),
  by the reclaimer's pass (``release_due_time_edges``).
An edge is released once: ``released_at IS NULL`` is the condition of its update, so a parent's terminal change
seen twice (a duplicate event, a retried transaction) never releases a child twice. Cycles are refused when the
mission is created; self-edges and duplicate edges are refused by the table's constraints too."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import insert, select, update

from kernel.effects import Tx
from reference.jobs import bugs, coverage
from reference.jobs.models import CANCELLED, DONE, EDGE_KINDS, HARD, PENDING, SOFT, TERMINAL, TIME, Job, JobDependency
from reference.jobs.rows import NewJob, aware, log

_JOB = Job.__table__
_EDGE = JobDependency.__table__


class MissionRefused(ValueError):
    """A mission whose edges do not form a DAG over its own jobs (a cycle, an unknown job, a bad kind)."""


class MissionConflict(ValueError):
    """A mission id already stored with other steps or edges (create_mission)."""


@dataclass(frozen=True)
class Step:
    """One job of a mission, named within it."""

    name: str
    type: str
    payload: object = None
    timeout_s: int = 300


@dataclass(frozen=True)
class Mission:
    id: str
    steps: tuple[Step, ...]
    edges: tuple[tuple[str, str, str], ...] = field(default=())  # (child, parent, kind)


def check_acyclic(mission: Mission) -> None:
    """Kahn's algorithm over the mission's edges: every job must come out, else there is a cycle."""
    names = [s.name for s in mission.steps]
    if len(set(names)) != len(names):
        raise MissionRefused("two steps share a name")
    children: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(names, 0)
    seen: set[tuple[str, str]] = set()
    for child, parent, kind in mission.edges:
        if child not in indegree or parent not in indegree:
            raise MissionRefused(f"edge {parent} -> {child} names a job outside the mission")
        if kind not in EDGE_KINDS:
            raise MissionRefused(f"edge {parent} -> {child}: kind {kind!r} is not one of {', '.join(EDGE_KINDS)}")
        if child == parent:
            raise MissionRefused(f"{child} depends on itself")
        if (child, parent) in seen:
            raise MissionRefused(f"edge {parent} -> {child} is given twice")
        seen.add((child, parent))
        children[parent].append(child)
        indegree[child] += 1
    ready = deque(n for n in names if indegree[n] == 0)
    done = 0
    while ready:
        n = ready.popleft()
        done += 1
        for c in children[n]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    if done != len(names):
        stuck = sorted(n for n, d in indegree.items() if d > 0)
        raise MissionRefused(f"the edges form a cycle through {', '.join(stuck)}")


def release_children(tx: Tx, parent_id: int, parent_status: str, actor: str) -> list[int]:
    """In the transaction that moved ``parent_id`` to a terminal status: release its edges as that status allows,
    cancel the hard children of a job that did not succeed. Returns the jobs cancelled."""
    conn = tx.conn
    edges = conn.execute(select(_EDGE.c.id, _EDGE.c.job_id, _EDGE.c.kind)
                         .where(_EDGE.c.parent_id == parent_id, _EDGE.c.released_at.is_(None))
                         .order_by(_EDGE.c.id)).all()
    cancelled: list[int] = []
    for edge_id, child, kind in edges:
        if not _release(tx, edge_id, child):
            continue  # released meanwhile (by this parent's change seen twice)
        if parent_status != DONE and kind == HARD and not bugs.BUGS.active(bugs.HARD_FAILURE_RELEASES):
            cancelled.extend(cancel(tx, child, actor, f"its hard parent {parent_id} ended {parent_status}"))
    if cancelled:
        coverage.COVERAGE.reached(coverage.CASCADE_CANCELLED)
    return cancelled


def _release(tx: Tx, edge_id: int, child: int) -> bool:
    conn = tx.conn
    hit = conn.execute(update(_EDGE).where(_EDGE.c.id == edge_id, _EDGE.c.released_at.is_(None))
                       .values(released_at=tx.now).execution_options(preserve_rowcount=True)).rowcount == 1
    if hit:
        conn.execute(update(_JOB).where(_JOB.c.id == child).values(unmet=_JOB.c.unmet - 1, updated_at=tx.now))
    return hit


def cancel(tx: Tx, job_id: int, actor: str, reason: str) -> list[int]:
    """Cancel a job that has not started (pending) and, through their hard edges, its descendants; release the
    soft and time edges of each cancelled job. Returns the jobs cancelled (none if it already started)."""
    changed = tx.conn.execute(
        update(_JOB).where(_JOB.c.id == job_id, _JOB.c.status == PENDING).values(status=CANCELLED, updated_at=tx.now)
        .execution_options(preserve_rowcount=True)).rowcount == 1
    if not changed:
        return []
    log(tx, job_id, PENDING, CANCELLED, actor, reason)
    return [job_id, *release_children(tx, job_id, CANCELLED, actor)]


def release_due_time_edges(tx: Tx) -> int:
    """Release the time edges whose parent has run for its timeout (or longer) without ending. Returns how many."""
    conn = tx.conn
    rows = conn.execute(
        select(_EDGE.c.id, _EDGE.c.job_id, _JOB.c.started_at, _JOB.c.timeout_s)
        .join(_JOB, _JOB.c.id == _EDGE.c.parent_id)
        .where(_EDGE.c.kind == TIME, _EDGE.c.released_at.is_(None), _JOB.c.started_at.is_not(None))
        .order_by(_EDGE.c.id)).all()
    due = [(e, c) for e, c, started, timeout in rows if aware(started) + timedelta(seconds=timeout) <= tx.now]
    return sum(1 for edge_id, child in due if _release(tx, edge_id, child))


def _stored(tx: Tx, mission_id: str) -> tuple[dict[str, int], set[tuple[str, str, str]], dict[int, int]]:
    """The mission as the tables hold it: step name -> job id, its edges (child, parent, kind) by name, and each
    job's unmet."""
    prefix = f"{mission_id}:"
    rows = tx.conn.execute(select(_JOB.c.id, _JOB.c.idempotent_key, _JOB.c.unmet)
                           .where(_JOB.c.mission_id == mission_id)).all()
    ids = {key.removeprefix(prefix): int(job_id) for job_id, key, _ in rows}
    names = {job_id: name for name, job_id in ids.items()}
    edges = tx.conn.execute(select(_EDGE.c.job_id, _EDGE.c.parent_id, _EDGE.c.kind)
                            .where(_EDGE.c.job_id.in_(sorted(names)))).all() if names else []
    return ids, {(names[c], names.get(p, str(p)), k) for c, p, k in edges}, {int(j): int(u) for j, _, u in rows}


def _as_stored(mission: Mission, ids: dict[str, int], edges: set[tuple[str, str, str]]) -> dict[str, int]:
    """The stored jobs when the mission asks for exactly what is stored (a repeated request); MissionConflict when
    it asks for other steps or edges."""
    if set(ids) != {s.name for s in mission.steps} or edges != set(mission.edges):
        raise MissionConflict(f"mission {mission.id} exists with other steps or edges; a mission is created once, "
                              f"whole (post it as stored, or under a new id)")
    return ids


def create_mission(tx: Tx, mission: Mission, enqueue: Callable[[Tx, NewJob], int], by: str = "") -> dict[str, int]:
    """The mission's jobs and edges in one transaction (a refused mission writes nothing). Returns step name -> job
    id. ``by`` is who creates it (each job's ``enqueued_by``).

    A mission id is its idempotent key (seed 004 Enqueue: a repeated request creates nothing and answers the
    existing jobs), and it is created once, whole: the same mission again answers its jobs; the same id with other
    steps or edges is refused (MissionConflict) and writes nothing. Extending a stored mission would add an edge to
    a parent that may have ended already (its release already happened: the child would wait forever, J9) or add
    a dependency to a job that may already run; seed 002 creates a DAG's edges with its jobs, in one transaction.
    ``enqueue`` is the repository's (idempotent by key): a concurrent post of the same mission that committed first
    is answered as stored; one whose step key another job holds is refused."""
    check_acyclic(mission)
    ids, edges, _ = _stored(tx, mission.id)
    if ids:
        return _as_stored(mission, ids, edges)
    waits: dict[str, int] = defaultdict(int)
    for child, _parent, _kind in mission.edges:
        waits[child] += 1
    ids = {s.name: enqueue(tx, NewJob(s.type, f"{mission.id}:{s.name}", s.payload, mission.id,
                                      timeout_s=s.timeout_s, unmet=waits[s.name], enqueued_by=by))
           for s in mission.steps}
    stored, edges, unmet = _stored(tx, mission.id)
    if edges or stored != ids:  # a concurrent post committed between the read and the inserts, or a key was taken
        return _as_stored(mission, stored, edges)
    if any(unmet[ids[name]] != waits[name] for name in ids):  # a concurrent post of the same steps without edges
        raise MissionConflict(f"mission {mission.id} exists with other edges")
    if mission.edges:
        parents = sorted({ids[p] for _c, p, _k in mission.edges})
        status = tx.conn.execute(select(_JOB.c.status).where(_JOB.c.id.in_(parents))
                                 .with_for_update()).scalars().all()  # held: no parent ends before its edges exist
        if set(status) & TERMINAL:
            raise MissionConflict(f"mission {mission.id}: a parent ended before its edges could be written")
        tx.conn.execute(insert(_EDGE), [
            {"job_id": ids[c], "parent_id": ids[p], "kind": k, "created_at": tx.now} for c, p, k in mission.edges])
    return ids


__all__ = ["HARD", "SOFT", "TIME", "Mission", "MissionConflict", "MissionRefused", "Step", "cancel", "check_acyclic",
           "create_mission", "release_children", "release_due_time_edges"]
