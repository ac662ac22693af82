"""The Copilot for `sortie fuzz` (scenarios.fuzz, System.fuzz): its API's OpenAPI document, its roles (an operator,
the approver, a supervisor, and the platform's webhook), and a deployment to fuzz: its app in process over an
in-memory database, or its real stack (gunicorn, PostgreSQL, the workers).

Before the fuzzing, the fuzzer's operator gets drafts and a task (their ids the examples of its path parameters),
and a user the fuzzer holds no credential of (another site's operator) creates a draft and has it approved;
afterwards, the invariants that the database alone can judge are checked (I2, I4, I5: one task per key, legal
audited histories, nothing half-written) and that user's rows are as they were."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from harness.history import History
from reference.copilot.http.auth import issue_token
from reference.copilot.http.openapi import document
from reference.copilot.models import ApprovalOrder, DroneTask, FlightRoute, TaskAuditLog, TaskDraft
from scenarios.fuzz import SeedPost, bearer, seeding_post
from scenarios.systems import FuzzRequest, FuzzSpec, StackRequest, StackUnavailable
from scenarios.verdicts import Verdict, Violation, judged
from systems.copilot.checkers import INVARIANTS, CheckContext
from systems.copilot.state import FinalState, read_database
from systems.copilot.users import APPROVER_ID, SUPERVISOR_ID
from systems.copilot.workload import WorkloadSpec, seed_fleet

# Judged on the database alone (the others need the history of requests and of the workers, or the platform).
DATABASE_INVARIANTS = ("I2", "I4", "I5")
FLEET = WorkloadSpec(confirms=1, window_s=1, devices=8, sites=2, operators=4)
# seed_fleet: operator-001 works SITE-001 (DRONE-0001, -3, ...), operator-002 SITE-002 (DRONE-0002, -4, ...).
FUZZER, FOREIGN = "operator-001", "operator-002"
USERS = {"operator": FUZZER, "approver": APPROVER_ID, "supervisor": SUPERVISOR_ID}
ROLES = (*USERS, "platform")  # platform: the webhook's token, for POST /v1/platform/events
FOREIGN_DRAFT = {"goal": "inspect the west fence", "area_id": "SITE-002",
                 "plan": {"device_id": "DRONE-0002", "waypoints": [[30.01, 120.11], [30.02, 120.12]],
                          "altitude_m": 60, "actions": ["photo"], "speed_mps": 8.0}}
FUZZER_DRAFT = {"goal": "inspect the north fence", "area_id": "SITE-001",
                "plan": {"device_id": "DRONE-0001", "waypoints": [[30.01, 120.01], [30.02, 120.03]],
                         "altitude_m": 60, "actions": ["photo"], "speed_mps": 8.0}}
NO_FOREIGN_ROW_TOUCHED = "no row of a user without a credential was touched"


@dataclass
class CopilotTarget:
    """A Copilot deployment under fuzzing (scenarios.systems.FuzzTarget)."""

    sessions: Callable[[], Session]
    secret: str
    webhook_token: str
    app: Any | None = None
    base_url: str | None = None
    foreign: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)  # the other user's rows, before

    def credentials(self, role: str) -> dict[str, str]:
        if role == "platform":
            return {"X-Webhook-Token": self.webhook_token}
        return bearer(issue_token(self.secret, USERS[role], role))

    seeded: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # role -> path parameter -> ids

    def examples(self, role: str) -> dict[str, list[str]]:
        return self.seeded.get(role, {})

    def seed(self, post: SeedPost) -> None:
        """Through the API: the fuzzer's operator gets a READY draft, an approved one and a task (their ids the
        examples of the operator's and the approver's passes); another site's operator, whom the fuzzer holds no
        credential of, an approved draft, whose rows are then noted."""
        ready = self._draft(post, FUZZER, FUZZER_DRAFT)
        approved = self._approved(post, FUZZER, FUZZER_DRAFT)
        task = self._task(post, self._approved(post, FUZZER, FUZZER_DRAFT))
        self.seeded = {"operator": {"draft_id": [ready["id"], approved["id"]], "task_id": [task["task_id"]]},
                       "approver": {"draft_id": [ready["id"]]}}
        self._approved(post, FOREIGN, FOREIGN_DRAFT)
        self.foreign = self._foreign_rows()

    def _draft(self, post: SeedPost, user: str, body: dict[str, Any]) -> dict[str, Any]:
        own = {**bearer(issue_token(self.secret, user, "operator")), "Idempotency-Key": f"seed-{uuid.uuid4().hex}"}
        return post("/v1/drafts", body, own)

    def _approved(self, post: SeedPost, user: str, body: dict[str, Any]) -> dict[str, Any]:
        draft = self._draft(post, user, body)
        post(f"/v1/drafts/{draft['id']}/approvals", {"draft_version": draft["version"], "decision": "approve"},
             self.credentials("approver"))
        return draft

    def _task(self, post: SeedPost, draft: dict[str, Any]) -> dict[str, Any]:
        return post(f"/v1/drafts/{draft['id']}/confirm", {"draft_version": draft["version"]},
                    {**self.credentials("operator"), "Idempotency-Key": f"seed-{uuid.uuid4().hex}"})

    def _foreign_rows(self) -> dict[str, list[tuple[str, ...]]]:
        with self.sessions() as s:
            drafts = list(s.scalars(select(TaskDraft.id).where(TaskDraft.user_id == FOREIGN)))
            tables = {
                "task_draft": select(TaskDraft).where(TaskDraft.user_id == FOREIGN),
                "flight_route": select(FlightRoute).where(FlightRoute.draft_id.in_(drafts)),
                "approval_order": select(ApprovalOrder).where(ApprovalOrder.draft_id.in_(drafts)),
                "task_audit_log": select(TaskAuditLog).where(TaskAuditLog.draft_id.in_(drafts)),
                "drone_task": select(DroneTask).where(
                    (DroneTask.user_id == FOREIGN) | DroneTask.draft_id.in_(drafts)),
            }
            return {name: sorted(_row(r) for r in s.scalars(query)) for name, query in tables.items()}

    def verdicts(self) -> list[Verdict]:
        state = FinalState()
        with self.sessions() as s:
            read_database(s, state)
        verdicts = INVARIANTS.check(CheckContext(History(), state), DATABASE_INVARIANTS)
        return [*verdicts, self._foreign_verdict()]

    def _foreign_verdict(self) -> Verdict:
        after = self._foreign_rows()
        bad = [Violation(None, f"{table}: {len(rows)} rows of {FOREIGN} before, {len(after.get(table, []))} after, "
                               "not the same") for table, rows in self.foreign.items() if after.get(table) != rows]
        verdict = judged(sum(len(rows) for rows in self.foreign.values()), bad,
                         note=f"{FOREIGN}'s drafts, routes, approvals, audit rows and tasks")
        verdict.invariant, verdict.title = "foreign-rows", NO_FOREIGN_ROW_TOUCHED
        return verdict


def _row(obj: Any) -> tuple[str, ...]:
    return tuple(str(getattr(obj, c.key)) for c in obj.__mapper__.column_attrs)


@contextmanager
def in_process(req: FuzzRequest) -> Iterator[CopilotTarget]:
    """The API (Flask) over a fresh in-memory database with the seeded fleet; no workers."""
    from reference.copilot.db import sqlite_engine
    from reference.copilot.http.app import create_app, hub_of
    from reference.copilot.runtime import Runtime

    engine = sqlite_engine()
    sessions = sessionmaker(engine, expire_on_commit=False)
    runtime = Runtime(sessions=sessions)
    runtime.transact(lambda tx: seed_fleet(tx, FLEET))
    secret, webhook = secrets.token_hex(32), secrets.token_hex(16)
    app = create_app(runtime, token_secret=secret, webhook_token=webhook)
    target = CopilotTarget(sessions, secret, webhook, app=app)
    target.seed(seeding_post(app))
    try:
        yield target
    finally:
        hub_of(app).close()
        engine.dispose()


@contextmanager
def on_stack(req: FuzzRequest) -> Iterator[CopilotTarget]:
    """The native stack (gunicorn, PostgreSQL, Redis, the broker, the object store, the platform simulator, the
    workers), its database reset and seeded with the fleet."""
    from stack.common import ProviderUnavailable
    from systems.copilot.stack import stack_for
    from systems.copilot.stack_run import StackScenarioRunner

    stack = stack_for(StackRequest(req.run_dir, req.seed))
    try:
        try:
            stack.start()
        except ProviderUnavailable as exc:
            raise StackUnavailable(str(exc)) from None
        runner = StackScenarioRunner(stack)
        runner.reset(req.seed, FLEET)
        ep = stack.endpoints
        target = CopilotTarget(_repeatable_reads(runner.admin), ep.app["token_secret"], ep.app["webhook_token"],
                               base_url=ep.api_url)
        target.seed(seeding_post(base_url=ep.api_url))
        yield target
        runner.admin.dispose()
    finally:
        stack.stop()


def _repeatable_reads(engine: Any) -> Callable[[], Session]:
    """Sessions that read one snapshot (the workers still write while the invariants are read)."""
    return sessionmaker(engine.execution_options(isolation_level="REPEATABLE READ"), expire_on_commit=False)


FUZZ = FuzzSpec(openapi=document, roles=ROLES, in_process=in_process, stack=on_stack)
