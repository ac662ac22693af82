"""I36 and I37: the outbox publishers' waits bounded from above. From mutation testing of outbox.py (2026-12-06): a
row's backoff one or two steps too long, a jitter draw past the step, rows not put back after a refusal, and a
publisher's count of failed rounds growing by 2 or reset to 1 were green everywhere (I30 bounds the waits from below
only). Each case builds what both shells record of a publisher's round: the claim (invoke, then ok with the rows it
took), the publishes, the mark-sent or the release. The policy here: a row's retry n waits at most min(4, 2^n) s; a
publisher pauses min(30, 0.5*2^k) s after its k-th failed round in a row; a claim takes at most 3 rows."""

from __future__ import annotations

from checker_scene import T0, Scene

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK
from kernel.runtime import PUBLISH
from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.services.outbox import CLAIM, MARK_SENT, RELEASE
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS, CheckContext

TASK = "task-1"
POLICY = Policy(outbox_retry=RetryPolicy(attempts=4, base_s=1.0, cap_s=4.0), outbox_batch=3, outbox_lease_s=30.0)


def _scene(*rows: str) -> Scene:
    s = Scene()
    s.state.outbox = [{"id": r, "task_id": TASK, "task_version": 1, "event_type": "TaskCreated", "status": "PENDING",
                       "created_at": T0} for r in rows]
    return s


def _claim(s: Scene, at: float, process: str, ids: list[str] | None, took_s: float = 0.01) -> int:
    s.op(at, process, INVOKE, CLAIM)
    if ids is None:
        return -1  # never answered
    return s.op(at + took_s, process, OK, CLAIM, ids=ids).index


def _publish(s: Scene, at: float, process: str, row: str, refused: bool) -> None:
    value = {"event_id": row, "task_id": TASK, "event_type": "TaskCreated"}
    s.op(at, process, INVOKE, PUBLISH, **value)
    s.op(at, process, FAIL if refused else OK, PUBLISH, **value)


def _commit(s: Scene, at: float, process: str, name: str) -> int:
    s.op(at, process, INVOKE, name)
    return s.op(at + 0.01, process, OK, name).index


def _refused_round(s: Scene, at: float, process: str, rows: list[str]) -> int:
    """A claim of ``rows`` at ``at``, the first publish refused, the rows put back: returns the release's op."""
    _claim(s, at, process, rows)
    _publish(s, at + 0.02, process, rows[0], refused=True)
    return _commit(s, at + 0.03, process, RELEASE)


def _nemesis(s: Scene, at: float, f: str, **value: object) -> None:
    s.history.add(at, NEMESIS, INFO, f, value)


def _check(inv: str, s: Scene, *, modelled: bool = True) -> Verdict:
    return INVARIANTS[inv](CheckContext(s.history, s.state, policy=POLICY, fast_path_modelled=modelled))


# ---------------------------------------------------------------------------------------------------------- I36


def test_a_row_taken_once_its_step_is_over_holds_and_is_counted() -> None:
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])  # its first claim: due again within max_delay(0) = 1 s
    _claim(s, 11.2, "publisher-2", ["e1"])
    verdict = _check("I36", s)
    assert verdict.status == HELD and verdict.checked == 1, verdict.as_json()


def test_a_claim_with_room_that_leaves_a_due_row_violates() -> None:
    s = _scene("e1", "e2")
    release = _refused_round(s, 10.0, "publisher-1", ["e1"])
    claim = _claim(s, 11.2, "publisher-2", ["e2"])  # room for 3, e1 due since 11.04
    verdict = _check("I36", s)
    assert verdict.status == VIOLATED
    assert [v.message for v in verdict.violations] == [
        "outbox event e1 was due by 11.040s, and a claim that began at 11.200s with room for 3 rows did not take it"]
    assert verdict.violations[0].ops == [release, claim] and verdict.violations[0].task_id == TASK


def test_the_step_grows_with_the_rows_claims() -> None:
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    _refused_round(s, 11.2, "publisher-1", ["e1"])  # its second claim: within max_delay(1) = 2 s of 11.24
    _claim(s, 12.5, "publisher-2", [])
    assert _check("I36", s).status == HELD
    _claim(s, 13.5, "publisher-2", [])
    assert _check("I36", s).status == VIOLATED


def test_a_full_claim_is_not_judged() -> None:
    s = _scene("e1", "e2", "e3", "e4")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    _claim(s, 11.2, "publisher-2", ["e2", "e3", "e4"])  # older rows first, and the batch is full
    verdict = _check("I36", s)
    assert verdict.status == HELD and verdict.checked == 0


