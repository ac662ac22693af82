"""A stateful property test of confirm_draft, drafts, cancel and transition() over a real SQLite database.

Hypothesis drives random sequences of: create a draft (approved, rejected or not), revise it (a new version,
sometimes approved), confirm (draft, version, key) with keys from a tiny pool so that keys collide and
versions are sometimes stale, cancel a task, and move a random task with transition() to a random (legal or
illegal) status. A model predicts each answer; after every step the database must keep the invariants:

- at most one task per (user, idempotency key), and exactly one per key that created one;
- at most one task per (draft, version): a fresh key confirming a version that made a task replays it;
- a confirm with a used key answers the same task for the same (draft, version), IDEMPOTENCY_KEY_REUSED
  otherwise, and never creates a second task;
- every task's audit chain is legal and continuous (from == previous to, versions +1) and the row's
  status/version equal its last audit row;
- every audited transition has exactly one outbox event with the same task_version;
- terminal tasks never change; COMPLETED tasks have a report row.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest
from core_db_support import Db, make_db
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from harness.history import History
from reference.copilot.errors import Conflict, DomainError, NotFound, StaleWrite
from reference.copilot.services.cancel import request_cancel
from reference.copilot.services.confirm import ConfirmDraft, confirm_draft
from reference.copilot.services.drafts import create_draft, decide_approval, revise_draft
from reference.copilot.states import OPERATOR_TRANSITIONS, SYSTEM_TRANSITIONS, TERMINAL, TaskStatus, is_legal
from reference.copilot.tasks import TASK_CREATED, IllegalTransition, fresh, transition
from scenarios.verdicts import HELD
from systems.copilot.checkers import CheckContext, check_i2, check_i4, check_i5
from systems.copilot.state import FinalState, read_database
from systems.copilot.workload import random_plan

S = TaskStatus
KEYS = ("k-a", "k-b", "k-c")
APPROVER = "approver-1"
TERMINAL_VALUES = {s.value for s in TERMINAL}
APPROVAL = st.sampled_from(["approve", "approve", "approve", "reject", "none"])
# Mostly the current version by the owner; sometimes a stale or future version, or a neighbour's click.
CONFIRM_MODES = ["current"] * 5 + ["older", "newer", "other-user"]
# Walk targets in this order of preference: forward progress first, terminal statuses last.
PROGRESS = [S.QUEUED, S.VALIDATING, S.DISPATCHING, S.EXECUTING, S.CANCEL_PENDING, S.DISPATCH_FAILED,
            S.MANUAL_REVIEW, S.COMPLETED, S.FAILED, S.CANCELLED, S.CREATED]


@dataclasses.dataclass
class DraftModel:
    id: str
    user: str
    area: str
    version: int
    decisions: dict[int, str]  # draft version -> latest decision (APPROVED / REJECTED)
    ever_approved: bool = False  # some version of the draft was approved at some point


@dataclasses.dataclass(frozen=True)
class KeyUse:
    task_id: str
    draft_id: str
    draft_version: int


class ConfirmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.db: Db | None = None
        self.drafts: list[DraftModel] = []
        self.keys: dict[tuple[str, str], KeyUse] = {}
        self.made: dict[tuple[str, int], str] = {}  # (draft, version) -> the task it made
        self.task_ids: list[str] = []  # in creation order
        self.frozen: dict[str, tuple[str, int]] = {}  # terminal task -> (status, version) when first seen
        self.rng = random.Random(0)

    # ---------------------------------------------------------------- set-up / tear-down

    @initialize(seed=st.integers(0, 2**16), operator=st.integers(0, 3), key=st.sampled_from(KEYS))
    def fresh_database(self, seed: int, operator: int, key: str) -> None:
        """A fresh database with one approved draft already confirmed, so every rule has work from step one."""
        self.db = make_db(seed=seed)
        self.rng = random.Random(seed)
        self.create_draft(operator, 0, 60.0, "approve")
        self.confirm(0, key, "current")
        assert len(self.task_ids) == 1

    def teardown(self) -> None:
        if self.db is None:
            return
        try:
            # The project's own checkers must agree with this model on the same database.
            state = FinalState()
            with self.db.runtime.sessions() as s:
                read_database(s, state)
            ctx = CheckContext(History(), state)
            for check in (check_i2, check_i4, check_i5):
                verdict = check(ctx)
                assert verdict.status == HELD, verdict.as_json()
        finally:
            self.db.dispose()

    # ---------------------------------------------------------------- helpers

    @property
    def rt(self) -> Any:
        assert self.db is not None
        return self.db.runtime

    def _plan(self, area: str, device_pick: int, altitude: float) -> Any:
        assert self.db is not None and self.db.fleet is not None
        plan = random_plan(self.rng, self.db.fleet, area)
        devices = self.db.fleet.devices_by_area[area]
        return dataclasses.replace(plan, device_id=devices[device_pick % len(devices)], altitude_m=altitude)

    def _decide(self, draft: DraftModel, approval: str) -> None:
        if approval == "none":
            return
        self.rt.transact(lambda tx: decide_approval(tx, APPROVER, draft.id, draft.version,
                                                    approve=approval == "approve"))
        draft.decisions[draft.version] = "APPROVED" if approval == "approve" else "REJECTED"
        draft.ever_approved |= approval == "approve"

    def _user_of(self, task_id: str) -> str:
        assert self.db is not None
        row = self.db.task(uuid.UUID(task_id))
        assert row is not None
        return str(row["user_id"])

    # ---------------------------------------------------------------- rules

    @rule(operator=st.integers(0, 3), device_pick=st.integers(0, 3), altitude=st.sampled_from([40.0, 60.0, 100.0]),
          approval=APPROVAL)
    def create_draft(self, operator: int, device_pick: int, altitude: float, approval: str) -> None:
        assert self.db is not None and self.db.fleet is not None
        user, area = self.db.fleet.operators[operator]
        plan = self._plan(area, device_pick, altitude)

        def make(tx: Any) -> tuple[str, int]:
            d = create_draft(tx, user, "inspect", area, plan)
            return str(d.id), d.version

        draft_id, version = self.rt.transact(make)
        assert version == 1
        draft = DraftModel(draft_id, user, area, 1, {})
        self.drafts.append(draft)
        self._decide(draft, approval)

    @rule(pick=st.integers(0, 63), stale=st.booleans(), device_pick=st.integers(0, 3),
          altitude=st.sampled_from([50.0, 80.0]), approval=APPROVAL)
    def revise_draft(self, pick: int, stale: bool, device_pick: int, altitude: float, approval: str) -> None:
        draft = self.drafts[pick % len(self.drafts)]
        plan = self._plan(draft.area, device_pick, altitude)
        expected = draft.version - 1 if stale else draft.version
        if stale:
            with pytest.raises(Conflict) as info:
                self.rt.transact(lambda tx: revise_draft(tx, draft.user, draft.id, expected, plan))
            assert info.value.code == "STALE_DRAFT_VERSION"
            return
        new_version = self.rt.transact(lambda tx: revise_draft(tx, draft.user, draft.id, expected, plan).version)
        assert new_version == draft.version + 1
        draft.version = new_version
        self._decide(draft, approval)

    @rule(pick=st.integers(0, 63), key=st.sampled_from(KEYS), mode=st.sampled_from(CONFIRM_MODES))
    def confirm(self, pick: int, key: str, mode: str) -> None:
        assert self.db is not None and self.db.fleet is not None
        draft = self.drafts[pick % len(self.drafts)]
        user = draft.user
        if mode == "other-user":  # a neighbour on the same site: may fly its devices, does not own the draft
            user = next(u for u, a in self.db.fleet.operators if a == draft.area and u != draft.user)
        version = {"older": draft.version - 1, "newer": draft.version + 1}.get(mode, draft.version)
        if version < 1:
            version = draft.version + 1
        cmd = ConfirmDraft(user, draft.id, version, key)
        before = len(self.db.all_tasks())
        used = self.keys.get((user, key))

        try:
            created = self.rt.run(confirm_draft(cmd))
        except DomainError as err:
            created, error = None, err
        else:
            error = None
        after = len(self.db.all_tasks())

        if used is not None:
            assert after == before, "a used key must never create a second task"
            if (used.draft_id, used.draft_version) == (draft.id, version):
                assert error is None, f"same key, same payload must replay, got {error!r}"
                assert created.task_id == used.task_id and created.replayed is True
                event("confirm: replayed")
            else:
                assert isinstance(error, Conflict) and error.code == "IDEMPOTENCY_KEY_REUSED", error
                assert error.detail.get("task_id") == used.task_id
                event("confirm: IDEMPOTENCY_KEY_REUSED")
            return

        # A fresh key: the usual checks decide, in confirm's order.
        expected_code: str | None = None
        if user != draft.user:
            expected_code = "DRAFT_NOT_FOUND"
        elif version != draft.version:
            expected_code = "STALE_DRAFT_VERSION"
        elif (made := self.made.get((draft.id, version))) is not None:
            # the version made a task already (another key): that task, no second one (seed 000 §6.3)
            assert error is None, f"a confirmed version must replay its task, got {error!r}"
            assert (created.task_id, created.replayed) == (made, True) and after == before
            event("confirm: version replayed")
            return
        elif draft.decisions.get(version) != "APPROVED":
            other = version not in draft.decisions and draft.ever_approved
            expected_code = "APPROVAL_VERSION_MISMATCH" if other else "APPROVAL_REQUIRED"
        if expected_code is not None:
            assert error is not None and error.code == expected_code, (expected_code, error)
            assert after == before
            event(f"confirm: {expected_code}")
            return
        assert error is None, f"expected a new task, got {error!r}"
        assert created.replayed is False and created.status == S.CREATED and created.version == 0
        assert after == before + 1
        self.keys[(user, key)] = KeyUse(created.task_id, draft.id, version)
        self.made[(draft.id, version)] = created.task_id
        self.task_ids.append(created.task_id)
        event("confirm: created")

    @rule(pick=st.integers(0, 63), wrong_user=st.sampled_from([False, False, False, True]))
    def cancel(self, pick: int, wrong_user: bool) -> None:
        if not self.task_ids:
            return
        task_id = self.task_ids[pick % len(self.task_ids)]
        owner = self._user_of(task_id)
        user = "operator-999" if wrong_user else owner
        before = self.rt.transact(lambda tx: fresh(tx, task_id))
        try:
            answer = self.rt.transact(lambda tx: request_cancel(tx, task_id, user))
        except DomainError as err:
            answer, error = None, err
        else:
            error = None
        status = S(before.status)
        if wrong_user:
            assert isinstance(error, NotFound) and error.code == "TASK_NOT_FOUND"
        elif status in (S.CREATED, S.QUEUED, S.VALIDATING, S.DISPATCH_FAILED):
            assert error is None and (answer.status, answer.version) == (S.CANCELLED, before.version + 1)
        elif status == S.EXECUTING:
            assert error is None and (answer.status, answer.version) == (S.CANCEL_PENDING, before.version + 1)
        elif status in (S.CANCEL_PENDING, S.CANCELLED):
            assert error is None and (answer.status, answer.version) == (status, before.version)
        else:
            assert isinstance(error, Conflict) and error.code == "TASK_NOT_CANCELLABLE", error
        if error is not None:
            after = self.rt.transact(lambda tx: fresh(tx, task_id))
            assert (after.status, after.version) == (before.status, before.version)

    @rule(pick=st.integers(0, 63), to=st.sampled_from(list(TaskStatus)), operator=st.booleans(),
          stale=st.sampled_from([False, False, False, True]))
    def random_transition(self, pick: int, to: TaskStatus, operator: bool, stale: bool) -> None:
        if not self.task_ids:
            return
        self._move(self.task_ids[pick % len(self.task_ids)], to, operator, stale)

    @rule(pick=st.integers(0, 63), choices=st.lists(st.integers(0, 7), min_size=1, max_size=6),
          operator=st.booleans())
    def legal_transitions(self, pick: int, choices: list[int], operator: bool) -> None:
        """A walk of moves the table allows, so that tasks get deep into their lifecycle."""
        if not self.task_ids:
            return
        task_id = self.task_ids[pick % len(self.task_ids)]
        for choice in choices:
            view = self.rt.transact(lambda tx: fresh(tx, task_id))
            allowed = SYSTEM_TRANSITIONS[view.status] | (OPERATOR_TRANSITIONS.get(view.status, frozenset())
                                                         if operator else frozenset())
            targets = [t for t in PROGRESS if t in allowed]
            if not targets:  # terminal (or MANUAL_REVIEW without an operator): any move must be refused
                self._move(task_id, PROGRESS[choice % len(PROGRESS)], operator, stale=False)
                return
            self._move(task_id, targets[choice] if choice < len(targets) else targets[0], operator, stale=False)

    def _move(self, task_id: str, to: TaskStatus, operator: bool, stale: bool) -> None:
        view = self.rt.transact(lambda tx: fresh(tx, task_id))
        used = view
        if stale:
            used = dataclasses.replace(view, version=view.version - 1 if view.version else view.version + 1)
        actor = "operator:alice" if operator else "dispatcher"
        try:
            v = self.rt.transact(lambda tx: transition(tx, used, to, actor=actor, action="TEST_MOVE",
                                                       operator=operator))
        except IllegalTransition:
            assert not is_legal(view.status, to, operator=operator)
            outcome = "illegal"
        except StaleWrite:
            assert stale and is_legal(view.status, to, operator=operator)
            outcome = "stale"
        else:
            assert not stale and is_legal(view.status, to, operator=operator)
            assert v == view.version + 1
            outcome = "moved"
        event(f"transition: {outcome}")
        after = self.rt.transact(lambda tx: fresh(tx, task_id))
        if outcome == "moved":
            assert (after.status, after.version) == (to, view.version + 1)
        else:
            assert (after.status, after.version) == (view.status, view.version)

    # ---------------------------------------------------------------- invariants

    @invariant()
    def one_task_per_user_key(self) -> None:
        if self.db is None:
            return
        tasks = self.db.all_tasks()
        per_key = Counter((t["user_id"], t["idempotency_key"]) for t in tasks)
        assert all(n == 1 for n in per_key.values()), per_key
        assert len(tasks) == len(self.keys)
        by_key = {(t["user_id"], t["idempotency_key"]): t for t in tasks}
        for uk, use in self.keys.items():
            t = by_key[uk]
            assert (str(t["id"]), str(t["draft_id"]), t["draft_version"]) == (
                use.task_id, use.draft_id, use.draft_version)

    @invariant()
    def audit_chains_are_legal_and_continuous(self) -> None:
        if self.db is None:
            return
        for t in self.db.all_tasks():
            chain = self.db.audit(t["id"])
            assert chain, f"task {t['id']} has no audit"
            first = chain[0]
            assert (first["from"], first["to"], first["from_version"], first["to_version"]) == (
                None, "CREATED", None, 0)
            assert first["action"] == "TASK_CREATED"
            for prev, cur in itertools.pairwise(chain):
                assert cur["from"] == prev["to"], (prev, cur)
                assert cur["from_version"] == prev["to_version"] and cur["to_version"] == cur["from_version"] + 1
                operator = str(cur["actor"]).startswith("operator:")
                assert is_legal(cur["from"], cur["to"], operator=operator), cur
            assert (t["status"], t["version"]) == (chain[-1]["to"], chain[-1]["to_version"])

    @invariant()
    def every_transition_has_one_outbox_event_of_its_version(self) -> None:
        if self.db is None:
            return
        for t in self.db.all_tasks():
            audit_versions = [a["to_version"] for a in self.db.audit(t["id"])]
            outbox = self.db.outbox(t["id"])
            assert sorted(o["task_version"] for o in outbox) == sorted(audit_versions)
            assert [o["event_type"] for o in outbox if o["task_version"] == 0] == [TASK_CREATED]

    @invariant()
    def terminal_tasks_never_change(self) -> None:
        if self.db is None:
            return
        counts: dict[str, int] = defaultdict(int)
        for t in self.db.all_tasks():
            tid = str(t["id"])
            if tid in self.frozen:
                assert (t["status"], t["version"]) == self.frozen[tid], f"terminal task {tid} changed"
            elif t["status"] in TERMINAL_VALUES:
                self.frozen[tid] = (t["status"], t["version"])
            if t["status"] == "COMPLETED":
                report = self.db.report(t["id"])
                assert report is not None and report["status"] == "PENDING"
            counts[t["status"]] += 1
        for status in counts:
            event(f"reached: {status}")


TestConfirmStateful = ConfirmMachine.TestCase
TestConfirmStateful.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
