"""What each scenario must see happen for its run to prove anything: its fault really fired and touched
the system (a scenario whose fault never touched anything fails). Incident files name these checks by
the key of ``EXPECTATIONS``; generic, declarative expectations live in scenarios.incident."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.history import DEVICES, FAIL, INFO, INVOKE, NEMESIS, OK, REVOKE_APPROVAL, History
from kernel.runtime import ACK
from reference.copilot.runtime import EVENTS_WITH_DUPLICATES, RECORDED_PLATFORM_CALLS
from reference.copilot.services.security import SECURITY_CODES
from scenarios.verdicts import Exercised, NotFired
from systems.copilot.checkers import IDLE_IN_TRANSACTION, lost_messages, publisher_rounds
from systems.copilot.faults import PERMISSIONS
from systems.copilot.state import SETTLED, FinalState
from systems.copilot.stream_belief import STREAM_DROP, STREAM_FINAL, STREAM_OPEN


def _ops(h: History, f: str, type_: str | None = None) -> list[Any]:
    return [op for op in h.ops if op.f == f and (type_ is None or op.type == type_)]


def _c1(h: History, s: FinalState) -> str | None:
    failed = {op.value["key"] for op in _ops(h, "confirm", FAIL) if op.value.get("code") == "SERVICE_UNAVAILABLE"}
    recovered = {op.value["key"] for op in _ops(h, "confirm", OK)} & failed
    if not failed:
        return NotFired("no confirm hit the injected database error")
    if not recovered:
        return "no confirm that hit the database error was retried successfully with the same key"
    return None


def _c2(h: History, s: FinalState) -> str | None:
    w = next((w for w in h.fault_windows() if w.fault == "broker-outage"), None)
    if w is None or w.end is None:
        return NotFired("no broker outage window recorded")
    held = [o for o in s.outbox if o["event_type"] == "TaskCreated" and w.start <= o["created_at"] - s.t0 < w.end
            and o["sent_at"] is not None and o["sent_at"] - s.t0 >= w.end]
    return None if held else NotFired("no task was created during the outage and published after it")


def _kills(h: History, prefix: str) -> int:
    return sum(1 for op in h.ops if op.f == "kill" and str(op.value.get("process", "")).startswith(prefix))


def _c3(h: History, s: FinalState) -> str | None:
    if not _kills(h, "publisher"):
        return NotFired("the publisher was never killed after a broker ack")
    resent = Counter(op.value["event_id"] for op in _ops(h, "deliver") if op.value.get("group") == "dispatcher")
    return None if any(n > 1 for n in resent.values()) else "no event was delivered twice after the crash"


def _c4(h: History, s: FinalState) -> str | None:
    replayed = [op for op in _ops(h, "confirm", OK) if op.value.get("replayed")]
    by_key = Counter(op.value["key"] for op in _ops(h, "confirm", OK))
    if not any(n > 1 for n in by_key.values()):
        return NotFired("no key was confirmed concurrently more than once")
    return None if replayed else "no concurrent confirm was answered with the winner's task"


def _r1(h: History, s: FinalState) -> str | None:
    timeouts = [op for op in _ops(h, "create_flight", INFO) if op.value.get("error") == "TIMEOUT"]
    found = [op for op in _ops(h, "find_by_request_id", OK) if op.value.get("external_id")]
    if not timeouts:
        return NotFired("no create_flight timed out after the platform accepted it")
    return None if found else "no timed-out dispatch was resolved by a query"


def _r2(h: History, s: FinalState) -> str | None:
    """Each task whose dispatcher died between the platform's accept and the write-back is settled by its flight's
    own events: the first telemetry comes seconds after the accept, long before the reconciler's stale threshold
    (60 s; 20 s on the stack, where the platform's 5 s telemetry period is 83 ms). Mutation testing of events.py
    (2026-12-06): events that never counted as evidence were green here, the reconciler settling every task."""
    if not (kills := _kills(h, "dispatcher")):
        return NotFired("no dispatcher was killed between the platform's accept and the write-back")
    by_events = _by_actor(s, "FLIGHT_CONFIRMED", "platform-events")
    if len(by_events) < kills:
        return (f"{kills} dispatchers died between the platform's accept and the write-back, but their flights' events "
                f"settled only {len(by_events)} tasks (the reconciler: {len(_by_reconciler(s, 'FLIGHT_CONFIRMED'))})")
    return None


def _b1(h: History, s: FinalState) -> str | None:
    deliveries = Counter((op.value["group"], op.value["event_id"]) for op in _ops(h, "deliver"))
    dups = sum(1 for n in deliveries.values() if n > 1)
    return None if dups else NotFired("no message was delivered more than once")


def _t1(h: History, s: FinalState) -> str | None:
    codes = Counter(op.value.get("error") for op in h.ops if op.type == FAIL and op.f == "create_flight")
    if not codes:
        return NotFired("no create_flight failed with a transient error")
    retried = [op for op in h.ops if op.type == "invoke" and op.f in ("create_flight", "get_device")
               and op.value.get("try", 0) >= 1]
    if not retried:
        return "no platform call was retried"
    tries = max(op.value["try"] for op in retried) + 1
    if tries < 3:
        return f"calls were tried at most {tries} times: the bound was never approached"
    done = sum(1 for t in s.tasks if t["status"] == "COMPLETED")
    return None if done else f"transient errors {dict(codes)} but no task completed"


def _t6(h: History, s: FinalState) -> str | None:
    """A cancel met a transient platform error and was tried again, and a task whose cancel was retried ended
    CANCELLED: the platform's confirmation settled it (I19 judges the tries' bound and spacing)."""
    if not [op for op in _ops(h, "cancel_flight", FAIL) if op.value.get("error") in ("UNAVAILABLE", "THROTTLED")]:
        return NotFired("no cancel_flight failed with a transient error")
    retried = {op.value.get("task_id") for op in _ops(h, "cancel_flight", INVOKE) if op.value.get("try", 0) >= 1}
    if not retried:
        return "no cancel_flight was tried again after a transient error"
    status = {t["id"]: t["status"] for t in s.tasks}
    if not any(status.get(tid) == "CANCELLED" for tid in retried):
        return f"no task whose cancel was retried ended CANCELLED ({sorted(str(status.get(t)) for t in retried)})"
    return None


def _t3(h: History, s: FinalState) -> str | None:
    rejected = {a["task_id"] for a in s.audit if a["to"] == "DISPATCH_FAILED"}
    if not rejected:
        return NotFired("no dispatch was rejected")
    flown = {str(f["reference"]) for f in s.ledger}
    resent = [op for op in _ops(h, "create_flight", "invoke") if op.value.get("task_id") in rejected]
    per_task = Counter(op.value["task_id"] for op in resent)
    if any(n > 1 for n in per_task.values()):
        return f"a rejected takeoff was sent again automatically: {dict(per_task)}"
    return None if not (rejected & flown) else "a rejected task flew"


def _t4(h: History, s: FinalState) -> str | None:
    """Uncertain dispatches happened, none was resent, and each was settled by the platform's own evidence
    (its telemetry names our task) or left to MANUAL_REVIEW. Which of the two depends on whether telemetry
    beats the client's timeout: in simulation it does not, on a time-scaled real platform it does."""
    uncertain = {op.value["task_id"] for op in _ops(h, "create_flight", INFO)
                 if op.value.get("error") == "TIMEOUT"}
    if not uncertain:
        return NotFired("no create_flight timed out")
    creates = Counter(op.value["task_id"] for op in _ops(h, "create_flight", "invoke")
                      if op.value.get("task_id") in uncertain)
    resent = sorted(t for t, n in creates.items() if n > 1)
    if resent:
        return f"uncertain dispatches were resent: {resent}"
    by_evidence = {a["task_id"] for a in s.audit
                   if a["action"] == "FLIGHT_CONFIRMED" and a["actor"] == "platform-events"}
    manual = {t["id"] for t in s.tasks if t["status"] == "MANUAL_REVIEW"}
    unresolved = sorted(uncertain - by_evidence - manual)
    if unresolved:
        return f"uncertain dispatches neither in MANUAL_REVIEW nor settled by evidence: {unresolved}"
    # A dispatcher that died before its create left a DISPATCHING task nothing can settle: the reconciler's to review.
    if not (kills := _kills(h, "dispatcher")):
        return NotFired("no dispatcher died between DISPATCHING and its create")
    reviewed = _by_reconciler(s, "OUTCOME_UNKNOWN")
    if len(reviewed) != kills:
        return (f"{kills} dispatchers died before their create, but the reconciler sent {len(reviewed)} tasks to "
                f"MANUAL_REVIEW")
    return None


