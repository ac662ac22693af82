"""The status sync for `sortie fuzz` (scenarios.fuzz, System.fuzz): its API's OpenAPI document
(reference/statussync/http/openapi.yaml), its callers as roles (a ``user``, the task ``coordinator``, a ``producer``
holding the execution token the service signed for one step attempt, and an ``admin`` who corrects results), and a
deployment to fuzz: the API in process over a SQLite file (as its tests run it), or one gunicorn replica on the real
stack's MariaDB through Toxiproxy (systems.statussync.stack.SyncStack; no relays, reconciler or producers, so rows
stay where the requests leave them).

Before the fuzzing, the coordinator creates a task for the fuzzer's user and one for a user the fuzzer holds no
credential of, and each task's first step reports STEP_STARTED with its own token (the fuzzer's producer holds the
token of its user's task's first step). Afterwards the invariants the tables alone can judge are checked (S3-S6, S10,
S11, S12, S14: token-bound producers, versions and sequences, legal transitions, atomic commit, health apart from
lifecycle, projections, failure notices, registered statuses) and the foreign user's rows are as they were."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from harness.history import History
from reference.statussync.client import MAX_DETAIL_SUBSCRIPTIONS
from reference.statussync.http.auth import ADMIN_ROLE, COORDINATOR_ROLE, USER, issue_token
from reference.statussync.http.openapi import document
from reference.statussync.models import Task, TaskEventDedup, TaskEventLog, TaskOutbox, TaskStep
from reference.statussync.registry import STEPS, TENANT, install
from reference.statussync.relay import RelayConfig
from scenarios.fuzz import SeedPost, bearer, fresh_sqlite_database, seeding_post
from scenarios.systems import FuzzRequest, FuzzSpec, StackUnavailable
from scenarios.verdicts import Verdict, Violation, judged
from systems.statussync.checkers import INVARIANTS, read_state

PRODUCER = "producer"
ROLES = (USER, COORDINATOR_ROLE, PRODUCER, ADMIN_ROLE)
# Judged on the tables alone (S1, S2, S13 need the producers' answers and ledgers, S7 the relays, S8, S9, S15 clients).
DATABASE_INVARIANTS = ("S3", "S4", "S5", "S6", "S10", "S11", "S12", "S14")
FUZZ_USER, FOREIGN_USER = "fuzz-user", "foreign-user"
COORDINATOR_SUBJECT = "task-coordinator"
ADMIN_SUBJECT = "fuzz-admin"
CENTRIFUGO_KEY_BYTES = 32
# The tables whose rows of the foreign user's task only the foreign task's own producers could have written.
_FOREIGN_TABLES = ((Task.__table__, Task.id), (TaskStep.__table__, TaskStep.task_id),
                   (TaskEventLog.__table__, TaskEventLog.task_id), (TaskEventDedup.__table__, TaskEventDedup.task_id),
                   (TaskOutbox.__table__, TaskOutbox.aggregate_id))
NO_FOREIGN_ROW_TOUCHED = "no row of a task of a user the fuzzer held no credential of was written or changed"

@dataclass
class SyncTarget:
    """A status-sync deployment under fuzzing (scenarios.systems.FuzzTarget)."""

    engine: Engine  # the tables' owner: reads them after the fuzzing
    secret: str
    app: Any | None = None
    base_url: str | None = None
    tasks: dict[str, str] = field(default_factory=dict)  # user -> the task seeded for them
    producer_token: str = ""
    foreign: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def credentials(self, role: str) -> dict[str, str]:
        if role == PRODUCER:
            return bearer(self.producer_token)
        subject = {USER: f"{TENANT}/{FUZZ_USER}", ADMIN_ROLE: ADMIN_SUBJECT}.get(role, COORDINATOR_SUBJECT)
        return bearer(issue_token(self.secret, subject, role))

    def examples(self, role: str) -> dict[str, list[Any]]:
        """The user's pass reads its own task and asks for the foreign one (404 either way it is not theirs); the
        administrator's corrects the fuzzer's user's task (never the foreign one: foreign-rows judges it untouched)."""
        if role == USER:
            return {"task_id": [self.tasks[FUZZ_USER], self.tasks[FOREIGN_USER]]}
        return {"task_id": [self.tasks[FUZZ_USER]]} if role == ADMIN_ROLE else {}

    def seed(self, post: SeedPost) -> None:
        """Through the API: a task for each user, its first step started by its own producer."""
        coordinator = bearer(issue_token(self.secret, COORDINATOR_SUBJECT, COORDINATOR_ROLE))
        for user in (FUZZ_USER, FOREIGN_USER):
            task_id = f"{user}-task"
            created = post("/internal/v1/tasks", {
                "taskId": task_id, "tenantId": TENANT, "ownerId": user, "title": f"{user}'s report",
                "steps": [{"stepId": s[0], "operationCode": s[1]} for s in STEPS]}, coordinator)
            step = created["steps"][0]
            post("/internal/v1/task-events", {
                "eventId": f"{step['producerId']}:{task_id}:{step['stepId']}:1", "taskId": task_id,
                "taskAttempt": 1, "stepId": step["stepId"], "stepAttempt": step["stepAttempt"],
                "operationCode": step["operationCode"], "producerId": step["producerId"], "sourceSeq": 1,
                "eventType": "STEP_STARTED", "businessStatus": STEPS[0][2]}, bearer(step["executionToken"]))
            self.tasks[user] = task_id
            if user == FUZZ_USER:
                self.producer_token = step["executionToken"]
        self.foreign = self._foreign_rows()

    def _foreign_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        with self.engine.connect() as conn:
            return {table.name: sorted((tuple(r) for r in conn.execute(select(table).where(
                column == self.tasks[FOREIGN_USER]))), key=repr) for table, column in _FOREIGN_TABLES}

    def verdicts(self) -> list[Verdict]:
        world = SimpleNamespace(
            sessions=lambda: Session(self.engine), history=History(), env=SimpleNamespace(now=0.0),
            centrifugo=SimpleNamespace(peak_subscriptions={}, max_subscriptions=MAX_DETAIL_SUBSCRIPTIONS + 1))
        state = read_state(world, [], RelayConfig(), None, 0.0)
        return [*INVARIANTS.check(state, DATABASE_INVARIANTS), self._foreign_verdict()]

    def _foreign_verdict(self) -> Verdict:
        after = self._foreign_rows()
        bad = [Violation(self.tasks[FOREIGN_USER], f"{name}: {before} before, {after[name]} after")
               for name, before in self.foreign.items() if after[name] != before]
        verdict = judged(sum(len(rows) for rows in self.foreign.values()), bad,
                         note=f"{FOREIGN_USER}'s task, steps, events, dedup and outbox rows")
        verdict.invariant, verdict.title = "foreign-rows", NO_FOREIGN_ROW_TOUCHED
        return verdict


