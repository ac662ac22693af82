"""The job system's port to PostgreSQL, on a real server as its application role: what the simulation's SQLite
cannot show for itself. A claim race has one winner by the row lock (RowsAffected == 1 for one of two concurrent
claims); a concurrent duplicate enqueue blocks on the unique index, then returns the first job (the savepoint keeps
the transaction usable); job_log is append-only by the role's grants; the fixed variant's fencing refuses a stale
claim's outcome where the seed's writes over the new claim; a mission's DAG is written whole or not at all.

Concurrency is ordered, not timed: the first transaction holds its lock until the second is seen waiting on it in
pg_stat_activity, then commits."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.jobs.dag import Mission, MissionRefused, Step, create_mission, release_children
from reference.jobs.migrations import create_app_role, install
from reference.jobs.models import DONE, PENDING, RUNNING, Job, JobDependency, JobLog
from reference.jobs.repo import FixedRepo, Reclaimed, SeedRepo
from reference.jobs.rows import NewJob

ROLE, PASSWORD = "jobs_app", "jobs-pw"
DB = "jobs_port"


@pytest.fixture(scope="module")
def urls(pg) -> tuple[str, str]:
    pg.create_database(DB, exist_ok=True)
    owner = create_engine(pg.url(database=DB))
    try:
        with owner.begin() as conn:
            install(conn)
            create_app_role(conn, ROLE, PASSWORD)
    finally:
        owner.dispose()
    return pg.url(database=DB), pg.url(ROLE, PASSWORD, DB)


@pytest.fixture
def app(urls, engines) -> Engine:
    owner = engines(urls[0])
    with owner.begin() as conn:
        conn.execute(text("TRUNCATE job, job_log, job_dependency RESTART IDENTITY CASCADE"))
    return engines(urls[1])


def _tx(engine: Engine, fn: Callable[[Tx], Any], now: datetime | None = None) -> Any:
    with Session(engine) as session, session.begin():
        return fn(Tx(session, now or datetime.now(UTC), uuid.uuid4))


def _count(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _waiting_on_a_lock(owner: Engine) -> bool:
    with owner.connect() as conn:
        return bool(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE usename = :r AND wait_event_type = "
                                      "'Lock'"), {"r": ROLE}).scalar_one())


def _wait_until_blocked(owner: Engine, timeout_s: float = 30.0) -> None:
    """Until a backend of the app role waits on a lock (a condition, polled; not a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _waiting_on_a_lock(owner):
            return
        time.sleep(0.02)
    raise AssertionError("the second transaction never waited on the first one's lock")


def _waits_or_ends(owner: Engine, thread: threading.Thread, timeout_s: float = 60.0) -> bool:
    """True once a backend of the app role waits on a lock, False once ``thread`` has ended (polled conditions)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        thread.join(0.02)
        if not thread.is_alive():
            return False
        if _waiting_on_a_lock(owner):
            return True
    raise AssertionError(f"neither ended nor waited on a lock in {timeout_s:g} s")


def _race(app: Engine, owner: Engine, first: Callable[[Tx], Any], second: Callable[[Tx], Any]) -> tuple[Any, Any]:
    """``first`` runs and holds its transaction open; ``second`` starts in another thread and blocks on it; then
    ``first`` commits and ``second`` finishes against what it committed."""
    out: dict[str, Any] = {}
    with Session(app) as session:
        session.begin()
        out["first"] = first(Tx(session, datetime.now(UTC), uuid.uuid4))
        thread = threading.Thread(target=lambda: out.__setitem__("second", _tx(app, second)))
        thread.start()
        try:
            _wait_until_blocked(owner)
        finally:
            session.commit()
            thread.join(60)
    assert not thread.is_alive()
    return out["first"], out["second"]


@pytest.mark.parametrize("repo", [SeedRepo(), FixedRepo()], ids=["seed", "fixed"])
def test_of_two_concurrent_claims_exactly_one_wins(repo, app, urls, engines) -> None:
    job_id = _tx(app, lambda tx: repo.enqueue(tx, NewJob("survey", "k-1", {})))
    a, b = _race(app, engines(urls[0]), lambda tx: repo.claim(tx, job_id, "instance-a"),
                 lambda tx: repo.claim(tx, job_id, "instance-b"))
    assert a is not None and a.owner == "instance-a" and b is None  # the blocked UPDATE re-checked its WHERE
    with app.connect() as conn:
        assert conn.execute(select(Job.status, Job.owner).where(Job.id == job_id)).one() == (RUNNING, "instance-a")
        logs = conn.execute(select(JobLog.to_status).where(JobLog.job_id == job_id).order_by(JobLog.id)).scalars()
        assert list(logs) == [PENDING, RUNNING]


@pytest.mark.parametrize("repo", [SeedRepo(), FixedRepo()], ids=["seed", "fixed"])
def test_a_concurrent_duplicate_enqueue_returns_the_first_job(repo, app, urls, engines) -> None:
    new = NewJob("survey", "same-key", {"n": 1})
    a, b = _race(app, engines(urls[0]), lambda tx: repo.enqueue(tx, new), lambda tx: repo.enqueue(tx, new))
    assert a == b
    assert _count(app, Job.__table__) == 1 and _count(app, JobLog.__table__) == 1


def test_job_log_is_append_only_for_the_application_role(app) -> None:
    repo = FixedRepo()
    job_id = _tx(app, lambda tx: repo.enqueue(tx, NewJob("survey", "k-log", {})))
    for statement in ("UPDATE job_log SET message = 'rewritten'", "DELETE FROM job_log", f"DELETE FROM job WHERE id = "
                      f"{job_id}"):
        with pytest.raises(ProgrammingError, match="permission denied"), app.begin() as conn:
            conn.execute(text(statement))
    assert _count(app, JobLog.__table__) == 1


def test_a_stale_claims_outcome_is_fenced_in_the_fixed_variant_and_lands_in_the_seed(app) -> None:
    t0 = datetime.now(UTC)
    for repo, lands in ((SeedRepo(), True), (FixedRepo(), False)):
        job_id = _tx(app, lambda tx, repo=repo: repo.enqueue(tx, NewJob("survey", f"k-{repo.variant}", {})), t0)
        first = _tx(app, lambda tx, repo=repo, j=job_id: repo.claim(tx, j, "instance-a"), t0)
        later = t0 + timedelta(seconds=120)
        reclaimed = _tx(app, lambda tx, repo=repo: repo.reclaim_stale(tx, 60.0, 6, "instance-b"), later)
        assert reclaimed == Reclaimed((job_id,))
        second = _tx(app, lambda tx, repo=repo, j=job_id: repo.claim(tx, j, "instance-b"), later)
        assert second is not None and second.token == first.token + 1
        assert _tx(app, lambda tx, repo=repo, c=first: repo.done(tx, c), later) is lands
        with app.connect() as conn:
            status = conn.execute(select(Job.status).where(Job.id == job_id)).scalar_one()
        assert status == (DONE if lands else RUNNING), repo.variant


def test_a_reclaim_is_not_held_up_by_a_stuck_transaction_on_another_stale_claim(app, urls, engines) -> None:
    """A worker stopped (SIGSTOP, a GC pause) inside its transaction keeps its row locks. The seed's reclaim waits
    on them, so every other stale claim waits too (seen natively: a zombie test's reclaim never came while the
    paused instance's other worker sat mid-transaction); the fixed one skips the locked row (SKIP LOCKED) and takes
    it back in a later period. The reclaim runs in another thread, so that the seed's wait is seen, not suffered."""
    owner = engines(urls[0])
    t0 = datetime.now(UTC)
    repo = FixedRepo()
    stuck, free = (_tx(app, lambda tx, k=k: repo.enqueue(tx, NewJob("survey", k, {})), t0) for k in ("k-s", "k-f"))
    claims = {j: _tx(app, lambda tx, j=j: repo.claim(tx, j, "instance-a"), t0) for j in (stuck, free)}
    later = t0 + timedelta(seconds=120)
    out: dict[str, Any] = {}
    with Session(app) as held:
        held.begin()
        assert repo.heartbeat(Tx(held, t0, uuid.uuid4), claims[stuck])  # uncommitted: a stuck worker's lock
        thread = threading.Thread(target=lambda: out.__setitem__(
            "reclaimed", _tx(app, lambda tx: repo.reclaim_stale(tx, 60.0, 6, "instance-b"), later)))
        thread.start()
        blocked = _waits_or_ends(owner, thread)
        held.rollback()  # the stuck worker dies; its lock goes
        thread.join(60)
    assert not blocked, "the reclaim waited on the stuck transaction's row lock"
    assert out["reclaimed"] == Reclaimed((free,))
    with app.connect() as conn:
        status = dict(conn.execute(select(Job.id, Job.status)).all())
    assert status == {stuck: RUNNING, free: PENDING}
    assert _tx(app, lambda tx: repo.reclaim_stale(tx, 60.0, 6, "instance-b"), later) == Reclaimed((stuck,))  # next


def test_a_mission_is_written_whole_and_a_cyclic_one_not_at_all(app) -> None:
    repo = FixedRepo()
    steps = tuple(Step(n, "inspect") for n in ("survey", "left", "right", "report"))
    diamond = Mission("m-1", steps, (("left", "survey", "hard"), ("right", "survey", "hard"),
                                     ("report", "left", "hard"), ("report", "right", "soft")))
    ids = _tx(app, lambda tx: create_mission(tx, diamond, repo.enqueue))
    assert _tx(app, lambda tx: create_mission(tx, diamond, repo.enqueue)) == ids  # idempotent by its keys
    with app.connect() as conn:
        unmet = dict(conn.execute(select(Job.id, Job.unmet)).all())
    assert [unmet[ids[n]] for n in ("survey", "left", "right", "report")] == [0, 1, 1, 2]
    assert _count(app, JobDependency.__table__) == 4
    cyclic = Mission("m-2", steps[:2], (("left", "survey", "hard"), ("survey", "left", "hard")))
    with pytest.raises(MissionRefused, match="cycle"):
        _tx(app, lambda tx: create_mission(tx, cyclic, repo.enqueue))
    assert _count(app, Job.__table__) == 4 and _count(app, JobDependency.__table__) == 4


def test_a_parent_completing_twice_at_once_releases_each_child_once(app, urls, engines) -> None:
    """A duplicate completion event (two transactions releasing the same parent concurrently): the edge's
    conditional release (released_at IS NULL) lets one of them decrement each child's in-degree."""
    repo = FixedRepo()
    steps = tuple(Step(n, "inspect") for n in ("survey", "left", "right"))
    ids = _tx(app, lambda tx: create_mission(tx, Mission("m-dup", steps, (("left", "survey", "hard"),
                                                                          ("right", "survey", "soft"))), repo.enqueue))
    survey = ids["survey"]
    _race(app, engines(urls[0]), lambda tx: release_children(tx, survey, DONE, "instance-a.1"),
          lambda tx: release_children(tx, survey, DONE, "instance-b.1"))
    with app.connect() as conn:
        unmet = dict(conn.execute(select(Job.id, Job.unmet)).all())
        released = conn.execute(select(func.count()).select_from(JobDependency.__table__)
                                .where(JobDependency.released_at.is_not(None))).scalar_one()
    assert (unmet[ids["left"]], unmet[ids["right"]], released) == (0, 0, 2)