def test_a_row_another_claim_took_at_the_same_time_is_excused() -> None:
    # SKIP LOCKED: publisher-2 locked e1 first and commits after publisher-1's claim, which skipped it
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    s.op(11.15, "publisher-2", INVOKE, CLAIM)
    _claim(s, 11.2, "publisher-1", [], took_s=0.05)
    s.op(11.3, "publisher-2", OK, CLAIM, ids=["e1"])
    assert _check("I36", s).status == HELD


def test_a_claim_with_no_answer_may_have_counted_and_widens_the_step() -> None:
    s = _scene("e1")
    _claim(s, 5.0, "publisher-2", None)  # it may have taken e1 (its lease ran out by 35)
    _nemesis(s, 5.5, "kill", process="publisher-2")
    _refused_round(s, 40.0, "publisher-1", ["e1"])  # a first or a second claim: due within 2 s, not 1 s
    _claim(s, 41.5, "publisher-1", [])
    assert _check("I36", s).status == HELD
    _claim(s, 42.2, "publisher-1", [])
    assert _check("I36", s).status == VIOLATED


def test_rows_of_a_publisher_that_died_are_due_when_their_lease_runs_out() -> None:
    s = _scene("e1")
    _claim(s, 10.0, "publisher-1", ["e1"])
    _nemesis(s, 10.5, "kill", process="publisher-1")
    _claim(s, 39.0, "publisher-2", [])  # leased until 40.01 at the latest
    assert _check("I36", s).status == HELD
    _claim(s, 41.0, "publisher-2", [])
    verdict = _check("I36", s)
    assert verdict.status == VIOLATED and "due by 40.010s" in verdict.violations[0].message


def test_sent_dead_and_redriven_rows_are_not_due() -> None:
    s = _scene("e1", "e2", "e3")
    _claim(s, 1.0, "publisher-1", ["e1"])
    _publish(s, 1.02, "publisher-1", "e1", refused=False)
    _commit(s, 1.03, "publisher-1", MARK_SENT)  # e1 sent
    for at in (2.0, 4.0, 7.0, 12.0):  # e2's fourth claim sends it DEAD
        _refused_round(s, at, "publisher-1", ["e2"])
    _refused_round(s, 20.0, "publisher-1", ["e3"])
    _redriven(s, 20.5, "e3")  # due now, with a fresh budget: not judged
    _claim(s, 25.0, "publisher-2", [])
    verdict = _check("I36", s)
    assert verdict.status == HELD, verdict.as_json()


def _redriven(s: Scene, at: float, row: str) -> None:
    """A supervisor's re-drive of ``row`` that committed at ``at`` (its OUTBOX_REDRIVEN audit), answered ok."""
    s.state.outbox_budget.append({"action": "OUTBOX_REDRIVEN", "event_id": row, "at": T0 + at, "attempts": 4})
    s.op(at - 0.01, "supervisor", INVOKE, "redrive", kind="outbox", id=row)
    s.op(at + 0.02, "supervisor", OK, "redrive", kind="outbox", id=row)


def test_a_redriven_row_counts_its_claims_from_the_commit_not_from_a_supervisors_answer() -> None:
    # R16: a publisher claims the re-driven row before the supervisor's answer (and the refused double click) is
    # recorded; its fourth refused claim after the re-drive sends it DEAD again, so a later empty claim is right
    s = _scene("e2")
    for at in (2.0, 4.0, 7.0, 12.0):
        _refused_round(s, at, "publisher-1", ["e2"])
    _redriven(s, 20.0, "e2")
    _refused_round(s, 20.01, "publisher-1", ["e2"])
    s.op(20.03, "supervisor", INVOKE, "redrive", kind="outbox", id="e2")
    s.op(20.04, "supervisor", FAIL, "redrive", kind="outbox", id="e2", code="NOT_DEAD")
    for at in (21.1, 23.1, 27.1):
        _refused_round(s, at, "publisher-1", ["e2"])
    _claim(s, 40.0, "publisher-1", [])
    verdict = _check("I36", s)
    assert verdict.status == HELD, verdict.as_json()


def test_a_row_a_stopped_publisher_marks_sent_while_another_holds_it_is_not_due() -> None:
    # publisher-2 published e1 and stopped past its lease; publisher-1 claimed e1 again; publisher-2 marks it sent
    s = _scene("e1")
    _claim(s, 1.0, "publisher-2", ["e1"])
    _publish(s, 1.02, "publisher-2", "e1", refused=False)
    _nemesis(s, 1.03, "pause", process="publisher-2", seconds=42.0)
    _claim(s, 31.1, "publisher-1", ["e1"])
    _publish(s, 31.12, "publisher-1", "e1", refused=False)
    _nemesis(s, 31.13, "pause", process="publisher-1", seconds=42.0)
    _commit(s, 43.1, "publisher-2", MARK_SENT)
    _claim(s, 62.0, "publisher-2", [])  # after publisher-1's lease: e1 is SENT, not due
    assert _check("I36", s).status == HELD