def _r3(h: History, s: FinalState) -> str | None:
    """The disorder reached the backend, not only the platform's knobs: a webhook batch held duplicates (the
    ingestion path records each such batch in both shells), an event of a flight arrived after a later one
    of the same flight, and a terminal event arrived well after the flight's other events (at least half the
    configured lateness later than its promptest event); and it was absorbed: alerts stored, tasks completed."""
    knobs = next((w.detail for w in h.fault_windows() if w.fault == "platform" and "late_completion_s" in w.detail),
                 {})
    late_s = float(knobs.get("late_completion_s", 0.0))
    arrivals = s.event_arrivals
    duplicates = sum(int(op.value.get("duplicates", 0)) for op in _ops(h, EVENTS_WITH_DUPLICATES))
    lateness = list(arrivals.get("terminal_lateness_s", {}).values())
    late = [x for x in lateness if late_s > 0 and x >= late_s / 2]
    missing = []
    if not duplicates:
        missing.append("no webhook batch reached the backend with a duplicate event")
    if not arrivals.get("reordered"):
        missing.append(f"no event arrived after a later event of its flight ({arrivals.get('stored', 0)} stored)")
    if late_s <= 0:
        missing.append("the platform was not told to deliver terminal events late")
    elif not late:
        missing.append(f"no terminal event arrived {late_s / 2:.0f}s or more after its flight's promptest event "
                       f"(latest: {max(lateness, default=0.0):.1f}s, {len(lateness)} terminal events)")
    if not sum(s.alert_events.values()):
        missing.append("no alert was stored")
    if not [o for o in s.outbox if o["event_type"] == "TaskCompleted"]:
        missing.append("no task completed")
    return "; ".join(missing) or None


def _r4(h: History, s: FinalState) -> str | None:
    timeouts = [op for op in _ops(h, "cancel_flight", INFO) if op.value.get("error") == "TIMEOUT"]
    if not timeouts:
        return NotFired("no cancel request timed out")
    cancelled = {t["id"] for t in s.tasks if t["status"] == "CANCELLED"}
    return None if {op.value["task_id"] for op in timeouts} & cancelled else \
        "no task whose cancel timed out was cancelled after the platform confirmed"


def _r5(h: History, s: FinalState) -> str | None:
    retried = [r for r in s.reports if r["status"] == "UPLOADED" and r["attempts"] > 1]
    return None if retried else "no report upload failed and recovered"


def _b3(h: History, s: FinalState) -> str | None:
    refused = [op for op in h.ops if op.type == FAIL and op.f in ("draft", "confirm", "cancel")
               and op.value.get("code") == "SERVICE_UNAVAILABLE"]
    return None if refused else NotFired("no request was refused while the database was down")


def _b5(h: History, s: FinalState) -> str | None:
    if not any(op.f == "pause" for op in h.ops):
        return NotFired("no dispatcher was paused after the platform accepted")
    taken = [a for a in s.audit if a["action"] == "FLIGHT_CONFIRMED" and a["actor"] in ("reconciler",
                                                                                         "platform-events")]
    return None if taken else "no paused dispatcher's task was taken over while it slept"


def _paused(h: History, why: str) -> list[tuple[float, float]]:
    """(pause, resume) times of each process stopped at the crash point ``why`` ("before dispatch.rejected")."""
    since: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    for op in h.ops:
        if op.f == "pause" and op.value.get("why") == why:
            since[op.value["process"]] = op.time
        elif op.f == "resume" and op.value.get("process") in since:
            spans.append((since.pop(op.value["process"]), op.time))
    return spans


def _b12(h: History, s: FinalState) -> str | None:
    """A dispatcher stopped after the platform refused its create woke up while the reconciler, which had found no
    flight for that attempt and dispatched the task anew, was stopped before its write-back: the task flew once, under
    the new attempt, and completed. The zombie's stale write leaves no trace when the fence holds, so the race is read
    from the timeline: the zombie's resume inside the reconciler's pause."""
    zombies = _paused(h, "before dispatch.rejected")
    if not zombies:
        return NotFired("no dispatcher stopped after the platform refused its create woke up again")
    writers = _paused(h, "before dispatch.write_back")
    if not any(start < woke < end for _, woke in zombies for start, end in writers):
        return NotFired("no stopped dispatcher woke up while the reconciler's new attempt waited for its write-back")
    anew = _by_reconciler(s, "DISPATCH_NOT_CREATED")
    if not anew:
        return "the reconciler did not find the refused attempt not created"
    status = {t["id"]: t["status"] for t in s.tasks}
    flights = Counter(str(f["reference"]) for f in s.ledger)
    bad = sorted(t for t in anew if status.get(t) != "COMPLETED" or flights[t] != 1)
    if bad:
        return ("a task dispatched anew while its stale dispatcher slept did not fly once and complete: "
                + ", ".join(f"{t} {status.get(t)} with {flights[t]} flight(s)" for t in bad))
    return None


