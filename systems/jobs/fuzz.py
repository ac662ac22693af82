"""The job system for `sortie fuzz` (scenarios.fuzz, System.fuzz): its API's OpenAPI document
(reference/jobs/http/openapi.yaml), its roles (an enqueuer, a reader, an operator), and a deployment to fuzz: the
API in process over a SQLite file, or on its real stack (gunicorn on PostgreSQL through Toxiproxy, as
systems/jobs/stack.py runs it; no pool instances, so jobs stay where the requests leave them).

Before the fuzzing, the fuzzer's enqueuer and an enqueuer the fuzzer holds no credential of each enqueue a job and
create a mission (their ids the examples of the passes' job_id); afterwards the invariants the tables alone can
judge are checked (J2-J5, J8-J10: legal logged histories, attempts, in-degrees, cascades) and the foreign caller's
jobs are as they were, but for an operator's logged cancel or re-drive (an operator may act on any job)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from reference.jobs.http.auth import ENQUEUER, OPERATOR, READER, ROLES, issue_token
from reference.jobs.http.openapi import document
from reference.jobs.migrations import install
from reference.jobs.models import Job
from reference.jobs.repo import OPERATOR_ACTOR
from scenarios.fuzz import SeedPost, bearer, fresh_sqlite_database, seeding_post
from scenarios.systems import FuzzRequest, FuzzSpec, StackUnavailable
from scenarios.verdicts import Verdict, Violation, judged
from systems.jobs.checkers import INVARIANTS, JobsState
from systems.jobs.sim import read_rows

# Judged on the tables alone (J1 needs the service's ledger, J6 workers, J7 the answers, J11-J14 the processes).
DATABASE_INVARIANTS = ("J2", "J3", "J4", "J5", "J8", "J9", "J10")
USERS = {ENQUEUER: "fuzz-enqueuer", READER: "fuzz-reader", OPERATOR: "fuzz-operator"}
FOREIGN = "foreign-enqueuer"
FOREIGN_JOB = {"type": "survey", "key": "foreign-job", "payload": {"site": "west"}}
FOREIGN_MISSION = {"id": "foreign-mission", "steps": [{"name": "a", "type": "survey"}, {"name": "b", "type": "report"}],
                   "edges": [["b", "a", "hard"]]}
# What only its enqueuer's requests could change (status, retry and times move with an operator's logged action).
_OWN = (Job.id, Job.type, Job.mission_id, Job.payload, Job.idempotent_key, Job.enqueued_by, Job.timeout_s)
NO_FOREIGN_JOB_TOUCHED = "no job of a caller without a credential was changed, but by an operator's logged action"


@dataclass
class JobsTarget:
    """A job-system deployment under fuzzing (scenarios.systems.FuzzTarget)."""

    engine: Engine  # the tables' owner: reads them after the fuzzing
    secret: str
    app: Any | None = None
    base_url: str | None = None
    foreign: list[tuple[Any, ...]] = field(default_factory=list)
    seeded: dict[str, list[int]] = field(default_factory=dict)  # caller -> the job ids seeded for it

    def credentials(self, role: str) -> dict[str, str]:
        return bearer(issue_token(self.secret, USERS[role], role))

    def examples(self, role: str) -> dict[str, list[Any]]:
        """The job ids a role's pass starts from: the enqueuer's own jobs; for a reader or an operator, the foreign
        caller's too (an operator may cancel them)."""
        ids = self.seeded.get(USERS[ENQUEUER], []) + ([] if role == ENQUEUER else self.seeded.get(FOREIGN, []))
        return {"job_id": ids} if ids else {}

    def seed_foreign(self, post: SeedPost) -> None:
        """Through the API: the fuzzer's enqueuer and a foreign enqueuer (whom the fuzzer holds no credential of)
        each enqueue a job and create a mission; the foreign caller's rows are then noted."""
        for user in (USERS[ENQUEUER], FOREIGN):
            own = bearer(issue_token(self.secret, user, ENQUEUER))
            job = post("/v1/jobs", {**FOREIGN_JOB, "key": f"{user}-job"}, own)["job_id"]
            mission = post("/v1/missions", {**FOREIGN_MISSION, "id": f"{user}-mission"}, own)["jobs"]
            self.seeded[user] = [job, *mission.values()]
        self.foreign = self._foreign_rows()

    def _foreign_rows(self) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(select(*_OWN).where(Job.enqueued_by == FOREIGN).order_by(Job.id))]

    def verdicts(self) -> list[Verdict]:
        with Session(self.engine) as session:
            jobs, log, edges = read_rows(session)
        state = JobsState(jobs, log, [], {}, [], edges, datetime.now(UTC), max_retry=3)
        return [*INVARIANTS.check(state, DATABASE_INVARIANTS), self._foreign_verdict(log)]

    def _foreign_verdict(self, log: list[dict[str, Any]]) -> Verdict:
        after = self._foreign_rows()
        ids = {row[0] for row in self.foreign}
        bad = [] if after == self.foreign else [Violation(None, f"{FOREIGN}'s jobs changed: {self.foreign} before, "
                                                                f"{after} after")]
        bad += [Violation(str(r["job_id"]), f"{r['from_status']} -> {r['to_status']} by {r['actor']}, not an "
                                            "operator") for r in log
                if r["job_id"] in ids and r["from_status"] is not None  # no pool runs: a change after creation
                and not str(r["actor"]).startswith(OPERATOR_ACTOR)]  # is an operator's (a cascade carries its actor)
        verdict = judged(len(self.foreign), bad, note=f"{FOREIGN}'s jobs and their log")
        verdict.invariant, verdict.title = "foreign-jobs", NO_FOREIGN_JOB_TOUCHED
        return verdict


@contextmanager
def in_process(req: FuzzRequest) -> Iterator[JobsTarget]:
    """The API (Flask) over a fresh SQLite file in the run's directory."""
    from reference.jobs.http.app import create_app

    url, engine = fresh_sqlite_database(req.run_dir, "jobs.db", install)
    secret = secrets.token_hex(32)
    app = create_app(url, "fixed", secret)
    target = JobsTarget(engine, secret, app=app)
    target.seed_foreign(seeding_post(app))
    try:
        yield target
    finally:
        engine.dispose()


@contextmanager
def on_stack(req: FuzzRequest) -> Iterator[JobsTarget]:
    """PostgreSQL behind Toxiproxy, the service and the API under gunicorn (systems.jobs.stack.JobsStack)."""
    from stack.postgres import find_pg_bin
    from systems.jobs.stack import JobsStack

    if find_pg_bin() is None:
        raise StackUnavailable("PostgreSQL server binaries not installed (scripts/system-deps.sh installs them)")
    with JobsStack(req.run_dir) as stack:
        base_url = stack.start_api("fixed")
        assert stack.owner is not None
        target = JobsTarget(stack.owner, stack.token_secret, base_url=base_url)
        target.seed_foreign(seeding_post(base_url=base_url))
        yield target


FUZZ = FuzzSpec(openapi=document, roles=ROLES, in_process=in_process, stack=on_stack)
