"""The status sync's invariants S1-S15 (seed 003 §3-§8, §10, §13, §17), one checker each over what a run left: the
history (every report's answer, every publish try, every view a client applied, every notice it showed, every
delivery Centrifugo made) and the final tables (task, task_step, task_event_log, task_event_dedup, task_outbox, the
producers' ledgers). Each checker reads the rule's facts itself; none trusts the reference's own account."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from harness.history import OK, History
from reference.statussync.models import (
    ProducerLedger,
    Task,
    TaskEventDedup,
    TaskEventLog,
    TaskOutbox,
    TaskStep,
)
from reference.statussync.registry import COORDINATOR, OPERATIONS, RECONCILER, statuses_of
from reference.statussync.relay import RelayConfig, backoff_s
from reference.statussync.service import payload_hash
from scenarios.sim.world import EPOCH_TS
from scenarios.verdicts import Invariants, Verdict, Violation, judged, unchecked

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
MOVES = {"PENDING": {"PENDING", "RUNNING", *TERMINAL}, "RUNNING": {"RUNNING", *TERMINAL}}  # §4.1, §4.2
STEP_OUTCOMES = {"STEP_COMPLETED": "SUCCEEDED", "STEP_FAILED": "FAILED"}
TASK_OUTCOMES = {"TASK_COMPLETED": "SUCCEEDED", "TASK_FAILED": "FAILED"}
# §3.3.1 / §6.1: what a USER_SUMMARY may carry; nothing server-only anywhere.
SUMMARY_KEYS = {"kind", "schemaVersion", "task", "notice"}
SUMMARY_TASK_KEYS = {"id", "product", "taskType", "title", "lifecycleStatus", "businessStatus", "health", "version",
                     "startedAt", "finishedAt", "failedStepId", "failureCode", "failureMessage", "summaryData",
                     "elapsedMs", "asOf"}
DETAIL_ONLY = {"resultRef", "steps", "data", "error"}
SERVER_ONLY = {"diagnosticsRef"}


@dataclass
class SyncState:
    """What a run left (scenarios.systems.RunState), with what the checkers read."""

    history: History
    task_rows: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    events: list[dict[str, Any]]  # task_event_log, by task and version
    dedup: dict[str, dict[str, Any]]
    outbox: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    clients: list[dict[str, Any]]
    peak_subscriptions: dict[str, int]
    max_subscriptions: int
    relay: RelayConfig  # its backoff and attempts
    heal_time: float
    end_time: float
    t0: float = EPOCH_TS
    audit: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return [{"id": t["id"], "status": t["lifecycle_status"], "created_at": _secs(t["created_at"]) + EPOCH_TS}
                for t in self.task_rows]

    def counts(self) -> dict[str, int]:
        by = Counter(t["lifecycle_status"] for t in self.task_rows)
        out = Counter(o["status"] for o in self.outbox)
        return {**{k.lower(): v for k, v in by.items()}, "events": len(self.events),
                **{f"outbox_{k.lower()}": v for k, v in out.items()}}

    def reports(self, f: str = "event.report") -> list[Any]:
        return [op for op in self.history.ops if op.f == f and op.type == OK]


def _secs(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp() - EPOCH_TS
    return 0.0


def read_state(world: Any, clients: Iterable[Any], relay_cfg: Any, health_cfg: Any, heal_time: float) -> SyncState:
    def rows(s: Any, table: Any, *order: Any) -> list[dict[str, Any]]:
        return [dict(r._mapping) for r in s.execute(select(table).order_by(*order))]

    with world.sessions() as s:
        tasks = rows(s, Task.__table__, Task.id)
        steps = rows(s, TaskStep.__table__, TaskStep.task_id, TaskStep.step_id, TaskStep.attempt)
        events = rows(s, TaskEventLog.__table__, TaskEventLog.task_id, TaskEventLog.task_version)
        dedup = {r["event_id"]: r for r in rows(s, TaskEventDedup.__table__, TaskEventDedup.event_id)}
        outbox = rows(s, TaskOutbox.__table__, TaskOutbox.id)
        ledger = rows(s, ProducerLedger.__table__, ProducerLedger.producer_id, ProducerLedger.task_id,
                      ProducerLedger.step_id, ProducerLedger.attempt, ProducerLedger.position)
    audit: list[dict[str, Any]] = []
    last: dict[str, str] = {}
    for e in events:
        before = last.get(e["task_id"])
        if before != e["lifecycle_status"]:
            audit.append({"task_id": e["task_id"], "from": before, "to": e["lifecycle_status"],
                          "at": _secs(e["committed_at"]) + EPOCH_TS, "actor": e["producer_id"],
                          "action": e["event_type"]})
        last[e["task_id"]] = e["lifecycle_status"]
    return SyncState(world.history, tasks, steps, events, dedup, outbox, ledger, [c.final() for c in clients],
                     dict(world.centrifugo.peak_subscriptions), world.centrifugo.max_subscriptions,
                     relay_cfg, heal_time,
                     world.env.now, audit=audit)


# ---------------------------------------------------------------------------------------------- the checkers


def one_effect_per_event(s: SyncState) -> Verdict:
    """§3.5, §10, §17: a retried eventId makes no second change; every answer to it is the first one (the same
    acceptance and the same taskVersion), and an accepted answer's version is the logged event's."""
    logged = {e["event_id"]: e for e in s.events}
    first: dict[str, Any] = {}
    bad = []
    for op in s.reports():
        v = op.value
        if v.get("code") == "EVENT_ID_CONFLICT":
            continue
        key = (v["accepted"], v.get("code"), v.get("taskVersion"), v.get("stepVersion"))
        seen = first.setdefault(v["eventId"], (key, op.index))
        if seen[0] != key:
            bad.append(Violation(v.get("taskId"), f"{v['eventId']} answered {key}, first {seen[0]}",
                                 [seen[1], op.index]))
        elif v["accepted"] and (row := logged.get(v["eventId"])) is not None \
                and str(row["task_version"]) != str(v.get("taskVersion")):
            bad.append(Violation(v.get("taskId"), f"{v['eventId']} answered version {v.get('taskVersion')}, "
                                 f"logged {row['task_version']}", [op.index]))
    return judged(len(first), bad)


def conflicting_reuse_refused(s: SyncState) -> Verdict:
    """§3.2, §10, §17: the same eventId with other content is refused, and the first content stays what the dedup
    table holds."""
    originals = {r["event_id"]: r["event"] for r in s.ledger}
    bad = []
    reuses = s.reports("reuse")
    for op in reuses:
        answer = op.value.get("answer") or {}
        if answer.get("accepted") or answer.get("code") != "EVENT_ID_CONFLICT":
            bad.append(Violation(None, f"{op.value['eventId']} reused with other content, answered {answer}",
                                 [op.index]))
    for event_id, row in s.dedup.items():
        if event_id in originals and row["payload_hash"] != payload_hash(originals[event_id]):
            bad.append(Violation(row["task_id"], f"{event_id}: the dedup table holds other content than the "
                                 "producer's"))
    return judged(len(reuses), bad)


def only_token_bound_producers(s: SyncState) -> Verdict:
    """§3.2, §3.3, §17: a report signed for one step never changes another; every logged step event is its step's
    producer's (or the health reconciler's), every task event the coordinator's."""
    owner = {(r["task_id"], r["step_id"]): r["service_name"] for r in s.steps}
    logged = {e["event_id"] for e in s.events}
    bad = [Violation(None, f"forged report {op.value['eventId']} accepted", [op.index])
           for op in s.reports("forged") if (op.value.get("answer") or {}).get("accepted")
           or op.value["eventId"] in logged]
    for e in s.events:
        if e["step_id"] is None:
            ok = e["producer_id"] == COORDINATOR
        else:
            ok = e["producer_id"] in (owner.get((e["task_id"], e["step_id"])), RECONCILER, COORDINATOR)
        if not ok:
            bad.append(Violation(e["task_id"], f"{e['event_id']} by {e['producer_id']} on {e['step_id']}"))
    return judged(len(s.events), bad)