# ---------------------------------------------------------------------------------------------------------- I37


def test_a_publisher_that_pauses_as_its_policy_says_holds() -> None:
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])  # round 1 fails: pause 1 s
    _refused_round(s, 11.05, "publisher-1", ["e1"])  # round 2 fails: pause 2 s
    _claim(s, 13.1, "publisher-1", [])  # an empty round: wait at most 5 s (the count stays)
    _refused_round(s, 17.0, "publisher-1", ["e1"])  # round 3 fails: pause 4 s
    _claim(s, 21.05, "publisher-1", ["e1"])
    verdict = _check("I37", s)
    assert verdict.status == HELD and verdict.checked == 4, verdict.as_json()


def test_a_pause_longer_than_the_policy_violates() -> None:
    s = _scene("e1")
    release = _refused_round(s, 10.0, "publisher-1", ["e1"])
    claim = s.op(12.04, "publisher-1", INVOKE, CLAIM).index  # 2 s after its first failed round: 1 s allowed
    verdict = _check("I37", s)
    assert verdict.status == VIOLATED
    assert [v.message for v in verdict.violations] == [
        "publisher-1 claimed again 2.000s after its failed round 1 in a row (policy: within 1.000s)"]
    assert verdict.violations[0].ops == [release - 4, claim]  # the round's claim, and the late one


def test_a_round_that_sent_starts_the_count_again() -> None:
    s = _scene("e1", "e2")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    _claim(s, 11.05, "publisher-1", ["e1"])
    _publish(s, 11.07, "publisher-1", "e1", refused=False)
    _commit(s, 11.08, "publisher-1", MARK_SENT)
    _refused_round(s, 12.0, "publisher-1", ["e2"])  # the first failed round in a row again: 1 s
    _claim(s, 13.6, "publisher-1", [])
    verdict = _check("I37", s)
    assert verdict.status == VIOLATED and "failed round 1 in a row" in verdict.violations[0].message


def test_after_a_full_batch_it_claims_at_once_and_after_a_smaller_one_within_its_wait() -> None:
    s = _scene("e1", "e2", "e3", "e4")
    _claim(s, 1.0, "publisher-1", ["e1", "e2", "e3"])
    for i, row in enumerate(("e1", "e2", "e3")):
        _publish(s, 1.02 + i / 100, "publisher-1", row, refused=False)
    _commit(s, 1.1, "publisher-1", MARK_SENT)
    _claim(s, 1.12, "publisher-1", ["e4"])  # at once
    _publish(s, 1.14, "publisher-1", "e4", refused=False)
    _commit(s, 1.15, "publisher-1", MARK_SENT)
    _claim(s, 6.1, "publisher-1", [])  # within 5 s
    assert _check("I37", s).status == HELD
    _claim(s, 11.2, "publisher-1", [])  # 5.09 s after an empty round
    verdict = _check("I37", s)
    assert verdict.status == VIOLATED and "after a round that took 0" in verdict.violations[0].message


def test_a_full_batch_followed_by_a_wait_violates() -> None:
    s = _scene("e1", "e2", "e3")
    _claim(s, 1.0, "publisher-1", ["e1", "e2", "e3"])
    for row in ("e1", "e2", "e3"):
        _publish(s, 1.02, "publisher-1", row, refused=False)
    _commit(s, 1.1, "publisher-1", MARK_SENT)
    _claim(s, 2.0, "publisher-1", [])
    verdict = _check("I37", s)
    assert verdict.status == VIOLATED and "after a full batch (policy: within 0.000s)" in verdict.violations[0].message


def test_a_stopped_or_restarted_publisher_and_a_slow_database_are_allowed_longer() -> None:
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    _nemesis(s, 10.2, "pause", process="publisher-1", seconds=5.0)
    _claim(s, 16.0, "publisher-1", [])  # not judged: it was stopped
    s.history.fault_start(16.5, "db-latency", ms=400)
    _refused_round(s, 17.0, "publisher-1", ["e1"])  # pause 2 s (the count went on), plus 0.4 s
    _claim(s, 19.4, "publisher-1", [])
    _nemesis(s, 19.5, "kill", process="publisher-1")
    _nemesis(s, 30.0, "restart", process="publisher-1")
    _claim(s, 40.0, "publisher-1", [])  # a new process: its first claim is not judged
    verdict = _check("I37", s)
    assert verdict.status == HELD and verdict.checked == 3, verdict.as_json()  # the claims at 16.0, 17.0 and 19.4