def _b8(h: History, s: FinalState) -> str | None:
    reset = {op.value["key"] for op in _ops(h, "confirm", INFO) if op.value.get("error") == "CONNECTION_RESET"}
    if not reset:
        return NotFired("the API never died between commit and answer")
    replayed = {op.value["key"] for op in _ops(h, "confirm", OK) if op.value.get("replayed")}
    return None if reset & replayed else "no client retry after the reset got the committed task back"


def _b11(h: History, s: FinalState) -> str | None:
    """A draft whose answer was lost (the API died after its commit) is got back by the user's retry with the
    same key: the same draft, and no second one."""
    lost = {op.process for op in _ops(h, "draft", INFO) if op.value.get("error") == "CONNECTION_RESET"}
    if not lost:
        return NotFired("the API never died between a draft's commit and its answer")
    got: dict[str, set[str]] = {}
    for op in _ops(h, "draft", OK):
        got.setdefault(op.process, set()).add(op.value.get("draft_id"))
    split = sorted(p for p, ids in got.items() if len(ids) > 1)
    if split:
        return f"a user's draft retries were answered with different drafts: {split[:5]}"
    replayed = [op for op in _ops(h, "draft", OK) if op.process in lost and op.value.get("replayed")]
    return None if replayed else "no retry after a lost draft answer got the committed draft back"


def _b6(h: History, s: FinalState) -> str | None:
    w = next((w for w in h.fault_windows() if w.fault == "redis-loss"), None)
    if w is None or w.end is None:
        return NotFired("no Redis loss window recorded")
    served = [op for op in h.ops if op.process.startswith("user") and op.type == OK and w.start <= op.time <= w.end]
    return None if served else "no client request was answered while Redis was lost"


# A platform call that failed on a cut link: CONNECT_TIMEOUT in simulation (and a connect timeout over HTTP),
# CONNECT_FAILED where Toxiproxy's disabled link refuses the connection (reference.copilot.adapters.platform_http).
CUT_CODES = ("CONNECT_TIMEOUT", "CONNECT_FAILED")
CUT_SLACK_S = 10.0  # a call started just before the heal fails a client timeout later
HEAL_SLACK_S = 1.0  # the real stack records the heal after re-enabling both links: a settle may beat it by ms


def _partition_hit(h: History, s: FinalState) -> str | None:
    """Some platform call hit the cut link (CONNECT_TIMEOUT: the simulated partition; CONNECT_FAILED:
    Toxiproxy's disabled link refuses). Incident files use this; B9 asks for more (``_b9``)."""
    cut = [op for op in h.ops if op.type == FAIL and op.value.get("error") in CUT_CODES]
    return None if cut else NotFired("no platform call hit the partition")


def _b9(h: History, s: FinalState) -> str | None:
    """The partition hit the calls that matter, not only the device check: at least one create_flight and one
    cancel_flight failed on the cut link; and after the heal every task they concern settled, after the heal,
    with at most one flight."""
    w = next((w for w in h.fault_windows() if w.fault == "platform-partition"), None)
    if w is None or w.end is None:
        return NotFired("no platform-partition window recorded")
    hit: dict[str, set[str]] = {"create_flight": set(), "cancel_flight": set()}
    for op in h.ops:
        if (op.f in hit and op.type == FAIL and op.value.get("error") in CUT_CODES
                and w.start <= op.time <= w.end + CUT_SLACK_S):
            hit[op.f].add(op.value["task_id"])
    if missing := [f for f, tasks in hit.items() if not tasks]:
        cut = Counter(op.f for op in h.ops if op.type == FAIL and op.value.get("error") in CUT_CODES)
        return NotFired(f"no {' and no '.join(missing)} failed on the cut link (calls that did: {dict(cut) or 'none'})")
    tasks = {t["id"]: t for t in s.tasks}
    flights = Counter(str(f.get("reference")) for f in s.ledger)
    settled_at: dict[str, float] = {}
    for a in s.audit:
        if a["task_id"] and a["to"] in SETTLED:
            settled_at[a["task_id"]] = a["at"] - s.t0
    problems = []
    for f, ids in hit.items():
        for tid in sorted(ids):
            status = tasks[tid]["status"] if tid in tasks else "missing"
            if status not in SETTLED:
                problems.append(f"{tid} (its {f} hit the cut) is {status}")
            elif settled_at.get(tid, w.end) < w.end - HEAL_SLACK_S:
                problems.append(f"{tid} (its {f} hit the cut) settled {status} at t={settled_at[tid]:.1f}s, "
                                f"while the link was still cut")
            if flights[tid] > 1:
                problems.append(f"{tid} (its {f} hit the cut) has {flights[tid]} flights")
    return "; ".join(problems[:5]) or None


def _c5(h: History, s: FinalState) -> str | None:
    """The same event reached both dispatchers within two seconds: they raced on one task."""
    seen: dict[str, list[tuple[float, str]]] = {}
    for op in _ops(h, "deliver"):
        if op.value.get("group") == "dispatcher":
            seen.setdefault(op.value["event_id"], []).append((op.time, op.process))
    raced = [e for e, ds in seen.items()
             if any(p1 != p2 and abs(t1 - t2) <= 2.0 for i, (t1, p1) in enumerate(ds) for t2, p2 in ds[i + 1:])]
    return None if raced else NotFired("no event reached two dispatchers at once")


def _b2(h: History, s: FinalState) -> str | None:
    held = _c2(h, s)
    if held is not None:
        return held
    w = next(w for w in h.fault_windows() if w.fault == "broker-outage")
    backlog = sum(1 for o in s.outbox if w.start <= o["created_at"] - s.t0 < w.end)
    return None if backlog >= 10 else f"only {backlog} events piled up during the outage (want >= 10: under load)"


