"""I41: a dead letter keeps its own record (seed 000 §5.5): the failures recorded for its consumer and event as its
history, its last error, and as many re-drives as were made of it. Hand-made runs (checker_scene) of one message that
failed three deliveries and was dead-lettered, then broken one way at a time: the history of another event, or of
another consumer; another error; a re-drive counted that nobody made. Mutation testing of services/consumer.py
(2026-12-07) found each of those green everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from checker_scene import T0, Scene

from harness.history import INFO, INVOKE, OK
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK, EVENT, OTHER_EVENT, GROUP = "task-1", "evt-1", "evt-2", "dispatcher"
DEAD_LETTER_ID = 7


def _failure(s: Scene, event: str, attempt: int, t: float, group: str = GROUP, code: str = "E") -> dict:
    f = {"consumer": group, "event_id": event, "attempt": attempt, "code": code, "at": T0 + t}
    s.state.event_failures.append(f)
    return f


def _entry(f: dict) -> dict:
    at = datetime.fromtimestamp(f["at"], UTC).replace(tzinfo=None)  # SQLite's naive UTC, as the consumer writes it
    return {"attempt": f["attempt"], "code": f["code"], "message": "boom", "at": at.isoformat()}


def _scene(history_of: str = EVENT, *, group_of: str = GROUP, error: str = "E", redrive_count: int = 0) -> Scene:
    """EVENT failed three deliveries (and OTHER_EVENT three, to another consumer's and this one's): dead-lettered with
    the history of ``history_of``'s failures to ``group_of``."""
    s = Scene()
    mine = [_failure(s, EVENT, a, 10.0 * a) for a in (1, 2, 3)]
    others = [_failure(s, OTHER_EVENT, a, 10.0 * a + 1) for a in (1, 2, 3)]
    foreign = [_failure(s, EVENT, a, 10.0 * a + 2, group="notifier") for a in (1, 2, 3)]
    history = {(EVENT, GROUP): mine, (OTHER_EVENT, GROUP): others, (EVENT, "notifier"): foreign}[(history_of, group_of)]
    s.state.dead_letters.append({
        "id": DEAD_LETTER_ID, "consumer": GROUP, "event_id": EVENT, "task_id": TASK, "event_type": "TaskCreated",
        "error_code": error, "attempts": 3, "history": [_entry(f) for f in history], "redriven": redrive_count > 0,
        "redrive_count": redrive_count, "created_at": T0 + 31.0})
    return s


def _check(s: Scene) -> Verdict:
    return INVARIANTS["I41"](s.ctx())


def test_a_dead_letter_with_its_own_failures_holds() -> None:
    verdict = _check(_scene())
    assert verdict.status == HELD and verdict.checked == 1, verdict.as_json()


@pytest.mark.parametrize("broken", [
    {"history_of": OTHER_EVENT},  # the failures of the consumer's other messages
    {"group_of": "notifier"},  # another consumer's failures of the same event
    {"error": "OTHER"},  # an error that is not its last failure's
], ids=["another-event", "another-consumer", "another-error"])
def test_a_dead_letter_with_another_record_is_violated(broken: dict) -> None:
    verdict = _check(_scene(**broken))
    assert verdict.status == VIOLATED and verdict.violations[0].task_id == TASK, verdict.as_json()


def test_failures_after_it_was_written_are_not_its_record_yet() -> None:
    """A re-driven letter failing again: the row's history is refreshed only when it dies again."""
    s = _scene(redrive_count=1)
    s.op(40.0, "operator", INVOKE, "redrive", dead_letter=DEAD_LETTER_ID)
    s.op(40.0, "operator", OK, "redrive", dead_letter=DEAD_LETTER_ID, event_id=EVENT)
    _failure(s, EVENT, 1, 50.0)
    assert _check(s).status == HELD


@pytest.mark.parametrize("ops,count,held", [
    ([], 0, True),
    ([], 1, False),  # a re-drive counted that nobody made
    ([OK], 1, True),
    ([OK], 0, False),  # a re-drive answered ok and not counted
    ([INFO], 1, True),  # an answer lost: the re-drive may have happened
    ([INFO], 0, True),
], ids=["none", "counted-unmade", "one", "ok-uncounted", "lost-made", "lost-not-made"])
def test_the_re_drives_counted_are_the_ones_made(ops: list[str], count: int, held: bool) -> None:
    s = _scene(redrive_count=count)
    for type_ in ops:  # the supervisor's, through the API
        s.op(40.0, "supervisor", INVOKE, "redrive", kind="dead-letter", id=str(DEAD_LETTER_ID))
        s.op(40.1, "supervisor", type_, "redrive", kind="dead-letter", id=str(DEAD_LETTER_ID))
    assert _check(s).status == (HELD if held else VIOLATED)
