"""What users do, written once: operators who draft, get approval, confirm (double clicks, same-key retries), poll
and cancel; attackers who send the bad requests of seed 000 §7.3; readers who poll snapshots.

A user is a generator (the project's sans-IO pattern, applied to clients). It yields:

- ``Request(process, cmd)``: one API command (reference.copilot.api); it receives the ``Reply`` (status 0: no answer
came, the
  connection reset, the outcome is unknown);
- ``Record(process, type, f, value)``: one history operation (invoke, ok, fail, info);
- ``Wait(seconds)``: think time, in scenario seconds (a driver on the real stack scales it by its time factor);
- ``Together(users)``: run sub-users concurrently (a double click); it receives their return values, in order.

Three thin drivers perform these: the simulation (systems.copilot.workload: the application layer in-process, as a
simulated process), HTTP (systems.copilot.stack_run: ``requests``), and Locust (systems/copilot/locustfile.py). One
retry rule (``call``) and one history writer (``Record``) for all of them; tests/core/test_user_model.py checks the
three produce the same operations for the same seed and answers.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from harness.history import FAIL, INFO, INVOKE, OK
from reference.copilot import api
from reference.copilot.api import Principal, Reply
from reference.copilot.services.drafts import Plan

APPROVER_ID = "approver-1"
APPROVER = Principal(APPROVER_ID, "approver")
SUPERVISOR_ID = "supervisor-1"
SUPERVISOR = Principal(SUPERVISOR_ID, "supervisor")
GOAL = "patrol the fire lanes"
RETRYABLE_STATUS = frozenset({0, 502, 503, 504})  # no answer, or the service said "try again"
TRACE_MARK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Request:
    process: str  # the user process sending it (crash points of role "api" name the request by it)
    cmd: api.Command


@dataclass(frozen=True)
class Record:
    process: str
    type: str
    f: str
    value: dict[str, Any]


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Together:
    users: tuple[Generator[Any, Any, Any], ...]


User = Generator[Any, Any, Any]


def operator_principal(user_id: str) -> Principal:
    return Principal(user_id, "operator")


def plan_json(plan: Plan) -> dict[str, Any]:
    return {"device_id": plan.device_id, "waypoints": plan.waypoints, "altitude_m": plan.altitude_m,
            "actions": plan.actions, "speed_mps": plan.speed_mps}


def no_answer(error: str = "CONNECTION_RESET", detail: str | None = None) -> Reply:
    """What a client knows when no answer came: nothing (status 0)."""
    return Reply(0, {"error": error, **({"detail": detail} if detail else {})})


def error_answer(reply: Reply) -> dict[str, Any]:
    """What the history keeps of an error answer: its code, its status, whether it was problem+json, whether it
    leaked a stack trace (I11)."""
    ctype = reply.headers.get("Content-Type", "")
    code = reply.code
    answer = {"code": "SERVICE_UNAVAILABLE" if reply.status == 503 else code or f"HTTP_{reply.status}",
              "status": reply.status, "structured": ctype.startswith("application/problem+json") and code is not None,
              "content_type": ctype, "trace": TRACE_MARK in json.dumps(reply.body, default=str)}
    # A refusal that names the task's status, and whether to try again (TASK_NOT_CANCELLABLE; invariant I35).
    answer.update({k: reply.body[k] for k in ("task_status", "retryable") if k in reply.body})
    return answer


def call(process: str, f: str, value: dict[str, Any], cmd: api.Command, rng: random.Random, *, attempts: int = 6,
         ok_extra: Callable[[Reply], dict[str, Any]] | None = None) -> Generator[Any, Any, Reply | None]:
    """One client operation: the request, recorded, retried with the same command (same idempotency key) while
    no answer came or the service asked for a retry, with exponential backoff. The successful reply, or None."""
    for attempt in range(attempts):
        v = {**value, "attempt": attempt}
        v["correlation_id"] = request_id(process, f, v)
        yield Record(process, INVOKE, f, v)
        reply: Reply = yield Request(process, in_request(cmd, v["correlation_id"]))
        if reply.ok:
            yield Record(process, OK, f, {**v, **(ok_extra(reply) if ok_extra else {})})
            return reply
        if reply.status == 0:
            yield Record(process, INFO, f, {**v, **reply.body})
        else:
            yield Record(process, FAIL, f, {**v, **error_answer(reply)})
            if reply.status not in RETRYABLE_STATUS:
                return None
        if attempt + 1 < attempts:
            yield Wait(rng.uniform(1.0, 2.0) * 2 ** min(attempt, 4))
    return None


def request_id(process: str, f: str, value: dict[str, Any]) -> str:
    """The client's correlation id of one request (X-Request-Id; seed 000 §7.3, I55): from who sends what, so a run's
    ids are the same in every shell and at every replay."""
    sent = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{process}.{f}.{value.get('attempt', 0)}.{sent}"


def in_request(cmd: api.Command, correlation_id: str) -> api.Command:
    """``cmd`` sent as the request ``correlation_id`` (its caller carries the id: the X-Request-Id header)."""
    caller: Principal = cmd.caller  # type: ignore[union-attr]  # every command a user sends has its caller
    return replace(cmd, caller=replace(caller, request_id=correlation_id))  # type: ignore[arg-type]


def _version_answered(reply: Reply) -> dict[str, Any]:
    """The draft version an answer names and its status (I54: only a READY version may become a task)."""
    return {"draft_version": reply.body.get("version"), "draft_status": reply.body.get("status")}


def _drafted(reply: Reply) -> dict[str, Any]:
    return {"draft_id": reply.body.get("id"), "replayed": reply.status == 200, **_version_answered(reply)}


def _created(reply: Reply) -> dict[str, Any]:
    return {"task_id": reply.body.get("task_id"), "replayed": reply.status == 200}


def _seen(reply: Reply) -> dict[str, Any]:
    return {"status": reply.body.get("status"), "version": reply.body.get("version")}


def _cancel_taken(reply: Reply) -> dict[str, Any]:
    """A cancel's answer: 202 took the cancel (its audit row carries the request's id); 200 a repeat, which writes
    nothing."""
    return {**_seen(reply), "replayed": reply.status == 200}


def run_blocking(user: User, request: Callable[[api.Command], Reply], record: Callable[[Record], None],
                 wait: Callable[[float], None], together: Callable[[list[User]], list[Any]]) -> Any:
    """Perform a user's steps with blocking calls (the HTTP and Locust drivers); returns what the user returns.
    ``together`` runs sub-users concurrently and returns their results in order."""
    answer: Any = None
    while True:
        try:
            step = user.send(answer)
        except StopIteration as stop:
            return stop.value
        answer = None
        if isinstance(step, Request):
            answer = request(step.cmd)
        elif isinstance(step, Record):
            record(step)
        elif isinstance(step, Wait):
            wait(max(0.0, step.seconds))
        elif isinstance(step, Together):
            answer = together(list(step.users))
        else:
            raise TypeError(f"unknown user step {step!r}")


# ------------------------------------------------------------------------------------------------ operators


@dataclass(frozen=True)
class OperatorPlan:
    """Everything an operator decided up front (drawn from the seed): what a driver needs to start it."""

    n: int | str  # unique in the run: names the user's process and its idempotency key
    user: str
    area: str
    plan: Plan
    confirm: bool
    clicks: int = 1  # concurrent confirms with one key: 2 for a double click, more for a same-key burst
    click_gap_s: float = 0.3  # 0: all clicks at once (a burst)
    think_s: float = 0.0  # reading the draft before confirming
    polls: int = 0  # snapshot reads after the confirm (the UI polling)
    cancel_after_s: float | None = None  # cancel part-way through the flight, if set
    cancel_clicks: int = 1
    attempts: int = 6
    seed: str = "1"
    rekey: bool = False  # confirm the version again afterwards with a new key (a client that lost its key)
    revised_plan: Plan | None = None  # revise the draft to this plan after confirming (the task keeps what it was)
    # The draft is made from the goal alone (GENERATING) and ``plan`` comes later from the planner (the revise that
    # stands in for the model's staged generation, seed 000 §4.2); an impatient client confirms the approved
    # GENERATING version first, refused DRAFT_NOT_READY, then the planned version.
    planned: bool = False


def operator(p: OperatorPlan, tasks: list[tuple[str, str]] | None = None) -> User:
    """Draft, approval by the approver, then (maybe) confirm, poll, cancel. Confirmed tasks go to ``tasks``
    (what readers read). Returns the task id, or None."""
    rng = random.Random(f"{p.seed}:user:{p.n}")
    proc, me = f"user-{p.n}", operator_principal(p.user)
    body = {"goal": GOAL, "area_id": p.area, "plan": None if p.planned else plan_json(p.plan)}
    draft_key = f"draft-{p.seed}-{p.n}"
    draft = yield from call(proc, "draft", {"user_id": p.user, "key": draft_key}, api.CreateDraft(me, body, draft_key),
                            rng, attempts=p.attempts, ok_extra=_drafted)
    if draft is None:
        return None
    draft_id = str(draft.body["id"])
    version = yield from version_to_confirm(p, proc, rng, draft_id, int(draft.body["version"]))
    if version is None:
        return None
    key = f"confirm-{p.seed}-{p.n}"
    if p.think_s:
        yield Wait(p.think_s)
    value = {"user_id": p.user, "key": key, "draft_id": draft_id, "draft_version": version}
    cmd = api.Confirm(me, draft_id, key, {"draft_version": version})

    def click(c: int) -> User:
        if c and p.click_gap_s:
            yield Wait(p.click_gap_s * c)
        reply = yield from call(f"{proc}.{c}", "confirm", value, cmd, random.Random(f"{p.seed}:user:{p.n}.{c}"),
                                attempts=p.attempts, ok_extra=_created)
        return None if reply is None else str(reply.body["task_id"])

    answers = yield Together(tuple(click(c) for c in range(p.clicks)))
    task_id = next((a for a in answers if a), None)
    if task_id is None:
        return None
    if tasks is not None:
        tasks.append((p.user, task_id))
    if p.rekey:
        again = f"{key}-again"
        yield from call(f"{proc}.again", "confirm", {**value, "key": again},
                        api.Confirm(me, draft_id, again, {"draft_version": version}),
                        random.Random(f"{p.seed}:user:{p.n}.again"), attempts=p.attempts, ok_extra=_created)
    if p.revised_plan is not None:
        yield from call(proc, "revise", {"user_id": p.user, "draft_id": draft_id},
                        api.ReviseDraft(me, draft_id, {"expected_version": version, "plan": plan_json(p.revised_plan)}),
                        random.Random(f"{p.seed}:user:{p.n}.revise"), attempts=p.attempts,
                        ok_extra=_version_answered)
    for _ in range(p.polls):
        yield Wait(rng.uniform(1.0, 4.0))
        yield from read(proc, p.user, task_id, rng)
    if p.cancel_after_s is not None:
        yield Wait(p.cancel_after_s)

        def cancel(c: int) -> User:
            if c:
                yield Wait(0.3 * c)
            yield from call(f"{proc}.cancel{c}", "cancel", {"user_id": p.user, "task_id": task_id},
                            api.Cancel(me, task_id), random.Random(f"{p.seed}:cancel:{p.n}.{c}"),
                            attempts=p.attempts, ok_extra=_cancel_taken)

        yield Together(tuple(cancel(c) for c in range(p.cancel_clicks)))
    return task_id


def version_to_confirm(p: OperatorPlan, proc: str, rng: random.Random, draft_id: str,
                       version: int) -> Generator[Any, Any, int | None]:
    """The draft approved by the approver; the version the operator confirms (a planned draft's: once planned), or
    None (no approval, or an operator who never confirms)."""
    approval = yield from call(proc, "approve", {"user_id": APPROVER.user_id, "draft_id": draft_id},
                               api.Approve(APPROVER, draft_id, {"draft_version": version, "decision": "approve"}),
                               rng, attempts=p.attempts)
    if approval is None or not p.confirm:
        return None
    return (yield from confirm_when_planned(p, proc, rng, draft_id, version)) if p.planned else version


def confirm_when_planned(p: OperatorPlan, proc: str, rng: random.Random, draft_id: str,
                         version: int) -> Generator[Any, Any, int | None]:
    """A planned draft (``p.planned``): the client confirms the approved version while it is still GENERATING (refused
    DRAFT_NOT_READY, nothing created); the planner writes the plan (a new version, READY) and the approver approves
    it. The version to confirm, or None."""
    me, value = operator_principal(p.user), {"user_id": p.user, "draft_id": draft_id, "draft_version": version}
    early = f"early-{p.seed}-{p.n}"
    yield from call(proc, "confirm", {**value, "key": early, "expect": ["DRAFT_NOT_READY"]},
                    api.Confirm(me, draft_id, early, {"draft_version": version}), rng, attempts=p.attempts,
                    ok_extra=_created)
    planned = yield from call(proc, "revise", {"user_id": p.user, "draft_id": draft_id},
                              api.ReviseDraft(me, draft_id, {"expected_version": version, "plan": plan_json(p.plan)}),
                              rng, attempts=p.attempts, ok_extra=_version_answered)
    if planned is None:
        return None
    version = int(planned.body["version"])
    approval = yield from call(proc, "approve", {"user_id": APPROVER.user_id, "draft_id": draft_id},
                               api.Approve(APPROVER, draft_id, {"draft_version": version, "decision": "approve"}),
                               rng, attempts=p.attempts)
    return None if approval is None else version


def read(process: str, user: str, task_id: str, rng: random.Random) -> Generator[Any, Any, Reply | None]:
    """One snapshot read, as its owner (not retried: the next poll is the retry)."""
    return (yield from call(process, "read", {"user_id": user, "task_id": task_id},
                            api.ReadTask(operator_principal(user), task_id), rng, attempts=1, ok_extra=_seen))


def reader(tasks: list[tuple[str, str]], rate_per_s: float, rng: random.Random,
           running: Callable[[], bool]) -> User:
    """Polls the snapshot of a random confirmed task, ``rate_per_s`` times a second, while ``running()``."""
    while running():
        yield Wait(rng.expovariate(rate_per_s))
        if tasks:
            user, task_id = tasks[rng.randrange(len(tasks))]
            yield from read("reader", user, task_id, rng)


# ------------------------------------------------------------------------------------------------ attackers

# Bad requests (seed 000 §7.3) -> the codes a correct backend refuses them with. Each is sent by an "attacker";
# its operations carry ``expect`` so the scenario checks the refusal.
BAD_REQUESTS: dict[str, tuple[str, ...]] = {
    "forbidden-area": ("FORBIDDEN_AREA",),  # S1: a draft in a site the user may not operate
    "forbidden-device": ("FORBIDDEN_DEVICE",),  # S1: a device the user may not fly
    "invalid-altitude": ("ALTITUDE_OUT_OF_RANGE",),  # S2: model-drafted parameters out of range
    "outside-area": ("COORDINATES_OUTSIDE_AREA",),  # S2: waypoints outside the site
    "unknown-action": ("UNKNOWN_ACTION",),  # S2
    "stale-draft-version": ("STALE_DRAFT_VERSION",),  # S3: confirm an old version of a revised draft
    "key-reuse": ("IDEMPOTENCY_KEY_REUSED",),  # S4: one key, another draft
    "approval-other-version": ("APPROVAL_VERSION_MISMATCH",),  # S6: approved v1, confirm v2
    "self-approval": ("SELF_APPROVAL",),  # S6: an operator who also holds the approver role approves their own draft
    # S1: another operator's task (its id learned somehow): read and cancel are refused as if it did not exist
    "foreign-task": ("TASK_NOT_FOUND",),
    # S9: the entries of the API's caches of answers (reference.copilot.api: the snapshot cache, the confirm dedup)
    # hit by a second user while they live: another operator reads a task its owner has just read (refused as S1's),
    # then confirms a draft of its own with the owner's Idempotency-Key (answered its own new task: keys are per user)
    "cache-neighbour": ("TASK_NOT_FOUND",),
}
NEEDS_A_VICTIM = ("foreign-task", "cache-neighbour")  # kinds whose victim is another operator than the attacker
BAD_DRAFTS = ("forbidden-area", "forbidden-device", "invalid-altitude", "outside-area", "unknown-action")


@dataclass(frozen=True)
class AttackPlan:
    n: int
    kind: str
    user: str
    area: str  # where the bad draft is made
    plan: Plan  # the bad draft's plan
    revised_plan: Plan  # S3/S6: the plan of the second version
    attempts: int = 6
    seed: str = "1"
    victim: str = ""  # foreign-task: the operator whose task (in ``area``, of ``plan``) the attacker goes after
    own_area: str = ""  # cache-neighbour: the attacker's own site (its draft there has ``revised_plan``)


@dataclass
class Fleet:
    """What users know of the site: areas (id, polygon), devices by area, operators (user, their area)."""

    areas: list[tuple[str, list[list[float]]]]
    devices_by_area: dict[str, list[str]]
    operators: list[tuple[str, str]]


def random_plan(rng: random.Random, fleet: Fleet, area_id: str) -> Plan:
    """A flight plan inside the area's square, with one of its devices."""
    (lat0, lon0), (lat1, lon1) = dict(fleet.areas)[area_id][0], dict(fleet.areas)[area_id][2]
    pts = [[round(rng.uniform(lat0 + 0.001, lat1 - 0.001), 6), round(rng.uniform(lon0 + 0.001, lon1 - 0.001), 6)]
           for _ in range(rng.randint(3, 8))]
    return Plan(device_id=rng.choice(fleet.devices_by_area[area_id]), waypoints=pts,
                altitude_m=float(rng.choice([40, 60, 80, 100])),
                actions=rng.sample(["photo", "video", "thermal_scan", "hover"], 2), speed_mps=8.0)


def bad_plan(rng: random.Random, fleet: Fleet, kind: str, user_area: str) -> tuple[str, Plan]:
    """(area, plan) of a bad draft of this kind, for an operator of ``user_area``."""
    other = next(a for a, _ in fleet.areas if a != user_area)
    plan = random_plan(rng, fleet, user_area)
    if kind == "forbidden-area":
        return other, random_plan(rng, fleet, other)
    if kind == "forbidden-device":
        return user_area, replace(plan, device_id=fleet.devices_by_area[other][0])
    if kind == "invalid-altitude":
        return user_area, replace(plan, altitude_m=5000.0)
    if kind == "outside-area":
        return user_area, replace(plan, waypoints=random_plan(rng, fleet, other).waypoints)
    if kind == "unknown-action":
        return user_area, replace(plan, actions=["self_destruct"])
    return user_area, plan


def attacker(a: AttackPlan, tasks: list[tuple[str, str]] | None = None) -> User:
    """One bad request of ``a.kind`` (with what it needs first: drafts, a revision, a first confirm)."""
    rng = random.Random(f"{a.seed}:attacker:{a.n}")
    proc, me = f"attacker-{a.n}", operator_principal(a.user)
    value = {"user_id": a.user, "kind": a.kind}
    expect = {"expect": list(BAD_REQUESTS[a.kind])}
    key = f"bad-{a.seed}-{a.n}"

    drafts = iter(range(1_000))

    def draft(val: dict[str, Any], who: Principal = me, area: str = a.area, plan: Plan = a.plan
              ) -> Generator[Any, Any, tuple[str, int] | None]:
        body = {"goal": GOAL, "area_id": area, "plan": plan_json(plan)}
        draft_key = f"bad-draft-{a.seed}-{a.n}-{next(drafts)}"
        d = yield from call(proc, "draft", {**val, "key": draft_key}, api.CreateDraft(who, body, draft_key), rng,
                            attempts=a.attempts, ok_extra=_drafted)
        if d is None:
            return None
        draft_id, version = str(d.body["id"]), int(d.body["version"])
        if "expect" not in val:
            ok = yield from call(proc, "approve", {"user_id": APPROVER.user_id, "draft_id": draft_id},
                                 api.Approve(APPROVER, draft_id, {"draft_version": version, "decision": "approve"}),
                                 rng, attempts=a.attempts)
            if ok is None:
                return None
        return draft_id, version

    def confirm(draft_id: str, version: int, val: dict[str, Any], who: Principal = me
                ) -> Generator[Any, Any, Reply | None]:
        return (yield from call(proc, "confirm", {**val, "key": key, "draft_id": draft_id, "draft_version": version},
                                api.Confirm(who, draft_id, key, {"draft_version": version}), rng,
                                attempts=a.attempts, ok_extra=_created))

    if a.kind in BAD_DRAFTS:
        yield from draft({**value, **expect})
    elif a.kind in ("stale-draft-version", "approval-other-version"):
        yield from confirm_after_revising(a, proc, rng, draft, confirm)
    elif a.kind == "self-approval":
        yield from self_approval(a, proc, rng)
    elif a.kind == "foreign-task":
        # The victim drafts, gets approval and confirms as any operator does; then the attacker, another operator,
        # reads the victim's task and asks to cancel it. Both must be refused, and the task flies on.
        victim = operator_principal(a.victim)
        them = {"user_id": a.victim}
        d = yield from draft(them, victim)
        c = None if d is None else (yield from confirm(*d, them, victim))
        if c is None:
            return
        task_id = str(c.body["task_id"])
        yield from call(proc, "read", {**value, **expect, "task_id": task_id}, api.ReadTask(me, task_id), rng,
                        attempts=1)
        yield from call(proc, "cancel", {**value, **expect, "task_id": task_id}, api.Cancel(me, task_id), rng,
                        attempts=a.attempts)
    elif a.kind == "cache-neighbour":
        yield from cache_neighbour(a, proc, rng, draft, confirm)
    elif a.kind == "key-reuse":
        first = yield from draft(value)
        second = yield from draft(value)
        if first and second and (yield from confirm(*first, value)):
            yield from confirm(*second, {**value, **expect})


def confirm_after_revising(a: AttackPlan, proc: str, rng: random.Random, draft: Callable[..., User],
                           confirm: Callable[..., User]) -> User:
    """S3 and S6: an approved draft revised, then confirmed at its old version (stale-draft-version) or at the new
    one, which no approval covers (approval-other-version)."""
    value = {"user_id": a.user, "kind": a.kind}
    d = yield from draft(value)
    if d is None:
        return
    body = {"expected_version": d[1], "plan": plan_json(a.revised_plan)}
    revised = yield from call(proc, "revise", {**value, "draft_id": d[0]},
                              api.ReviseDraft(operator_principal(a.user), d[0], body), rng, attempts=a.attempts,
                              ok_extra=_version_answered)
    if revised is not None:
        version = d[1] if a.kind == "stale-draft-version" else int(revised.body["version"])
        yield from confirm(d[0], version, {**value, "expect": list(BAD_REQUESTS[a.kind])})


def self_approval(a: AttackPlan, proc: str, rng: random.Random) -> User:
    """S6: an operator who also holds the approver role drafts in their own site and approves the draft themself
    (refused: SELF_APPROVAL; I49 judges that no such approval was stored)."""
    value = {"user_id": a.user, "kind": a.kind}
    body = {"goal": GOAL, "area_id": a.area, "plan": plan_json(a.plan)}
    draft_key = f"bad-draft-{a.seed}-{a.n}-0"
    d = yield from call(proc, "draft", {**value, "key": draft_key},
                        api.CreateDraft(operator_principal(a.user), body, draft_key), rng, attempts=a.attempts,
                        ok_extra=_drafted)
    if d is not None:
        draft_id, decision = str(d.body["id"]), {"draft_version": int(d.body["version"]), "decision": "approve"}
        yield from call(proc, "approve", {**value, "expect": list(BAD_REQUESTS[a.kind]), "draft_id": draft_id},
                        api.Approve(Principal(a.user, "approver"), draft_id, decision), rng, attempts=a.attempts)


def cache_neighbour(a: AttackPlan, proc: str, rng: random.Random, draft: Callable[..., User],
                    confirm: Callable[..., User]) -> User:
    """S9: the victim confirms and reads its task; at once (within both caches' lifetimes) another operator reads
    that task, refused as if it did not exist, and confirms an approved draft of its own with the victim's key,
    answered with its own new task (I15, I22 judge both answers)."""
    me, victim = operator_principal(a.user), operator_principal(a.victim)
    value = {"user_id": a.user, "kind": a.kind}
    mine = yield from draft(value, me, a.own_area, a.revised_plan)
    theirs = yield from draft({"user_id": a.victim}, victim)
    if mine is None or theirs is None:
        return
    c = yield from confirm(*theirs, {"user_id": a.victim}, victim)
    if c is None:
        return
    task_id = str(c.body["task_id"])
    yield from read(proc, a.victim, task_id, rng)
    yield from call(proc, "read", {**value, "expect": list(BAD_REQUESTS[a.kind]), "task_id": task_id},
                    api.ReadTask(me, task_id), rng, attempts=1)
    yield from confirm(*mine, {"user_id": a.user})


# ------------------------------------------------------------------------------------------------ schedule


@dataclass(frozen=True)
class Arrival:
    at: float  # scenario seconds after the start
    name: str
    start: Callable[[list[tuple[str, str]]], User]  # the user, given the list confirmed tasks go to


def schedule(spec: Any, fleet: Fleet, seed: int | str) -> list[Arrival]:
    """Every user of a scenario's workload (systems.copilot.workload.WorkloadSpec) with its start time, drawn from
    the seed alone: the same list for every driver."""
    rng = random.Random(f"{seed}:workload")
    arrivals: list[Arrival] = []
    drafts = round(spec.confirms * spec.drafts_per_confirm)
    to_confirm = set(rng.sample(range(drafts), spec.confirms)) if drafts else set()
    rekeyed = set(sorted(to_confirm)[:spec.rekeyed_confirms])
    revised = set(sorted(to_confirm)[:spec.revised_after_confirm])
    planned = set(sorted(to_confirm)[:spec.planned_drafts])
    t = 0.0
    for n in range(drafts):
        if spec.window_s > 0:
            t += rng.expovariate(drafts / spec.window_s)
        user, area = fleet.operators[rng.randrange(len(fleet.operators))]
        burst = spec.same_key_burst > 1
        clicks = spec.same_key_burst if burst else (2 if rng.random() < spec.double_click_ratio else 1)
        cancel = rng.random() < spec.cancel_ratio
        p = OperatorPlan(n=n, user=user, area=area, plan=random_plan(rng, fleet, area),
                         confirm=n in to_confirm, clicks=clicks, click_gap_s=0.0 if burst else 0.3,
                         think_s=rng.uniform(2.0, 20.0), polls=spec.polls_after_confirm,
                         cancel_after_s=rng.uniform(20.0, 60.0) if cancel else None,
                         cancel_clicks=spec.cancel_clicks, attempts=spec.confirm_retries, seed=str(seed),
                         rekey=n in rekeyed, planned=n in planned,
                         # its own generator: the other users' draws stay as they were
                         revised_plan=random_plan(random.Random(f"{seed}:revise:{n}"), fleet, area)
                         if n in revised else None)
        arrivals.append(Arrival(t, f"user-{n}", partial(operator, p)))
    for n, kind in enumerate(k for k in spec.bad_requests for _ in range(spec.bad_each)):
        user, area = fleet.operators[rng.randrange(len(fleet.operators))]
        bad_area, plan = bad_plan(rng, fleet, kind, area)
        victim = ""
        if kind in NEEDS_A_VICTIM:  # another operator is the victim, with a plan in their own site
            others = [o for o in fleet.operators if o[0] != user]
            victim, bad_area = others[rng.randrange(len(others))]
            plan = random_plan(rng, fleet, bad_area)
        a = AttackPlan(n=n, kind=kind, user=user, area=bad_area, plan=plan,
                       revised_plan=random_plan(rng, fleet, area), attempts=spec.confirm_retries,
                       seed=str(seed), victim=victim, own_area=area)
        arrivals.append(Arrival(rng.uniform(0.0, spec.window_s), f"attacker-{n}", partial(attacker, a)))
    arrivals.sort(key=lambda x: x.at)
    return arrivals