def _streams(s: SyncState) -> tuple[list[Violation], dict[tuple[Any, ...], list[tuple[int, int]]],
                                    dict[tuple[str, str], list[tuple[int, int]]]]:
    """Accepted events out of order (an old sequence or attempt), and per stream (version, seq) and per step
    (version, attempt opened) for judging refusals."""
    bad = []
    streams: dict[tuple[Any, ...], list[tuple[int, int]]] = defaultdict(list)
    attempts: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for e in s.events:
        if e["step_id"] is None or e["step_attempt"] is None:
            continue
        step = (e["task_id"], e["step_id"])
        if e["event_type"] == "STEP_RETRY_CREATED" or (not attempts[step] and e["step_attempt"] == 1):
            attempts[step].append((e["task_version"], e["step_attempt"]))
        if e["producer_id"] == COORDINATOR:
            continue
        current = max((a for _, a in attempts[step]), default=1)
        key = (e["task_id"], e["step_id"], e["step_attempt"], e["producer_id"])
        last = streams[key][-1][1] if streams[key] else 0
        if e["step_attempt"] < current:
            bad.append(Violation(e["task_id"], f"{e['event_id']}: attempt {e['step_attempt']} accepted after "
                                 f"attempt {current} opened"))
        if e["source_seq"] <= last:
            bad.append(Violation(e["task_id"], f"{e['event_id']}: sourceSeq {e['source_seq']} accepted after "
                                 f"{last} of {e['producer_id']}"))
        streams[key].append((e["task_version"], e["source_seq"]))
    return bad, streams, attempts