def _b15(h: History, s: FinalState) -> str | None:
    """A round the broker refused after accepting part of it; each of its rows went out in the end (what its
    publisher did between the refusal and its next claim is I37's)."""
    split = [(who, r) for who, r in publisher_rounds(h) if r.refused]  # None: not refused; 0: at its first publish
    if not split:
        return NotFired("no publisher's round was refused after the broker had accepted part of it")
    sent = {o["id"] for o in s.outbox if o["sent_at"] is not None}
    unsent = sorted({row for _, r in split for row in r.ids} - sent)
    if unsent:
        return f"{len(unsent)} row(s) of a round refused in its middle never went out: {', '.join(unsent[:5])}"
    return None


def _b4(h: History, s: FinalState) -> str | None:
    kills = [op for op in h.ops if op.f == "kill" and op.value.get("why") == "kill-worker"]
    roles = {str(op.value.get("process", "")).rsplit("-", 1)[0] for op in kills}
    if len(kills) < 3:
        return NotFired(f"only {len(kills)} workers were killed")
    done = sum(1 for t in s.tasks if t["status"] == "COMPLETED")
    return None if done else f"workers {sorted(roles)} were killed but no task completed"


def _b10(h: History, s: FinalState) -> str | None:
    """Client operations during the slow window took at least the injected latency, and the platform was
    called while the database was slow (so I20, no transaction open across a platform call, was put to the
    test where holding one would hurt most). On the real stack the longest ``idle in transaction`` the
    sampler saw is quoted when this fails (information: I20's note carries it too)."""
    w = next((w for w in h.fault_windows() if w.fault == "db-latency"), None)
    if w is None or w.end is None:
        return NotFired("no db-latency window recorded")
    idle = [op.value for op in _ops(h, IDLE_IN_TRANSACTION)]
    seen = "" if not idle else (f" (longest idle in transaction seen: {max(v['max_idle_s'] for v in idle):.2f}s over "
                                f"{len(idle)} connections)")
    calls = [op for op in h.ops
             if op.type == INVOKE and op.f in RECORDED_PLATFORM_CALLS and w.start <= op.time <= w.end]
    if not calls:
        return NotFired("no platform call was made while the database was slow" + seen)
    delay = float(w.detail.get("ms", 200)) / 1000.0
    started: dict[tuple[str, str], float] = {}
    slow = 0
    for op in h.ops:
        if op.f not in ("draft", "confirm") or not op.process.startswith("user"):
            continue
        if op.type == "invoke":
            started[(op.process, op.f)] = op.time
        elif op.type == OK and (op.process, op.f) in started:
            t0 = started.pop((op.process, op.f))
            if w.start <= t0 <= w.end and op.time - t0 >= delay:
                slow += 1
    return None if slow else "no client operation was slowed by the database latency" + seen


def _t2(h: History, s: FinalState) -> str | None:
    dead = [d for d in s.dead_letters if d["history"] and len(d["history"]) >= 1]
    if not dead:
        return NotFired("no message was dead-lettered with its failure history")
    redriven = [op for op in _ops(h, "redrive", OK)]
    if not redriven:
        return "no dead letter was re-driven"
    done = {(p["consumer"], p["event_id"]) for p in s.processed}
    took = [d for d in s.dead_letters if d["redriven"] and (d["consumer"], d["event_id"]) in done]
    return None if took else "no re-driven message took effect"


def _b13(h: History, s: FinalState) -> str | None:
    """A worker's ack was refused (the broker went away while it held the delivery); each such message was delivered
    again and took effect once (I6 judges the once)."""
    refused = [op for op in _ops(h, ACK) if op.type in (FAIL, INFO) and op.process.startswith("dispatcher")]
    if not refused:
        return NotFired("no dispatcher's ack was refused")
    delivered = {(op.value["group"], op.value["event_id"], op.value.get("attempt") or 1) for op in _ops(h, "deliver")}
    processed = {(p["consumer"], p["event_id"]) for p in s.processed}
    for op in refused:
        key = (op.value["group"], op.value["event_id"])
        if not any((*key, a) in delivered for a in range(int(op.value.get("attempt") or 1) + 1, 100)):
            return (f"{op.value['event_type']} {key[1]}, whose ack was refused (op {op.index}), was never delivered "
                    "again")
        if key not in processed:
            return f"{op.value['event_type']} {key[1]}, whose ack was refused (op {op.index}), never took effect"
    return None


def _b14(h: History, s: FinalState) -> str | None:
    """A delivery failed while neither its effect nor its failure could be recorded (no failure row at its attempt):
    the broker delivered it again, and it took effect in the end."""
    w = next((w for w in h.fault_windows() if w.fault == "db-error"), None)
    if w is None or w.end is None:
        return NotFired("no db-error window recorded")
    recorded = {(f["consumer"], f["event_id"], f["attempt"]) for f in s.event_failures}
    delivered = {(op.value["group"], op.value["event_id"], op.value.get("attempt") or 1) for op in _ops(h, "deliver")}
    unrecorded = [op for op in _ops(h, "deliver") if w.start <= op.time < w.end
                  and (op.value["group"], op.value["event_id"], op.value.get("attempt") or 1) not in recorded
                  and (op.value["group"], op.value["event_id"], (op.value.get("attempt") or 1) + 1) in delivered]
    if not unrecorded:
        return NotFired("no delivery in the window failed unrecorded and came back")
    processed = {(p["consumer"], p["event_id"]) for p in s.processed}
    lost = [op for op in unrecorded if (op.value["group"], op.value["event_id"]) not in processed]
    return None if not lost else (f"{lost[0].value['event_type']} {lost[0].value['event_id']} failed unrecorded "
                                  f"(op {lost[0].index}) and never took effect")


def _refusals(h: History, s: FinalState) -> str | None:
    """Every bad request was refused with its expected code (and none was accepted)."""
    marked = [op for op in h.ops if "expect" in op.value and op.type in (OK, FAIL)]
    if not marked:
        return NotFired("no bad request was sent")
    accepted = [op for op in marked if op.type == OK]
    if accepted:
        return f"bad requests were accepted: {[(op.index, op.value.get('kind', op.f)) for op in accepted][:5]}"
    wrong = [op for op in marked if op.value.get("code") not in op.value["expect"]]
    if wrong:
        return "bad requests refused with the wrong code: " + ", ".join(
            f"op {op.index} {op.value.get('kind', op.f)}: {op.value.get('code')} (want {op.value['expect']})"
            for op in wrong[:5])
    # Each security-relevant refusal left its trace in the security log (reference.copilot.services.security).
    refused = Counter(op.value["code"] for op in marked if op.value.get("code") in SECURITY_CODES)
    logged = Counter(e["code"] for e in s.security_log)
    missing = {k: n - logged[k] for k, n in refused.items() if logged[k] < n}
    return f"security-relevant refusals missing from the security log: {missing}" if missing else None