@contextmanager
def in_process(req: FuzzRequest) -> Iterator[SyncTarget]:
    """The API (Flask) over a fresh SQLite file in the run's directory."""
    from reference.statussync.http.app import create_app

    url, engine = fresh_sqlite_database(req.run_dir, "statussync.db", install)
    secret = secrets.token_hex(32)
    app = create_app(url, secret, secrets.token_hex(CENTRIFUGO_KEY_BYTES))
    target = SyncTarget(engine, secret, app=app)
    target.seed(seeding_post(app))
    try:
        yield target
    finally:
        engine.dispose()


@contextmanager
def on_stack(req: FuzzRequest) -> Iterator[SyncTarget]:
    """MariaDB behind Toxiproxy and one API replica under gunicorn (systems.statussync.stack.SyncStack)."""
    from stack.mariadb import mariadb_available
    from systems.statussync.stack import SyncStack

    if not mariadb_available():
        raise StackUnavailable("MariaDB server binaries not installed (scripts/system-deps.sh installs them)")
    with SyncStack(req.run_dir) as stack:
        stack.reset()
        [base_url] = stack.start_api(replicas=1)
        assert stack.owner is not None
        target = SyncTarget(stack.owner, stack.token_secret, base_url=base_url)
        target.seed(seeding_post(base_url=base_url))
        yield target


FUZZ = FuzzSpec(openapi=document, roles=ROLES, in_process=in_process, stack=on_stack)

__all__ = ["FUZZ", "ROLES"]