def no_stale_accepted_no_fresh_refused(s: SyncState) -> Verdict:
    """§3.2, §3.3, §4.1, §17: no event of an older attempt or with a sourceSeq not above its producer's last is
    accepted, and none is refused as old unless an event of the same producer stream with a sequence at least as
    high (or a newer attempt of the step) was committed before it (A's seq 2 never makes B's seq 1 old)."""
    bad, streams, attempts = _streams(s)
    refusals = 0
    for op in s.reports():
        v = op.value
        if v["accepted"] or v["duplicate"] or v.get("code") not in ("STALE_SEQUENCE", "STALE_ATTEMPT") \
                or v.get("stepId") is None or v.get("taskVersion") is None:
            continue
        refusals += 1
        at = int(v["taskVersion"])
        key = (v["taskId"], v["stepId"], v["stepAttempt"], v["producerId"])
        newer_seq = any(ver <= at and seq >= int(v["sourceSeq"]) for ver, seq in streams.get(key, []))
        newer_attempt = any(ver <= at and a > int(v["stepAttempt"] or 0)
                            for ver, a in attempts.get((v["taskId"], v["stepId"]), []))
        if not (newer_seq or newer_attempt):
            bad.append(Violation(v["taskId"], f"{v['eventId']} refused {v['code']} though nothing newer of its "
                                 f"stream was committed by version {at}", [op.index]))
    return judged(len(s.events) + refusals, bad)