S7_MIN_REFUSED = 10  # tasks that must meet the closed airspace at their pre-flight check for S7 to count


def _s7(h: History, s: FinalState) -> str | None:
    closed = {t["id"] for t in s.tasks if t.get("last_error_code") == "AIRSPACE_CLOSED"}
    if len(closed) < S7_MIN_REFUSED:
        return NotFired(f"only {len(closed)} confirmed tasks met the closed airspace at dispatch "
                        f"(want >= {S7_MIN_REFUSED})")
    flown = closed & {str(f["reference"]) for f in s.ledger}
    if flown:
        return f"tasks refused for closed airspace flew: {sorted(flown)[:5]}"
    audited = {a["task_id"] for a in s.audit if a["action"] == "PRECHECK_FAILED"}
    missing = closed - audited
    return None if not missing else f"no PRECHECK_FAILED audit record for {sorted(missing)[:5]}"


S8_MIN_REFUSED = 2  # tasks per kind of unfitness that must meet it at their pre-flight check for S8 to count
S8_REFUSALS = {"offline": "DEVICE_OFFLINE", "low_battery": "BATTERY_LOW", "unknown": "DEVICE_UNKNOWN",
               "revoked": "APPROVAL_REVOKED"}


def _s8(h: History, s: FinalState) -> str | None:
    """Devices went offline, below the minimum battery or unknown to the platform, and approvals were revoked, while
    their tasks were queued: enough of each met it at the pre-flight check (refused with its code and a
    PRECHECK_FAILED audit row, never flown), and the tasks on devices drained to exactly the minimum flew. (A task
    dispatched before the fault landed may have flown: I14 and I23 judge every flight by what its check could see.)"""
    spoiled = next((op.value for op in h.ops if op.process == NEMESIS and op.f == DEVICES), None)
    if spoiled is None:
        return NotFired("no unfit-for-flight record in the history")
    chosen = {**{k: set(v) for k, v in spoiled["tasks"].items()},
              "revoked": {op.value["task_id"] for op in _ops(h, REVOKE_APPROVAL, OK)}}
    code_of = {t["id"]: t.get("last_error_code") for t in s.tasks}
    met = {kind: {t for t in chosen[kind] if code_of.get(t) == code} for kind, code in S8_REFUSALS.items()}
    short = {kind: len(ids) for kind, ids in met.items() if len(ids) < S8_MIN_REFUSED}
    if short:
        return NotFired(f"too few queued tasks met their unfitness at the pre-flight check: {short} "
                        f"(want >= {S8_MIN_REFUSED} each)")
    refused = set().union(*met.values())
    flown = {str(f["reference"]) for f in s.ledger}
    audited = {a["task_id"] for a in s.audit if a["action"] == "PRECHECK_FAILED"}
    if refused & flown:
        return f"tasks refused at the pre-flight check flew: {sorted(refused & flown)[:5]}"
    if refused - audited:
        return f"no PRECHECK_FAILED audit record for {sorted(refused - audited)[:5]}"
    at_min = chosen.get("at_min_battery", set())
    if not at_min:
        return NotFired("no queued task's device was drained to exactly the minimum battery")
    refused_at_min = {t for t in at_min if code_of.get(t) == "BATTERY_LOW"}
    if refused_at_min:
        return f"tasks on devices at exactly the minimum battery were refused: {sorted(refused_at_min)[:5]}"
    if not at_min & flown:
        return f"none of the {len(at_min)} tasks on devices at exactly the minimum battery flew"
    return None


def _b7(h: History, s: FinalState) -> str | None:
    """Streams dropped in the window, every stream that dropped reconnected after it and resynced by version,
    and at the end every stream knows each of its tasks at the database's version. Whether a known task
    changed while its stream was down depends on flight timing, so a recovered change is reported by the
    client (``missed_changes``) but not required."""
    w = next((w for w in h.fault_windows() if w.fault == "stream-disconnect"), None)
    if w is None or w.end is None:
        return NotFired("no stream-disconnect window recorded")
    dropped = {op.process for op in h.ops if op.f == "stream-drop" and w.start <= op.time <= w.end + 5.0}
    if not dropped:
        return NotFired("no open stream dropped during the window")
    reopened = {op.process: op.time for op in h.ops
                if op.f == "stream-open" and op.value.get("after_drop") and op.time >= w.start}
    if missing := sorted(dropped - set(reopened)):
        return f"streams never reconnected after the drop: {missing}"
    resynced = {op.process for op in _ops(h, "resync-done", OK) if op.time >= reopened.get(op.process, 1e18)}
    if missing := sorted(dropped - resynced):
        return f"streams reconnected without resyncing by version: {missing}"
    if not _ops(h, "stream-final-done", OK):
        return "no stream stated its final versions"
    final = {t["id"]: t["version"] for t in s.tasks}
    stale = [f"{op.process} believed {op.value['task_id']} at v{op.value['stream_version']}, it is at "
             f"v{final.get(op.value['task_id'])}" for op in _ops(h, "stream-final", OK)
             if op.value["stream_version"] != final.get(op.value["task_id"])]
    return None if not stale else "streams did not converge: " + "; ".join(stale[:5])


def _b16(h: History, s: FinalState) -> str | None:
    """Streams held open through the whole Redis loss (none dropped: the clients' link holds) missed what was
    published meanwhile, so each was told to resync once the relay was back, and did (``resync-done`` after the
    window's end, without a reconnect); I38 judges that they converged."""
    w = next((w for w in h.fault_windows() if w.fault == "redis-loss"), None)
    if w is None or w.end is None:
        return NotFired("no Redis loss window recorded")
    opened: dict[str, float] = {}
    through: set[str] = set()
    for op in h.ops:
        if op.f == STREAM_OPEN:
            opened[op.process] = op.time
        elif (op.f in (STREAM_DROP, f"{STREAM_FINAL}-done") and op.process in opened
              and opened.pop(op.process) <= w.start and op.time >= w.end):
            through.add(op.process)
    through |= {p for p, at in opened.items() if at <= w.start}
    if not through:
        return NotFired("no task stream was open through the whole Redis loss")
    resynced = {op.process for op in _ops(h, "resync-done", OK) if op.time >= w.end}
    if missing := sorted(through - resynced):
        return f"streams open through the Redis loss never resynced after it: {missing}"
    return None