def test_where_the_machine_schedules_the_publishers_a_pause_is_bounded_from_below_only() -> None:
    s = _scene("e1")
    _refused_round(s, 10.0, "publisher-1", ["e1"])
    _claim(s, 20.0, "publisher-1", ["e1"])
    verdict = _check("I37", s, modelled=False)
    assert verdict.status == HELD and verdict.checked == 1 and "not bounded from above" in verdict.note
    assert _check("I36", s, modelled=False).status == HELD  # the rows' bounds are the database's: judged anywhere
    _refused_round(s, 20.1, "publisher-1", ["e1"])  # its second failed round: a pause of 2 s
    _claim(s, 21.0, "publisher-1", [])
    assert [v.message for v in _check("I37", s, modelled=False).violations] == [
        "publisher-1 claimed again 0.860s after its failed round 2 in a row (policy: a pause of at least 2.000s)"]


def test_a_database_failure_is_a_failed_round() -> None:
    s = _scene("e1")
    s.op(10.0, "publisher-1", INVOKE, CLAIM)
    s.op(10.1, "publisher-1", FAIL, CLAIM, error="OperationalError")
    _claim(s, 10.6, "publisher-1", [])  # the idle poll, not the pause of 1 s
    assert [v.message for v in _check("I37", s).violations] == [
        "publisher-1 claimed again 0.500s after its failed round 1 in a row (policy: a pause of at least 1.000s)"]


def test_a_round_must_mark_what_was_sent_and_put_back_what_was_refused() -> None:
    s = _scene("e1", "e2")
    _claim(s, 10.0, "publisher-1", ["e1", "e2"])
    _publish(s, 10.02, "publisher-1", "e1", refused=False)
    _publish(s, 10.03, "publisher-1", "e2", refused=True)
    _commit(s, 10.04, "publisher-1", RELEASE)  # e1 never marked sent
    _claim(s, 11.06, "publisher-1", ["e2"])
    _publish(s, 11.12, "publisher-1", "e2", refused=True)  # and e2 never put back
    _claim(s, 13.13, "publisher-1", [])
    assert [v.message for v in _check("I37", s).violations] == [
        "publisher-1 claimed again without marking sent the 1 row(s) the broker accepted (they go out again when "
        "their lease runs out)",
        "publisher-1 claimed again without putting back the rows the broker refused (they wait out their lease, not "
        "their backoff)"]


def test_a_round_whose_publish_went_unanswered_is_not_judged() -> None:
    s = _scene("e1")
    _claim(s, 10.0, "publisher-1", ["e1"])
    s.op(10.02, "publisher-1", INVOKE, PUBLISH, event_id="e1", task_id=TASK, event_type="TaskCreated")
    s.op(10.03, "publisher-1", INFO, PUBLISH, event_id="e1", task_id=TASK, event_type="TaskCreated", error="Boom")
    _claim(s, 10.1, "publisher-1", [])
    assert _check("I37", s).status == HELD


# ------------------------------------------------------------------------------- B15's expectation (refused-mid-batch)


def _sent(s: Scene, *rows: str) -> None:
    for o in s.state.outbox:
        o["sent_at"] = T0 + 100.0 if o["id"] in rows else None


def test_b15_wants_a_round_refused_after_an_accepted_publish() -> None:
    from scenarios.verdicts import NotFired
    from systems.copilot.expectations import EXPECTATIONS

    expect = EXPECTATIONS["refused-mid-batch"]
    s = _scene("e1", "e2")
    _refused_round(s, 10.0, "publisher-1", ["e1", "e2"])  # refused at its first publish: not in the middle
    _sent(s, "e1", "e2")
    assert isinstance(expect(s.history, s.state), NotFired)
    _claim(s, 20.0, "publisher-2", ["e1", "e2"])
    _publish(s, 20.02, "publisher-2", "e1", refused=False)
    _publish(s, 20.03, "publisher-2", "e2", refused=True)
    _commit(s, 20.04, "publisher-2", MARK_SENT)
    _commit(s, 20.05, "publisher-2", RELEASE)
    assert expect(s.history, s.state) is None
    _sent(s, "e1")
    assert expect(s.history, s.state) == "1 row(s) of a round refused in its middle never went out: e2"


def test_a_round_cut_short_by_a_kill_is_not_one_of_the_publishers_rounds() -> None:
    from systems.copilot.checkers import publisher_rounds

    s = _scene("e1", "e2")
    _claim(s, 10.0, "publisher-1", ["e1", "e2"])
    _publish(s, 10.02, "publisher-1", "e1", refused=False)
    _nemesis(s, 10.03, "kill", process="publisher-1")
    _publish(s, 10.04, "publisher-1", "e2", refused=True)  # a new process of that name, before its claim: no round
    _claim(s, 12.0, "publisher-1", None)  # never answered: not a round either
    assert [(who, r.published, r.refused) for who, r in publisher_rounds(s.history)] == [
        ("publisher-1", ["e1"], None)]