def legal_transitions(s: SyncState) -> Verdict:
    """§4.1, §4.2, §17: a task's lifecycle moves only along the state machine and never leaves a terminal status
    (nothing is logged after it); a step attempt's neither."""
    bad = []
    task_last: dict[str, str] = {}
    step_last: dict[tuple[Any, ...], str] = {}
    for e in s.events:
        before = task_last.get(e["task_id"])
        if before is not None and e["lifecycle_status"] not in MOVES.get(before, set()):
            bad.append(Violation(e["task_id"], f"task {before} -> {e['lifecycle_status']} by {e['event_id']}"))
        task_last[e["task_id"]] = e["lifecycle_status"]
        if e["step_id"] is not None and e["step_lifecycle"] is not None:
            key = (e["task_id"], e["step_id"], e["step_attempt"])
            was = step_last.get(key, "PENDING")
            if e["step_lifecycle"] not in MOVES.get(was, set()):
                bad.append(Violation(e["task_id"], f"step {key[1]}#{key[2]} {was} -> {e['step_lifecycle']} by "
                                     f"{e['event_id']}"))
            step_last[key] = e["step_lifecycle"]
    return judged(len(s.events), bad)


def atomic_commit(s: SyncState) -> Verdict:
    """§3.1, §3.6, §5.1, §10: every logged event has its dedup result with its version and its outbox rows (a
    USER_SUMMARY and a TASK_DETAIL of that version); the task's and step's versions are their last event's; an
    accepted answer always has its logged event (a success means persisted)."""
    bad = []
    projections = defaultdict(set)
    for o in s.outbox:
        projections[(o["aggregate_id"], o["aggregate_version"])].add(o["projection"])
    for e in s.events:
        d = s.dedup.get(e["event_id"])
        if d is None or str(d["result"].get("taskVersion")) != str(e["task_version"]):
            bad.append(Violation(e["task_id"], f"{e['event_id']} (version {e['task_version']}) without its dedup "
                                 "result"))
        have = projections.get((e["task_id"], e["task_version"]), set())
        if have != {"USER_SUMMARY", "TASK_DETAIL"}:
            bad.append(Violation(e["task_id"], f"version {e['task_version']} ({e['event_type']}) has outbox "
                                 f"rows {sorted(have)}"))
    last_version: dict[str, int] = {}
    last_step: dict[tuple[Any, ...], int] = {}
    for e in s.events:
        last_version[e["task_id"]] = max(last_version.get(e["task_id"], 0), e["task_version"])
        if e["step_id"] is not None and e["step_version"] is not None:
            key = (e["task_id"], e["step_id"], e["step_attempt"])
            last_step[key] = max(last_step.get(key, 0), e["step_version"])
    for t in s.task_rows:
        if last_version.get(t["id"]) != t["version"]:
            bad.append(Violation(t["id"], f"task version {t['version']}, last event {last_version.get(t['id'])}"))
    for r in s.steps:
        if r["version"] != last_step.get((r["task_id"], r["step_id"], r["attempt"]), 1):
            bad.append(Violation(r["task_id"], f"step {r['step_id']}#{r['attempt']} version {r['version']}"))
    logged = {e["event_id"] for e in s.events}
    for op in s.reports():
        if op.value["accepted"] and op.value["eventId"] not in logged:
            bad.append(Violation(op.value.get("taskId"), f"{op.value['eventId']} answered accepted, not logged",
                                 [op.index]))
    return judged(len(s.events), bad)


def outbox_settles(s: SyncState) -> Verdict:
    """§5.2, §10, §11.4: once faults heal every outbox row ends PUBLISHED or DEAD; a failed try is retried only after
    its backoff, a permanent error (4xx other than 429) is not retried, and no row takes more than the attempts
    allowed."""
    bad = [Violation(o["aggregate_id"], f"outbox row {o['id']} still {o['status']} (attempts {o['attempts']})")
           for o in s.outbox if o["status"] not in ("PUBLISHED", "DEAD")]
    bad += [Violation(o["aggregate_id"], f"outbox row {o['id']} took {o['attempts']} attempts")
            for o in s.outbox if o["attempts"] > s.relay.max_attempts]
    tries: dict[int, list[Any]] = defaultdict(list)
    for op in s.history.ops:
        if op.f == "publish" and op.type in (OK, "fail"):
            tries[op.value["outbox_id"]].append(op)
    for row_id, ops in tries.items():
        for before, after in zip(ops, ops[1:], strict=False):
            if before.type != "fail":
                continue
            status = int(before.value.get("status", 0))
            if status != 429 and 400 <= status < 500:
                bad.append(Violation(None, f"outbox row {row_id} retried after permanent {status}",
                                     [before.index, after.index]))
            elif after.time - before.time < 0.5 * backoff_s(s.relay, int(before.value["attempt"])) - 1e-6:
                bad.append(Violation(None, f"outbox row {row_id} retried {after.time - before.time:.2f}s after "
                                     f"its try {before.value['attempt']} failed", [before.index, after.index]))
    return judged(len(s.outbox), bad)