def _c6(h: History, s: FinalState) -> str | None:
    """A held cancel read EXECUTING@v, the task went round the cancel-refused cycle while it waited, and
    its conditional write was refused (TASK_CHANGED): a race lost on the version alone."""
    holds = [op for op in h.ops if op.f == "hold"]
    if not holds:
        return NotFired("no transaction was held between its read and its write")
    refused = {a["task_id"] for a in s.audit if a["action"] == "CANCEL_REFUSED"}
    if not refused:
        return NotFired("no cancel was refused by the platform (no EXECUTING -> CANCEL_PENDING -> EXECUTING cycle)")
    # The held transaction runs in a user's process in simulation and in an API process on the real stack:
    # a lost race is a cancel refused TASK_CHANGED (only a conditional write that matched no row answers so).
    lost = [op for op in _ops(h, "cancel", FAIL) if op.value.get("code") == "TASK_CHANGED"
            and op.value.get("task_id") in refused]
    return None if lost else "no held cancel lost its race to the refused-cancel cycle"


def _by_actor(s: FinalState, action: str, actor: str) -> set[str]:
    """The tasks whose audit has ``action`` taken by ``actor``."""
    return {a["task_id"] for a in s.audit if a["action"] == action and a["actor"] == actor}


def _by_reconciler(s: FinalState, action: str) -> set[str]:
    return _by_actor(s, action, "reconciler")


def _lost_events(h: History) -> str | None:
    w = [w for w in h.fault_windows() if w.fault == "platform" and w.detail.get("lose_event_kinds")]
    return None if w else NotFired("no platform events were lost")


def _r6(h: History, s: FinalState) -> str | None:
    if (why := _lost_events(h)) or not _kills(h, "dispatcher"):
        return why or "no dispatcher was killed between the platform's accept and the write-back"
    confirmed = _by_reconciler(s, "FLIGHT_CONFIRMED")
    if not confirmed:
        return "no stuck DISPATCHING task was settled by the reconciler's query"
    # With every event lost, a task is confirmed by its dispatcher's write-back or by the reconciler; only a task
    # whose dispatcher died in between is the reconciler's (one dispatch at a time per dispatcher process).
    if len(confirmed) > (kills := _kills(h, "dispatcher")):
        return (f"the reconciler confirmed {len(confirmed)} flights, but only {kills} dispatchers died between the "
                f"platform's accept and the write-back: the other write-backs did not record the platform's answer")
    return None


def _r15(h: History, s: FinalState) -> str | None:
    """Cancels the cut swallowed (a dispatcher's cancel_flight that failed inside the partition, none of its tries
    answered) were sent again by the reconciler once the link was back, and each such task ended CANCELLED."""
    cuts = [w for w in h.fault_windows() if w.fault == "platform-partition"]
    answered = {op.value.get("task_id") for op in _ops(h, "cancel_flight", OK)
                if op.process.startswith("dispatcher")}
    lost = {op.value.get("task_id") for op in h.ops
            if op.f == "cancel_flight" and op.type in (FAIL, INFO) and op.process.startswith("dispatcher")
            and any(w.start <= op.time <= (w.end if w.end is not None else float("inf")) for w in cuts)} - answered
    if not lost:
        return NotFired("no cancel was lost in the cut")
    resent = {op.value.get("task_id") for op in _ops(h, "cancel_flight", OK) if op.process.startswith("reconciler")}
    if not lost & resent:
        return f"no cancel the cut lost was sent again by the reconciler ({len(lost)} lost)"
    status = {t["id"]: t["status"] for t in s.tasks}
    bad = sorted(t for t in lost & resent if t is not None and status.get(t) != "CANCELLED")
    return f"tasks whose cancel the reconciler sent again did not end CANCELLED: {bad}" if bad else None


def _r7(h: History, s: FinalState) -> str | None:
    if why := _lost_events(h):
        return why
    return None if _by_reconciler(s, "FLIGHT_COMPLETED") else \
        "no EXECUTING task whose completion was lost was completed by the reconciler's query"


def _r8(h: History, s: FinalState) -> str | None:
    """The platform lost every event and answered no query for longer than Policy.escalate_after_s: flights it
    cannot confirm go to MANUAL_REVIEW (from EXECUTING), and so do the tasks of dispatchers that died between the
    platform's accept and their write-back (from DISPATCHING); none is guessed failed or completed meanwhile."""
    if why := _lost_events(h):
        return why
    code = {t["id"]: t["last_error_code"] for t in s.tasks}

    def silent(status: str) -> int:
        return sum(1 for a in s.audit if a["action"] == "OUTCOME_UNKNOWN" and a["from"] == status
                   and a["to"] == "MANUAL_REVIEW" and a["actor"] == "reconciler"
                   and code.get(a["task_id"]) == "PLATFORM_SILENT")

    if not silent("EXECUTING"):
        return "no EXECUTING task went to MANUAL_REVIEW while the platform was silent"
    if not (kills := _kills(h, "dispatcher")):
        return NotFired("no dispatcher was killed between the platform's accept and the write-back")
    # Each killed dispatcher left a DISPATCHING task only the reconciler can move, and the platform never answers it.
    if silent("DISPATCHING") < kills:
        return (f"{kills} dispatchers died after the platform's accept, but only {silent('DISPATCHING')} DISPATCHING "
                f"tasks went to MANUAL_REVIEW while the platform was silent: the others waited unbounded")
    return None


def _r10(h: History, s: FinalState) -> str | None:
    """A supervisor took a task the platform still flew out of MANUAL_REVIEW as executing; it then ended as the
    platform said, with no second flight (I1 checks that)."""
    resolved = {op.value["task_id"] for op in _ops(h, "review", OK) if op.value.get("status") == "EXECUTING"}
    if not resolved:
        return NotFired("no task in MANUAL_REVIEW was resolved as executing")
    ended = {t["id"] for t in s.tasks if t["id"] in resolved and t["status"] == "COMPLETED"}
    return None if ended else "no task resolved as executing completed afterwards"


