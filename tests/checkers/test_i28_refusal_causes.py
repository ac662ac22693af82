"""I28: the pre-flight check refuses a task only for a cause that held when it ran. Hand-made runs (checker_scene)
of one task refused at t=103 s (QUEUED 101, VALIDATING 102, FAILED 103 by PRECHECK_FAILED), with and without its
cause in the history; and the mutant of the dispatcher's area read that mutation testing found green everywhere."""

from __future__ import annotations

from typing import Any

import pytest
from checker_scene import AREAS, Scene
from sqlalchemy import bindparam, select

import reference.copilot.services.dispatch as dispatch
from harness.history import AIRSPACE, FAIL, INFO, INVOKE, NEMESIS, OK, REVOKE_APPROVAL
from reference.copilot.policy import Policy
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-refused"
CHECK = 103.0  # the PRECHECK_FAILED row's time
MIN = Policy().min_battery


def _refused(code: str) -> Scene:
    s = Scene()
    row = s.task(TASK, ["QUEUED", "VALIDATING", "FAILED"], user="operator-001", key="k-1", start=100.0)
    row["last_error_code"] = code
    next(a for a in s.state.audit if a["task_id"] == TASK and a["to"] == "FAILED")["action"] = "PRECHECK_FAILED"
    return s


def _device(s: Scene, type_: str, **value: Any) -> None:
    s.op(CHECK - 0.6, "dispatcher-1", INVOKE, "get_device", task_id=TASK, method="get_device")
    s.op(CHECK - 0.55, "dispatcher-1", type_, "get_device", task_id=TASK, method="get_device", **value)


def _airspace(s: Scene, at: float, open_: bool) -> None:
    s.op(at, NEMESIS, INFO, AIRSPACE, areas=[AREAS[0]], open=open_)


def _i28(s: Scene) -> Verdict:
    return INVARIANTS["I28"](s.ctx())


@pytest.mark.parametrize("closings,held", [
    ([(50.0, False)], True),  # closed before the check
    ([(CHECK + 0.3, False)], True),  # recorded just after it: a record follows its act on a real stack
    ([], False),  # never closed
    ([(50.0, False), (80.0, True)], False),  # closed, then reopened before the check
    ([(CHECK + 5.0, False)], False),  # closed only later
], ids=["closed-before", "recorded-just-after", "never-closed", "reopened", "closed-later"])
def test_airspace_closed_needs_its_area_closed(closings: list[tuple[float, bool]], held: bool) -> None:
    s = _refused("AIRSPACE_CLOSED")
    for at, open_ in closings:
        _airspace(s, at, open_)
    verdict = _i28(s)
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


@pytest.mark.parametrize("closed_at,held", [(CHECK + 5.0, True), (CHECK + 8.0, False)],
                         ids=["closed-during-the-hold", "closed-after-it"])
def test_a_transaction_held_before_its_first_write_checks_the_airspace_after_the_hold(closed_at: float,
                                                                                       held: bool) -> None:
    """Found by `sortie explore` (2026-12-06): a dispatch.begin held 6.8 s after its reads, the airspace closed during
    the hold, and the task refused rightly; its audit rows carry the transaction's start, before the close."""
    s = _refused("AIRSPACE_CLOSED")
    s.history.add(CHECK + 0.01, NEMESIS, INFO, "hold", {"process": "dispatcher-1", "seconds": 6.0,
                                                      "why": "before-write dispatch.begin"})
    _airspace(s, closed_at, False)
    verdict = _i28(s)
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


@pytest.mark.parametrize("code,answer,held", [
    ("DEVICE_OFFLINE", (OK, {"online": False, "battery": 90.0}), True),
    ("DEVICE_OFFLINE", (OK, {"online": True, "battery": 90.0}), False),
    ("BATTERY_LOW", (OK, {"online": True, "battery": MIN - 5}), True),
    ("BATTERY_LOW", (OK, {"online": True, "battery": MIN}), False),  # exactly the minimum is fit
    ("DEVICE_UNKNOWN", (FAIL, {"error": "DEVICE_NOT_FOUND"}), True),
    ("DEVICE_UNKNOWN", (OK, {"online": True, "battery": 90.0}), False),
    ("DEVICE_OFFLINE", None, False),  # no answer: the check had nothing to refuse on
])
def test_a_device_refusal_needs_the_platforms_answer_to_say_so(code: str, answer: Any, held: bool) -> None:
    s = _refused(code)
    if answer is not None:
        _device(s, answer[0], **answer[1])
    verdict = _i28(s)
    assert verdict.checked == 1 and verdict.status == (HELD if held else VIOLATED), verdict.as_json()


def test_approval_revoked_needs_a_revocation_asked_for_before_the_check() -> None:
    s = _refused("APPROVAL_REVOKED")
    assert _i28(s).status == VIOLATED
    s.op(90.0, "approver", INVOKE, REVOKE_APPROVAL, task_id=TASK, draft_id=f"draft-{TASK}", draft_version=1)
    assert _i28(s).status == HELD
    other = _refused("APPROVAL_REVOKED")
    other.op(90.0, "approver", INVOKE, REVOKE_APPROVAL, task_id=TASK, draft_id=f"draft-{TASK}", draft_version=2)
    assert _i28(other).status == VIOLATED  # another version's revocation


def test_a_cause_the_history_does_not_record_is_not_judged() -> None:
    verdict = _i28(_refused("SOMETHING_ELSE"))
    assert verdict.status == HELD and verdict.checked == 0


def test_a_check_that_reads_another_areas_airspace_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant `id == area_id` -> `id != area_id` of the dispatcher's area read (mutation testing, 2026-12-05):
    tasks in open areas were refused AIRSPACE_CLOSED (the first other area was closed) and S7 stayed green."""
    table = dispatch._AREA_TABLE
    monkeypatch.setattr(dispatch, "_AREA", select(table.c.airspace_open, table.c.requires_approval)
                        .where(table.c.id != bindparam("area_id")))
    result = simulate(load_catalogue("copilot")["S7"], 1)
    violated = {v.invariant for v in result.verdicts if v.status == VIOLATED}
    assert violated == {"I28"}, violated