def clients_converge(s: SyncState) -> Verdict:
    """§8, §10, §13, §17: after the faults heal every online client's summary of each of its user's tasks, and its
    detail of each task it has open, is the database's version."""
    versions = {t["id"]: t["version"] for t in s.task_rows}
    owner = {t["id"]: t["owner_id"] for t in s.task_rows}
    bad = []
    for c in s.clients:
        if not c["online"]:
            bad.append(Violation(c["client"], "not connected again after the faults healed"))
            continue
        for task_id, version in versions.items():
            if owner[task_id] == c["user"] and c["summary"].get(task_id) != version:
                bad.append(Violation(task_id, f"{c['client']} shows summary v{c['summary'].get(task_id)}, "
                                     f"database v{version}"))
        for task_id in c["open_details"]:
            if owner.get(task_id) == c["user"] and c["detail"].get(task_id) != versions.get(task_id):
                bad.append(Violation(task_id, f"{c['client']} shows detail v{c['detail'].get(task_id)}, "
                                     f"database v{versions.get(task_id)}"))
    return judged(len(s.clients), bad)


def client_views_monotonic(s: SyncState) -> Verdict:
    """§8.1, §8.2, §12: per client, gate and task, each applied view has a higher version than the last (duplicates
    and reordered publications change nothing; the client never shows an older state)."""
    last: dict[tuple[str, str, str], int] = {}
    bad = []
    n = 0
    for op in s.history.ops:
        if op.f != "view":
            continue
        n += 1
        key = (op.value["client"], op.value["gate"], op.value["task"])
        if op.value["version"] <= last.get(key, 0):
            bad.append(Violation(op.value["task"], f"{key[0]} {key[1]} v{last[key]} -> v{op.value['version']}",
                                 [op.index]))
        last[key] = max(last.get(key, 0), op.value["version"])
    return judged(n, bad)


def health_apart_from_lifecycle(s: SyncState) -> Verdict:
    """§4.3, §4.4, §17: a STEP_HEALTH_CHANGED leaves the step's and the task's lifecycle as they were, and STALE is
    only ever given to a running step."""
    step_last: dict[tuple[Any, ...], str] = {}
    task_last: dict[str, str] = {}
    bad = []
    n = 0
    for e in s.events:
        key = (e["task_id"], e["step_id"], e["step_attempt"])
        if e["event_type"] == "STEP_HEALTH_CHANGED":
            n += 1
            was = step_last.get(key, "PENDING")
            if e["step_lifecycle"] != was or e["lifecycle_status"] != task_last.get(e["task_id"]):
                bad.append(Violation(e["task_id"], f"health change {e['event_id']} moved the lifecycle: step "
                                     f"{was} -> {e['step_lifecycle']}, task {task_last.get(e['task_id'])} -> "
                                     f"{e['lifecycle_status']}"))
            if e["step_health"] == "STALE" and was != "RUNNING":
                bad.append(Violation(e["task_id"], f"STALE given to a {was} step by {e['event_id']}"))
        if e["step_lifecycle"] is not None:
            step_last[key] = e["step_lifecycle"]
        task_last[e["task_id"]] = e["lifecycle_status"]
    return judged(n, bad)


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | set().union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value)) if value else set()
    return set()