def _r17(h: History, s: FinalState) -> str | None:
    """Flights ended while the platform was silent: their tasks (EXECUTING, and CANCEL_PENDING) went to MANUAL_REVIEW,
    and so did dispatches that never reached it; the supervisor resolved them as the platform then said: completed,
    failed, cancelled and (no flight made) redispatch each at least once, and no task is left in MANUAL_REVIEW (I18
    checks each agrees with its flight, I1 that a redispatch made one flight, I26 that each resolution is audited)."""
    reviewed = {(a["from"], a["to"]) for a in s.audit if "MANUAL_REVIEW" in (a["from"], a["to"])}
    if ("CANCEL_PENDING", "MANUAL_REVIEW") not in reviewed:
        return NotFired("no CANCEL_PENDING task went to MANUAL_REVIEW")
    missing = [to for to in ("COMPLETED", "FAILED", "CANCELLED", "QUEUED") if ("MANUAL_REVIEW", to) not in reviewed]
    if missing:
        return NotFired(f"no task in MANUAL_REVIEW was resolved as {', '.join(missing)}")
    left = [t["id"] for t in s.tasks if t["status"] == "MANUAL_REVIEW"]
    return f"tasks left in MANUAL_REVIEW: {left[:5]}" if left else None


def _r9(h: History, s: FinalState) -> str | None:
    if why := _lost_events(h):
        return why
    return None if _by_reconciler(s, "CANCEL_CONFIRMED") else \
        "no CANCEL_PENDING task whose cancelled event was lost was settled by the reconciler's query"


def _r11(h: History, s: FinalState) -> str | None:
    """Outbox events and reports went DEAD during the long outages (after the scenario's short retry budgets), the
    supervisor re-drove each through the API, and each then took effect: the checkers see every event published
    and consumed (I6), every report uploaded (I8), and no row DEAD before its budget."""
    dead = Counter(a["action"] for a in s.audit if a["action"] in ("OUTBOX_DEAD", "REPORT_DEAD"))
    if not dead["OUTBOX_DEAD"] or not dead["REPORT_DEAD"]:
        return NotFired(f"not both kinds went DEAD (outbox events: {dead['OUTBOX_DEAD']}, reports: "
                        f"{dead['REPORT_DEAD']})")
    redriven = Counter(op.value["kind"] for op in _ops(h, "redrive", OK) if op.process == "supervisor")
    if not redriven["outbox"] or not redriven["report"]:
        return f"the supervisor did not re-drive both kinds through the API (re-driven: {dict(redriven)})"
    refused = [op.value for op in _ops(h, "redrive", FAIL) if op.process == "supervisor"]
    if refused:
        return f"re-drives were refused: {refused[:3]}"
    still = [o["id"] for o in s.outbox if o["status"] == "DEAD"] + [r["task_id"] for r in s.reports
                                                                   if r["status"] == "DEAD"]
    return f"rows are still DEAD after the re-drive: {still[:5]}" if still else None


def _r16(h: History, s: FinalState) -> str | None:
    """Outbox events went DEAD, the supervisor re-drove them while the broker refused again: each re-driven event
    spent its fresh budget and went DEAD a second time; the double click of each first re-drive was answered 409
    NOT_DEAD; after the second re-drive no row is DEAD. That each event took effect once is I6's, its budget I30's,
    each DEAD's page I31's."""
    dead = Counter(a["event_id"] for a in s.outbox_budget if a["action"] == "OUTBOX_DEAD")
    if not dead:
        return NotFired("no outbox event went DEAD")
    twice = [e for e, n in dead.items() if n >= 2]
    if not twice:
        return NotFired(f"no re-driven event went DEAD again ({len(dead)} went DEAD once)")
    clicks = [op for op in h.ops if op.f == "redrive" and op.type != INVOKE and op.value.get("click") == 2]
    if not clicks:
        return "the supervisor never clicked a re-drive twice"
    if wrong := [op.value for op in clicks if op.type != FAIL or op.value.get("code") != "NOT_DEAD"]:
        return f"a second click of a re-drive was not answered NOT_DEAD: {wrong[:3]}"
    still = [o["id"] for o in s.outbox if o["status"] == "DEAD"]
    return f"outbox events are still DEAD after the second re-drive: {still[:5]}" if still else None


def _r12(h: History, s: FinalState) -> str | None:
    """A stale consumer in the dispatchers' group acked TaskCreated messages unread: each such task left CREATED only
    through the reconciler's queueing (QUEUED_BY_RECONCILER: its event was SENT long ago and never took effect), unless
    its operator cancelled it first; the invariants check it then flew once and ended."""
    lost = {op.value["task_id"] for op in lost_messages(h) if op.value.get("event_type") == "TaskCreated"}
    if not lost:
        return NotFired("no TaskCreated message was lost")
    queued = {a["task_id"] for a in s.audit if a["action"] == "QUEUED_BY_RECONCILER" and a["actor"] == "reconciler"}
    cancelled = {t["id"] for t in s.tasks if t["status"] == "CANCELLED"}
    missing = sorted(lost - queued - cancelled)
    return f"tasks whose TaskCreated was lost were not queued by the reconciler: {missing[:5]}" if missing else None


def _r13(h: History, s: FinalState) -> str | None:
    """Dispatchers died after committing DISPATCHING and before their create reached a platform without keys: the
    reconciler's query found no flight for such an attempt, closed it NOT_CREATED, and the task was dispatched
    again afterwards (unless its operator cancelled it); the invariants check it flew once."""
    killed = [op for op in h.ops if op.f == "kill" and str(op.value.get("process", "")).startswith("dispatcher")
              and op.value.get("why") == "before create_flight"]
    if not killed:
        return NotFired("no dispatcher was killed between its DISPATCHING commit and its create call")
    found_not_created = {a["task_id"]: a["id"] for a in s.audit
                         if a["action"] == "DISPATCH_NOT_CREATED" and a["actor"] == "reconciler"}
    if not found_not_created:
        return "no stuck DISPATCHING task was found not created by the reconciler's query"
    dispatched_again = {a["task_id"] for a in s.audit if a["action"] == "DISPATCH_STARTED"
                        and a["id"] > found_not_created.get(a["task_id"], a["id"])}
    cancelled = {t["id"] for t in s.tasks if t["status"] == "CANCELLED"}
    missing = sorted(set(found_not_created) - dispatched_again - cancelled)
    return f"tasks found not created were never dispatched again: {missing[:5]}" if missing else None


