"""Invariant checkers (DESIGN.md §6) over a history and a final state. Each names the offending task ids
and the operations of the history that concern them, and says how many items it examined, so that a
vacuous pass is visible."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference.policy import Policy
from reference.runtime import PLATFORM_CALL_IN_TRANSACTION, RECORDED_PLATFORM_CALLS
from reference.states import TERMINAL, TaskStatus, is_legal
from scenarios.history import INVOKE, OK, History, Op
from scenarios.state import FinalState

HELD, VIOLATED, UNCHECKED = "held", "violated", "unchecked"
SETTLED = {s.value for s in TERMINAL} | {TaskStatus.MANUAL_REVIEW.value}


@dataclass
class Violation:
    task_id: str | None
    message: str
    ops: list[int] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "message": self.message, "ops": self.ops}


@dataclass
class Verdict:
    invariant: str
    title: str
    status: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "title": self.title, "status": self.status, "checked": self.checked,
                "violations": [v.as_json() for v in self.violations[:50]],
                "violation_count": len(self.violations), "note": self.note}


@dataclass
class CheckContext:
    history: History
    state: FinalState
    recovery_bound_s: float = 600.0
    policy: Policy = field(default_factory=Policy)  # the reference's limits in this run (retries, deliveries)
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


def _verdict(inv: str, title: str, checked: int, violations: list[Violation], note: str = "") -> Verdict:
    return Verdict(inv, title, VIOLATED if violations else HELD, checked, violations, note)


def check_i1(ctx: CheckContext) -> Verdict:
    flights: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in ctx.state.ledger:
        flights[str(f.get("reference"))].append(f)
    bad = [Violation(ref, f"{len(fs)} platform flights for one task: "
                     + ", ".join(str(f["external_id"]) for f in fs), ctx.ops_for_task(ref))
           for ref, fs in sorted(flights.items()) if len(fs) > 1]
    return _verdict("I1", "at most one platform flight per task (platform ledger)", len(flights), bad)


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
    return _verdict("I2", "at most one task per (user, idempotency key)", len(by_key), bad)


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
    return _verdict("I3", "every confirmed task settles (terminal or MANUAL_REVIEW) within the recovery bound",
                    len(tasks) + len(confirmed), bad,
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
    return _verdict("I4", "every audited transition is legal; terminal tasks never change",
                    sum(len(c) for c in chains.values()), bad)


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
    return _verdict("I5", "task, audit and outbox event are written together or not at all",
                    len(tasks | created_audit | created_event), bad)


# Which consumer must take which event type (reference.services.consumer.HANDLERS).
SUBSCRIBED = {"TaskCreated": "dispatcher", "TaskCancelRequested": "dispatcher", "TaskCompleted": "report-worker"}


def check_i6(ctx: CheckContext) -> Verdict:
    bad: list[Violation] = []
    processed = Counter((p["consumer"], p["event_id"]) for p in ctx.state.processed)
    dead = {(d["consumer"], d["event_id"]) for d in ctx.state.dead_letters}
    for o in ctx.state.outbox:
        if o["status"] != "SENT":
            bad.append(Violation(o["task_id"], f"outbox event {o['event_type']} {o['id']} was never published",
                                 ctx.ops_for_task(o["task_id"])))
            continue
        consumer = SUBSCRIBED.get(o["event_type"])
        if consumer is None:
            continue
        n = processed[(consumer, o["id"])]
        if n == 0 and (consumer, o["id"]) not in dead:
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
    return _verdict("I6", "every outbox event is published; every consumed event takes effect once",
                    len(ctx.state.outbox), bad, note=f"{redelivered} events were delivered more than once")


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
    return _verdict("I7", "CANCELLED only after the platform confirmed the cancel",
                    sum(1 for t in ctx.state.tasks if t["status"] == TaskStatus.CANCELLED), bad, note)


def check_i8(ctx: CheckContext) -> Verdict:
    reports = {r["task_id"]: r for r in ctx.state.reports}
    bad: list[Violation] = []
    completed = [t for t in ctx.state.tasks if t["status"] == TaskStatus.COMPLETED]
    for t in completed:
        r = reports.get(t["id"])
        if r is None:
            bad.append(Violation(t["id"], "COMPLETED without a report record", ctx.ops_for_task(t["id"])))
        elif r["status"] != "UPLOADED":
            bad.append(Violation(t["id"], f"report is {r['status']} after recovery (attempts {r['attempts']}, "
                                 f"last error {r['last_error']})", ctx.ops_for_task(t["id"])))
        elif ctx.state.objects.get(r["object_key"]) != r["sha256"]:
            bad.append(Violation(t["id"], f"report {r['object_key']} marked UPLOADED but the object store has "
                                 + ("no such object" if r["object_key"] not in ctx.state.objects
                                    else "different content"), ctx.ops_for_task(t["id"])))
    return _verdict("I8", "every COMPLETED task has its report object", len(completed), bad)


def check_i9(ctx: CheckContext) -> Verdict:
    """Telemetry never moves a task backwards (status: I4's terminal rule; progress: the task keeps the
    highest sequence it ever stored); each alert takes effect once (count == distinct alerts stored)."""
    bad: list[Violation] = []
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
    return _verdict("I9", "telemetry never moves a task backwards; each alert takes effect once",
                    len(ctx.state.tasks), bad)


REDIS_FAULTS = frozenset({"redis-loss"})


def check_i10(ctx: CheckContext) -> Verdict:
    """No outcome depends on Redis: while Redis is flushed or down, no client request fails for it (the
    other invariants, checked on the same run, say that the outcomes themselves held)."""
    windows = [w for w in ctx.history.fault_windows() if w.fault in REDIS_FAULTS]
    if not windows:
        return Verdict("I10", "no outcome depends on Redis", UNCHECKED,
                       note="no Redis fault in this run (Redis exists only on the real stack)")
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
        if not op.process.startswith("user") or op.type not in (OK, "fail"):
            continue
        if not any(w.start <= op.time <= (w.end if w.end is not None else float("inf")) + 5.0 for w in windows):
            continue
        checked += 1
        if op.type == "fail" and int(op.value.get("status", 0)) >= 500:
            bad.append(Violation(op.value.get("task_id"), f"{op.f} failed with {op.value.get('code')} while Redis "
                                 "was lost", [op.index]))
    return _verdict("I10", "no outcome depends on Redis", checked, bad)


STABLE_CODE = re.compile(r"^[A-Z][A-Z0-9_]{2,63}$")
CLIENTS = ("user", "reader", "attacker", "stream")


def check_i11(ctx: CheckContext) -> Verdict:
    """Every error answer a client got is structured (problem+json where HTTP is involved) with a stable
    code and no stack trace; and a refused create wrote nothing: a key none of whose confirms succeeded
    (all refused, none unknown) has no task."""
    bad: list[Violation] = []
    checked = 0
    outcomes: dict[tuple[str, str], set[str]] = defaultdict(set)
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
    return _verdict("I11", "errors are structured with stable codes; refusals write nothing", checked, bad)


def task_agrees_with_its_flight(ctx: CheckContext) -> Verdict:
    """I16: a terminal task tells what the platform says happened: COMPLETED only if its flight completed,
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
    return _verdict("I16", "a terminal task agrees with its flight on the platform", checked, bad)