def projection_whitelist(s: SyncState) -> Verdict:
    """§3.3.1, §4.4, §5.1, §17: a USER_SUMMARY carries only the summary's whitelisted fields (no step data, no result
    reference); no projection carries a server-only field (diagnosticsRef)."""
    bad = []
    for o in s.outbox:
        p = o["payload"]
        if _keys(p) & SERVER_ONLY:
            bad.append(Violation(o["aggregate_id"], f"outbox row {o['id']} ({o['projection']}) carries "
                                 f"{sorted(_keys(p) & SERVER_ONLY)}"))
        if o["projection"] == "USER_SUMMARY":
            extra = (set(p) - SUMMARY_KEYS) | (set(p.get("task", {})) - SUMMARY_TASK_KEYS)
            leaked = _keys(p.get("task", {}).get("summaryData")) & DETAIL_ONLY
            if extra or leaked:
                bad.append(Violation(o["aggregate_id"], f"summary row {o['id']} carries {sorted(extra | leaked)}"))
    return judged(len(s.outbox), bad)


def failure_notices(s: SyncState) -> Verdict:
    """§6.8, §8.5, §13.3, §17: every committed STEP_FAILED and TASK_FAILED has a USER_SUMMARY row of its version with
    its notice (a user who opened no detail still hears of it); a client shows each notice at most once."""
    summaries = {(o["aggregate_id"], o["aggregate_version"]): o["payload"] for o in s.outbox
                 if o["projection"] == "USER_SUMMARY"}
    bad = []
    n = 0
    for e in s.events:
        if e["event_type"] not in ("STEP_FAILED", "TASK_FAILED"):
            continue
        n += 1
        notice = (summaries.get((e["task_id"], e["task_version"])) or {}).get("notice")
        if not notice or notice.get("id") != f"{e['task_id']}:{e['task_version']}":
            bad.append(Violation(e["task_id"], f"{e['event_type']} v{e['task_version']} has no summary notice"))
    shown = Counter((op.value["client"], op.value["id"]) for op in s.history.ops if op.f == "notice")
    bad += [Violation(notice_id, f"{client} showed notice {notice_id} {count} times")
            for (client, notice_id), count in shown.items() if count > 1]
    return judged(n + len(shown), bad)


def producer_truth(s: SyncState) -> Verdict:
    """§3.3, §3.9, §5.2 (the last paragraph), §10: a producer's real outcome reaches the database. For each outcome a
    producer recorded in its ledger (a step's completion or failure of its latest attempt, the coordinator's task
    end), the service answered it, and the step or task ended so; only a report after the task ended may be refused
    (§4.2)."""
    latest: dict[tuple[str, str], int] = {}
    for r in s.steps:
        latest[(r["task_id"], r["step_id"])] = max(latest.get((r["task_id"], r["step_id"]), 0), r["attempt"])
    steps = {(r["task_id"], r["step_id"], r["attempt"]): r for r in s.steps}
    tasks = {t["id"]: t for t in s.task_rows}
    bad = []
    n = 0
    for row in s.ledger:
        kind = row["event"]["eventType"]
        if row["answer"] == "TASK_TERMINAL":
            continue
        if kind in STEP_OUTCOMES and latest.get((row["task_id"], row["step_id"])) == row["attempt"]:
            n += 1
            have = steps[(row["task_id"], row["step_id"], row["attempt"])]["lifecycle_status"]
            want = STEP_OUTCOMES[kind]
        elif kind in TASK_OUTCOMES:
            n += 1
            have, want = tasks[row["task_id"]]["lifecycle_status"], TASK_OUTCOMES[kind]
        else:
            continue
        if have != want or row["answer"] != "ACCEPTED":
            bad.append(Violation(row["task_id"], f"{row['producer_id']} recorded {kind} (answered "
                                 f"{row['answer']}); the database has {have}"))
    return judged(n, bad)