def _r14(h: History, s: FinalState) -> str | None:
    """Every dispatch of the tasks was killed before its create: each task was found not created and dispatched anew
    up to max_dispatch_attempts, then abandoned (FAILED, DISPATCH_ABANDONED with NOT_CREATED), never flown. (More
    attempts than the policy allows is I21's; this says the cap was reached at all.)"""
    killed = [op for op in h.ops if op.f == "kill" and op.value.get("why") == "before create_flight"]
    if not killed:
        return NotFired("no dispatch was killed between its DISPATCHING commit and its create call")
    abandoned = {a["task_id"] for a in s.audit if a["action"] == "DISPATCH_ABANDONED"}
    if not abandoned:
        return NotFired(f"no task used up its dispatch attempts ({len(killed)} dispatch(es) killed)")
    by_id = {t["id"]: t for t in s.tasks}
    flown = {str(f["reference"]) for f in s.ledger}
    wrong = sorted(f"{tid} {by_id[tid]['status']} {by_id[tid].get('last_error_code')}" for tid in abandoned
                   if by_id[tid]["status"] != "FAILED" or by_id[tid].get("last_error_code") != "NOT_CREATED")
    if wrong:
        return f"abandoned tasks did not end FAILED with NOT_CREATED: {wrong[:5]}"
    if abandoned & flown:
        return f"abandoned tasks flew: {sorted(abandoned & flown)[:5]}"
    return None


def _t5(h: History, s: FinalState) -> str | None:
    """Flights failed part-way, and others were aborted by the platform's operator (CANCELLED with no cancel of
    ours): each such task ended as the platform said, FAILED (MANUAL_REVIEW when it failed while our cancel was
    pending; CANCELLED when our cancel met the abort), by both routes: the platform's terminal event, and for a
    failure whose event was lost, the reconciler's query. Never COMPLETED (I18) and never stuck (I3)."""
    failed = {str(f["reference"]): f for f in s.ledger if f.get("status") == "FAILED"}
    aborted = {str(f["reference"]): f for f in s.ledger
               if f.get("status") == "CANCELLED" and f.get("cancel_requested_at") is None}
    if not failed or not aborted:
        return NotFired("no flight failed" if not failed else "no flight was aborted by the platform")
    status = {t["id"]: t["status"] for t in s.tasks}
    wrong = sorted(f"{tid} {status.get(tid)} (flight {f['status']})" for tid, f in {**failed, **aborted}.items()
                   if status.get(tid) not in ("FAILED", "MANUAL_REVIEW" if tid in failed else "CANCELLED"))
    if wrong:
        return f"tasks whose flight ended badly did not end as the platform said: {wrong}"
    by_event = {a["task_id"] for a in s.audit if a["actor"] == "platform-events"
                and a["action"] in ("FLIGHT_FAILED", "FLIGHT_CANCELLED_EXTERNALLY")}
    if not by_event & set(failed) or not by_event & set(aborted):
        return "a failure or an abort was never settled by the platform's terminal event"
    if why := _lost_events(h):
        return why
    return None if _by_reconciler(s, "FLIGHT_FAILED") & set(failed) else \
        "no task whose failure event was lost was failed by the reconciler's query"


# Named checks, by the slug of the catalogue scenario that introduced them (incident files may reuse them).
def _t7(h: History, s: FinalState) -> str | None:
    """A cancel request was delivered to the dispatcher after its task had settled (the broker held it while the
    flight ended): what I40 judges the handling of."""
    settled = {a["task_id"]: a["at"] - s.t0 for a in s.audit if a["to"] in SETTLED and a["task_id"]}
    late = [op for op in _ops(h, "deliver") if op.value.get("event_type") == "TaskCancelRequested"
            and settled.get(op.value.get("task_id"), float("inf")) < op.time]
    if not late:
        return NotFired("no cancel request was delivered after its task had settled")
    return None


S10_MIN_CANCELS = 2  # owners' cancels of flights asked while their permissions were removed, for S10 to count


def _s10(h: History, s: FinalState) -> str | None:
    """Owners asked to cancel their flights while their permissions were removed (what I52 judges the answers of),
    and every such cancel that was taken (answered ok) stopped or ended its flight."""
    windows: list[tuple[float, float]] = []
    for op in _ops(h, PERMISSIONS):
        if op.value.get("revoked"):
            windows.append((op.time, float("inf")))
        elif windows:
            windows[-1] = (windows[-1][0], op.time)
    revoked = {u for op in _ops(h, PERMISSIONS) for u in op.value.get("users", ())}
    asked = [op for op in _ops(h, "cancel", INVOKE) if op.value.get("user_id") in revoked
             and any(a <= op.time < b for a, b in windows)]
    if len(asked) < S10_MIN_CANCELS:
        return NotFired(f"only {len(asked)} cancels were asked while the permissions were removed "
                        f"(want >= {S10_MIN_CANCELS})")
    return None


EXPECTATIONS: dict[str, Exercised] = {
    "db-fault-on-create": _c1, "broker-down-after-commit": _c2, "publisher-crash-after-send": _c3,
    "concurrent-same-key": _c4, "accepted-then-timeout": _r1, "crash-before-writeback": _r2,
    "telemetry-disorder": _r3, "cancel-timeout": _r4, "report-upload-failure": _r5,
    "transient-platform-errors": _t1, "dispatch-rejected": _t3, "no-key-no-query": _t4,
    "duplicate-delivery": _b1, "db-outage": _b3, "zombie-worker": _b5, "redis-loss": _b6, "api-restart": _b8,
    "lost-draft-response": _b11, "zombie-after-rejection": _b12,
    "platform-partition": _partition_hit,
    "platform-partition-in-flight": _b9, "concurrent-consumers": _c5, "broker-outage": _b2, "worker-kill": _b4,
    "slow-database": _b10, "poison-message": _t2, "bad-requests-refused": _refusals, "airspace-revoked": _s7,
    "stream-disconnect": _b7, "streams-resynced-after-redis-loss": _b16, "redrive-then-refused-again": _r16,
    "stale-read-race": _c6,
    "stuck-dispatching": _r6, "stuck-executing": _r7, "cancel-never-arrived": _r15, "platform-silent": _r8,
    "review-while-flying": _r10, "reviews-resolved-every-way": _r17, "stuck-cancel-pending": _r9,
    "dead-then-redrive": _r11,
    "lost-created-event": _r12, "dispatch-never-sent": _r13, "poison-dispatch": _r14, "flight-ends-badly": _t5,
    "cancel-under-platform-errors": _t6,
    "unfit-for-flight": _s8, "ack-refused": _b13, "unrecorded-failure": _b14, "refused-mid-batch": _b15,
    "cancels-held-past-the-landing": _t7, "permission-removed-mid-flight": _s10,
}
