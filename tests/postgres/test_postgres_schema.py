"""The PostgreSQL schema and the core on a real PostgreSQL (seed 000 §6, §7.3; docs/systems/copilot.md).

- the Alembic migration and reference/copilot/models.py describe the same schema;
- the seed's named constraints and indexes exist;
- the application role cannot rewrite the audit log;
- the core's database paths that differ from SQLite work: the unique-key race of confirm_draft, FOR UPDATE
  SKIP LOCKED in the outbox claim, INSERT ... ON CONFLICT DO NOTHING.
"""

from __future__ import annotations

import contextlib
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, func, inspect, select, text
from sqlalchemy import event as sa_event
from sqlalchemy.exc import IntegrityError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from kernel.runtime import utc_now
from reference.copilot.db import insert_ignore
from reference.copilot.effects import Tx, run_sync
from reference.copilot.errors import StaleWrite
from reference.copilot.migrations import current_heads, downgrade, upgrade
from reference.copilot.migrations.roles import create_app_role
from reference.copilot.models import Base, DroneTask, ProcessedEvent, SecurityEvent, TaskAuditLog, TaskEventOutbox
from reference.copilot.runtime import Runtime
from reference.copilot.services.confirm import ConfirmDraft, TaskCreated, confirm_draft
from reference.copilot.services.drafts import create_draft, decide_approval
from reference.copilot.services.outbox import claim
from reference.copilot.states import TaskStatus
from reference.copilot.tasks import TASK_CREATED, TaskView, load, transition
from stack.postgres import LocalPostgres
from systems.copilot.workload import APPROVER, Fleet, WorkloadSpec, random_plan, seed_fleet

MakeDb = Callable[[str], Any]  # conftest.migrated_database: name -> Database(owner_url, app_url, app_role, ...)
Engines = Callable[[str], Engine]


def _diffs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))


# --- the migration ------------------------------------------------------------------------------


