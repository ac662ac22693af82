"""I39: a task snapshot read is never older than the snapshot cache's lifetime. Hand-made runs: a read that names the
newest version certainly committed more than the lifetime (and a read's slack) before it began holds; one that names
an older version is violated; a version not certainly committed that long ago is not asked for (its outbox event
marked sent, or an answer naming it, says when it had committed)."""

from __future__ import annotations

from harness.history import INVOKE, OK, History
from reference.copilot.api import SNAPSHOT_CACHE_TTL_S
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS, SNAPSHOT_READ_SLACK_S, CheckContext
from systems.copilot.state import FinalState

T0 = 1_000_000.0
TASK, USER = "00000000-0000-4000-8000-000000000001", "operator-001"
OWED = SNAPSHOT_CACHE_TTL_S + SNAPSHOT_READ_SLACK_S  # after this long a committed version is owed to a reader
SENT = 10.0  # the completion's outbox event was marked sent then: v5 had committed by then


def run(read_at: float, answered: int, *, sent_at: float | None = SENT, seen_at: float | None = None) -> Verdict:
    h = History()
    if seen_at is not None:
        h.add(seen_at, "user-1", OK, "cancel", {"user_id": USER, "task_id": TASK, "status": "COMPLETED",
                                                "version": 5})
    h.add(read_at, "reader", INVOKE, "read", {"user_id": USER, "task_id": TASK})
    h.add(read_at + 0.01, "reader", OK, "read", {"user_id": USER, "task_id": TASK, "status": "EXECUTING",
                                                 "version": answered})
    outbox = [{"id": "e5", "task_id": TASK, "task_version": 5, "event_type": "TaskCompleted", "status": "SENT",
               "created_at": T0 + 9.0, "sent_at": None if sent_at is None else T0 + sent_at}]
    state = FinalState(t0=T0, tasks=[{"id": TASK, "user_id": USER, "status": "COMPLETED", "version": 5}],
                       outbox=outbox)
    return INVARIANTS.check(CheckContext(h, state), ["I39"])[0]


def test_a_read_of_the_version_it_is_owed_holds() -> None:
    assert run(SENT + OWED + 1.0, 5).status == HELD


def test_a_read_older_than_the_caches_lifetime_is_violated() -> None:
    verdict = run(SENT + OWED + 1.0, 4)
    assert verdict.status == VIOLATED and "read v4" in verdict.violations[0].message


def test_a_version_committed_within_the_lifetime_is_not_owed_yet() -> None:
    assert run(SENT + OWED - 0.5, 4).status == HELD


def test_an_answer_naming_the_version_also_says_it_had_committed() -> None:
    assert run(SENT + OWED + 1.0, 4, sent_at=None, seen_at=SENT).status == VIOLATED
    assert run(SENT + OWED + 1.0, 4, sent_at=None).status == HELD
