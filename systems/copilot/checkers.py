"""Invariant checkers (docs/systems/copilot.md) over a history and a final state. Each names the offending task ids
and the operations of the history that concern them, and says how many items it examined, so that a
vacuous pass is visible."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right, insort
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harness.history import (
    AIRSPACE,
    FAIL,
    INFO,
    INVOKE,
    LOST_MESSAGE,
    NEMESIS,
    OK,
    REVOKE_APPROVAL,
    FaultWindow,
    History,
    Op,
)
from kernel.logs import DEFECT_NAMES
from kernel.runtime import ACK, LOOP_ENDED, PUBLISH
from reference.copilot.api import SNAPSHOT_CACHE_TTL_S
from reference.copilot.policy import Policy
from reference.copilot.runtime import PLATFORM_CALL_IN_TRANSACTION, RECORDED_PLATFORM_CALLS
from reference.copilot.services.dlq import BROKER_DLQ
from reference.copilot.services.drafts import (
    ALLOWED_ACTIONS,
    MAX_ACTIONS,
    MAX_SPEED_MPS,
    MAX_WAYPOINTS,
    MIN_ALTITUDE_M,
    MIN_SPEED_MPS,
)
from reference.copilot.services.outbox import CLAIM as OUTBOX_CLAIM
from reference.copilot.services.outbox import MARK_SENT as OUTBOX_MARK_SENT
from reference.copilot.services.outbox import RELEASE as OUTBOX_RELEASE
from reference.copilot.services.security import SECURITY_CODES
from reference.copilot.states import TERMINAL, TaskStatus, is_legal
from reference.copilot.topology import Topology
from scenarios.verdicts import Invariants, Verdict, Violation, judged, unchecked
from simulator.model import CREATE_REJECTIONS, PLATFORM_CAPABILITIES
from systems.copilot.state import SETTLED, FinalState, epoch


@dataclass
class CheckContext:
    history: History
    state: FinalState
    recovery_bound_s: float = 600.0
    policy: Policy = field(default_factory=Policy)  # the reference's limits in this run (retries, deliveries)
    # Whether the fast path's latency is the harness's to model (the simulation, in virtual time, its thresholds far
    # above that latency): then a task no fault touched must never need the reconciler (I25). On a real stack the
    # latency is the machine's and the stack's thresholds are tight on purpose (STACK_POLICY): not judged there.
    fast_path_modelled: bool = False
    # The longest a platform call may take in this shell: its client's connect and read timeouts (the real stack's
    # adapter, reference/copilot/adapters/platform_http.py). None where the shell applies the timeout itself (the
    # simulation: CopilotLatency.client_timeout_s), so no history of it can show a call without one (I56).
    platform_call_limit_s: float | None = None
    _by_task: dict[str, list[Op]] | None = field(default=None, repr=False)

    def ops_for_task(self, task_id: str, fs: tuple[str, ...] | None = None) -> list[int]:
        """The operations that name the task (at most 20): where a reader of a violation should look."""
        if self._by_task is None:
            self._by_task = defaultdict(list)
            for op in self.history.ops:
                tid = op.value.get("task_id")
                if tid is not None:
                    self._by_task[tid].append(op)
        return [op.index for op in self._by_task.get(task_id, ()) if fs is None or op.f in fs][:20]


def check_i1(ctx: CheckContext) -> Verdict:
    flights: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in ctx.state.ledger:
        flights[str(f.get("reference"))].append(f)
    bad = [Violation(ref, f"{len(fs)} platform flights for one task: "
                     + ", ".join(str(f["external_id"]) for f in fs), ctx.ops_for_task(ref))
           for ref, fs in sorted(flights.items()) if len(fs) > 1]
    return judged(len(flights), bad)


def _confirm_answers(history: History) -> list[Op]:
    return [op for op in history.ops if op.f == "confirm" and op.type == OK]


def check_i2(ctx: CheckContext) -> Verdict:
    bad: list[Violation] = []
    by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in ctx.state.tasks:
        by_key[(t["user_id"], t["idempotency_key"])].append(t["id"])
    for (user, key), ids in sorted(by_key.items()):
        if len(ids) > 1:
            ops = sorted({i for tid in ids for i in ctx.ops_for_task(tid)})
            bad.append(Violation(ids[0], f"{len(ids)} tasks for user {user} key {key}: {', '.join(ids)}", ops))
    answers: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for op in _confirm_answers(ctx.history):
        answers[(op.value.get("user_id", ""), op.value.get("key", ""))][op.value.get("task_id", "")].append(op.index)
    for (user, key), named in sorted(answers.items()):
        if len(named) > 1:
            ops = sorted(i for idx in named.values() for i in idx)
            bad.append(Violation(sorted(named)[0], f"confirms with key {key} of {user} were answered with "
                                 f"{len(named)} different tasks", ops))
    return judged(len(by_key), bad)


def check_i3(ctx: CheckContext) -> Verdict:
    tasks = {t["id"]: t for t in ctx.state.tasks}
    last_change: dict[str, float] = {}
    for a in ctx.state.audit:
        if a["task_id"]:
            last_change[a["task_id"]] = a["at"]
    bad: list[Violation] = []
    confirmed: dict[str, list[int]] = defaultdict(list)
    for op in _confirm_answers(ctx.history):
        confirmed[op.value["task_id"]].append(op.index)
    for tid, ops in sorted(confirmed.items()):
        if tid not in tasks:
            bad.append(Violation(tid, "lost task: a confirm answered with this task, but it is not in the database",
                                 ops))
    flight_end: dict[str, float] = {}
    for f in ctx.state.ledger if ctx.state.ledger_clock_comparable else ():
        if f.get("ended_at") is not None:
            flight_end[str(f.get("reference"))] = max(flight_end.get(str(f.get("reference")), 0.0), f["ended_at"])
    for tid, t in sorted(tasks.items()):
        if t["status"] not in SETTLED:
            bad.append(Violation(tid, f"stuck in {t['status']} at the end of the run", ctx.ops_for_task(tid)))
            continue
        settled_rel = last_change.get(tid, t["updated_at"]) - ctx.state.t0
        # The clock starts when the system could settle the task: faults healed, task created, flight over.
        since = max(ctx.state.heal_time, t["created_at"] - ctx.state.t0,
                    flight_end.get(tid, ctx.state.t0) - ctx.state.t0)
        bound = since + ctx.recovery_bound_s
        if settled_rel > bound + 1e-6:
            bad.append(Violation(tid, f"settled at t={settled_rel:.1f}s, after the recovery bound t={bound:.1f}s",
                                 ctx.ops_for_task(tid)))
    return judged(len(tasks) + len(confirmed), bad,
                  note=f"bound {ctx.recovery_bound_s:.0f}s after the later of heal, creation and flight end")


def check_i4(ctx: CheckContext) -> Verdict:
    chains: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in ctx.state.audit:
        if a["task_id"] and a["to"] is not None:
            chains[a["task_id"]].append(a)
    tasks = {t["id"]: t for t in ctx.state.tasks}
    bad: list[Violation] = []
    for tid, chain in sorted(chains.items()):
        ops = ctx.ops_for_task(tid)
        first = chain[0]
        if first["from"] is not None or first["to"] != TaskStatus.CREATED or first["to_version"] != 0:
            bad.append(Violation(tid, f"history does not start with creation: audit #{first['id']}", ops))
            continue
        for prev, cur in zip(chain, chain[1:], strict=False):
            operator = str(cur["actor"]).startswith("operator:")
            if prev["to"] in {s.value for s in TERMINAL}:
                bad.append(Violation(tid, f"terminal task changed: {prev['to']} -> {cur['to']} "
                                     f"(audit #{cur['id']} {cur['action']})", ops))
            elif cur["from"] != prev["to"] or cur["from_version"] != prev["to_version"]:
                bad.append(Violation(tid, f"audit #{cur['id']} starts from {cur['from']}@v{cur['from_version']} but "
                                     f"the task was {prev['to']}@v{prev['to_version']} (lost update)", ops))
            elif cur["to_version"] != cur["from_version"] + 1:
                bad.append(Violation(tid, f"audit #{cur['id']} skips versions", ops))
            elif not is_legal(cur["from"], cur["to"], operator=operator):
                bad.append(Violation(tid, f"illegal transition {cur['from']} -> {cur['to']} "
                                     f"(audit #{cur['id']} {cur['action']} by {cur['actor']})", ops))
        task = tasks.get(tid)
        last = chain[-1]
        if task is not None and (task["status"] != last["to"] or task["version"] != last["to_version"]):
            bad.append(Violation(tid, f"task row is {task['status']}@v{task['version']} but its audit ends at "
                                 f"{last['to']}@v{last['to_version']}", ops))
    return judged(sum(len(c) for c in chains.values()), bad)


def check_i5(ctx: CheckContext) -> Verdict:
    tasks = {t["id"] for t in ctx.state.tasks}
    created_audit = {a["task_id"] for a in ctx.state.audit if a["task_id"] and a["to"] == TaskStatus.CREATED
                     and a["from"] is None}
    created_event = {o["task_id"] for o in ctx.state.outbox if o["event_type"] == "TaskCreated"}
    events_by_version = {(o["task_id"], o["task_version"]) for o in ctx.state.outbox}
    bad: list[Violation] = []
    for tid in sorted(tasks | created_audit | created_event):
        parts = {"task": tid in tasks, "creation audit": tid in created_audit,
                 "TaskCreated outbox": tid in created_event}
        if not all(parts.values()):
            have = [k for k, v in parts.items() if v]
            miss = [k for k, v in parts.items() if not v]
            bad.append(Violation(tid, f"half-written creation: has {', '.join(have)}; missing {', '.join(miss)}",
                                 ctx.ops_for_task(tid)))
    for a in ctx.state.audit:
        if a["task_id"] and a["to_version"] is not None and (a["task_id"], a["to_version"]) not in events_by_version:
            bad.append(Violation(a["task_id"], f"transition to {a['to']}@v{a['to_version']} (audit #{a['id']}) has no "
                                 "outbox event of the same version", ctx.ops_for_task(a["task_id"])))
    return judged(len(tasks | created_audit | created_event), bad)


def lost_messages(history: History) -> list[Op]:
    """The messages a consumer group lost: a stale consumer in it acked them unread (the stale-consumer fault), as
    the history records them."""
    return [op for op in history.ops if op.process == NEMESIS and op.f == LOST_MESSAGE]


# Which consumer must take which event type (reference.copilot.services.consumer.HANDLERS).
SUBSCRIBED = {"TaskCreated": "dispatcher", "TaskCancelRequested": "dispatcher", "TaskCompleted": "report-worker"}


def check_i6(ctx: CheckContext) -> Verdict:
    bad: list[Violation] = []
    processed = Counter((p["consumer"], p["event_id"]) for p in ctx.state.processed)
    dead = {(d["consumer"], d["event_id"]) for d in ctx.state.dead_letters}
    budget = ctx.policy.outbox_retry.attempts
    # Events a stale consumer acked unread (the stale-consumer fault): the group's live consumers never get them; the
    # reconciler must settle their tasks, which the other invariants check.
    lost = {(str(op.value["group"]), str(op.value["event_id"])) for op in lost_messages(ctx.history)}
    for o in ctx.state.outbox:
        if o["status"] == "DEAD":
            early = f"after only {o['attempts']} of the policy's {budget} attempts" if o["attempts"] < budget else (
                f"after {o['attempts']} attempts ({o['last_error']})")
            bad.append(Violation(o["task_id"], f"outbox event {o['event_type']} {o['id']} went DEAD {early} and was "
                                 "not re-driven: never published", ctx.ops_for_task(o["task_id"])))
            continue
        if o["status"] != "SENT":
            bad.append(Violation(o["task_id"], f"outbox event {o['event_type']} {o['id']} was never published",
                                 ctx.ops_for_task(o["task_id"])))
            continue
        consumer = SUBSCRIBED.get(o["event_type"])
        if consumer is None:
            continue
        n = processed[(consumer, o["id"])]
        if n == 0 and (consumer, o["id"]) not in dead and (consumer, str(o["id"])) not in lost:
            bad.append(Violation(o["task_id"], f"{o['event_type']} {o['id']} was published but {consumer} never "
                                 "took it (not processed, not dead-lettered)", ctx.ops_for_task(o["task_id"])))
        elif n > 1:
            bad.append(Violation(o["task_id"], f"{consumer} processed {o['event_type']} {o['id']} {n} times",
                                 ctx.ops_for_task(o["task_id"])))
    queued_from_created = Counter(a["task_id"] for a in ctx.state.audit
                                  if a["from"] == TaskStatus.CREATED and a["to"] == TaskStatus.QUEUED)
    for tid, n in sorted(queued_from_created.items()):
        if n > 1:
            bad.append(Violation(tid, f"TaskCreated took effect {n} times", ctx.ops_for_task(tid)))
    deliveries = Counter((op.value.get("group"), op.value.get("event_id")) for op in ctx.history.ops
                         if op.f == "deliver")
    redelivered = sum(1 for n in deliveries.values() if n > 1)
    return judged(len(ctx.state.outbox), bad, note=f"{redelivered} events were delivered more than once"
                    + (f"; {len(lost)} acked unread by a stale consumer" if lost else ""))


CANCEL_CONFIRMED = "CANCEL_CONFIRMED"  # the audit action of a cancel the platform confirmed (reference settle)


def check_i7(ctx: CheckContext) -> Verdict:
    flights = defaultdict(list)
    for f in ctx.state.ledger:
        flights[str(f.get("reference"))].append(f)
    cancelled_at: dict[str, float] = {}
    bad: list[Violation] = []
    for a in ctx.state.audit:
        if a["task_id"] and a["to"] == TaskStatus.CANCELLED:
            cancelled_at[a["task_id"]] = a["at"]
            # Once a flight exists (CANCEL_PENDING), only the platform's confirmation may cancel the task:
            # the audit names it, whatever the clocks say.
            if a["from"] == TaskStatus.CANCEL_PENDING and a.get("action") != CANCEL_CONFIRMED:
                bad.append(Violation(a["task_id"], f"CANCEL_PENDING -> CANCELLED by {a.get('action')!r} "
                                     f"({a.get('actor')}), not by the platform's confirmation",
                                     ctx.ops_for_task(a["task_id"])))
    for t in ctx.state.tasks:
        if t["status"] != TaskStatus.CANCELLED:
            continue
        tid = t["id"]
        for f in flights.get(tid, []):
            if f.get("status") != "CANCELLED" or f.get("cancelled_at") is None:
                bad.append(Violation(tid, f"task CANCELLED but flight {f['external_id']} is {f.get('status')} on the "
                                     "platform", ctx.ops_for_task(tid)))
            elif (ctx.state.ledger_clock_comparable
                  and f["cancelled_at"] > cancelled_at.get(tid, float("inf")) + 1e-6):
                bad.append(Violation(tid, f"task CANCELLED at {cancelled_at[tid]:.1f} before the platform confirmed "
                                     f"at {f['cancelled_at']:.1f}", ctx.ops_for_task(tid)))
    note = "" if ctx.state.ledger_clock_comparable else \
        "the platform's clock is scaled: checked the flight was cancelled and the audit names the platform's "\
        "confirmation, not the order of the two clocks"
    return judged(sum(1 for t in ctx.state.tasks if t["status"] == TaskStatus.CANCELLED), bad, note)


def check_i8(ctx: CheckContext) -> Verdict:
    reports = {r["task_id"]: r for r in ctx.state.reports}
    bad: list[Violation] = []
    completed = [t for t in ctx.state.tasks if t["status"] == TaskStatus.COMPLETED]
    for t in completed:
        r = reports.get(t["id"])
        if r is None:
            bad.append(Violation(t["id"], "COMPLETED without a report record", ctx.ops_for_task(t["id"])))
        elif r["status"] == "DEAD":
            budget = ctx.policy.report_retry.attempts
            early = f" after only {r['attempts']} of the policy's {budget} attempts" if r["attempts"] < budget else ""
            bad.append(Violation(t["id"], f"report went DEAD{early} (last error {r['last_error']}) and was not "
                                 "re-driven", ctx.ops_for_task(t["id"])))
        elif r["status"] != "UPLOADED":
            bad.append(Violation(t["id"], f"report is {r['status']} after recovery (attempts {r['attempts']}, "
                                 f"last error {r['last_error']})", ctx.ops_for_task(t["id"])))
        elif ctx.state.objects.get(r["object_key"]) != r["sha256"]:
            bad.append(Violation(t["id"], f"report {r['object_key']} marked UPLOADED but the object store has "
                                 + ("no such object" if r["object_key"] not in ctx.state.objects
                                    else "different content"), ctx.ops_for_task(t["id"])))
    return judged(len(completed), bad)


def check_i9(ctx: CheckContext) -> Verdict:
    """Telemetry never moves a task backwards (status: I4's terminal rule; progress: the task keeps the
    highest sequence it ever stored); each alert takes effect once (count == distinct alerts stored); and an event
    of the flight a task knows as its own (or, before its write-back, knows none) is stored as the task's, not as an
    orphan whose alerts and progress no task counts (the platform's ledger names the task a flight was made for).
    Where the harness saw the webhook's answers (the simulation), they count what was stored: the events taken as
    new are the rows stored, those and the duplicates are what was sent, the orphans are the rows with no task. A
    batch left unanswered may have been stored all the same (the API killed after its commit; the platform sends it
    again and hears "duplicates"): then the answers may count fewer rows than were stored, never more."""
    bad: list[Violation] = []
    answers = ctx.state.webhook_answers
    if answers is not None:
        stored, orphans = ctx.state.event_arrivals.get("stored", 0), sum(ctx.state.orphan_events.values())
        unanswered = bool(answers.get("unanswered"))
        told = [  # (what the answers summed, their sum, the truth, what the truth counts, may they count fewer?)
            ("accepted", answers["accepted"], stored, "events were stored", unanswered),
            ("accepted + duplicates", answers["accepted"] + answers["duplicates"], answers["sent"],
             "events were sent", False),
            ("orphans", answers["orphans"], orphans, "events were stored with no task", unanswered)]
        for what, said, truth, counted, may_undercount in told:
            if said > truth or (said < truth and not may_undercount):
                bad.append(Violation(None, f"the webhook's answers summed {what} {said}, but {truth} {counted}", []))
    made_for = {f["external_id"]: f.get("reference") for f in ctx.state.ledger}
    flight_of = {t["id"]: t["external_task_id"] for t in ctx.state.tasks}
    for ext, n in sorted(ctx.state.orphan_events.items()):
        tid = made_for.get(ext)
        if tid is not None and tid in flight_of and flight_of[tid] in (None, ext):
            bad.append(Violation(tid, f"{n} events of its flight {ext} stored with no task", ctx.ops_for_task(tid)))
    for t in ctx.state.tasks:
        tid = t["id"]
        stored_alerts = ctx.state.alert_events.get(tid, 0)
        if t["alert_count"] != stored_alerts:
            bad.append(Violation(tid, f"alert_count {t['alert_count']} but {stored_alerts} distinct alerts stored",
                                 ctx.ops_for_task(tid)))
        top = ctx.state.telemetry_max_seq.get(tid, 0)
        if t["last_telemetry_seq"] != top:
            bad.append(Violation(tid, f"last_telemetry_seq {t['last_telemetry_seq']} but the highest telemetry "
                                 f"sequence stored is {top}", ctx.ops_for_task(tid)))
    return judged(len(ctx.state.tasks), bad)


REDIS_FAULTS = frozenset({"redis-loss"})


def check_i10(ctx: CheckContext) -> Verdict:
    """No outcome depends on Redis: while Redis is flushed or down, no client request fails for it (the
    other invariants, checked on the same run, say that the outcomes themselves held)."""
    windows = [w for w in ctx.history.fault_windows() if w.fault in REDIS_FAULTS]
    if not windows:
        return unchecked("no Redis fault in this run")
    # A request that failed while another fault was on (the database down, a killed API) may have failed for
    # that: it says nothing about Redis (found by `sortie explore`: a database outage overlapping a Redis loss).
    others = [w for w in ctx.history.fault_windows() if w.fault not in REDIS_FAULTS]

    def during(ws: list[Any], t: float) -> bool:
        return any(w.start <= t <= (w.end if w.end is not None else float("inf")) + 5.0 for w in ws)

    bad: list[Violation] = []
    checked = confounded = 0
    for op in ctx.history.ops:
        if not op.process.startswith("user") or op.type not in (OK, "fail"):
            continue
        if not during(windows, op.time):
            continue
        if op.type == "fail" and during(others, op.time):
            confounded += 1
            continue
        checked += 1
        if op.type == "fail" and int(op.value.get("status", 0)) >= 500:
            bad.append(Violation(op.value.get("task_id"), f"{op.f} failed with {op.value.get('code')} while Redis "
                                 "was lost", [op.index]))
    verdict = judged(checked, bad)
    if confounded:
        verdict.note = (verdict.note + "; " if verdict.note else "") + \
            f"{confounded} failed request(s) not counted: another fault was on at the time"
    return verdict


STABLE_CODE = re.compile(r"^[A-Z][A-Z0-9_]{2,63}$")
CLIENTS = ("user", "reader", "attacker", "stream")


def check_i11(ctx: CheckContext) -> Verdict:
    """Every error answer a client got is structured (problem+json where HTTP is involved) with a stable
    code and no stack trace; and a refused create wrote nothing: a key none of whose confirms succeeded
    (all refused, none unknown) has no task."""
    bad: list[Violation] = []
    checked = 0
    outcomes: dict[tuple[str | None, str], set[str]] = defaultdict(set)  # (user, key): an answer may name no user
    for op in ctx.history.ops:
        if not op.process.startswith(CLIENTS):
            continue
        if op.f == "confirm" and op.type != "invoke" and op.value.get("key"):
            outcomes[(op.value.get("user_id"), op.value["key"])].add(op.type)
        if op.type != "fail":
            continue
        checked += 1
        code = op.value.get("code")
        if not isinstance(code, str) or not STABLE_CODE.match(code):
            bad.append(Violation(op.value.get("task_id"), f"{op.f} answered without a stable code: {code!r}",
                                 [op.index]))
        if op.value.get("structured") is False:
            bad.append(Violation(op.value.get("task_id"), f"{op.f} error answer is not problem+json "
                                 f"(content type {op.value.get('content_type')!r})", [op.index]))
        if op.value.get("trace"):
            bad.append(Violation(op.value.get("task_id"), f"{op.f} error answer carries a stack trace", [op.index]))
    tasks_by_key = {(t["user_id"], t["idempotency_key"]): t["id"] for t in ctx.state.tasks}
    for (user, key), types in outcomes.items():
        if types == {"fail"}:
            checked += 1
            tid = tasks_by_key.get((user, key))
            if tid is not None:
                bad.append(Violation(tid, f"every confirm with key {key} was refused, yet task {tid} exists "
                                     "(a partial write)", ctx.ops_for_task(tid)))
    return judged(checked, bad)


def task_agrees_with_its_flight(ctx: CheckContext) -> Verdict:
    """I18: a terminal task tells what the platform says happened: COMPLETED only if its flight completed,
    FAILED never when its flight completed (the platform's ledger is the ground truth, seed 000 §7.2)."""
    flights: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in ctx.state.ledger:
        flights[str(f.get("reference"))].append(f)
    bad: list[Violation] = []
    checked = 0
    for t in ctx.state.tasks:
        tid, status = t["id"], t["status"]
        completed = [f["external_id"] for f in flights.get(tid, []) if f.get("status") == "COMPLETED"]
        if status == TaskStatus.COMPLETED:
            checked += 1
            if not completed:
                bad.append(Violation(tid, "task COMPLETED but no flight of it completed on the platform ("
                                     + (", ".join(f"{f['external_id']} {f.get('status')}" for f in flights[tid])
                                        or "no flight") + ")", ctx.ops_for_task(tid)))
        elif status == TaskStatus.FAILED:
            checked += 1
            if completed:
                bad.append(Violation(tid, f"task FAILED but its flight {completed[0]} COMPLETED on the platform",
                                     ctx.ops_for_task(tid)))
    return judged(checked, bad)


RETRIED_CALLS = ("create_flight", "get_device", "cancel_flight")


def retries_bounded_and_spaced(ctx: CheckContext) -> Verdict:
    """I19: one call is tried at most ``platform_retry.attempts`` times, and try n+1 starts no sooner than
    the policy's backoff floor after try n answered (seed 000 §5.5: bounded retries with backoff). Where the harness
    models the fast path's latency (the simulation), also no later than the whole backoff step after the process's
    last platform answer (try n's, or the query that followed it): a retry waits as the policy says, not longer
    (mutation testing, 2026-12-05: backoffs one step too long were green everywhere). A process paused, held or killed
    in between is not judged from above; on a real stack the machine's scheduling is not the policy's to bound."""
    retry = ctx.policy.platform_retry
    last_answer: dict[tuple[str, str, Any], tuple[int, float, int]] = {}  # (process, f, task) -> (try, t, op)
    answered_at: dict[str, tuple[float, int]] = {}  # process -> its last platform answer (time, op)
    stopped: set[str] = set()  # processes paused, held or killed since their last answer
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.process == NEMESIS and op.f in ("pause", "hold", "kill"):
            stopped.add(str(op.value.get("process")))
            continue
        if op.f in RECORDED_PLATFORM_CALLS and op.type != INVOKE:
            answered_at[op.process] = (op.time, op.index)
            stopped.discard(op.process)
        if op.f not in RETRIED_CALLS or "try" not in op.value:
            continue
        n = int(op.value["try"])
        key = (op.process, op.f, op.value.get("task_id"))
        if op.type != "invoke":
            last_answer[key] = (n, op.time, op.index)
            continue
        checked += 1
        tid = op.value.get("task_id")
        if n >= retry.attempts:
            bad.append(Violation(tid, f"{op.process} tried {op.f} a {n + 1}th time (policy: at most "
                                 f"{retry.attempts})", [op.index]))
        prev = last_answer.get(key)
        if n >= 1 and prev is not None and prev[0] == n - 1:
            floor = retry.min_delay(n - 1)
            if op.time - prev[1] < floor - 1e-6:
                bad.append(Violation(tid, f"{op.process} retried {op.f} {op.time - prev[1]:.3f}s after the failed "
                                     f"try (policy: at least {floor:.3f}s)", [prev[2], op.index]))
            last = answered_at.get(op.process)
            ceiling = retry.max_delay(n - 1)
            if (ctx.fast_path_modelled and last is not None and op.process not in stopped
                    and op.time - last[0] > ceiling + 1e-6):
                bad.append(Violation(tid, f"{op.process} retried {op.f} {op.time - last[0]:.3f}s after its last "
                                     f"platform answer (policy: at most {ceiling:.3f}s)", [last[1], op.index]))
    note = f"at most {retry.attempts} tries; try n+1 at least min(cap, base*2^n)/2 after try n"
    note += (", and at most min(cap, base*2^n) after the process's last platform answer" if ctx.fast_path_modelled
             else "; not bounded from above on this shell (its scheduling is the machine's)")
    return judged(checked, bad, note=note)


def outbox_backs_off(ctx: CheckContext) -> Verdict:
    """I30: an outbox row backs off a broker that refuses it, and its budget lasts as its policy says (seed 000 §5.5;
    the seed's "close RocketMQ, the outbox still holds the event" must hold for any outage shorter than the budget).
    From the publishes both shells record and the rows' budget audits:
    - a row's next publish after its n-th refused one waits at least ``outbox_retry.min_delay(n - 1)`` (its claims
      are at least its refused publishes; a re-drive gives it a fresh budget);
    - a row goes DEAD with exactly ``outbox_retry.attempts`` claims, and no sooner than the shortest time those
      claims can take, sum(min_delay(n) for n < attempts - 1), after it was written or last re-driven.
    Mutation testing (2026-12-06) found no check of the publishers' backoff; building this one found that a row's
    backoff came from its publisher's failed rounds, which any empty claim reset: a 20-minute outage sent rows DEAD
    that the policy promised an hour. (A publisher's own pause, and the rows' waits from above: I37 and I36.)"""
    retry = ctx.policy.outbox_retry
    refused: dict[str, int] = defaultdict(int)  # event id -> refused publishes since written or re-driven
    row_refusal: dict[str, tuple[float, int]] = {}  # event id -> (time, op) of its last refusal
    # A publisher stopped (paused, or held in a transaction) may publish what it claimed before another publisher's
    # refusal once it goes on: its lease ran out meanwhile. Until its next refusal ends that round, or a lease after it
    # went on, its publishes are not judged by the rows' backoff.
    stale_until: dict[str, float] = {}
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.process == NEMESIS and op.f in ("pause", "hold"):
            stale_until[str(op.value.get("process"))] = (op.time + float(op.value.get("seconds") or 0.0)
                                                         + ctx.policy.outbox_lease_s)
            continue
        # From the re-drive's invoke: the row may be published again before the supervisor hears back.
        if op.f == "redrive" and op.value.get("kind") == "outbox":
            event_id = str(op.value.get("id"))
            refused.pop(event_id, None)
            row_refusal.pop(event_id, None)
            continue
        if op.f != PUBLISH:
            continue
        event_id, tid = str(op.value.get("event_id")), op.value.get("task_id")
        if op.type == FAIL:
            stale_until.pop(op.process, None)
            refused[event_id] += 1
            row_refusal[event_id] = (op.time, op.index)
        elif op.type == INVOKE:
            row_last = row_refusal.pop(event_id, None)
            if row_last is not None and stale_until.get(op.process, -1.0) < op.time:
                checked += 1
                floor = retry.min_delay(refused[event_id] - 1)
                if op.time - row_last[0] < floor - 1e-6:
                    bad.append(Violation(tid, f"outbox event {event_id} published again {op.time - row_last[0]:.3f}s "
                                         f"after it was refused {refused[event_id]} time(s) (policy: at least "
                                         f"{floor:.3f}s)", [row_last[1], op.index]))
    t0 = ctx.state.t0
    written = {o["id"]: (o["created_at"] - t0, o["task_id"]) for o in ctx.state.outbox}
    shortest = sum(retry.min_delay(n) for n in range(retry.attempts - 1))
    since_of: dict[str, float] = {}  # event id -> its last re-drive, in the audit's order (the database's clock)
    for audit in ctx.state.outbox_budget:
        event_id = audit["event_id"]
        if event_id not in written:
            continue
        if audit["action"] == "OUTBOX_REDRIVEN":
            since_of[event_id] = audit["at"] - t0
            continue
        checked += 1
        at = audit["at"] - t0
        since = since_of.get(event_id, written[event_id][0])
        tid = written[event_id][1]
        if audit["attempts"] != retry.attempts:
            bad.append(Violation(tid, f"outbox event {event_id} went DEAD after {audit['attempts']} claims (policy: "
                                 f"{retry.attempts})", ctx.ops_for_task(tid)))
        if at - since < shortest - 1e-6:
            bad.append(Violation(tid, f"outbox event {event_id} went DEAD {at - since:.1f}s after it was written or "
                                 f"re-driven (policy: {retry.attempts} claims take at least {shortest:.1f}s)",
                                 ctx.ops_for_task(tid)))
    return judged(checked, bad, note=f"a row's retry n at least min({retry.cap_s}, {retry.base_s}*2^n)/2; DEAD "
                    f"after {retry.attempts} claims, no sooner than {shortest:.1f}s")


# The alert an item gone DEAD raises (as its audit action is named), and the field it names the item by.
DEAD_ALERT_ITEM = {"OUTBOX_DEAD": "event_id", "REPORT_DEAD": "task_id", "DEAD_LETTER": "event_id"}
# A writer killed between its commit and its alert leaves the DEAD item unannounced (the audit row is the durable
# record; the alert is a page, raised once after the commit): excused within this long of the item's DEAD audit.
ALERT_AFTER_COMMIT_S = 5.0


def _dead_letter_deaths(ctx: CheckContext) -> list[tuple[str, str, str, float]]:
    """Each time a consumer dead-lettered a message: once, and once more for each re-drive after which it failed to
    its limit again (the row is kept, its re-drive mark cleared). Timed by its last recorded failure."""
    deaths = []
    for d in ctx.state.dead_letters:
        failures = [f["at"] for f in d.get("history") or [] if f.get("at")]
        at = (epoch(datetime.fromisoformat(failures[-1])) if failures else d["created_at"]) or ctx.state.t0
        times = d["redrive_count"] + (0 if d["redriven"] else 1)
        deaths += [("DEAD_LETTER", str(d["event_id"]), str(d["consumer"]), at - ctx.state.t0)] * times
    return deaths


def every_dead_item_alerts_an_operator(ctx: CheckContext) -> Verdict:
    """I31: an item that went DEAD after its retries (an outbox event, a report, a consumer's dead letter) pages an
    operator once, and nothing else does: one alert per DEAD audit or dead-lettering, naming the item (seed 000 §5.5:
    what outlives its retry policy goes to dead-letter handling "供人工排查", for a person to look into).
    The simulation hears the alert records; the real stack's harness reads them in the components' logs. Mutation
    testing of outbox.py (2026-12-06) found the OUTBOX_DEAD alert could go unraised with everything green."""
    if ctx.state.alerts is None:
        return unchecked("this shell does not observe the components' alerts")
    raised = Counter((a["code"], a.get(DEAD_ALERT_ITEM[a["code"]])) for a in ctx.state.alerts
                     if a.get("code") in DEAD_ALERT_ITEM)
    deaths: list[tuple[str, str, str, float]] = []  # (alert code, item, writer role, history time)
    for a in ctx.state.outbox_budget:
        if a["action"] == "OUTBOX_DEAD":
            deaths.append(("OUTBOX_DEAD", a["event_id"], "publisher", a["at"] - ctx.state.t0))
    for a in ctx.state.audit:
        if a["action"] == "REPORT_DEAD":
            deaths.append(("REPORT_DEAD", str(a["task_id"]), "report", a["at"] - ctx.state.t0))
    deaths += _dead_letter_deaths(ctx)
    kills = [(op.time, str(op.value.get("process"))) for op in ctx.history.ops
             if op.process == NEMESIS and op.f == "kill"]
    task_of = {o["id"]: o["task_id"] for o in ctx.state.outbox}
    bad: list[Violation] = []
    for code, item, role, at in deaths:
        if raised[(code, item)] > 0:
            raised[(code, item)] -= 1
            continue
        if any(at - 1.0 <= t <= at + ALERT_AFTER_COMMIT_S and who.startswith(role) for t, who in kills):
            continue
        tid = task_of.get(item, item)
        what = {"OUTBOX_DEAD": "outbox event", "REPORT_DEAD": "the report of task"}.get(code, "dead letter of event")
        bad.append(Violation(tid, f"{what} {item} went DEAD at {at:.1f}s and no operator was alerted",
                             ctx.ops_for_task(tid)))
    for (code, named), left in sorted(raised.items()):
        if left > 0:
            about = task_of.get(named, named)  # None: the alert named no item, so no task's operations to read
            bad.append(Violation(about, f"{left} {code} alert(s) for {named}, which has no DEAD audit for them",
                                 ctx.ops_for_task(about) if about is not None else []))
    return judged(len(deaths), bad,
                  note=f"a writer killed within {ALERT_AFTER_COMMIT_S:g}s of the DEAD commit is excused")


IDLE_IN_TRANSACTION = "idle-in-transaction"  # the real stack's pg_stat_activity sample (systems.copilot.stack_run)


def no_platform_call_inside_a_transaction(ctx: CheckContext) -> Verdict:
    """I20: no database transaction is open across a platform call (seed 000: no lock held across external
    calls). Both shells record a ``platform-call-in-transaction`` operation when a platform call starts while
    the calling thread is inside a transaction (the simulation: inside a transaction's greenlet; the real
    stack: inside Runtime.transact, seen by Runtime.perform and by the HTTP platform client); each one is a
    violation. The longest ``idle in transaction`` the real stack's sampler saw during a slow-database
    window is reported in the note, as information: between two statements over a slow link a transaction
    is legitimately idle."""
    calls = 0
    bad: list[Violation] = []
    idle: list[Op] = []
    for op in ctx.history.ops:
        if op.type == INVOKE and op.f in RECORDED_PLATFORM_CALLS:
            calls += 1
        elif op.f == PLATFORM_CALL_IN_TRANSACTION:
            v = op.value
            bad.append(Violation(v.get("task_id"), f"{op.process} called the platform ({v.get('method')}) inside "
                                 f"the open transaction {v.get('transaction') or '(unnamed)'!r} "
                                 f"(seen by the {v.get('via', '?')})", [op.index]))
        elif op.f == IDLE_IN_TRANSACTION:
            idle.append(op)
    note = f"{calls} platform calls examined"
    if idle:
        top = max(idle, key=lambda op: float(op.value.get("max_idle_s", 0.0)))
        note += (f"; longest idle in transaction during the slow-database window: "
                 f"{float(top.value.get('max_idle_s', 0.0)):.2f}s ({top.value.get('application') or 'pid'} "
                 f"{top.value.get('pid')}), {len(idle)} connections seen idle in a transaction (information)")
    return judged(max(calls, len(bad)), bad, note)


# ---------------------------------------------------------------------------------------------- security gates
# Seed 000 §7.3: a user operates only permitted devices and areas; the pre-dispatch recheck of airspace and of
# the approval bound to the confirmed draft version. The recheck runs in the transaction that writes the
# DISPATCH_STARTED audit row (VALIDATING -> DISPATCHING), so that row's time is "dispatch time". Its `at` is
# the transaction's start, and the checks read later, no later than the flight request that follows: each
# dispatch is judged over [at, first create_flight after it], and a rule is broken only if it was broken over
# the whole of that span (a change that landed inside it may or may not have been seen).


@dataclass(frozen=True)
class Dispatch:
    """One pre-flight check that passed (a DISPATCH_STARTED row) and the flight requests that followed it."""

    task: dict[str, Any]
    at: float  # history time of the DISPATCH_STARTED row (its transaction's start)
    end: float  # the latest time its checks can have read: the first create_flight after it (else ``at``)
    creates: tuple[int, ...]  # create_flight operations of this dispatch (until the next DISPATCH_STARTED)
    flew: bool  # a flight was requested (create_flight) or the platform's ledger has one for the task


def _dispatches(ctx: CheckContext) -> list[Dispatch]:
    tasks = {t["id"]: t for t in ctx.state.tasks}
    started: dict[str, list[float]] = defaultdict(list)
    for a in ctx.state.audit:
        if a["task_id"] in tasks and a["to"] == TaskStatus.DISPATCHING:
            started[a["task_id"]].append(a["at"] - ctx.state.t0)
    creates: dict[str, list[Op]] = defaultdict(list)
    for op in ctx.history.ops:
        if op.f == "create_flight" and op.value.get("task_id") in started:
            creates[op.value["task_id"]].append(op)
    in_ledger = {str(f.get("reference")) for f in ctx.state.ledger}
    out: list[Dispatch] = []
    for tid, times in sorted(started.items()):
        times.sort()
        for n, at in enumerate(times):
            until = times[n + 1] if n + 1 < len(times) else float("inf")
            mine = [op for op in creates[tid] if at <= op.time < until]
            last = n + 1 == len(times)
            out.append(Dispatch(tasks[tid], at, min((op.time for op in mine), default=at),
                                tuple(op.index for op in mine), bool(mine) or (last and tid in in_ledger)))
    return out


def _airspace_changes(history: History) -> dict[str, list[tuple[float, bool, int]]]:
    """Area -> its airspace changes in the order they were made: (time, open, operation index)."""
    out: dict[str, list[tuple[float, bool, int]]] = defaultdict(list)
    for op in history.ops:
        if op.process == NEMESIS and op.f == AIRSPACE:
            for area in op.value.get("areas", ()):
                out[str(area)].append((op.time, bool(op.value.get("open")), op.index))
    for changes in out.values():
        changes.sort(key=lambda c: (c[0], c[2]))
    return out


def _closed_throughout(changes: list[tuple[float, bool, int]], start: float, end: float) -> int | None:
    """The operation that closed the area if it was closed over the whole of [start, end]: the last change
    strictly before ``start`` closed it and nothing reopened it up to ``end`` (a change at the very instant
    of the check is given the benefit of the doubt). Areas start open, as the workload seeds them."""
    closing = None
    for t, open_, index in changes:
        if t < start:
            closing = None if open_ else index
        elif t <= end and open_:
            return None
    return closing


def no_flight_into_closed_airspace(ctx: CheckContext) -> Verdict:
    """I12: no flight for a task whose pre-flight check passed while the airspace over its area was closed
    (when which area was closed: the nemesis's ``airspace`` operations in the history)."""
    changes = _airspace_changes(ctx.history)
    bad: list[Violation] = []
    flown = [d for d in _dispatches(ctx) if d.flew]
    for d in flown:
        area = d.task.get("area_id")
        closing = _closed_throughout(changes.get(str(area), []), d.at, d.end)
        if closing is not None:
            bad.append(Violation(d.task["id"], f"the pre-flight check passed at t={d.at:.1f}s while the airspace "
                                 f"over {area} was closed (operation {closing}), and the flight was requested",
                                 sorted({closing, *d.creates})))
    return judged(len(flown), bad, note=f"{sum(len(c) for c in changes.values())} airspace changes recorded")


def no_flight_without_permission(ctx: CheckContext) -> Verdict:
    """I13: no flight for a task whose user may not operate its device or its area. The only fault that changes the
    permission tables (revoke-permissions, S10) gives them back when its window ends, so the final tables are the
    tables every confirm was checked against (permissions gate the confirm; a flight is not stopped for them)."""
    if not ctx.state.areas:
        return unchecked("the final state holds no sites or permissions")
    bad: list[Violation] = []
    flown = {d.task["id"]: d.task for d in _dispatches(ctx) if d.flew}
    for tid, t in sorted(flown.items()):
        missing = []
        if (t["user_id"], t.get("area_id")) not in ctx.state.area_permissions:
            missing.append(f"area {t.get('area_id')}")
        if (t["user_id"], t["device_id"]) not in ctx.state.device_permissions:
            missing.append(f"device {t['device_id']}")
        if missing:
            bad.append(Violation(tid, f"flight requested for {t['user_id']}, who may not operate "
                                 + " or ".join(missing), ctx.ops_for_task(tid, ("confirm", "create_flight"))))
    return judged(len(flown), bad)


APPROVED = "APPROVED"


def _revocations(history: History) -> dict[tuple[str, int], list[Op]]:
    """(draft id, version) -> the approver's revocations of it that were answered ok (committed by then)."""
    out: dict[tuple[str, int], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.f == REVOKE_APPROVAL and op.type == OK:
            out[(str(op.value.get("draft_id")), int(op.value.get("draft_version", -1)))].append(op)
    return out


def no_flight_without_approval_of_the_confirmed_version(ctx: CheckContext) -> Verdict:
    """I14: where the area requires approval, no flight without an APPROVED approval of exactly the task's
    (draft_id, draft_version), decided no later than its pre-flight check, and not revoked before it: a revocation
    answered ok before the check started, with no approval of the version decided after it, means the check
    passed on a revoked approval. (An approval's time is its decision's, its transaction's start on the real stack:
    it counts if it may have been seen; a revocation's is its answer's, by which it had committed.)"""
    if not ctx.state.areas:
        return unchecked("the final state holds no sites")
    needs = {a["id"]: bool(a["requires_approval"]) for a in ctx.state.areas}
    approvals: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in ctx.state.approvals:
        approvals[str(a["draft_id"])].append(a)
    revoked = _revocations(ctx.history)
    bad: list[Violation] = []
    checked = 0
    for d in _dispatches(ctx):
        t = d.task
        if not d.flew or not needs.get(t.get("area_id"), True):
            continue
        checked += 1
        mine = approvals.get(str(t.get("draft_id")), [])
        exact = [a for a in mine if a["draft_version"] == t.get("draft_version") and a["status"] == APPROVED]
        before = [op for op in revoked.get((str(t.get("draft_id")), int(t.get("draft_version") or 0)), ())
                  if op.time < d.at]
        if before and not any(a["decided_at"] - ctx.state.t0 > before[-1].time
                              and a["decided_at"] - ctx.state.t0 <= d.end for a in exact):
            bad.append(Violation(t["id"], f"flight requested after a pre-flight check at t={d.at:.1f}s that passed "
                                 f"on the approval of draft {t.get('draft_id')} v{t.get('draft_version')}, revoked at "
                                 f"t={before[-1].time:.1f}s", sorted({before[-1].index, *d.creates})))
            continue
        if any(a["decided_at"] - ctx.state.t0 <= d.end for a in exact):
            continue
        if exact:
            why = f"its approval was decided only at t={min(a['decided_at'] for a in exact) - ctx.state.t0:.1f}s"
        elif any(a["status"] == APPROVED for a in mine):
            others = sorted({a["draft_version"] for a in mine if a["status"] == APPROVED})
            why = "the approvals are for version(s) " + ", ".join(f"v{v}" for v in others) + " of the draft"
        else:
            why = "the draft has no approval"
        bad.append(Violation(t["id"], f"flight requested for draft {t.get('draft_id')} v{t.get('draft_version')} "
                             f"in {t.get('area_id')}, which requires approval, after a pre-flight check at "
                             f"t={d.at:.1f}s; {why}", ctx.ops_for_task(t["id"], ("confirm", "create_flight"))))
    return judged(checked, bad)


def _device_answers(history: History) -> dict[str, list[Op]]:
    """Task -> the platform's answers to the dispatcher's device checks for it (ok: its state; fail: a refusal,
    e.g. an unknown device), in order. A timeout is no answer."""
    out: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.f == "get_device" and op.type in (OK, FAIL) and op.value.get("task_id") is not None:
            out[str(op.value["task_id"])].append(op)
    return out


def no_flight_on_an_unfit_device(ctx: CheckContext) -> Verdict:
    """I23: no flight after a pre-flight check whose device answer (the platform's, just before the check) said the
    device was offline, unknown or below the minimum battery (seed 000 §7.3: device state is re-checked at flight
    time). A dispatch with no device answer before it is one that skipped the check."""
    answers = _device_answers(ctx.history)
    minimum = ctx.policy.min_battery
    bad: list[Violation] = []
    flown = [d for d in _dispatches(ctx) if d.flew]
    for d in flown:
        tid = d.task["id"]
        seen = [op for op in answers.get(tid, ()) if op.time <= d.at + 1e-6]
        if not seen:
            why = "no device check was answered before it"
        else:
            last = seen[-1]
            v = last.value
            if last.type == FAIL:
                why = f"the platform refused the device check ({v.get('error')})"
            elif not v.get("online", False):
                why = f"the platform said device {d.task['device_id']} was offline"
            elif float(v.get("battery", 0.0)) < minimum:
                why = f"the platform said device {d.task['device_id']} had {v.get('battery')}% < {minimum:g}%"
            else:
                continue
        ops = sorted({*(op.index for op in seen[-1:]), *d.creates})
        bad.append(Violation(tid, f"flight requested after a pre-flight check at t={d.at:.1f}s: {why}", ops))
    return judged(len(flown), bad, note=f"minimum battery {minimum:g}%")


def confirm_answer_is_own_task_of_that_draft(ctx: CheckContext) -> Verdict:
    """I15: a successful confirm names a task of that user, from exactly the draft and version it confirmed, created
    with that idempotency key unless that version had made it under another (seed 000 §6.3: a re-confirm of a version
    gets the task it made, whatever the key; I42): a key never returns another user's or another draft's task. (An
    answer naming a task the database does not have is I3's lost task.)"""
    tasks = {t["id"]: t for t in ctx.state.tasks}
    bad: list[Violation] = []
    checked = 0
    for op in _confirm_answers(ctx.history):
        v, t = op.value, tasks.get(op.value.get("task_id"))
        if t is None:
            continue
        checked += 1
        wrong = []
        if t["user_id"] != v.get("user_id"):
            wrong.append(f"belongs to {t['user_id']}")
        same_version = (str(t.get("draft_id")) == str(v.get("draft_id"))
                        and t.get("draft_version") == v.get("draft_version"))
        if "key" in v and t["idempotency_key"] != v["key"] and not same_version:
            wrong.append(f"was created with key {t['idempotency_key']}")
        if "draft_id" in v and t.get("draft_id") is not None and str(t["draft_id"]) != str(v["draft_id"]):
            wrong.append(f"was built from draft {t['draft_id']}")
        if ("draft_version" in v and t.get("draft_version") is not None
                and t["draft_version"] != int(v["draft_version"])):
            wrong.append(f"was built from version {t['draft_version']}")
        if wrong:
            bad.append(Violation(t["id"], f"confirm by {v.get('user_id')} with key {v.get('key')} of draft "
                                 f"{v.get('draft_id')} v{v.get('draft_version')} was answered with task {t['id']}, "
                                 "which " + " and ".join(wrong), [op.index]))
    return judged(checked, bad)


# Faults that can stop a consumer between recording a failure and writing the dead letter: the database fails,
# or the process dies.
DB_FAULTS = frozenset({"db-outage", "db-latency"})
STOPS = frozenset({"kill", "restart"})


def _db_fault(w: FaultWindow) -> bool:
    d = w.detail
    return (w.fault in DB_FAULTS or (w.fault == "db-error" and "dead_letter" in d.get("tables", ()))
            or (w.fault == "stop-service" and d.get("service") == "postgres")
            or (w.fault == "toxic" and d.get("link") == "postgres"))


def _touches(op: Op, group: str) -> bool:
    """``op`` (a nemesis action) names a process of ``group``: by its name (the simulation's process, a native
    component such as dispatcher-2) or as that process's own records name it, role-pid, where it gives the pid (a
    native kill of dispatcher-2, pid 2254, touches dispatcher-2254)."""
    name = str(op.value.get("process", ""))
    pid = op.value.get("pid")
    return name.startswith(group) or (pid is not None and f"{name.rsplit('-', 1)[0]}-{pid}" == group)


def _group_had(ctx: CheckContext, group: str, start: float, end: float, names: Collection[str]) -> bool:
    """Some operation named in ``names`` touched a process of ``group`` at some time in [start, end]."""
    return any(start <= op.time <= end and op.f in names and _touches(op, group) for op in ctx.history.ops)


def _interrupted(ctx: CheckContext, group: str, start: float, end: float) -> bool:
    """A process of ``group`` died, or the database failed, at some time in [start, end]."""
    if _group_had(ctx, group, start, end, STOPS):
        return True
    return any(_db_fault(w) and w.start <= end and (w.end is None or w.end >= start)
               for w in ctx.history.fault_windows())


def _deliveries_by_message(history: History) -> dict[tuple[str, str], list[Op]]:
    """(group, event id) -> its ``deliver`` operations, in time order."""
    out: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.f == "deliver":
            out[(str(op.value.get("group")), str(op.value.get("event_id")))].append(op)
    return out


def no_redelivery_past_the_limit_without_dead_letter(ctx: CheckContext) -> Verdict:
    """I16: no message is delivered more often than the policy allows without being dead-lettered.

    - A message the broker delivered to a group past the limit (a delivery attempt above ``max_deliveries``)
      was, in the end, dead-lettered by that group or took effect there.
    - Once the consumer recorded a failed handling at an attempt at or above the limit, it dead-lettered the
      message before the broker delivered it again: the consumer writes the dead letter in the transaction
      right after the failure, so only a process of the group dying or the database failing in between
      excuses a missing or late dead letter. Deliveries past the limit of a message that took effect with no
      failure recorded at the limit are fine: redeliveries after a lost ack, or failures nobody could record
      (the database was down).

    Attempts count per broker entry, as the consumer's policy does: a re-drive or an injected duplicate starts
    again at 1."""
    limit = ctx.policy.max_deliveries
    t0 = ctx.state.t0
    deliveries = _deliveries_by_message(ctx.history)
    dead = {(d["consumer"], d["event_id"]): d for d in ctx.state.dead_letters}
    processed = {(p["consumer"], p["event_id"]) for p in ctx.state.processed}
    first_at_limit: dict[tuple[str, str], dict[str, Any]] = {}
    for f in sorted(ctx.state.event_failures, key=lambda f: f["at"]):
        if f["attempt"] >= limit:
            first_at_limit.setdefault((f["consumer"], f["event_id"]), f)
    bad: list[Violation] = []
    past = 0
    for (group, eid), ops in sorted(deliveries.items()):
        top = max(int(op.value.get("attempt") or 1) for op in ops)
        past += top > limit
        tid = ops[0].value.get("task_id")
        what = f"{ops[0].value.get('event_type', 'event')} {eid} (delivered to {group} up to attempt {top}; the " \
               f"limit is {limit})"
        idx = [op.index for op in ops]
        dl = dead.get((group, eid))
        if top > limit and dl is None and (group, eid) not in processed:
            bad.append(Violation(tid, f"{what} was neither dead-lettered nor taken", idx))
            continue
        failure = first_at_limit.get((group, eid))
        if failure is None:
            continue
        at = failure["at"] - t0
        after = min((op.time for op in ops if op.time > at), default=None)
        dead_at = dl["created_at"] - t0 if dl is not None and dl.get("created_at") is not None else None
        if dead_at is not None and (after is None or dead_at <= after):
            continue
        if _interrupted(ctx, group, at, ctx.state.end_time if after is None else after):
            continue
        late = "was not dead-lettered" if dead_at is None else f"was dead-lettered only at t={dead_at:.1f}s"
        again = "" if after is None else f", after it was delivered again at t={after:.1f}s"
        bad.append(Violation(tid, f"{what}: its handling failed at attempt {failure['attempt']} ({failure['code']}) at "
                             f"t={at:.1f}s but it {late}{again}", idx))
    return judged(len(deliveries), bad, note=f"limit {limit} deliveries; {past} messages went past it")


def processed_events_took_effect(ctx: CheckContext) -> Verdict:
    """I17: an event a consumer recorded as processed took its effect. TaskCreated (dispatcher): the task left
    CREATED (processed_event is written in the transaction that queues it). TaskCompleted (report-worker): the
    report row exists. TaskCancelRequested (dispatcher): the platform was asked to cancel after the request
    (a cancel_flight operation), or the task left CANCEL_PENDING at that version (processed_event commits before
    the cancel is sent: a consumer that dies in between leaves the send to the reconciler)."""
    outbox = {o["id"]: o for o in ctx.state.outbox}
    left: set[tuple[str, str, int | None]] = {(a["task_id"], a["from"], a["from_version"]) for a in ctx.state.audit
                                              if a["task_id"] and a["from"] is not None}
    left_created = {tid for tid, frm, _ in left if frm == TaskStatus.CREATED}
    asked_at = {(a["task_id"], a["to_version"]): a["at"] - ctx.state.t0 for a in ctx.state.audit
                if a["to"] == TaskStatus.CANCEL_PENDING}
    reports = {r["task_id"] for r in ctx.state.reports}
    cancels: dict[str, list[float]] = defaultdict(list)
    deliveries: dict[tuple[str, str], list[int]] = defaultdict(list)
    for op in ctx.history.ops:
        if op.f == "cancel_flight" and op.value.get("task_id"):
            cancels[op.value["task_id"]].append(op.time)
        elif op.f == "deliver":
            deliveries[(str(op.value.get("group")), str(op.value.get("event_id")))].append(op.index)
    bad: list[Violation] = []
    checked = 0
    for p in ctx.state.processed:
        o = outbox.get(p["event_id"])
        if o is None:
            continue
        tid, kind = o["task_id"], (p["consumer"], o["event_type"])
        missing = None
        if kind == ("dispatcher", "TaskCreated"):
            missing = None if tid in left_created else "the task never left CREATED"
        elif kind == ("report-worker", "TaskCompleted"):
            missing = None if tid in reports else "the task has no report row"
        elif kind == ("dispatcher", "TaskCancelRequested"):
            v = o["task_version"]
            since = asked_at.get((tid, v), float("-inf"))
            if (tid, TaskStatus.CANCEL_PENDING, v) not in left and not any(t >= since for t in cancels[tid]):
                missing = f"the task is still CANCEL_PENDING@v{v} and the platform was never asked to cancel"
        else:
            continue
        checked += 1
        if missing:
            bad.append(Violation(tid, f"{p['consumer']} recorded {o['event_type']} {o['id']} as processed but "
                                 f"{missing}", deliveries.get((p["consumer"], p["event_id"]))
                                 or ctx.ops_for_task(tid)))
    return judged(checked, bad)


# How a dispatch attempt closed when the platform's answer was "no flight": a definite refusal, or the reconciler's
# query by request id that found none.
_ATTEMPT_NO_FLIGHT = ("FAILED", "NOT_CREATED")


def attempts_agree_with_the_platform(ctx: CheckContext) -> Verdict:
    """I21: the recorded dispatch requests and their outcomes (dispatch_attempt, what seed 000 §7.2's reconciler reads)
    agree with the platform's ledger. Every flight was requested under a recorded attempt of its task (the attempt is
    written before the call); an attempt closed ACCEPTED names a flight of its task made under its request id; one
    closed FAILED or NOT_CREATED has no flight under its request id; an attempt is still PENDING only while its task
    is DISPATCHING it (every settled attempt was closed); a task's attempts are 1..dispatch_attempts, and never more
    than the policy's max_dispatch_attempts (a supervisor's re-dispatch reopens the last one: R14 reaches the cap)."""
    tasks = {t["id"]: t for t in ctx.state.tasks}
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in ctx.state.ledger:
        by_request[str(f.get("request_id"))].append(f)
    attempts: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for a in ctx.state.dispatch_attempts:
        attempts[a["task_id"]][a["attempt"]] = a
    requested = {a["request_id"]: a for a in ctx.state.dispatch_attempts}
    bad: list[Violation] = []

    def violation(tid: str, message: str) -> None:
        bad.append(Violation(tid, message, ctx.ops_for_task(tid)))

    for f in ctx.state.ledger:
        tid, rid = str(f.get("reference")), str(f.get("request_id"))
        if tid in tasks and (rid not in requested or requested[rid]["task_id"] != tid):
            violation(tid, f"flight {f['external_id']} was requested under {rid}, which is no recorded attempt "
                           "of its task")
    for tid, task in tasks.items():
        mine = attempts.get(tid, {})
        if sorted(mine) != list(range(1, (task["dispatch_attempts"] or 0) + 1)):
            violation(tid, f"the task counts {task['dispatch_attempts']} dispatch attempts; recorded: {sorted(mine)}")
        if len(mine) > ctx.policy.max_dispatch_attempts:
            violation(tid, f"{len(mine)} dispatch attempts, more than the policy's {ctx.policy.max_dispatch_attempts}")
        for n, a in sorted(mine.items()):
            flights = by_request.get(a["request_id"], [])
            where = f"attempt {n} ({a['request_id']})"
            if a["outcome"] == "PENDING":
                if not (task["status"] == TaskStatus.DISPATCHING and n == task["dispatch_attempts"]):
                    violation(tid, f"{where} is still PENDING but the task is {task['status']}")
            elif a["outcome"] == "ACCEPTED":
                if not any(f["external_id"] == a["external_task_id"] and str(f.get("reference")) == tid
                           for f in flights):
                    violation(tid, f"{where} closed ACCEPTED with flight {a['external_task_id']}, which the platform "
                                   "has under no request of this attempt")
            elif a["outcome"] in _ATTEMPT_NO_FLIGHT and flights:
                violation(tid, f"{where} closed {a['outcome']} but the platform made flight "
                               f"{flights[0]['external_id']} under its request id")
    return judged(len(ctx.state.dispatch_attempts) + len(ctx.state.ledger), bad)


# What only a task's owner may do to it, as the audit names it (reference.copilot.services.confirm and .cancel).
CANCEL_ACTIONS = ("CANCELLED_BEFORE_DISPATCH", "CANCELLED_AFTER_FAILED_DISPATCH", "CANCEL_REQUESTED")
OWNER_ACTIONS = ("TASK_CREATED", *CANCEL_ACTIONS)
OWNER_CALLS = ("read", "cancel")  # the users' operations on a task that only its owner may do


def only_the_owner_acts_on_a_task(ctx: CheckContext) -> Verdict:
    """I22: a user reads and cancels only their own tasks (seed 000 §7.3: a user operates only what they may): every
    successful read or cancel in the history was asked by the task's owner, and every audited action only an owner
    may take (creation, a cancel) names the owner as its actor. Another operator's request is refused as if the
    task did not exist."""
    owner = {t["id"]: t["user_id"] for t in ctx.state.tasks}
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.f in OWNER_CALLS and op.type == OK and op.value.get("task_id") in owner:
            checked += 1
            tid, user = op.value["task_id"], op.value.get("user_id")
            if user != owner[tid]:
                bad.append(Violation(tid, f"{user} was answered a {op.f} of {owner[tid]}'s task", [op.index]))
    for a in ctx.state.audit:
        if a["action"] in OWNER_ACTIONS and a["task_id"] in owner:
            checked += 1
            if a["actor"] != owner[a["task_id"]]:
                bad.append(Violation(a["task_id"], f"{a['actor']} took {a['action']} on {owner[a['task_id']]}'s task",
                                     ctx.ops_for_task(a["task_id"])))
    return judged(checked, bad)


def answers_name_states_the_task_had(ctx: CheckContext) -> Verdict:
    """I24: every status and version an answer told its caller (a read, a cancel, a supervisor's review) is one the
    task really had: its audit chain has the transition to that status at that version. A state computed in a
    transaction that rolled back, a cached one that never committed, or a version from before the change answered
    are phantoms the user acts on."""
    had: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for a in ctx.state.audit:
        if a["task_id"] is not None and a["to"] is not None:
            had[a["task_id"]].add((str(a["to"]), int(a["to_version"])))
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        v = op.value
        if op.type != OK or v.get("task_id") not in had or v.get("status") is None or v.get("version") is None:
            continue
        checked += 1
        if (str(v["status"]), int(v["version"])) not in had[v["task_id"]]:
            bad.append(Violation(v["task_id"], f"{op.process} was answered {v['status']}@v{v['version']} by a "
                                 f"{op.f}, a state the task never had (its audit chain)", [op.index]))
    return judged(checked, bad)


# Seed 000 §7.3 (审计记录应覆盖用户确认、审批通过或拒绝、任务创建、...人工介入): the people's actions an ok answer
# confirms, and the audit actions that must record them, on the draft or the task the operation names.
HUMAN_AUDIT: dict[str, tuple[str, tuple[str, ...]]] = {
    "draft": ("draft_id", ("DRAFT_CREATED",)),
    "approve": ("draft_id", ("APPROVAL_APPROVED", "APPROVAL_REJECTED")),
    REVOKE_APPROVAL: ("draft_id", ("APPROVAL_REJECTED",)),
    "confirm": ("task_id", ("TASK_CREATED",)),
    "review": ("task_id", ("REVIEW_RESOLVED",)),
}
REDRIVE_AUDIT = {"outbox": "OUTBOX_REDRIVEN", "report": "REPORT_REDRIVEN", "dead-letter": "DEAD_LETTER_REDRIVEN"}


def every_human_action_is_audited(ctx: CheckContext) -> Verdict:
    """I26: every action of a person that was answered ok has its audit row: a draft created, an approval decided or
    revoked, a task created by a confirm, a manual review resolved (on the draft or task it names, by the user who
    asked when the operation says who), and as many re-drives of each kind as the supervisor was told succeeded.
    (Cancels: I22 and I24 check the rows they answered with.)"""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    actions: Counter[str] = Counter()
    for a in ctx.state.audit:
        actions[a["action"]] += 1
        for key in ("task_id", "draft_id"):
            if a.get(key):
                rows[(key, str(a[key]))].append(a)
    bad: list[Violation] = []
    checked = 0
    redriven: dict[str, list[int]] = defaultdict(list)
    for op in ctx.history.ops:
        if op.type != OK:
            continue
        if op.f == "redrive" and op.value.get("kind") in REDRIVE_AUDIT:
            redriven[op.value["kind"]].append(op.index)
            continue
        if op.f not in HUMAN_AUDIT or not op.value.get(HUMAN_AUDIT[op.f][0]):
            continue
        key, wanted = HUMAN_AUDIT[op.f]
        checked += 1
        who = op.value.get("user_id")
        mine = [a for a in rows.get((key, str(op.value[key])), ())
                if a["action"] in wanted and (who is None or a["actor"] == who)]
        if not mine:
            owner = op.value.get("task_id")
            bad.append(Violation(owner, f"{op.process}'s {op.f} of {key[:-3]} {op.value[key]} was answered ok, and no "
                                 f"audit row ({' or '.join(wanted)}{f' by {who}' if who else ''}) records it",
                                 [op.index]))
    for kind, ops in sorted(redriven.items()):
        checked += len(ops)
        if actions[REDRIVE_AUDIT[kind]] < len(ops):
            bad.append(Violation(None, f"{len(ops)} re-drive(s) of {kind} were answered ok, and only "
                                 f"{actions[REDRIVE_AUDIT[kind]]} {REDRIVE_AUDIT[kind]} audit row(s) record them",
                                 ops[:20]))
    return judged(checked, bad)


RECONCILER = "reconciler"  # the reconciler's actor in the audit log (reference.copilot.services.reconcile)


def _lingers(w: FaultWindow) -> bool:
    """A fault with no window (a one-shot: a crash point armed, devices spoiled) or one never stopped: its effects
    may last to the end of the run."""
    return w.end is None or w.end <= w.start


def the_reconciler_repairs_only_what_a_fault_touched(ctx: CheckContext) -> Verdict:
    """I25: the reconciler never acts on a task no fault touched before it first flies. The reconciler is the safety
    net of seed 000 §7.2: a task that needed it on its way to the platform while nothing had gone wrong took it
    because its fast path (outbox, broker, consumer, dispatcher) is broken, which every other invariant misses, since
    the net catches the fall. (Once a task flies, the reconciler's queries of a long flight are its policy's to
    time: not judged.) A task is touched by a fault that started before the reconciler acted and either lingers (a
    one-shot) or ended less than a grace before the task was created: ``invisible_s`` (a message a dead worker held
    reappears) plus the outbox publisher's longest backoff."""
    if not ctx.fast_path_modelled:
        return unchecked("judged in simulation only: on a real stack the fast path's "
                       "latency is the machine's, and its reconciler thresholds are tight on purpose")
    grace = ctx.policy.invisible_s + ctx.policy.outbox_retry.cap_s
    windows = ctx.history.fault_windows()
    created = {a["task_id"]: a["at"] - ctx.state.t0 for a in ctx.state.audit
               if a["task_id"] is not None and a["from"] is None}

    def touched(task_id: str, t: float) -> bool:
        c = created.get(task_id, 0.0)
        # a window that does not linger has an end (_lingers): the second test only narrows it for mypy
        return any(w.start <= t and (_lingers(w) or (w.end is not None and float(w.end) + grace >= c))
                   for w in windows)

    flying = {a["task_id"]: a["at"] - ctx.state.t0 for a in reversed(ctx.state.audit)
              if a["to"] == TaskStatus.EXECUTING}  # (reversed: the first time it flew wins)
    # What the reconciler did to a task before it first flew: its moves (audit rows) and its platform calls for it
    # (its queries, and the dispatch of a stale QUEUED task, whose audit rows are the dispatcher's code's).
    acts = [(a["task_id"], a["at"] - ctx.state.t0, f"moved it ({a['action']}: {a['from']} -> {a['to']})")
            for a in ctx.state.audit if a["actor"] == RECONCILER and a["task_id"] in created]
    acts += [(op.value["task_id"], op.time, f"called {op.f} for it") for op in ctx.history.ops
             if op.process.startswith(RECONCILER) and op.type == INVOKE and op.value.get("task_id") in created]
    acts = [(tid, at, what) for tid, at, what in acts if at < flying.get(tid, float("inf"))]
    bad: list[Violation] = []
    for tid in sorted({tid for tid, at, _ in acts if not touched(tid, at)}):
        at, what = min((at, what) for t, at, what in acts if t == tid and not touched(tid, at))
        bad.append(Violation(tid, f"the reconciler {what} at t={at:.1f}s, and no fault had touched the task "
                             f"(created at t={created[tid]:.1f}s)", ctx.ops_for_task(tid)))
    calm = sum(not touched(tid, float("inf")) for tid in created)
    return judged(calm, bad, note=f"{calm} task(s) no fault touched; the reconciler acted "
                    f"{len(acts)} time(s)")


PRECHECK_FAILED = "PRECHECK_FAILED"  # the audit action of a task the pre-flight check refused (reference dispatch)
CAUSE_SLACK_S = 0.5  # a cause recorded this long after the check counts (on a real stack a record follows its act)


def _open_at(changes: list[tuple[float, bool, int]], t: float, late: float = 0.0) -> bool:
    """Whether the area was certainly open from ``t`` to ``t + late``: no change closed it at or before t + late (plus
    the slack), or the last one that did was reopened before t (minus the slack). Areas start open."""
    closed_since: float | None = None
    for when, open_, _index in changes:
        if when > t + late + CAUSE_SLACK_S:
            break
        if not open_:
            closed_since = when if closed_since is None else closed_since
        elif closed_since is not None and when < t - CAUSE_SLACK_S:
            closed_since = None
    return closed_since is None


def no_refusal_without_its_cause(ctx: CheckContext) -> Verdict:
    """I28: the pre-flight check refuses a task only for a cause that held when it ran: AIRSPACE_CLOSED when the
    nemesis had closed its area; DEVICE_OFFLINE, BATTERY_LOW and DEVICE_UNKNOWN when the platform's device answer
    just before it said so; APPROVAL_REVOKED when the approver had revoked the approval of the task's draft version.
    The dual of I12, I14 and I23 (no flight on an unfit task): a check that refuses fit tasks passes those. Mutation
    testing (2026-12-05) found a check that read another area's airspace green everywhere."""
    answers = _device_answers(ctx.history)
    changes = _airspace_changes(ctx.history)
    # A transaction held before its first write (a hold-transaction fault) reads the airspace after the hold, while its
    # audit rows carry its start (found by `sortie explore`: a close during a held dispatch.begin, refused rightly).
    holds = [(op.time, float(op.value.get("seconds", 0.0))) for op in ctx.history.ops
             if op.process == NEMESIS and op.f == "hold" and str(op.value.get("why", "")).startswith("before-write")]
    revoked: dict[tuple[str, int], list[float]] = defaultdict(list)
    for op in ctx.history.ops:
        if op.f == REVOKE_APPROVAL and op.type == INVOKE:
            revoked[(str(op.value.get("draft_id")), int(op.value.get("draft_version", -1)))].append(op.time)
    tasks = {t["id"]: t for t in ctx.state.tasks}
    minimum = ctx.policy.min_battery
    bad: list[Violation] = []
    checked = 0
    for a in ctx.state.audit:
        t = tasks.get(a["task_id"])
        if a["action"] != PRECHECK_FAILED or t is None:
            continue
        at, code = a["at"] - ctx.state.t0, t.get("last_error_code")
        seen = [op for op in answers.get(t["id"], ()) if op.time <= at + 1e-6]
        device = seen[-1] if seen else None
        if code == "AIRSPACE_CLOSED":
            late = max((secs for when, secs in holds if at - 1e-6 <= when <= at + CAUSE_SLACK_S), default=0.0)
            why = None if not _open_at(changes.get(str(t.get("area_id")), []), at, late) else \
                f"area {t.get('area_id')} was open" + (f" from then to {at + late:.1f}s (a hold)" if late else "")
        elif code in ("DEVICE_OFFLINE", "BATTERY_LOW", "DEVICE_UNKNOWN"):
            v = device.value if device is not None else {}
            held = device is not None and (
                (code == "DEVICE_UNKNOWN" and device.type == FAIL) or
                (code == "DEVICE_OFFLINE" and device.type == OK and not v.get("online", True)) or
                (code == "BATTERY_LOW" and device.type == OK and float(v.get("battery", 100.0)) < minimum))
            why = None if held else ("no device answer came before it" if device is None else
                                     f"the platform's answer before it was {device.type} {v}")
        elif code == "APPROVAL_REVOKED":
            key = (str(t.get("draft_id")), int(t.get("draft_version") or 0))
            why = None if any(r <= at + CAUSE_SLACK_S for r in revoked.get(key, ())) else \
                f"no revocation of draft {key[0]} v{key[1]} was asked for before it"
        else:
            continue  # a cause the history does not record: not judged
        checked += 1
        if why is not None:
            bad.append(Violation(t["id"], f"refused at its pre-flight check at t={at:.1f}s with {code}, but {why}",
                                 ctx.ops_for_task(t["id"])))
    return judged(checked, bad)


# the API's answer to an exception it has no mapping for (reference.copilot.api.problem_of)
INTERNAL_ERROR = "INTERNAL_ERROR"


def no_defect_raised(ctx: CheckContext) -> Verdict:
    """I27: the code never failed with a defect, an error only a bug raises (kernel.logs.DEFECTS: TypeError,
    AttributeError, KeyError, AssertionError...), never an outage, a conflict or bad input. Worker loops carry on
    after any failure and a redelivery or the reconciler may repair what it left, so without this a crash in the
    dispatcher or a consumer passes every other check (mutation testing, 2026-12-05: a write-back that raised
    TypeError after a timeout was settled by the reconciler, green everywhere). Judged on what both shells record: a
    consumer's recorded failure whose code is a defect's name, an API answer INTERNAL_ERROR (an exception with no
    mapping), and the defects a loop logged and carried on from, or that ended a process (the simulation's logging
    handler; on a real stack the components' logs, read for kernel.logs.DEFECT_MARK). ``state.defects`` is None where
    the shell did not read them (a final state built without the logs)."""
    bad: list[Violation] = []
    failures = [f for f in ctx.state.event_failures if f.get("code") in DEFECT_NAMES]
    for f in failures:
        bad.append(Violation(None, f"consumer {f['consumer']} failed on event {f['event_id']} with {f['code']} "
                             f"(delivery {f['attempt']})"))
    answers = [op for op in ctx.history.ops if op.type == "fail" and op.value.get("code") == INTERNAL_ERROR]
    for op in answers:
        bad.append(Violation(op.value.get("task_id"), f"{op.process}'s {op.f} was answered {INTERNAL_ERROR} "
                             f"at t={op.time:.1f}s", [op.index]))
    seen = ctx.state.defects
    for d in seen or ():
        bad.append(Violation(None, f"{d['error']} at {d['where']} (t={d['t']:.1f}s, {d['logger']}), carried on from"))
    checked = len(ctx.state.event_failures) + sum(op.type in (OK, "fail") for op in ctx.history.ops)
    note = "" if seen is not None else ("the worker loops' own logs were not read for this run: defects they carried "
                                        "on from are not judged")
    return judged(checked, bad, note=note)


CANCEL_SLACK_S = 60.0  # beyond the reconciler's own delay: the dispatcher's and the reconciler's platform calls


def a_cancel_reaches_the_platform(ctx: CheckContext) -> Verdict:
    """I29: a cancel the user asked for reaches the platform while the flight still flies. The dispatcher sends it;
    when that send is lost (its tries throttled, refused or cut off), the task stays CANCEL_PENDING and the reconciler
    must send it again once the task is stale (seed 000 §7.2: CANCEL_PENDING until the platform confirms). Without
    this, a reconciler that never re-sent a cancel passed every check (mutation testing of reconcile.py, 2026-12-05):
    the flight flew to its end and the task ended COMPLETED, the user's cancel silently dropped.

    Judged on every task whose flight was still in the air at its deadline: the later of the cancel request and the
    heal of the last fault, plus the reconciler's delay (CANCEL_PENDING's stale threshold and two scan periods) and
    CANCEL_SLACK_S. Its flight must show a cancel request (the ledger's cancel_requested_at), or the platform refused
    it (CANCEL_REFUSED: it was heard). Where the platform's clock is not the backend's (a real stack's scaled one),
    only flights still in the air at the end of the run are judged."""
    pol = ctx.policy
    delay = (pol.stale_after_s.get(TaskStatus.CANCEL_PENDING, 60.0) + 2 * pol.reconcile_interval_s
             + CANCEL_SLACK_S)
    heal = ctx.state.t0 + ctx.state.heal_time
    end = ctx.state.t0 + ctx.state.end_time
    requested: dict[str, float] = {}
    refused: set[str] = set()
    for a in ctx.state.audit:
        if a["task_id"] and a["action"] == "CANCEL_REQUESTED":
            requested.setdefault(a["task_id"], a["at"])
        elif a["task_id"] in requested and a["action"] == "CANCEL_REFUSED":
            refused.add(a["task_id"])
    flights = {f["external_id"]: f for f in ctx.state.ledger}
    comparable = ctx.state.ledger_clock_comparable
    bad: list[Violation] = []
    checked = 0
    for t in ctx.state.tasks:
        tid = t["id"]
        f = flights.get(t["external_task_id"] or "")
        if tid not in requested or tid in refused or f is None:
            continue
        checked += 1
        deadline = max(requested[tid], heal) + delay
        ended = f.get("ended_at")
        flying = (ended is None or ended > deadline) if comparable else (ended is None and end > deadline)
        if not flying:
            continue  # it ended in time, on its own or stopped
        asked = f.get("cancel_requested_at")
        if asked is None:
            bad.append(Violation(tid, f"cancel requested at t={requested[tid] - ctx.state.t0:.1f}s never reached the "
                                 f"platform: flight {f['external_id']} flew on past t={deadline - ctx.state.t0:.1f}s "
                                 f"and ended {f.get('status')}", ctx.ops_for_task(tid, ("cancel", "cancel_flight"))))
        elif comparable and asked > deadline + 1e-6:
            bad.append(Violation(tid, f"cancel requested at t={requested[tid] - ctx.state.t0:.1f}s reached the "
                                 f"platform only at t={asked - ctx.state.t0:.1f}s, after "
                                 f"t={deadline - ctx.state.t0:.1f}s",
                                 ctx.ops_for_task(tid, ("cancel", "cancel_flight"))))
    note = "" if comparable else "the platform's clock is scaled: judged only flights still in the air at the end"
    return judged(checked, bad, note=note)


def _acks_by_delivery(history: History) -> dict[tuple[str, str, int], list[Op]]:
    """(group, event id, delivery attempt) -> the ``ack`` operations of that delivery (ok, fail or unknown)."""
    out: dict[tuple[str, str, int], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.f == ACK:
            out[(str(op.value.get("group")), str(op.value.get("event_id")), int(op.value.get("attempt") or 1))
                ].append(op)
    return out


def _stalled(ctx: CheckContext, group: str, start: float, end: float) -> bool:
    """A process of ``group`` was paused (SIGSTOP) or held inside a transaction at some time in [start, end]: its ack
    may come after the run's end."""
    return _group_had(ctx, group, start, end, ("pause", "hold"))


def dead_letters_at_the_limit_then_acked(ctx: CheckContext) -> Verdict:
    """I32: a consumer dead-letters a message when its ``max_deliveries``-th delivery fails, not sooner, and then acks
    it (seed 000 §6.4: retry, then a dead letter with the failure history). I16 bounds deliveries from above; this is
    the other side, found by mutation testing of consumer.py (2026-12-06): a consumer that dead-lettered at the first
    failure, or left a dead-lettered message unacked to be delivered again and again, passed every check.

    - Every dead letter has a failed handling recorded at an attempt at or above the limit (the consumer records the
      failure in the transaction just before the dead letter's, for the same delivery).
    - A message whose handling failed at attempt ``a`` at or above the limit is delivered again (attempt ``a + 1``)
      only if an ack of attempt ``a`` was tried (a refused ack, or one that came after the message had gone back to
      the broker, is the broker's doing), or a process of the group died, was paused or held, or the database failed
      in between (then the dead letter or the ack could not happen, or comes later)."""
    limit = ctx.policy.max_deliveries
    t0 = ctx.state.t0
    deliveries = _deliveries_by_message(ctx.history)
    acks = _acks_by_delivery(ctx.history)
    failures: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for f in ctx.state.event_failures:
        failures[(f["consumer"], f["event_id"])].append(f)
    bad: list[Violation] = []
    for d in ctx.state.dead_letters:
        key = (d["consumer"], d["event_id"])
        tried = sorted(f["attempt"] for f in failures[key])
        if not tried or tried[-1] < limit:
            bad.append(Violation(d["task_id"], f"{d['consumer']} dead-lettered {d['event_type']} {d['event_id']} "
                                 f"with failures recorded at attempts {tried or 'none'}: the limit is {limit}",
                                 [op.index for op in deliveries.get(key, ())][:20]))
    checked = len(ctx.state.dead_letters)
    for (group, eid), fs in sorted(failures.items()):
        ops = deliveries.get((group, eid), [])
        for f in fs:
            a = f["attempt"]
            if a < limit:
                continue
            checked += 1
            at = f["at"] - t0
            again = next((op for op in ops if op.time >= at and int(op.value.get("attempt") or 1) == a + 1), None)
            if again is None or acks.get((group, eid, a)) or _interrupted(ctx, group, at, again.time) \
                    or _stalled(ctx, group, at, again.time):
                continue
            bad.append(Violation(again.value.get("task_id"), f"{again.value.get('event_type', 'event')} {eid} failed "
                                 f"its delivery {a} to {group} at t={at:.1f}s (limit {limit}) and was delivered again "
                                 f"at t={again.time:.1f}s: the consumer never acked it",
                                 [op.index for op in ops][:20]))
    return judged(checked, bad, note=f"limit {limit} deliveries")


_WORKER_ROLES = frozenset(Topology().counts())


def _worker_role(process: str) -> str | None:
    """The reference worker role a process name belongs to (``dispatcher-2`` -> dispatcher), else None."""
    if process in _WORKER_ROLES:
        return process
    base, _, n = process.rpartition("-")
    return base if base in _WORKER_ROLES and n.isdigit() else None


def acks_follow_the_outcome(ctx: CheckContext) -> Verdict:
    """I33: a consumer acks a delivery only once its outcome is committed: the event was processed (processed_event)
    or dead-lettered, before the ack (seed 000 §6.4: ack only after commit). An ack with neither loses the message:
    the broker never delivers it again, and nothing records that it did not take effect. Found by mutation testing of
    consumer.py (2026-12-06): a consumer that acked a delivery whose failure it could not record (the database was
    away) passed every check, because the reconciler later repaired the task that the lost message left behind.

    Judged on every ack the reference's consumers tried (ok, refused or unknown) of an event their group subscribes to.
    A stale consumer (a fault) acks unread on purpose: not judged."""
    t0 = ctx.state.t0
    # A row without its time (not recorded): taken as committed before any ack, so never blamed.
    processed = {(p["consumer"], p["event_id"]): p["at"] - t0 if p.get("at") is not None else float("-inf")
                 for p in ctx.state.processed}
    dead = {(d["consumer"], d["event_id"]): d["created_at"] - t0 if d.get("created_at") is not None else float("-inf")
            for d in ctx.state.dead_letters}
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.f != ACK or _worker_role(op.process) is None:
            continue
        group, eid = str(op.value.get("group")), str(op.value.get("event_id"))
        if SUBSCRIBED.get(str(op.value.get("event_type"))) != group:
            continue
        checked += 1
        key = (group, eid)
        # 1 ms: the outcome's time is the transaction's clock, the ack's the history's; in a process they are one clock
        if min(processed.get(key, float("inf")), dead.get(key, float("inf"))) <= op.time + 1e-3:
            continue
        later = [f"processed at t={processed[key]:.1f}s"] if key in processed else []
        later += [f"dead-lettered at t={dead[key]:.1f}s"] if key in dead else []
        bad.append(Violation(op.value.get("task_id"), f"{op.process} acked {op.value.get('event_type')} {eid} "
                             f"(delivery {op.value.get('attempt')}) at t={op.time:.1f}s before the event was processed "
                             f"or dead-lettered ({', '.join(later) or 'it never was'}): the message was lost",
                             [op.index]))
    return judged(checked, bad)


def worker_loops_run_until_stopped(ctx: CheckContext) -> Verdict:
    """I34: a worker's loop (publisher, dispatcher, report worker, reconciler) ends only when it is stopped or killed.
    Its dependencies fail (the broker refuses an ack, the database goes away); a loop that lets one of those end it
    stops consuming until a supervisor restarts the process, and in the meantime its share of the work waits or goes
    to the others. Found by mutation testing of consumer.py (2026-12-06): a consumer whose failed ack ended its loop
    passed every check, because the other dispatcher took its messages. Both shells record a loop that ends on its
    own (``loop-ended``)."""
    workers = {op.process for op in ctx.history.ops if _worker_role(op.process) is not None}
    bad = [Violation(None, f"{op.value.get('process', op.process)}'s loop ended at t={op.time:.1f}s without being "
                     f"stopped: {op.value.get('error') or 'it returned'}", [op.index])
           for op in ctx.history.ops if op.f == LOOP_ENDED]
    return judged(len(workers), bad)


# Where a person's cancel is taken (seed 000 §7.2): before dispatch, and after a failed one, it cancels at once; a
# flying task goes CANCEL_PENDING until the platform confirms; a repeated request gets the same answer. DISPATCHING
# (whether a flight exists is not known yet: retry once the dispatch result is in), MANUAL_REVIEW (a supervisor
# decides) and the other ends refuse it.
USER_CANCELLABLE = frozenset({TaskStatus.CREATED, TaskStatus.QUEUED, TaskStatus.VALIDATING, TaskStatus.DISPATCH_FAILED,
                              TaskStatus.EXECUTING, TaskStatus.CANCEL_PENDING, TaskStatus.CANCELLED})
NOT_CANCELLABLE = "TASK_NOT_CANCELLABLE"


def a_cancel_answer_follows_the_task_status(ctx: CheckContext) -> Verdict:
    """I35: a person's cancel is answered as the task's status says (seed 000 §7.2). An accepted cancel answers
    CANCEL_PENDING (the flight is being stopped) or CANCELLED; a refusal (``TASK_NOT_CANCELLABLE``) names a status the
    cancel cannot be taken in, and says to retry exactly when the task is DISPATCHING (the dispatch result is not in
    yet). Found by mutation testing of cancel.py (2026-12-06): a repeated cancel refused as not cancellable, an
    accepted cancel of a task that was still dispatching, and a refusal that told the user the wrong thing about
    retrying all passed every check (I24 only asks that the status named is one the task had)."""
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.f != "cancel" or op.process == NEMESIS:
            continue
        v = op.value
        if op.type == OK and v.get("status") is not None:
            checked += 1
            if v["status"] not in (TaskStatus.CANCEL_PENDING, TaskStatus.CANCELLED):
                bad.append(Violation(v.get("task_id"), f"{op.process}'s cancel was accepted with the task "
                                     f"{v['status']} (an accepted cancel answers CANCEL_PENDING or CANCELLED)",
                                     [op.index]))
        elif op.type == FAIL and v.get("code") == NOT_CANCELLABLE and "task_status" in v:
            checked += 1
            status = str(v["task_status"])
            if status in USER_CANCELLABLE:
                bad.append(Violation(v.get("task_id"), f"{op.process}'s cancel was refused as not cancellable with "
                                     f"the task {status}, where a cancel is taken", [op.index]))
            elif bool(v.get("retryable")) != (status == TaskStatus.DISPATCHING):
                bad.append(Violation(v.get("task_id"), f"{op.process}'s cancel of a {status} task was refused with "
                                     f"retryable={bool(v.get('retryable'))} (retry only while DISPATCHING)",
                                     [op.index]))
    return judged(checked, bad)


@dataclass
class _Round:
    """One round of an outbox publisher, as its recorded transactions and publishes show it."""

    start: float  # the claim's invoke
    claim: int = -1  # the claim's ok (op index); -1 while it has not committed
    ids: list[str] = field(default_factory=list)  # the rows it took, in the claim's order
    published: list[str] = field(default_factory=list)  # accepted by the broker
    refused: int | None = None  # position in ids of the first refused publish (what its release puts back)
    failed: bool = False  # a claim, publish, mark-sent or release of the round failed
    unknown: bool = False  # a publish was not answered (the process died, or a defect): not judged
    marked: bool = False  # a mark-sent was tried
    released: bool = False  # a release was tried
    end: float = 0.0  # the time of its last operation

    def note(self, op: Op) -> None:
        """Take in one of the publisher's operations after its claim's invoke (the same reading for I36 and I37)."""
        self.end = op.time
        if op.f == OUTBOX_CLAIM and op.type == OK:
            self.claim, self.ids = op.index, [str(i) for i in op.value.get("ids") or ()]
        elif op.f == PUBLISH:
            if op.type == INVOKE:
                self.unknown = True  # until it is answered
            elif op.type == OK:
                self.unknown = False
                self.published.append(str(op.value.get("event_id")))
            elif op.type == FAIL:
                self.unknown = False
                if self.refused is None:
                    self.refused = len(self.published)  # publishes go in the claim's order
        elif op.f == OUTBOX_MARK_SENT and op.type != INVOKE:
            self.marked = True
        elif op.f == OUTBOX_RELEASE and op.type != INVOKE:
            self.released = True
        if op.type == FAIL or (op.f == PUBLISH and op.type == INFO):
            self.failed = True
        if op.f == OUTBOX_RELEASE and op.type == OK:
            self.failed = True  # a release follows a refusal


_ROUND_OPS = (OUTBOX_CLAIM, OUTBOX_MARK_SENT, OUTBOX_RELEASE, PUBLISH)


def publisher_rounds(history: History) -> list[tuple[str, _Round]]:
    """Every round of every outbox publisher whose claim committed, with its process, in the order they began (a
    round ends at the process's next claim, or where it was killed or restarted)."""
    rounds: list[tuple[str, _Round]] = []
    current: dict[str, _Round] = {}
    for op in history.ops:
        if op.process == NEMESIS and op.f in ("kill", "restart"):
            current.pop(str(op.value.get("process")), None)
        elif op.f == OUTBOX_CLAIM and op.type == INVOKE:
            current[op.process] = _Round(op.time)
            rounds.append((op.process, current[op.process]))
        elif op.f in _ROUND_OPS and (r := current.get(op.process)) is not None:
            r.note(op)
    return [(who, r) for who, r in rounds if r.claim >= 0]


def outbox_claims_take_due_rows(ctx: CheckContext) -> Verdict:
    """I36: a publisher's claim with room takes every outbox row that is due (seed 000 §5.2, §5.5: a row waits out its
    backoff, no longer). Both shells record the publishers' transactions
    (reference.copilot.runtime.RECORDED_TRANSACTIONS):
    a claim's commit names the rows it took. A row a claim took is due again at the latest when its lease runs out
    (the claim's commit plus ``outbox_lease_s``) or, once its round put it back after a refusal, ``max_delay(n - 1)``
    of ``outbox_retry`` after that release committed, n its claims since it was written or re-driven (a claim whose
    outcome is not known may have been one of them: it counts, for the longest step). A claim that began after that
    and took fewer than ``outbox_batch`` rows must have taken it, unless a claim running at the same time did (SKIP
    LOCKED). Every bound is a fact of the database (commits, the rows' clocks), not of the machine's scheduling, so
    both shells judge it. I30 bounds the waits from below; mutation testing of outbox.py (2026-12-06) left a row's
    backoff one or two steps too long, a jitter draw past the step, and rows never put back green everywhere."""
    retry, batch, lease = ctx.policy.outbox_retry, ctx.policy.outbox_batch, ctx.policy.outbox_lease_s
    t0 = ctx.state.t0
    since: dict[str, float] = {o["id"]: o["created_at"] - t0 for o in ctx.state.outbox}  # written or re-driven
    task_of = {o["id"]: o["task_id"] for o in ctx.state.outbox}
    claims: dict[str, int] = defaultdict(int)  # row -> claims that took it since written or re-driven
    unknown: list[float] = []  # the invoke times, sorted, of claims whose rows are not known (failed, or unanswered)
    due: dict[str, tuple[float, int, int]] = {}  # row -> (due at the latest, the op that says so, its round's claim)
    taken: dict[str, list[tuple[float, float]]] = defaultdict(list)  # row -> (invoke, ok) of each claim of it
    rounds: dict[str, _Round] = {}
    suspects: list[tuple[str, float, float, int, float, int]] = []
    checked = 0

    def longest_step(row: str, at: float) -> tuple[float, int]:
        """The row's longest backoff step now, and its claims counted for it (the unknown ones included)."""
        lo, hi = bisect_left(unknown, since.get(row, 0.0)), bisect_right(unknown, at)
        return retry.max_delay(max(0, claims[row] + (hi - lo) - 1)), claims[row] + (hi - lo)

    # The re-drives that committed, by the database's clock (not a supervisor's request: a refused second click, or
    # the answer of one a claim already followed, would start the count again in the wrong place).
    redriven = sorted((b["at"] - t0, b["event_id"]) for b in ctx.state.outbox_budget
                      if b["action"] == "OUTBOX_REDRIVEN")
    for op in ctx.history.ops:
        while redriven and redriven[0][0] <= op.time:
            at, row = redriven.pop(0)
            claims.pop(row, None)
            due.pop(row, None)
            since[row] = at
        if op.process == NEMESIS and op.f in ("kill", "restart"):
            lost = rounds.pop(str(op.value.get("process")), None)
            if lost is not None and lost.claim < 0:
                insort(unknown, lost.start)
            continue
        if op.f not in _ROUND_OPS:
            continue
        r = rounds.get(op.process)
        if op.f == OUTBOX_CLAIM:
            if op.type == INVOKE:
                if r is not None and r.claim < 0:  # the previous claim never answered
                    insort(unknown, r.start)
                rounds[op.process] = _Round(op.time)
            elif op.type == OK and r is not None and isinstance(op.value.get("ids"), list):
                r.note(op)
                taking = set(r.ids)
                if len(r.ids) < batch:
                    for row, (at, why, _) in due.items():
                        if at < r.start - 1e-3:
                            checked += 1
                            if row not in taking:
                                suspects.append((row, r.start, op.time, op.index, at, why))
                for row in r.ids:
                    claims[row] += 1
                    due[row] = (op.time + lease, op.index, op.index)
                    taken[row].append((r.start, op.time))
            elif r is not None:
                insort(unknown, r.start)
                rounds.pop(op.process)
            continue
        if r is None or r.claim < 0:
            continue
        r.note(op)
        if op.f == OUTBOX_MARK_SENT and op.type != INVOKE:
            # Sent, or (a failed mark) maybe sent: not judged either way. A mark needs no claim of the row: a publisher
            # that was stopped past its lease marks what it published while another holds the row.
            for row in r.published:
                due.pop(row, None)
        elif op.f == OUTBOX_RELEASE and op.type != INVOKE and r.refused is not None:
            for row in r.ids[r.refused:]:
                if row not in due:
                    continue
                step, n = longest_step(row, op.time)
                if claims[row] >= retry.attempts or n >= retry.attempts:
                    del due[row]  # DEAD (or perhaps): an operator re-drives it
                elif op.type == OK and due[row][2] == r.claim:
                    due[row] = (op.time + step, op.index, r.claim)
                else:  # perhaps put back, or put back under another claim's lease: whichever is later
                    due[row] = (max(due[row][0], op.time + step), op.index, due[row][2])
    bad: list[Violation] = []
    for row, start, end, index, at, why in suspects:
        if any(a < end and b > start for a, b in taken[row]):
            continue  # a claim at the same time took it (SKIP LOCKED)
        bad.append(Violation(task_of.get(row), f"outbox event {row} was due by {at:.3f}s, and a claim that began at "
                             f"{start:.3f}s with room for {batch} rows did not take it", [why, index]))
    return judged(checked, bad, note=f"a row is due by its lease ({lease:g}s) after its claim, or by the whole step "
                    f"min({retry.cap_s:g}, {retry.base_s:g}*2^(n-1)) after its release")


def outbox_rounds_go_as_the_policy_says(ctx: CheckContext) -> Verdict:
    """I37: an outbox publisher's rounds go as its policy says (seed 000 §5.2, §5.5), read from what both shells record
    of them (I36): before it claims again, a publisher marks sent what the broker accepted and puts back what it
    refused (or tried to: a failed mark or release counts); after its k-th failed round in a row (a claim, publish,
    mark-sent or release failed; a round that sent something starts the count again, an empty one leaves it) it
    pauses at least ``publisher_pause(k)``. Where the harness models the fast path's latency (the simulation), it also
    claims again no later than that pause, than ``outbox_wait_s`` after a round that took fewer rows than a batch, and
    at once after a full one (a slow-database fault adds its latency); on a real stack the machine schedules the
    processes. A process killed or restarted counts from 0; one paused, held, or whose loop ended is not bounded from
    above until its next claim; a round with a publish of unknown outcome is not judged. Mutation testing of outbox.py
    (2026-12-06) left green: a publisher's count growing by 2 or reset to 1, a database failure not counted as a
    failed round (no pause), and the accepted rows of a refused round never marked sent (sent again after the lease)."""
    policy = ctx.policy
    upper = ctx.fast_path_modelled
    slow = [w for w in ctx.history.fault_windows() if w.fault == "db-latency"]
    rounds: dict[str, _Round] = {}
    failed_rounds: dict[str, int] = defaultdict(int)
    excused: set[str] = set()  # not bounded from above until its next claim
    bad: list[Violation] = []
    checked = 0

    def judge(who: str, r: _Round, op: Op) -> None:
        nonlocal checked
        if r.failed:
            failed_rounds[who] += 1
        elif r.published:
            failed_rounds[who] = 0
        if r.unknown:
            return
        checked += 1
        if r.published and not r.marked:
            bad.append(Violation(None, f"{who} claimed again without marking sent the {len(r.published)} row(s) the "
                                 "broker accepted (they go out again when their lease runs out)", [r.claim, op.index]))
        if r.refused is not None and not r.released:
            bad.append(Violation(None, f"{who} claimed again without putting back the rows the broker refused (they "
                                 "wait out their lease, not their backoff)", [r.claim, op.index]))
        gap = op.time - r.end
        if r.failed:
            k = failed_rounds[who]
            floor = ceiling = policy.publisher_pause(k)
            why = f"its failed round {k} in a row"
        else:
            floor = 0.0
            ceiling = 0.0 if len(r.ids) >= policy.outbox_batch else max(policy.outbox_wait_s, policy.poll_idle_s)
            why = "a full batch" if len(r.ids) >= policy.outbox_batch else f"a round that took {len(r.ids)}"
        if gap < floor - 1e-6:
            bad.append(Violation(None, f"{who} claimed again {gap:.3f}s after {why} (policy: a pause of at least "
                                 f"{floor:.3f}s)", [r.claim, op.index]))
        if upper and who not in excused:
            extra = max((float(w.detail.get("ms", 200)) / 1000.0 for w in slow
                         if w.start <= op.time and (w.end is None or w.end >= r.end)), default=0.0)
            if gap > ceiling + extra + 0.05:
                bad.append(Violation(None, f"{who} claimed again {gap:.3f}s after {why} (policy: within "
                                     f"{ceiling:.3f}s)", [r.claim, op.index]))

    for op in ctx.history.ops:
        if op.process == NEMESIS and op.f in ("pause", "hold", "kill", "restart"):
            who = str(op.value.get("process"))
            excused.add(who)
            if op.f in ("kill", "restart"):
                rounds.pop(who, None)
                failed_rounds.pop(who, None)
            continue
        if op.f == LOOP_ENDED:  # restarted: a new loop counts from 0
            excused.add(op.process)
            rounds.pop(op.process, None)
            failed_rounds.pop(op.process, None)
            continue
        if op.f not in _ROUND_OPS:
            continue
        r = rounds.get(op.process)
        if op.f == OUTBOX_CLAIM and op.type == INVOKE:
            if r is not None:
                judge(op.process, r, op)
            excused.discard(op.process)
            rounds[op.process] = _Round(op.time, end=op.time)
            continue
        if r is None:
            continue
        r.note(op)
    note = ("after the k-th failed round in a row a pause of at least min(30, "
            f"{policy.poll_idle_s:g}*2^k)s")
    note += (f", and at most that; at once after a full batch of {policy.outbox_batch}; within "
             f"{policy.outbox_wait_s:g}s after a smaller round" if upper
             else "; not bounded from above on this shell (its scheduling is the machine's)")
    return judged(checked, bad, note=note)


# The Copilot's invariants, in the order they are checked and listed (docs/invariants.md).
# How late a committed change may reach an open stream (the stack's Redis relay) and still count as heard while open.
STREAM_NOTIFY_SLACK_S = 1.0


def _stream_open_spans(history: History) -> dict[str, list[tuple[float, float]]]:
    """Stream process -> the spans its stream was open (from its stream-open to its next drop, or its final read)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    opened: dict[str, float] = {}
    for op in history.ops:
        if op.f == "stream-open":
            opened[op.process] = op.time
        elif op.f in ("stream-drop", "stream-final-done") and op.process in opened:
            spans[op.process].append((opened.pop(op.process), op.time))
    return spans


def every_stream_converges(ctx: CheckContext) -> Verdict:
    """I38 (seed 000 §7.3: a dropped stream only delays notifications; a client that reconnects resyncs from the
    persisted state): at the end every task stream believes each of its user's tasks at the database's status and
    version, from what the stream told it and the resyncs after its reconnects (``stream-final`` states that belief
    before its own read). A task whose last change was committed while the stream was open must be among what it
    believes: the fan-out reaches every open stream of the task's user."""
    finals = [op for op in ctx.history.ops if op.f == "stream-final-done" and op.type == OK]
    if not finals:
        return unchecked("no task stream was held open in this run")
    tasks = {t["id"]: t for t in ctx.state.tasks}
    committed: dict[tuple[str, int], float] = {}  # (task, version) -> when that version was committed (history time)
    for a in ctx.state.audit:
        if a["task_id"] is not None and a["to_version"] is not None:
            committed[(a["task_id"], int(a["to_version"]))] = float(a["at"]) - ctx.state.t0
    believed: dict[str, dict[str, Op]] = defaultdict(dict)  # stream -> task -> its stream-final
    unread: dict[str, set[str]] = defaultdict(set)  # stream -> tasks it knows whose final read got no answer
    for op in ctx.history.ops:
        if op.f == "stream-final":
            if op.type == OK:
                believed[op.process][op.value["task_id"]] = op
            else:
                unread[op.process].add(op.value["task_id"])
    spans = _stream_open_spans(ctx.history)
    bad: list[Violation] = []
    checked = 0
    for final in finals:
        stream, user = final.process, final.value["user_id"]
        for tid, task in tasks.items():
            if task["user_id"] != user or tid in unread[stream]:
                continue
            belief = believed[stream].get(tid)
            now = (str(task["status"]), int(task["version"]))
            if belief is not None:
                checked += 1
                told = (str(belief.value.get("stream_status")), int(belief.value["stream_version"]))
                if told != now:
                    bad.append(Violation(tid, f"{stream} ended believing {told[0]}@v{told[1]}, the task is "
                                         f"{now[0]}@v{now[1]}", [belief.index, *ctx.ops_for_task(tid)[:5]]))
                continue
            at = committed.get((tid, now[1]))
            if at is not None and any(start <= at and at + STREAM_NOTIFY_SLACK_S <= end
                                      for start, end in spans.get(stream, ())):
                checked += 1
                bad.append(Violation(tid, f"{stream} ({user}) never heard of the task, though its last change "
                                     f"({now[0]}@v{now[1]}, t={at:.1f}) was committed while the stream was open",
                                     [final.index, *ctx.ops_for_task(tid)[:5]]))
    return judged(checked, bad)


CANCEL_READ_SLACK_S = 1.0  # a cancel's sender reads CANCEL_PENDING, then calls: a commit may land in between


def _cancel_pending_spans(ctx: CheckContext) -> dict[str, list[tuple[float, float]]]:
    """Each task's spells in CANCEL_PENDING, in history time (from its audit chain): from when the move into it began
    to when the move out of it had certainly committed (_committed_by). An audit row's time is its transaction's
    start (PostgreSQL's now()): on a slow database link (B10) the move out commits seconds later, and a sender
    reads CANCEL_PENDING until then (found by explore: seed 1 run 1451, 400 ms a statement: a flight's end began at
    t=75.6, had not committed at 76.6, and the cancel read before it was sent at 77.0)."""
    committed = _committed_by(ctx)
    versions: dict[str, list[tuple[int, float]]] = defaultdict(list)  # task -> (version, committed by)
    for (task, version), by in committed.items():
        versions[task].append((version, by))
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    entered: dict[str, float] = {}
    for a in sorted(ctx.state.audit, key=lambda a: (a["at"], a["id"])):
        tid, at = a["task_id"], a["at"] - ctx.state.t0
        if not tid or a["to"] is None:
            continue
        if tid in entered and a["from"] == TaskStatus.CANCEL_PENDING:
            # that version or a later one was seen committed; none: not known to have left (judged open)
            left = min((by for v, by in versions[tid] if v >= int(a["to_version"] or 0)), default=float("inf"))
            spans[tid].append((entered.pop(tid), max(at, left)))
        if a["to"] == TaskStatus.CANCEL_PENDING:
            entered[tid] = at
    for tid, at in entered.items():
        spans[tid].append((at, float("inf")))
    return spans


def cancels_sent_only_while_cancel_pending(ctx: CheckContext) -> Verdict:
    """I40: the platform is asked to stop a flight (a cancel's first try) only while its task is CANCEL_PENDING
    (seed 000 §7.2: a cancel is the user's request, recorded as CANCEL_PENDING, and only then sent). A cancel request
    delivered after its task settled (the flight ended while the broker held it) or after the platform refused it
    must not be sent: the task's status, not the message, decides (the opening's rule). Mutation testing of
    services/cancel.py (2026-12-07): a dispatcher that sent the cancel whatever the task's status passed every check;
    T7 delivers cancel requests after their flights' ends. A retry is the same request (its task was CANCEL_PENDING
    at the first try) and is not judged; CANCEL_READ_SLACK_S allows a commit between the read and the call."""
    spans = _cancel_pending_spans(ctx)
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.f != "cancel_flight" or op.type != INVOKE or op.value.get("try", 0) != 0:
            continue
        checked += 1
        tid = str(op.value.get("task_id"))
        if not any(start <= op.time and op.time - CANCEL_READ_SLACK_S <= end for start, end in spans.get(tid, ())):
            bad.append(Violation(tid, f"{op.process} asked the platform to cancel at t={op.time:.1f}s, the task not "
                                 "CANCEL_PENDING", ctx.ops_for_task(tid, ("cancel", "cancel_flight"))))
    return judged(checked, bad)
def _redrives_of_dead_letters(history: History) -> dict[str, tuple[int, int]]:
    """Dead letter id -> (re-drives answered ok, re-drives whose answer was lost): the on-call operator's (T2's
    ``dead_letter``) and the supervisor's through the API (``kind: dead-letter``)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for op in history.ops:
        if op.f != "redrive" or op.type not in (OK, INFO):
            continue
        v = op.value
        item = v.get("dead_letter") if "dead_letter" in v else v.get("id") if v.get("kind") == "dead-letter" else None
        if item is not None:
            counts[str(item)][0 if op.type == OK else 1] += 1
    return {k: (ok, lost) for k, (ok, lost) in counts.items()}


def dead_letters_keep_their_record(ctx: CheckContext) -> Verdict:
    """I41 (seed 000 §5.5: a dead letter keeps the original event id, task id, the error and the retry record, for a
    person to look into and re-drive after review): a consumer's dead letter's history is its own failures, the ones
    recorded for its consumer and event, in order and at their times (a prefix of them: failures recorded after it
    was written come from a re-drive, or from a redelivery that died before it could update the row); its error is
    its history's last; and it counts as many re-drives as were answered ok for it (and no more than those plus the
    ones whose answer was lost). Mutation testing of services/consumer.py (2026-12-07): a dead letter that took
    another event's or another consumer's failures, or counted a re-drive nobody made, passed every check."""
    failures: dict[tuple[str, str], list[tuple[int, str, float]]] = defaultdict(list)
    for f in ctx.state.event_failures:
        failures[(f["consumer"], f["event_id"])].append((f["attempt"], f["code"], f["at"]))
    redrives = _redrives_of_dead_letters(ctx.history)
    deliveries = _deliveries_by_message(ctx.history)
    bad: list[Violation] = []
    for d in ctx.state.dead_letters:
        key = (d["consumer"], d["event_id"])
        what = f"{d['consumer']}'s dead letter {d['id']} of {d['event_type']} {d['event_id']}"
        ops = [op.index for op in deliveries.get(key, ())][:20]
        record = [(h["attempt"], h["code"], epoch(datetime.fromisoformat(h["at"])))
                  for h in d.get("history") or () if h.get("code") != BROKER_DLQ]
        own = failures[key][:len(record)]
        if not record or [(a, c, round(t or 0.0, 3)) for a, c, t in record] != [
                (a, c, round(t, 3)) for a, c, t in own]:
            bad.append(Violation(d["task_id"], f"{what} has the history {[(a, c) for a, c, _ in record]}, not its own "
                                 f"failures {[(a, c) for a, c, _ in failures[key]]}", ops))
        elif d["error_code"] != record[-1][1] and d["error_code"] != BROKER_DLQ:
            bad.append(Violation(d["task_id"], f"{what} has the error {d['error_code']}, its last failure "
                                 f"{record[-1][1]}", ops))
        ok, lost = redrives.get(str(d["id"]), (0, 0))
        if "redrive_count" in d and not ok <= d["redrive_count"] <= ok + lost:
            bad.append(Violation(d["task_id"], f"{what} counts {d['redrive_count']} re-drive(s); {ok} were answered "
                                 f"ok{f' and {lost} unanswered' if lost else ''}", ops))
    return judged(len(ctx.state.dead_letters), bad)


# How long before its cache entry was set a cached snapshot may have been read: the read's own transaction and its
# answer's way back (a slow database link, B10, makes each round trip up to 400 ms longer).
SNAPSHOT_READ_SLACK_S = 3.0


def _committed_by(ctx: CheckContext) -> dict[tuple[str, int], float]:
    """(task, version) -> a time by which that version had certainly committed (history time): when its outbox event
    was marked sent (the publisher claimed it after the commit), or when an answer first named it or a later one."""
    by: dict[tuple[str, int], float] = {}
    for o in ctx.state.outbox:
        if o.get("sent_at") is not None and o.get("task_version") is not None:
            key = (str(o["task_id"]), int(o["task_version"]))
            by[key] = min(by.get(key, float("inf")), float(o["sent_at"]) - ctx.state.t0)
    for op in ctx.history.ops:
        v = op.value
        if op.type == OK and v.get("task_id") is not None and None not in (v.get("status"), v.get("version")):
            key = (str(v["task_id"]), int(v["version"]))
            by[key] = min(by.get(key, float("inf")), op.time)
    return by


def no_snapshot_older_than_its_cache(ctx: CheckContext) -> Verdict:
    """I39 (seed 000 §3.2: the task state is the database's, a cache only absorbs polling): a task snapshot read
    (``GET /v1/tasks/<id>``) is never older than the snapshot cache's lifetime (reference.copilot.api
    SNAPSHOT_CACHE_TTL_S): a read that began more than that lifetime (and SNAPSHOT_READ_SLACK_S) after a newer version
    of the task had certainly committed names that version or a later one. When a version had certainly committed is
    a fact both shells record (_committed_by); a version that never shows it is not asked for."""
    committed = _committed_by(ctx)
    newer: dict[str, list[tuple[float, int]]] = defaultdict(list)  # task -> (committed by, version), by time
    for (tid, version), at in committed.items():
        newer[tid].append((at, version))
    for versions in newer.values():
        versions.sort()
    invoked: dict[str, float] = {}
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.f != "read":
            continue
        if op.type == INVOKE:
            invoked[op.process] = op.time
            continue
        read_tid, read_version = op.value.get("task_id"), op.value.get("version")
        if op.type != OK or read_version is None or read_tid not in newer:
            continue
        tid, version = str(read_tid), int(read_version)
        start = invoked.get(op.process, op.time)
        owed = max((w for at, w in newer[tid] if at + SNAPSHOT_CACHE_TTL_S + SNAPSHOT_READ_SLACK_S < start),
                   default=-1)
        checked += 1
        if version < owed:
            bad.append(Violation(tid, f"{op.process} read v{version} at {start:.1f}s, though v{owed} had committed "
                                 f"more than the cache's {SNAPSHOT_CACHE_TTL_S:g}s (and {SNAPSHOT_READ_SLACK_S:g}s for "
                                 "the read) before", [op.index, *ctx.ops_for_task(tid)[:5]]))
    return judged(checked, bad, note=f"the cache's lifetime {SNAPSHOT_CACHE_TTL_S:g}s, a read's slack "
                  f"{SNAPSHOT_READ_SLACK_S:g}s")


def one_task_per_draft_version(ctx: CheckContext) -> Verdict:
    """I42 (seed 000 §6.3: confirming a draft version that already made a task answers with that task, never a second
    one, whatever the key): at most one task per (draft_id, draft_version) in the database, and every confirm answered
    ok for a draft version names the same task (I2 judges one key; a client that lost its key confirms again with
    another)."""
    bad: list[Violation] = []
    by_version: dict[tuple[str, int], list[str]] = defaultdict(list)
    for t in ctx.state.tasks:
        by_version[(str(t["draft_id"]), int(t["draft_version"]))].append(t["id"])
    for (draft, version), ids in sorted(by_version.items()):
        if len(ids) > 1:
            ops = sorted({i for tid in ids for i in ctx.ops_for_task(tid)})
            bad.append(Violation(ids[0], f"{len(ids)} tasks for draft {draft} v{version}: {', '.join(ids)}", ops))
    named: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for op in _confirm_answers(ctx.history):
        if op.value.get("draft_id") is None or op.value.get("draft_version") is None:
            continue
        named[(str(op.value["draft_id"]), int(op.value["draft_version"]))][str(op.value.get("task_id"))].append(
            op.index)
    for (draft, version), tasks in sorted(named.items()):
        if len(tasks) > 1:
            bad.append(Violation(sorted(tasks)[0], f"confirms of draft {draft} v{version} were answered with "
                                 f"{len(tasks)} different tasks: {', '.join(sorted(tasks))}",
                                 sorted(i for idx in tasks.values() for i in idx)))
    return judged(len(by_version) + len(named), bad)


def _security_log_may_have_failed(ctx: CheckContext, start: float, end: float) -> bool:
    """The database refused or lost writes in [start, end]: the security log's own write may have failed (the
    refusal is still answered, reference.copilot.api _log_refusal)."""
    return any((_db_fault(w) or w.fault == "db-error") and w.start <= end and (w.end is None or w.end >= start)
               for w in ctx.history.fault_windows())


def security_refusals_are_logged(ctx: CheckContext) -> Verdict:
    """I43 (docs/systems/copilot.md, seed 000 §7.3: security-relevant refusals are written to security_log): every
    request refused with a security-relevant code (reference.copilot.services.security SECURITY_CODES: a forbidden
    device or area, an approval of another version, a reused key, a self-approval) has its security_log row, counted
    per (actor, code). A refusal whose request overlapped a database fault is not owed a row (its write may have
    failed; the refusal is answered all the same)."""
    invoked: dict[str, float] = {}
    owed: Counter[tuple[str, str]] = Counter()
    ops: dict[tuple[str, str], list[int]] = defaultdict(list)
    checked = 0
    for op in ctx.history.ops:
        if op.type == INVOKE:
            invoked[op.process] = op.time
            continue
        code = op.value.get("code")
        if op.type != FAIL or code not in SECURITY_CODES:
            continue
        checked += 1
        start = invoked.get(op.process, op.time)
        if _security_log_may_have_failed(ctx, start, op.time):
            continue
        key = (str(op.value.get("user_id")), str(code))
        owed[key] += 1
        ops[key].append(op.index)
    logged = Counter((str(e["actor"]), str(e["code"])) for e in ctx.state.security_log)
    bad = [Violation(actor, f"{n} refusals of {actor} with {code}, {logged[(actor, code)]} security_log rows",
                     ops[(actor, code)][:20])
           for (actor, code), n in sorted(owed.items()) if logged[(actor, code)] < n]
    return judged(checked, bad)


def no_create_after_a_definite_rejection(ctx: CheckContext) -> Verdict:
    """I44 (seed 000 §5.5, §7.1: a definite rejection is not retried automatically: DISPATCH_FAILED, no second create
    of that takeoff): once the platform definitely rejected a create (simulator.model CREATE_REJECTIONS, a 4xx: nothing
    was created), no create with the same request id (the same attempt) follows. A supervisor's decision on the task
    in between (an audited operator action) is a person's, not an automatic retry: not judged."""
    operator_acts: dict[str, list[float]] = defaultdict(list)
    for a in ctx.state.audit:
        if a["task_id"] and str(a["actor"]).startswith("operator:"):
            operator_acts[a["task_id"]].append(a["at"] - ctx.state.t0)
    rejected: dict[str, tuple[float, int]] = {}  # request id -> (when, op) of its first definite rejection
    bad: list[Violation] = []
    for op in ctx.history.ops:
        if op.f != "create_flight" or op.value.get("request_id") is None:
            continue
        rid, tid = str(op.value["request_id"]), str(op.value.get("task_id"))
        if op.type == FAIL and op.value.get("error") in CREATE_REJECTIONS:
            rejected.setdefault(rid, (op.time, op.index))
        elif op.type == INVOKE and rid in rejected:
            at, index = rejected[rid]
            if not any(at <= t <= op.time for t in operator_acts.get(tid, ())):
                bad.append(Violation(tid, f"{op.process} sent create {rid} again at t={op.time:.1f}s, after the "
                                     f"platform rejected it at t={at:.1f}s", [index, op.index]))
    return judged(len(rejected), bad)


def back_to_executing_only_on_a_refused_cancel(ctx: CheckContext) -> Verdict:
    """I45 (seed 000 §7.1: CANCEL_PENDING -> EXECUTING when the platform refused the cancel: the flight flies on):
    a task goes back from CANCEL_PENDING to EXECUTING (automatically) only after the platform answered a cancel of its
    flight with a refusal (cancel_flight answered, not accepted) while the task was CANCEL_PENDING. A timeout or an
    error says nothing about the flight: it must not send the task back (issue 54: how a cancelling task settles)."""
    refusals: dict[str, list[float]] = defaultdict(list)
    for op in ctx.history.ops:
        if op.f == "cancel_flight" and op.type == OK and op.value.get("accepted") is False:
            refusals[str(op.value.get("task_id"))].append(op.time)
    entered: dict[str, float] = {}
    bad: list[Violation] = []
    checked = 0
    for a in sorted(ctx.state.audit, key=lambda a: (a["at"], a["id"])):
        tid, at = a["task_id"], a["at"] - ctx.state.t0
        if not tid or a["to"] is None:
            continue
        if a["to"] == TaskStatus.CANCEL_PENDING:
            entered[tid] = at
        elif (a["from"] == TaskStatus.CANCEL_PENDING and a["to"] == TaskStatus.EXECUTING
              and not str(a["actor"]).startswith("operator:")):
            checked += 1
            since = entered.get(tid, float("-inf"))
            if not any(since <= t <= at + CANCEL_READ_SLACK_S for t in refusals.get(tid, ())):
                bad.append(Violation(tid, f"back to EXECUTING at t={at:.1f}s (audit #{a['id']} {a['action']}) with "
                                     "no refusal of its cancel from the platform",
                                     ctx.ops_for_task(tid, ("cancel", "cancel_flight"))))
    return judged(checked, bad)


def _no_key_no_query_spans(history: History) -> list[tuple[float, float]]:
    """When the platform had neither its idempotency key nor its query by request id: each platform fault step sets
    the capabilities it names and leaves the other as it was (two steps may take them one after the other), and the
    end of a window leaves them (simulator.model.PLATFORM_CAPABILITIES)."""
    caps = dict.fromkeys(PLATFORM_CAPABILITIES, True)
    spans: list[tuple[float, float]] = []
    since: float | None = None
    for w in sorted((w for w in history.fault_windows() if w.fault == "platform"), key=lambda w: w.start):
        caps.update({k: bool(w.detail[k]) for k in PLATFORM_CAPABILITIES if k in w.detail})
        blind = not any(caps.values())
        if blind and since is None:
            since = w.start
        elif not blind and since is not None:
            spans.append((since, w.start))
            since = None
    return [*spans, *([(since, float("inf"))] if since is not None else [])]


ESCALATE_SLACK_S = 1e-3  # the reference compares the same clock's readings; rounding only


def manual_review_only_after_silence(ctx: CheckContext) -> Verdict:
    """I46 (seed 000 §7.1, §7.2: DISPATCHING or EXECUTING -> MANUAL_REVIEW when the outcome cannot be learnt: no key and
    no query, or the platform silent past escalate_after_s): a task goes automatically from DISPATCHING or EXECUTING
    to MANUAL_REVIEW only once it has not moved for the policy's ``escalate_after_s`` (its previous audited change that
    long before), or on a platform that has neither idempotency key nor query. A task sent to a person at the first
    unanswered query is a guess that the platform will stay silent (issue 54: rows 58 and 62)."""
    blind = _no_key_no_query_spans(ctx.history)
    wait_s = ctx.policy.escalate_after_s
    previous: dict[str, float] = {}
    bad: list[Violation] = []
    checked = 0
    for a in sorted(ctx.state.audit, key=lambda a: (a["at"], a["id"])):
        tid, at = a["task_id"], a["at"] - ctx.state.t0
        if not tid or a["to"] is None:
            continue
        if (a["to"] == TaskStatus.MANUAL_REVIEW and a["from"] in (TaskStatus.DISPATCHING, TaskStatus.EXECUTING)
                and not str(a["actor"]).startswith("operator:")):
            checked += 1
            quiet_s = at - previous.get(tid, at)
            if not any(start <= at < end for start, end in blind) and quiet_s < wait_s - ESCALATE_SLACK_S:
                bad.append(Violation(tid, f"{a['from']} -> MANUAL_REVIEW at t={at:.1f}s (audit #{a['id']} "
                                     f"{a['action']}) after {quiet_s:.1f}s without a change (policy: "
                                     f"{wait_s:g}s), on a platform with a key or a query", ctx.ops_for_task(tid)))
        previous[tid] = at
    return judged(checked, bad, note=f"escalate_after_s {wait_s:g}")


def audit_rows_never_change(ctx: CheckContext) -> Verdict:
    """I47 (seed 000 §7.3: the audit log cannot be changed or deleted through the application): every audit row the
    harness read during the run (the simulation's watcher, every AUDIT_WATCH_S) is at the end of the run unchanged,
    field for field. Unchecked where nothing watched the log (the real stack, whose application role PostgreSQL's
    grants refuse UPDATE and DELETE: S5)."""
    if ctx.state.audit_seen is None:
        return unchecked("no audit row was read during this run (the real stack: PostgreSQL's grants, S5)")
    final = {a["id"]: a for a in ctx.state.audit}
    bad: list[Violation] = []
    for seen in ctx.state.audit_seen:
        now = final.get(seen["id"])
        tid = seen["task_id"] or ""
        if now is None:
            bad.append(Violation(tid, f"audit #{seen['id']} ({seen['action']}) was deleted", ctx.ops_for_task(tid)))
        elif now != seen:
            changed = sorted(k for k in seen.keys() | now.keys() if seen.get(k) != now.get(k))
            bad.append(Violation(tid, f"audit #{seen['id']} ({seen['action']}) was changed: "
                                 + ", ".join(f"{k} {seen.get(k)!r} -> {now.get(k)!r}" for k in changed),
                                 ctx.ops_for_task(tid)))
    return judged(len(ctx.state.audit_seen), bad)


def redriven_dead_letters_take_effect(ctx: CheckContext) -> Verdict:
    """I48 (seed 000 §5.5: a dead item re-driven by a person after review then takes effect): every dead letter
    marked re-driven at the end of the run was processed by its consumer (its processed_event row). One that failed
    again to its limit is a dead letter again (no longer marked re-driven: judged no more); a message a consumer
    group lost (the stale-consumer fault, I6's) is not owed its effect."""
    done = {(p["consumer"], p["event_id"]) for p in ctx.state.processed}
    lost = {(str(op.value.get("group")), str(op.value.get("event_id"))) for op in lost_messages(ctx.history)}
    redriven = [d for d in ctx.state.dead_letters if d["redriven"]]
    bad = [Violation(str(d["task_id"]), f"dead letter #{d['id']} ({d['event_type']} for {d['consumer']}) was re-driven "
                     "but never took effect", ctx.ops_for_task(str(d["task_id"]), ("redrive", "deliver", "ack")))
           for d in redriven
           if (d["consumer"], d["event_id"]) not in done and (d["consumer"], d["event_id"]) not in lost]
    return judged(len(redriven), bad)


def _ops_for_draft(ctx: CheckContext, draft_id: str) -> list[int]:
    return [op.index for op in ctx.history.ops if op.value.get("draft_id") == draft_id][:20]


def no_approval_by_its_drafts_author(ctx: CheckContext) -> Verdict:
    """I49 (docs/systems/copilot.md: an approver may not approve their own draft, SELF_APPROVAL; the approval of seed
    000 §6.1 is a second person's word): no decision on a draft, approval or rejection, was made by the user who
    drafted it."""
    author = {d["id"]: d["user_id"] for d in ctx.state.drafts}
    decided = [a for a in ctx.state.approvals if a["draft_id"] in author]
    bad = [Violation(a["draft_id"], f"approval {a['id']} ({a['status']} of version {a['draft_version']}) was decided "
                     f"by {a['approver_id']}, who drafted it", _ops_for_draft(ctx, a["draft_id"]))
           for a in decided if a["approver_id"] == author[a["draft_id"]]]
    return judged(len(decided), bad)


def _first_outside(waypoints: list[list[float]], polygon: list[list[float]]) -> int | None:
    """The index of the first waypoint not strictly inside the polygon (matplotlib's point-in-path test: a second
    implementation beside the reference's own), or None."""
    from matplotlib.path import Path  # here: the import costs a run that never judges a route nothing

    if not waypoints:
        return None
    inside = Path(polygon).contains_points(waypoints)
    return next((i for i, ok in enumerate(inside) if not ok), None)


def _plan_problems(waypoints: list[list[float]] | None, parameters: dict[str, Any] | None,
                   area: dict[str, Any]) -> list[str]:
    """What of a stored plan lies outside its area or the documented limits (docs/systems/copilot.md)."""
    out: list[str] = []
    if waypoints is not None:
        if not 2 <= len(waypoints) <= MAX_WAYPOINTS:
            out.append(f"{len(waypoints)} waypoints (2..{MAX_WAYPOINTS})")
        i = _first_outside(waypoints, area["polygon"])
        if i is not None:
            out.append(f"waypoint {i} {waypoints[i]} outside area {area['id']}")
    if parameters is not None:
        altitude, speed = parameters.get("altitude_m"), parameters.get("speed_mps", 8.0)
        actions = parameters.get("actions") or []
        if not MIN_ALTITUDE_M <= float(altitude or 0) <= float(area["max_altitude_m"]):
            out.append(f"altitude {altitude} m outside {MIN_ALTITUDE_M}..{area['max_altitude_m']} m")
        if not MIN_SPEED_MPS <= float(speed) <= MAX_SPEED_MPS:
            out.append(f"speed {speed} m/s outside {MIN_SPEED_MPS}..{MAX_SPEED_MPS}")
        if len(actions) > MAX_ACTIONS or set(actions) - ALLOWED_ACTIONS:
            out.append(f"actions {sorted(set(actions))[:5]} not allowed (at most {MAX_ACTIONS} of "
                       f"{sorted(ALLOWED_ACTIONS)})")
    return out


def plans_within_area_and_limits(ctx: CheckContext) -> Verdict:
    """I50 (seed 000 §7.3: device ids, coordinates and action parameters drafted by the model are validated by the
    server; out of range is refused, nothing created): every stored plan lies within its area and the documented
    limits: every route row of a drafted plan (each version's waypoints: strictly inside the draft's area), every
    draft's current parameters (altitude between the floor and the area's ceiling, speed, actions) and every task's
    snapshot (route and parameters, judged against the task's area). A draft still GENERATING has no plan yet, nor
    has the route row of a version made GENERATING (no waypoints: S3's planned drafts' version 1)."""
    areas = {a["id"]: a for a in ctx.state.areas}
    drafts = {d["id"]: d for d in ctx.state.drafts if d["status"] != "GENERATING" and d["area_id"] in areas}
    bad: list[Violation] = []
    routes = [r for r in ctx.state.routes if r["waypoints"]]
    for r in routes:
        d = drafts.get(r["draft_id"])
        for problem in _plan_problems(r["waypoints"], None, areas[d["area_id"]]) if d else ():
            bad.append(Violation(r["draft_id"], f"route of version {r['version']}: {problem}",
                                 _ops_for_draft(ctx, r["draft_id"])))
    for d in drafts.values():
        for problem in _plan_problems(None, d["parameters"], areas[d["area_id"]]):
            bad.append(Violation(d["id"], f"draft version {d['version']}: {problem}", _ops_for_draft(ctx, d["id"])))
    tasks = [t for t in ctx.state.tasks if t.get("area_id") in areas and t.get("snapshot")]
    for t in tasks:
        snap = t["snapshot"]
        for problem in _plan_problems(snap["route"]["waypoints"], snap["parameters"], areas[t["area_id"]]):
            bad.append(Violation(t["id"], f"task snapshot: {problem}", ctx.ops_for_task(t["id"])))
    return judged(len(routes) + len(drafts) + len(tasks), bad)


def _snapshot_problems(t: dict[str, Any], routes: dict[str, dict[str, Any]],
                       drafts: dict[str, dict[str, Any]]) -> list[str]:
    """How a task differs from the draft version it was confirmed from."""
    snap, version = t["snapshot"], t["draft_version"]
    out: list[str] = []
    if (t["route_version"], snap.get("draft_version")) != (version, version):
        out.append(f"route version {t['route_version']} (snapshot: {snap.get('draft_version')}), confirmed {version}")
    if snap.get("device_id") != t["device_id"]:
        out.append(f"snapshot device {snap.get('device_id')}, task device {t['device_id']}")
    route = routes.get(t["route_id"])
    if route is None:
        out.append(f"its route row {t['route_id']} is gone")
    elif (route["draft_id"], route["version"]) != (t["draft_id"], version):
        out.append(f"its route row is now version {route['version']} of draft {route['draft_id']}, confirmed {version}")
    elif route["waypoints"] != snap["route"]["waypoints"]:
        out.append("its route row's waypoints differ from the snapshot's")
    d = drafts.get(t["draft_id"])
    if d is not None and d["version"] == version and (d["device_id"], d["parameters"]) != (t["device_id"],
                                                                                           snap["parameters"]):
        out.append(f"draft (still at version {version}) flies {d['device_id']} {d['parameters']}, the task "
                   f"{t['device_id']} {snap['parameters']}")
    return out


def tasks_keep_their_confirmed_version(ctx: CheckContext) -> Verdict:
    """I51 (seed 000 §3.1, §6.1: the task keeps a snapshot of the confirmed version's route, area, device and
    parameters; a later revision of the draft changes nothing of it): every task names the route row of exactly the
    version it was confirmed from, whose waypoints are its snapshot's; its device is its snapshot's; where the draft is
    still at that version, its device and parameters are the task's; every flight the platform flew for it flies its
    device. Drafts revised after their confirm (C4) are what make a difference show."""
    routes = {r["id"]: r for r in ctx.state.routes}
    drafts = {d["id"]: d for d in ctx.state.drafts}
    tasks = [t for t in ctx.state.tasks if t.get("snapshot")]
    devices = {t["id"]: t["device_id"] for t in tasks}
    bad = [Violation(t["id"], "; ".join(problems), ctx.ops_for_task(t["id"]))
           for t in tasks if (problems := _snapshot_problems(t, routes, drafts))]
    bad += [Violation(str(f["reference"]), f"flight {f['external_id']} flies {f['device_id']}, its task "
                      f"{devices[str(f['reference'])]}", ctx.ops_for_task(str(f["reference"])))
            for f in ctx.state.ledger
            if str(f.get("reference")) in devices and f.get("device_id") != devices[str(f["reference"])]]
    return judged(len(tasks), bad)


def owners_may_always_cancel(ctx: CheckContext) -> Verdict:
    """I52 (docs/systems/copilot.md: permissions gate starting a flight, never stopping one; seed 000 §7.2: a user may
    cancel their task): no cancel asked by the task's owner is refused as forbidden (a 403), whatever the owner's
    permissions are by then (S10 removes them mid-flight)."""
    owner = {t["id"]: t["user_id"] for t in ctx.state.tasks}
    answered = [op for op in ctx.history.ops if op.f == "cancel" and op.type in (OK, FAIL)
                and owner.get(op.value.get("task_id")) == op.value.get("user_id")]
    bad = [Violation(op.value["task_id"], f"{op.value['user_id']}'s cancel of their own task was refused as forbidden "
                     f"({op.value.get('code')})", [op.index])
           for op in answered if op.type == FAIL and op.value.get("status") == 403]
    return judged(len(answered), bad)


def _draft_answers(history: History) -> list[Op]:
    return [op for op in history.ops if op.f == "draft" and op.type == OK and "key" in op.value]


def one_draft_per_key(ctx: CheckContext) -> Verdict:
    """I53 (seed 000 §4.2: a draft is answered with its draft id; §6.3: one idempotency key per user operation, a
    retry of it gets the first outcome back): at most one draft is stored per (user, key), and every answer to a
    draft request with a key names the draft stored with that key (B11: a retry after an answer lost to a crash)."""
    stored: dict[tuple[str, str], list[str]] = defaultdict(list)
    for d in ctx.state.drafts:
        if d.get("idempotency_key") is not None:
            stored[(d["user_id"], d["idempotency_key"])].append(d["id"])
    answered: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for op in _draft_answers(ctx.history):
        answered[(op.value.get("user_id", ""), op.value["key"])][op.value.get("draft_id", "")].append(op.index)
    bad = [Violation(ids[0], f"{len(ids)} drafts stored for user {user} key {key}: {', '.join(ids)}",
                     _ops_for_draft(ctx, ids[0])) for (user, key), ids in sorted(stored.items()) if len(ids) > 1]
    for (user, key), named in sorted(answered.items()):
        ops = sorted(i for idx in named.values() for i in idx)[:20]
        if len(named) > 1:
            bad.append(Violation(sorted(named)[0], f"draft requests of {user} with key {key} were answered with "
                                 f"{len(named)} different drafts: {', '.join(sorted(named))}", ops))
        elif (draft_id := next(iter(named))) not in stored.get((user, key), ()):
            bad.append(Violation(draft_id, f"draft requests of {user} with key {key} were answered with {draft_id}, "
                                 f"which is not stored with that key (stored: {stored.get((user, key), [])})", ops))
    return judged(len(stored.keys() | answered.keys()), bad)


def _answered_versions(history: History) -> dict[tuple[str, int], tuple[str, int]]:
    """(draft id, version) -> (the status an answer named it with, the answer's op index): from the answers to
    drafts made and revised."""
    out: dict[tuple[str, int], tuple[str, int]] = {}
    for op in history.ops:
        if op.f in ("draft", "revise") and op.type == OK and op.value.get("draft_status") is not None:
            out[(str(op.value.get("draft_id")), int(op.value["draft_version"]))] = (op.value["draft_status"], op.index)
    return out


def tasks_only_from_ready_versions(ctx: CheckContext) -> Verdict:
    """I54 (seed 000 §4.2: a draft generated in stages is persisted as GENERATING, then READY or FAILED; the confirm
    checks the draft before it creates the task): every task was confirmed from a draft version answered READY,
    never from one still GENERATING (or FAILED: no plan to fly). A version's status is the one its answer named: a
    revision, the only way a plan arrives, makes a new version. S3's planned drafts are confirmed once too early."""
    versions = _answered_versions(ctx.history)
    known = [(t, versions[key]) for t in ctx.state.tasks
             if (key := (str(t.get("draft_id")), t.get("draft_version"))) in versions]
    bad = [Violation(t["id"], f"task confirmed from version {t['draft_version']} of draft {t['draft_id']}, answered "
                     f"{status} (op {index})", [index, *ctx.ops_for_task(t["id"])][:20])
           for t, (status, index) in known if status != "READY"]
    return judged(len(known), bad)


# A person's request answered ok -> (the id the op names, the audit actions it writes there): a user's, a supervisor's
# (a review resolved, an item re-driven: its kind says which row), an approver's, the on-call operator's (a dead
# letter re-driven, which names no item key). A repeat answered with what an earlier request made (``replayed``: a
# draft's, a confirm's or a cancel's) writes nothing.
REQUEST_AUDIT: dict[str, tuple[str, tuple[str, ...]]] = {
    **{f: HUMAN_AUDIT[f] for f in ("draft", "approve", "confirm", REVOKE_APPROVAL, "review")},
    "revise": ("draft_id", ("DRAFT_REVISED",)), "cancel": ("task_id", CANCEL_ACTIONS), "redrive": ("", ())}


def _request_audit(op: Op) -> tuple[str, tuple[str, ...]]:
    """The id ``op`` names ("": none) and the audit actions its request writes."""
    if op.f == "redrive":  # the supervisor's name their kind; the on-call operator's re-drive dead letters
        return "", (REDRIVE_AUDIT[op.value.get("kind", "dead-letter")],)
    return REQUEST_AUDIT[op.f]


def audit_rows_carry_their_request(ctx: CheckContext) -> Verdict:
    """I55 (seed 000 §7.3: each audit row records the actor, the action, the task, the statuses, the time, the
    request's correlation id and a result summary): every audit row a request answered ok wrote carries the
    correlation id that request sent (X-Request-Id), so the log leads back to the request and the request to its
    rows: a user's draft made or revised, task created or cancelled; an approval decided or revoked; a supervisor's
    review resolved or item re-driven; the on-call operator's dead letter re-driven. A repeat answered with what an
    earlier request made (a draft's, a confirm's or a cancel's ``replayed``) writes no row at all."""
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in ctx.state.audit:
        if a.get("correlation_id"):
            by_request[a["correlation_id"]].append(a)
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if op.type != OK or op.f not in REQUEST_AUDIT or not (rid := op.value.get("correlation_id")):
            continue
        key, wanted = _request_audit(op)
        if key and not op.value.get(key):
            continue
        checked += 1
        if op.value.get("replayed"):
            if written := by_request.get(rid):
                actions = ", ".join(a["action"] for a in written)
                bad.append(Violation(op.value.get("task_id"), f"{op.process}'s {op.f} was answered as a repeat of an "
                                     f"earlier request, and wrote audit rows ({actions}) under its correlation id "
                                     f"{rid}", [op.index]))
        elif not any(a["action"] in wanted and (not key or str(a.get(key)) == str(op.value[key]))
                     for a in by_request.get(rid, ())):
            named = f" of {key[:-3]} {op.value[key]}" if key else ""
            bad.append(Violation(op.value.get("task_id"), f"{op.process}'s {op.f}{named} was answered ok, and no "
                                 f"{' or '.join(wanted)} audit row carries its request's correlation id {rid}",
                                 [op.index]))
    return judged(checked, bad)


PLATFORM_CALL_SLACK_S = 3.0  # a call's recorded start and end are its process's, on a loaded machine


def _platform_calls(history: History) -> list[tuple[Op, Op | None]]:
    """Every recorded platform call: its invoke and its end (ok, fail or info; None: it never ended)."""
    calls: list[tuple[Op, Op | None]] = []
    started: dict[tuple[str, str], Op] = {}
    for op in history.ops:
        if op.f not in RECORDED_PLATFORM_CALLS:
            continue
        if op.type == INVOKE:
            started[(op.process, op.f)] = op
        elif (invoke := started.pop((op.process, op.f), None)) is not None:
            calls.append((invoke, op))
    return calls + [(invoke, None) for invoke in started.values()]


def platform_calls_end_within_their_timeout(ctx: CheckContext) -> Verdict:
    """I56 (seed 000 §5.5: the database, the platform and the devices each get their own timeout): every platform call
    ends within its client's connect and read timeouts (plus a slack for a loaded machine), or its process was
    stopped, paused or held meanwhile; a call that never ended is judged at the history's end. Judged where the
    history records the reference's own client (the real stack); the simulation applies the timeout itself."""
    limit = ctx.platform_call_limit_s
    if limit is None:
        return unchecked("the simulation applies each platform call's timeout itself (CopilotLatency.client_timeout_s)")
    end_of_run = max((op.time for op in ctx.history.ops), default=0.0)
    bad: list[Violation] = []
    calls = _platform_calls(ctx.history)
    for invoke, done in calls:
        ended = end_of_run if done is None else done.time
        if ended - invoke.time <= limit + PLATFORM_CALL_SLACK_S:
            continue
        if _group_had(ctx, invoke.process, invoke.time, ended, (*STOPS, "pause", "resume", "hold")):
            continue
        bad.append(Violation(invoke.value.get("task_id"), f"{invoke.process}'s {invoke.f} took "
                             f"{ended - invoke.time:.1f}s{' and never ended' if done is None else ''} (its timeouts: "
                             f"{limit:g}s)", [invoke.index] + ([done.index] if done else [])))
    return judged(len(calls), bad, note=f"within {limit:g}s plus {PLATFORM_CALL_SLACK_S:g}s")


INVARIANTS: Invariants[CheckContext] = Invariants({
    "I1": (check_i1, "at most one platform flight per task (platform ledger)"),
    "I2": (check_i2, "at most one task per (user, idempotency key)"),
    "I3": (check_i3, "every confirmed task settles (terminal or MANUAL_REVIEW) within the recovery bound"),
    "I4": (check_i4, "every audited transition is legal; terminal tasks never change"),
    "I5": (check_i5, "task, audit and outbox event are written together or not at all"),
    "I6": (check_i6, "every outbox event is published; every consumed event takes effect once"),
    "I7": (check_i7, "CANCELLED only after the platform confirmed the cancel"),
    "I8": (check_i8, "every COMPLETED task has its report object"),
    "I9": (check_i9, "telemetry never moves a task backwards; each alert takes effect once"),
    "I10": (check_i10, "no outcome depends on Redis"),
    "I11": (check_i11, "errors are structured with stable codes; refusals write nothing"),
    "I12": (no_flight_into_closed_airspace, "no flight into closed airspace (pre-flight check at DISPATCH_STARTED)"),
    "I13": (no_flight_without_permission, "no flight for a user without permission for the device and the area"),
    "I14": (no_flight_without_approval_of_the_confirmed_version,
            "no flight without an approval of the confirmed draft version"),
    "I15": (confirm_answer_is_own_task_of_that_draft,
            "a confirm answer names the caller's own task of exactly that draft version"),
    "I16": (no_redelivery_past_the_limit_without_dead_letter,
            "no message is delivered past the policy's limit without being dead-lettered"),
    "I17": (processed_events_took_effect, "every event a consumer recorded as processed took its effect"),
    "I18": (task_agrees_with_its_flight, "a terminal task agrees with its flight on the platform"),
    "I19": (retries_bounded_and_spaced, "platform calls are retried a bounded number of times, with backoff"),
    "I20": (no_platform_call_inside_a_transaction, "no database transaction is open across a platform call"),
    "I21": (attempts_agree_with_the_platform, "the recorded dispatch attempts agree with the platform's ledger"),
    "I22": (only_the_owner_acts_on_a_task, "a user reads and cancels only their own tasks"),
    "I23": (no_flight_on_an_unfit_device,
            "no flight on a device offline, unknown or under the minimum battery at its pre-flight check"),
    "I24": (answers_name_states_the_task_had, "every status and version an answer names is one the task had"),
    "I25": (the_reconciler_repairs_only_what_a_fault_touched,
            "the reconciler does not act on a task no fault touched on its way to the platform"),
    "I26": (every_human_action_is_audited, "every action of a person answered ok is in the audit log"),
    "I27": (no_defect_raised, "no error only a defect raises"),
    "I28": (no_refusal_without_its_cause, "a pre-flight check refuses only for a cause that held"),
    "I29": (a_cancel_reaches_the_platform, "a cancel the user asked for reaches the platform while the flight flies"),
    "I30": (outbox_backs_off, "an outbox row backs off a refusing broker; its budget lasts as its policy says"),
    "I31": (every_dead_item_alerts_an_operator, "every item gone DEAD pages an operator, once"),
    "I32": (dead_letters_at_the_limit_then_acked,
            "a message is dead-lettered at its last allowed delivery, not sooner, and then acked"),
    "I33": (acks_follow_the_outcome, "a consumer acks a delivery only once its outcome is committed"),
    "I34": (worker_loops_run_until_stopped, "a worker's loop ends only when it is stopped"),
    "I35": (a_cancel_answer_follows_the_task_status, "a cancel is answered as the task's status says"),
    "I36": (outbox_claims_take_due_rows, "a claim with room takes every outbox row that is due"),
    "I37": (outbox_rounds_go_as_the_policy_says,
            "an outbox publisher marks what it sent, puts back what was refused, and pauses as its policy says"),
    "I38": (every_stream_converges, "every task stream ends at each of its user's tasks' latest status and version"),
    "I39": (no_snapshot_older_than_its_cache, "a task snapshot read is never older than the snapshot cache's lifetime"),
    "I40": (cancels_sent_only_while_cancel_pending,
            "the platform is asked to stop a flight only while its task is CANCEL_PENDING"),
    "I41": (dead_letters_keep_their_record,
            "a dead letter keeps its own failure history and error, and counts the re-drives made of it"),
    "I42": (one_task_per_draft_version, "at most one task per draft version, whatever the key; its confirms name it"),
    "I43": (security_refusals_are_logged, "every security-relevant refusal has its security_log row"),
    "I44": (no_create_after_a_definite_rejection, "no create of a takeoff follows its definite rejection"),
    "I45": (back_to_executing_only_on_a_refused_cancel,
            "a cancelling task flies on (EXECUTING) only after the platform refused its cancel"),
    "I46": (manual_review_only_after_silence,
            "a task goes to MANUAL_REVIEW only after escalate_after_s of silence, or with neither key nor query"),
    "I47": (audit_rows_never_change, "no audit row changes or vanishes once written"),
    "I48": (redriven_dead_letters_take_effect, "every re-driven dead letter takes effect (or is dead again)"),
    "I49": (no_approval_by_its_drafts_author, "no draft is approved (or rejected) by the user who drafted it"),
    "I50": (plans_within_area_and_limits,
            "every stored plan (route rows, drafts, task snapshots) lies within its area and the documented limits"),
    "I51": (tasks_keep_their_confirmed_version,
            "every task keeps the route, device and parameters of the draft version it was confirmed from"),
    "I52": (owners_may_always_cancel, "no owner's cancel of their task is refused as forbidden (permissions or not)"),
    "I53": (one_draft_per_key, "at most one draft per (user, idempotency key); every answer of the key names it"),
    "I54": (tasks_only_from_ready_versions, "every task is confirmed from a draft version answered READY"),
    "I55": (audit_rows_carry_their_request,
            "every audit row a request wrote carries its correlation id; a repeated request writes none"),
    "I56": (platform_calls_end_within_their_timeout,
            "every platform call ends within its client's timeouts (judged on the real stack)"),
})