def test_migration_matches_models(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("sortie")
    engine = engines(db.owner_url)
    assert _diffs(engine) == []
    with engine.connect() as conn:
        assert tuple(conn.execute(text("SELECT version_num FROM alembic_version")).scalars()) == current_heads()
    assert set(inspect(engine).get_table_names()) == set(Base.metadata.tables) | {"alembic_version"}


def test_downgrade_then_upgrade_again(pg: LocalPostgres) -> None:
    pg.create_database("roundtrip")
    url = pg.url(database="roundtrip")
    engine = create_engine(url)
    try:
        upgrade(url)
        downgrade(url, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(url)
        assert _diffs(engine) == []
    finally:
        engine.dispose()
        pg.drop_database("roundtrip")


def test_named_constraints_and_indexes(migrated_database: MakeDb, engines: Engines) -> None:
    engine = engines(migrated_database("sortie").owner_url)
    with engine.connect() as conn:
        constraints = {
            name: (table, kind, definition)
            for name, table, kind, definition in conn.execute(text(
                "SELECT c.conname, t.relname, c.contype, pg_get_constraintdef(c.oid) FROM pg_constraint c "
                "JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
                "WHERE n.nspname = 'public'"))
        }
        indexes = {
            name: (table, definition)
            for name, table, definition in conn.execute(text(
                "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE schemaname = 'public'"))
        }

    table, kind, definition = constraints["ck_task_status"]
    assert (table, kind) == ("drone_task", "c")
    for status in ("CREATED", "QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "COMPLETED",
                   "DISPATCH_FAILED", "FAILED", "CANCEL_PENDING", "CANCELLED", "MANUAL_REVIEW"):
        assert f"'{status}'" in definition
    for name, on in [("ck_task_draft_draft_status", "task_draft"),
                     ("ck_approval_order_approval_status", "approval_order"),
                     ("ck_task_event_outbox_outbox_status", "task_event_outbox"),
                     ("ck_task_report_report_status", "task_report")]:
        assert constraints[name][:2] == (on, "c"), name
    assert constraints["uq_task_idempotency"] == ("drone_task", "u", "UNIQUE (user_id, idempotency_key)")
    assert constraints["uq_task_draft_version"] == ("drone_task", "u", "UNIQUE (draft_id, draft_version)")
    for name, on in [("uq_route_draft_version", "flight_route"), ("uq_dispatch_attempt", "dispatch_attempt"),
                     ("uq_dead_letter_event", "dead_letter"), ("uq_platform_event_seq", "platform_event")]:
        assert constraints[name][:2] == (on, "u"), name
    assert constraints["pk_processed_event"] == ("processed_event", "p", "PRIMARY KEY (consumer, event_id)")

    assert indexes["idx_drone_task_status_created"][0] == "drone_task"
    assert indexes["idx_drone_task_status_created"][1].endswith("USING btree (status, created_at)")
    assert indexes["idx_drone_task_device_status"][0] == "drone_task"
    assert indexes["idx_drone_task_device_status"][1].endswith("USING btree (device_id, status)")
    assert indexes["idx_outbox_pending"][1].endswith("USING btree (status, available_at)")
    assert indexes["idx_audit_task"][1].endswith("USING btree (task_id, id)")


# --- the application role -----------------------------------------------------------------------


def _denied(engine: Engine, sql: str, params: dict[str, Any] | None = None) -> None:
    with pytest.raises(ProgrammingError) as info, engine.begin() as conn:
        conn.execute(text(sql), params or {})
    assert isinstance(info.value.orig, psycopg.errors.InsufficientPrivilege), info.value
    assert "permission denied" in str(info.value.orig) or "must be owner" in str(info.value.orig)


def test_app_role_cannot_rewrite_the_audit_log(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("sortie")
    app = engines(db.app_url)
    with app.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar_one() == db.app_role
    marker = f"role-test-{uuid.uuid4()}"
    with app.begin() as conn:
        conn.execute(TaskAuditLog.__table__.insert().values(actor=marker, action="TEST", result="OK", detail={}))
    with app.connect() as conn:
        row_id = conn.execute(select(TaskAuditLog.id).where(TaskAuditLog.actor == marker)).scalar_one()

    _denied(app, "UPDATE task_audit_log SET action = 'TAMPERED' WHERE id = :id", {"id": row_id})
    _denied(app, "DELETE FROM task_audit_log WHERE id = :id", {"id": row_id})
    _denied(app, "TRUNCATE task_audit_log")
    _denied(app, "DROP TABLE task_audit_log")
    _denied(app, "CREATE TABLE sneaky (id int)")
    _denied(app, "INSERT INTO alembic_version VALUES ('9999')")
    with app.connect() as conn:
        assert conn.execute(select(TaskAuditLog.action).where(TaskAuditLog.id == row_id)).scalar_one() == "TEST"
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == current_heads()[0]

    # ... while the tables it works on are fully writable.
    task_id, now = uuid.uuid4(), utc_now()
    with app.begin() as conn:
        conn.execute(DroneTask.__table__.insert().values(
            id=task_id, draft_id=uuid.uuid4(), draft_version=1, user_id="role-test", device_id="dev",
            route_id=uuid.uuid4(), status="CREATED", version=0, idempotency_key=str(task_id),
            created_at=now, updated_at=now, area_id="A", route_version=1, snapshot={}, request_hash="h"))
    with app.begin() as conn:
        moved = conn.execute(DroneTask.__table__.update()
                             .where(DroneTask.id == task_id, DroneTask.status == "CREATED", DroneTask.version == 0)
                             .values(status="QUEUED", version=1))
        assert moved.rowcount == 1
    with app.begin() as conn:
        assert conn.execute(DroneTask.__table__.delete().where(DroneTask.id == task_id)).rowcount == 1


def test_app_role_can_only_append_to_the_security_log(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("sortie")
    app = engines(db.app_url)
    marker = f"security-test-{uuid.uuid4()}"
    with app.begin() as conn:
        conn.execute(SecurityEvent.__table__.insert().values(at=utc_now(), actor=marker, action="CONFIRM",
                                                             code="FORBIDDEN_DEVICE", detail={}))
    with app.connect() as conn:
        row_id = conn.execute(select(SecurityEvent.id).where(SecurityEvent.actor == marker)).scalar_one()
    _denied(app, "UPDATE security_log SET code = 'NOTHING' WHERE id = :id", {"id": row_id})
    _denied(app, "DELETE FROM security_log WHERE id = :id", {"id": row_id})
    _denied(app, "TRUNCATE security_log")
    with app.connect() as conn:
        assert conn.execute(select(SecurityEvent.code).where(SecurityEvent.id == row_id)).scalar_one() == \
            "FORBIDDEN_DEVICE"


def test_check_constraint_rejects_unknown_status(migrated_database: MakeDb, engines: Engines) -> None:
    app = engines(migrated_database("sortie").app_url)
    now, task_id = utc_now(), uuid.uuid4()
    with pytest.raises(IntegrityError) as info, app.begin() as conn:
        conn.execute(DroneTask.__table__.insert().values(
            id=task_id, draft_id=uuid.uuid4(), draft_version=1, user_id="ck-test", device_id="dev",
            route_id=uuid.uuid4(), status="FLYING", version=0, idempotency_key=str(task_id),
            created_at=now, updated_at=now, area_id="A", route_version=1, snapshot={}, request_hash="h"))
    assert isinstance(info.value.orig, psycopg.errors.CheckViolation)
    assert "ck_task_status" in str(info.value.orig)


def test_app_role_grants_are_idempotent_and_password_is_set(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("sortie")
    owner = engines(db.owner_url)
    with owner.begin() as conn:
        create_app_role(conn, db.app_role, db.app_password)  # a re-run (after a later migration) is harmless
    with owner.connect() as conn:
        row = conn.execute(text(
            "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolpassword IS NOT NULL "
            "FROM pg_authid WHERE rolname = :r"), {"r": db.app_role}).one()
        assert tuple(row) == (True, False, False, False, True)
        privileges = set(conn.execute(text(
            "SELECT privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = :r AND table_name = 'task_audit_log'"), {"r": db.app_role}).scalars())
        assert privileges == {"SELECT", "INSERT"}


# --- the core on PostgreSQL ---------------------------------------------------------------------


@contextlib.contextmanager
def _racing_inserts(rt: Runtime, app: Engine, errors: list[type[BaseException]]) -> Iterator[Any]:
    """An effect performer under which two concurrent confirms both pass every read of their creating
    transaction before either inserts: each waits at its INSERT INTO drone_task for the other to get there (a
    condition, not a sleep), so the loser meets the unique index, whatever the machine's speed. Exceptions the
    effects raise are collected in ``errors``."""
    at_insert = threading.Barrier(2, timeout=30)

    def wait_for_the_other(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "INSERT INTO DRONE_TASK" in statement.upper():  # (the task's insert leads the confirm's one statement)
            at_insert.wait()

    def perform(effect: Any) -> Any:
        try:
            return rt.perform(effect)
        except Exception as exc:
            errors.append(type(exc))
            raise

    sa_event.listen(app, "before_cursor_execute", wait_for_the_other)
    try:
        yield perform
    finally:
        sa_event.remove(app, "before_cursor_execute", wait_for_the_other)


def _draft(rt: Runtime, fleet: Fleet, user: str, area_id: str, rng: random.Random) -> tuple[str, int]:
    plan = random_plan(rng, fleet, area_id)

    def fn(tx: Tx) -> tuple[str, int]:
        draft = create_draft(tx, user, "inspect the substation", area_id, plan)
        decide_approval(tx, APPROVER, draft.id, draft.version, approve=True)
        return str(draft.id), draft.version

    return rt.transact(fn)


def test_core_on_postgres(migrated_database: MakeDb, engines: Engines) -> None:
    db = migrated_database("core")
    app = engines(db.app_url)
    rt = Runtime(sessions=sessionmaker(app))
    rng = random.Random(1)
    fleet = rt.transact(lambda tx: seed_fleet(tx, WorkloadSpec(confirms=1, window_s=1, devices=4, sites=1,
                                                                  operators=2)))
    user, area_id = fleet.operators[0]

    # confirm, then the same key again: one task, the replay names it
    draft_id, version = _draft(rt, fleet, user, area_id, rng)
    cmd = ConfirmDraft(user, draft_id, version, "key-1")
    first = rt.run(confirm_draft(cmd))
    assert (first.status, first.version, first.replayed) == ("CREATED", 0, False)
    again = rt.run(confirm_draft(cmd))
    assert (again.task_id, again.replayed) == (first.task_id, True)

    # two confirms with one new key race past the lookup; the unique index picks the winner
    draft_id2, version2 = _draft(rt, fleet, user, area_id, rng)
    cmd2 = ConfirmDraft(user, draft_id2, version2, "key-2")
    errors: list[type[BaseException]] = []
    with _racing_inserts(rt, app, errors) as perform, ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_sync, confirm_draft(cmd2), perform) for _ in range(2)]
        answers: list[TaskCreated] = [f.result(timeout=60) for f in futures]
    assert errors == [IntegrityError]  # the loser hit uq_task_idempotency, then read the winner's task
    assert answers[0].task_id == answers[1].task_id
    assert sorted(a.replayed for a in answers) == [False, True]
    winner = uuid.UUID(answers[0].task_id)
    with Session(app) as s:
        assert s.scalar(select(func.count()).select_from(DroneTask)
                        .where(DroneTask.user_id == user, DroneTask.idempotency_key == "key-2")) == 1
        assert s.scalar(select(func.count()).select_from(TaskAuditLog)
                        .where(TaskAuditLog.task_id == winner, TaskAuditLog.action == "TASK_CREATED")) == 1
        assert s.scalar(select(func.count()).select_from(TaskEventOutbox)
                        .where(TaskEventOutbox.task_id == winner)) == 1
        task = s.get(DroneTask, winner)
        assert task is not None and task.snapshot["draft_version"] == version2
        assert task.snapshot["route"]["waypoints"]  # JSON round-trips through PostgreSQL

    # a conditional transition: the row count of the UPDATE decides, a stale writer is refused
    def advance(tx: Tx) -> int:
        task = load(tx, winner)
        assert task is not None
        return transition(tx, TaskView.of(task), TaskStatus.QUEUED, actor="test", action="QUEUE")

    stale = rt.transact(lambda tx: TaskView.of(load(tx, winner)))  # type: ignore[arg-type]
    assert rt.transact(advance) == 1
    with pytest.raises(StaleWrite):
        rt.transact(lambda tx: transition(tx, stale, TaskStatus.QUEUED, actor="zombie", action="QUEUE"))
    with Session(app) as s:
        assert s.scalar(select(func.count()).select_from(TaskEventOutbox)
                        .where(TaskEventOutbox.task_id == winner)) == 2  # created + queued, none from the zombie

    # two more tasks: five events pending (four TaskCreated, one TaskStatusChanged)
    for n in (3, 4):
        d, v = _draft(rt, fleet, user, area_id, rng)
        rt.run(confirm_draft(ConfirmDraft(user, d, v, f"key-{n}")))
    with Session(app) as s:
        pending = set(s.scalars(select(TaskEventOutbox.id).where(TaskEventOutbox.status == "PENDING")))
        assert s.scalar(select(func.count()).select_from(TaskEventOutbox)
                        .where(TaskEventOutbox.event_type == TASK_CREATED)) == 4
    assert len(pending) == 5

    # two publishers claim at once: A holds its row locks while B claims; SKIP LOCKED keeps them disjoint
    now = utc_now()
    with Session(app) as sa, Session(app) as sb, sa.begin(), sb.begin():
        sb.execute(text("SET LOCAL lock_timeout = '10s'"))  # without SKIP LOCKED, B would wait and fail
        claimed_a = claim(Tx(sa, now, uuid.uuid4), 2, 30.0)
        claimed_b = claim(Tx(sb, now, uuid.uuid4), 100, 30.0)
    ids_a = {uuid.UUID(m.event_id) for m in claimed_a}
    ids_b = {uuid.UUID(m.event_id) for m in claimed_b}
    assert len(ids_a) == 2 and ids_a.isdisjoint(ids_b) and ids_a | ids_b == pending
    with Session(app) as s:
        rows = s.scalars(select(TaskEventOutbox).where(TaskEventOutbox.id.in_(pending))).all()
        assert all(r.attempts == 1 and r.available_at >= now + timedelta(seconds=29) for r in rows)
    assert rt.transact(lambda tx: claim(tx, 100, 30.0)) == []  # leased: nothing due now

    # insert-if-absent: a duplicate delivery is recognised without aborting the transaction
    event_id = uuid.uuid4()

    def mark(tx: Tx) -> bool:
        return insert_ignore(tx.flushed(), ProcessedEvent,
                             {"consumer": "dispatcher", "event_id": event_id, "task_id": winner,
                              "processed_at": tx.now}, ["consumer", "event_id"])

    assert rt.transact(mark) is True
    assert rt.transact(mark) is False

    def twice_in_one_tx(tx: Tx) -> tuple[bool, int]:
        again = mark(tx)
        return again, tx.session.scalar(select(func.count()).select_from(ProcessedEvent)) or 0

    assert rt.transact(twice_in_one_tx) == (False, 1)  # the transaction is still usable after the conflict


def test_one_task_per_draft_version_even_when_keys_race(migrated_database: MakeDb, engines: Engines) -> None:
    """Seed 000 §6.3: a draft version confirmed again, with other keys, concurrently, makes one task; every
    answer names it (the loser of the insert hit uq_task_draft_version and read the winner's task)."""
    db = migrated_database("per_version")
    app = engines(db.app_url)
    rt = Runtime(sessions=sessionmaker(app))
    fleet = rt.transact(lambda tx: seed_fleet(tx, WorkloadSpec(confirms=1, window_s=1, devices=4, sites=1,
                                                                  operators=2)))
    user, area_id = fleet.operators[0]
    draft_id, version = _draft(rt, fleet, user, area_id, random.Random(7))
    errors: list[type[BaseException]] = []
    with _racing_inserts(rt, app, errors) as perform, ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_sync, confirm_draft(ConfirmDraft(user, draft_id, version, f"k-{n}")), perform)
                   for n in range(2)]
        answers = [f.result(timeout=60) for f in futures]
    assert errors == [IntegrityError]
    assert answers[0].task_id == answers[1].task_id and sorted(a.replayed for a in answers) == [False, True]
    later = rt.run(confirm_draft(ConfirmDraft(user, draft_id, version, "k-later")))
    assert (later.task_id, later.replayed) == (answers[0].task_id, True)
    with Session(app) as s:
        made = select(func.count()).select_from(DroneTask).where(DroneTask.draft_id == uuid.UUID(draft_id))
        assert s.scalar(made) == 1