def registered_statuses(s: SyncState) -> Verdict:
    """§4.5-§4.7, §17: every committed business status is registered in the definition version its task bound, a
    task's lifecycle is what that version maps it to, and every data schema is one its operation allows for the
    event type."""
    bound = {t["id"]: t["status_definition_version"] for t in s.task_rows}
    bad = []
    for e in s.events:
        statuses = statuses_of(bound[e["task_id"]])
        if e["business_status"] not in statuses:
            bad.append(Violation(e["task_id"], f"{e['event_id']}: {e['business_status']} not registered in "
                                 f"v{bound[e['task_id']]}"))
        elif e["event_type"] in TASK_OUTCOMES and statuses[e["business_status"]][0] != e["lifecycle_status"]:
            bad.append(Violation(e["task_id"], f"{e['event_id']}: {e['business_status']} is "
                                 f"{statuses[e['business_status']][0]} in v{bound[e['task_id']]}, the task is "
                                 f"{e['lifecycle_status']}"))
        if e["data_schema"] is not None and e["operation_code"] in OPERATIONS:
            allowed = OPERATIONS[e["operation_code"]][2].get(e["event_type"], [])
            if e["data_schema"] not in allowed:
                bad.append(Violation(e["task_id"], f"{e['event_id']}: schema {e['data_schema']} not allowed"))
    return judged(len(s.events), bad)


def no_foreign_publication(s: SyncState) -> Verdict:
    """§6.5, §7, §17: a client receives publications only of its user's channel and of the detail channels of its
    user's tasks, and the server holds no connection above its subscription limit (1 + 20)."""
    owner = {t["id"]: t["owner_id"] for t in s.task_rows}
    user = {c["client"]: c["user"] for c in s.clients}
    bad = []
    n = 0
    for op in s.history.ops:
        if op.f != "deliver":
            continue
        n += 1
        client, channel = op.value["client"], op.value["channel"]
        kind, _, rest = channel.partition(":")
        who = rest.split("/", 1)[1] if "/" in rest else ""
        mine = who == user.get(client) if kind == "task_user" else owner.get(who) == user.get(client)
        if not mine:
            bad.append(Violation(who, f"{client} (user {user.get(client)}) received {channel}", [op.index]))
    bad += [Violation(client, f"{client} held {peak} subscriptions, the limit is {s.max_subscriptions}")
            for client, peak in s.peak_subscriptions.items() if peak > s.max_subscriptions]
    return judged(n, bad)


INVARIANTS: Invariants[SyncState] = Invariants({
    "S1": (one_effect_per_event, "one effect per eventId, and every retry gets the first answer"),
    "S2": (conflicting_reuse_refused, "an eventId reused with other content is refused"),
    "S3": (only_token_bound_producers, "only the producer a token binds changes a step"),
    "S4": (no_stale_accepted_no_fresh_refused, "no old attempt or sourceSeq accepted, no fresh one refused"),
    "S5": (legal_transitions, "lifecycles move along the state machine; no terminal regression"),
    "S6": (atomic_commit, "state, event, versions, dedup result and outbox rows commit together"),
    "S7": (outbox_settles, "every outbox row ends PUBLISHED or DEAD, with bounded backoff and no hot loop"),
    "S8": (clients_converge, "every online client converges on the database after heal"),
    "S9": (client_views_monotonic, "a client's views only move to higher versions, per gate"),
    "S10": (health_apart_from_lifecycle, "health never changes the lifecycle; STALE only on running steps"),
    "S11": (projection_whitelist, "projections carry only their whitelisted fields"),
    "S12": (failure_notices, "failures reach the summary channel with a notice, shown at most once"),
    "S13": (producer_truth, "a producer's recorded outcome reaches the database"),
    "S14": (registered_statuses, "only registered statuses and schemas, by the task's bound version"),
    "S15": (no_foreign_publication, "no client receives another user's publication; the subscription limit holds"),
})

__all__ = ["INVARIANTS", "SyncState", "read_state", "unchecked"]
