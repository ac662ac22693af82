"""The status sync's deployment for `sortie fuzz` (systems/statussync/fuzz.py), in process on SQLite: it seeds a task
for the fuzzer's user and one for a user the fuzzer holds no credential of, each role gets a credential the API takes,
and its verdicts on the database catch what the fuzzing must not leave: a foreign row written, an event without its
outbox rows (half-written)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from sqlalchemy import delete, insert, select, update

from reference.statussync.models import Task, TaskEventDedup, TaskOutbox
from scenarios.systems import FuzzRequest
from systems.statussync.fuzz import DATABASE_INVARIANTS, FOREIGN_USER, FUZZ_USER, ROLES, SyncTarget, in_process


def _statuses(target: SyncTarget) -> dict[str, tuple[str, int]]:
    return {v.invariant: (v.status, v.checked) for v in target.verdicts()}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncTarget]:
    """One deployment for the module (its schema takes longer than the tests); a test that breaks a row mends it."""
    with in_process(FuzzRequest(tmp_path_factory.mktemp("statussync-fuzz"))) as deployed:
        yield deployed


def test_the_seeded_world_holds_and_every_role_is_let_in(target: SyncTarget) -> None:
    statuses = _statuses(target)
    assert {k: s for k, (s, _) in statuses.items()} == dict.fromkeys([*DATABASE_INVARIANTS, "foreign-rows"], "held")
    assert statuses["S6"][1] == 4 and statuses["foreign-rows"][1] > 0  # two tasks' two events; the foreign rows
    mine, foreign = target.examples("user")["task_id"]
    assert (mine, foreign) == (target.tasks[FUZZ_USER], target.tasks[FOREIGN_USER])
    http = target.app.test_client()
    user, coordinator, producer, _ = (target.credentials(role) for role in ROLES)
    assert http.get(f"/api/tasks/{mine}", headers=user).status_code == 200
    assert http.get(f"/api/tasks/{foreign}", headers=user).status_code == 404
    refused = http.post("/internal/v1/tasks", json={}, headers=coordinator)
    assert refused.status_code == 400  # past authentication: the coordinator's body is what is refused
    beat = http.post("/internal/v1/task-events", headers=producer, json={
        "eventId": "beat-1", "taskId": mine, "taskAttempt": 1, "stepId": "01_prepare", "stepAttempt": 1,
        "operationCode": "FILE.PREPARE", "producerId": "file-worker", "sourceSeq": 2, "eventType": "STEP_HEARTBEAT"})
    assert beat.status_code == 200, beat.text  # the producer's token is its step attempt's


def test_a_foreign_row_written_or_changed_is_a_violation(target: SyncTarget) -> None:
    foreign = target.tasks[FOREIGN_USER]
    claimed = TaskEventDedup.__table__.c.event_id == "claimed"
    with target.engine.begin() as conn:
        conn.execute(insert(TaskEventDedup.__table__).values(
            event_id="claimed", task_id=foreign, payload_hash="x", result={}, created_at=datetime(2026, 1, 1)))
    assert _statuses(target)["foreign-rows"][0] == "violated"
    with target.engine.begin() as conn:
        conn.execute(delete(TaskEventDedup.__table__).where(claimed))
        title = conn.execute(select(Task.title).where(Task.id == foreign)).scalar_one()
    assert _statuses(target)["foreign-rows"][0] == "held"
    with target.engine.begin() as conn:
        conn.execute(update(Task.__table__).where(Task.id == foreign).values(title="changed by the fuzzer"))
    assert _statuses(target)["foreign-rows"][0] == "violated"
    with target.engine.begin() as conn:
        conn.execute(update(Task.__table__).where(Task.id == foreign).values(title=title))


def test_a_half_written_event_is_a_violation(target: SyncTarget) -> None:
    detail = (TaskOutbox.aggregate_id == target.tasks[FUZZ_USER]) & (TaskOutbox.projection == "TASK_DETAIL")
    with target.engine.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(TaskOutbox.__table__).where(detail))]
        conn.execute(delete(TaskOutbox.__table__).where(detail))
    assert _statuses(target)["S6"][0] == "violated"
    with target.engine.begin() as conn:
        conn.execute(insert(TaskOutbox.__table__), rows)
    assert _statuses(target)["S6"][0] == "held"
