"""The Copilot's deployment for `sortie fuzz` (systems/copilot/fuzz.py), in process: it seeds the fuzzer's rows (their
ids the examples of the path parameters) and another operator's, and its verdicts on the database catch what the
fuzzing must not leave: another user's row changed, a task half-written."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import delete, update

from reference.copilot.models import TaskDraft, TaskEventOutbox
from scenarios.systems import FuzzRequest
from systems.copilot.fuzz import FOREIGN, CopilotTarget, in_process


def _statuses(target: CopilotTarget) -> dict[str, tuple[str, int]]:
    return {v.invariant: (v.status, v.checked) for v in target.verdicts()}


def test_the_seeded_world_holds_and_names_its_rows(tmp_path: Path) -> None:
    with in_process(FuzzRequest(tmp_path)) as target:
        operator = target.examples("operator")
        assert len(operator["draft_id"]) == 2 and len(operator["task_id"]) == 1
        assert target.examples("approver")["draft_id"] == operator["draft_id"][:1]  # the READY draft
        assert target.examples("platform") == {}
        statuses = _statuses(target)
        assert {k: s for k, (s, _) in statuses.items()} == {"I2": "held", "I4": "held", "I5": "held",
                                                             "foreign-rows": "held"}
        assert statuses["I5"][1] == 1 and statuses["foreign-rows"][1] > 0  # the seeded task; the foreign rows


def test_a_foreign_row_changed_is_a_violation(tmp_path: Path) -> None:
    with in_process(FuzzRequest(tmp_path)) as target:
        with target.sessions() as s, s.begin():
            s.execute(update(TaskDraft).where(TaskDraft.user_id == FOREIGN).values(goal="changed by the fuzzer"))
        assert _statuses(target)["foreign-rows"][0] == "violated"


def test_a_half_written_task_is_a_violation(tmp_path: Path) -> None:
    with in_process(FuzzRequest(tmp_path)) as target:
        [task] = target.examples("operator")["task_id"]
        with target.sessions() as s, s.begin():
            s.execute(delete(TaskEventOutbox).where(TaskEventOutbox.task_id == uuid.UUID(task)))
        assert _statuses(target)["I5"][0] == "violated"