RETRIED_CALLS = ("create_flight", "get_device", "cancel_flight")


def retries_bounded_and_spaced(ctx: CheckContext) -> Verdict:
    """I17: one call is tried at most ``platform_retry.attempts`` times, and try n+1 starts no sooner than
    the policy's backoff floor after try n answered (seed 000 §5.5: bounded retries with backoff)."""
    retry = ctx.policy.platform_retry
    last_answer: dict[tuple[str, str, Any], tuple[int, float, int]] = {}  # (process, f, task) -> (try, t, op)
    bad: list[Violation] = []
    checked = 0
    for op in ctx.history.ops:
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
    return _verdict("I17", "platform calls are retried a bounded number of times, with backoff", checked, bad,
                    note=f"at most {retry.attempts} tries; try n+1 at least min(cap, base*2^n)/2 after try n")


IDLE_IN_TRANSACTION = "idle-in-transaction"  # the real stack's pg_stat_activity sample (scenarios.stack_run)


def no_platform_call_inside_a_transaction(ctx: CheckContext) -> Verdict:
    """I18: no database transaction is open across a platform call (seed 000: no lock held across external
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
    return _verdict("I18", "no database transaction is open across a platform call", max(calls, len(bad)), bad,
                    note)


CHECKERS: dict[str, Callable[[CheckContext], Verdict]] = {
    "I1": check_i1, "I2": check_i2, "I3": check_i3, "I4": check_i4,
    "I5": check_i5, "I6": check_i6, "I7": check_i7, "I8": check_i8, "I9": check_i9, "I10": check_i10,
    "I11": check_i11, "I16": task_agrees_with_its_flight, "I17": retries_bounded_and_spaced,
    "I18": no_platform_call_inside_a_transaction,
}
NOT_YET: dict[str, str] = {}


def check_all(ctx: CheckContext, invariants: list[str] | None = None) -> list[Verdict]:
    out = [CHECKERS[i](ctx) for i in (invariants or list(CHECKERS))]
    out += [Verdict(i, "", UNCHECKED, note=why) for i, why in NOT_YET.items() if i not in CHECKERS]
    return out
