"""The inspection pipeline's invariants: V1-V20 are seed 001 §11's INV-1 ... INV-20, judged on a run's history and
tables; V21-V28 are what its users need beyond them (issue 57): each message takes effect once or is superseded,
the current row holds the greatest (cycle_id, seq), one owner per epoch and no write under a superseded epoch, every
slot owned and every backlog drained, worker transitions legal and on time, the rebalance limits, §4.4 D's RTO, and
no message refused unless superseded (resharding's lost updates).

What the checkers read (InspectionState): the history (the IS nodes' ``outbox`` and ``publish`` ops, the workers'
``deliver``, ``batch.commit``, ``ack`` and ``nack`` ops, the heartbeats, the nemesis's faults), and the tables at
the end: ``device_status_history`` and ``slot_audit`` are append-only records in commit order, so the checkers
replay them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from harness.history import INVOKE, NEMESIS, OK, History, Op
from reference.inspection.config import Settings
from reference.inspection.ingest import SUPPORTED_SCHEMAS, fold, fold_alert
from reference.inspection.models import ACTIVE, DEAD, DRAINING, METADATA, OFFLINE, SUSPECTED, WORKER_EDGES
from reference.inspection.reshard import slot_of
from scenarios.sim.world import EPOCH
from scenarios.verdicts import Invariants, Verdict, Violation, judged

OUTBOX_MARGIN_S = 600.0  # INV-13's safety margin


def read_tables(session: Any, origin: datetime = EPOCH, scale: float = 1.0) -> dict[str, list[dict[str, Any]]]:
    """Every table of the pipeline as plain dicts in primary key order, times as seconds since the run's ``origin``
    times ``scale`` (the real stack: its wall seconds back to scenario seconds)."""
    out = {}
    for name, table in METADATA.tables.items():
        rows = session.execute(select(table).order_by(*table.primary_key.columns)).mappings()
        out[name] = [{k: ((v.replace(tzinfo=EPOCH.tzinfo) if v.tzinfo is None else v) - origin).total_seconds() * scale
                      if isinstance(v, datetime) else v for k, v in r.items()} for r in rows]
    return out


@dataclass
class InspectionState:  # a scenarios.systems.RunState
    history: History
    tables: dict[str, list[dict[str, Any]]]
    settings: Settings
    spec: Any  # systems.inspection.sim.InspectionSpec
    outboxes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    broker_leftovers: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    heal_time: float = 0.0
    end_time: float = 0.0
    t0: float = EPOCH.timestamp()
    defects: list[dict[str, Any]] = field(default_factory=list)
    scale: float = 1.0  # scenario seconds per second of the run's clock (the real stack's: 1 / its time factor)

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return []

    @property
    def audit(self) -> list[dict[str, Any]]:
        return []

    def counts(self) -> dict[str, int]:
        t = self.tables
        return {"outboxed": len(outboxed(self.history)), "processed": len(t["message_dedup"]),
                "history_rows": len(t["device_status_history"]), "devices": len(t["device_status_current"]),
                "alert_events": len(t["alert_event"]), "broker_leftovers": len(self.broker_leftovers)}


# ---------------------------------------------------------------------------------------------- reading


def ops(h: History, f: str, type_: str | None = None) -> Iterator[Op]:
    return (o for o in h.ops if o.f == f and (type_ is None or o.type == type_))


def outboxed(h: History) -> dict[str, dict[str, Any]]:
    """message_id -> its body, as the IS nodes wrote it to their outboxes (the first time)."""
    out: dict[str, dict[str, Any]] = {}
    for o in ops(h, "outbox"):
        for body in o.value["messages"]:
            out.setdefault(str(body["message_id"]), body)
    return out


def _bodies(h: History) -> Iterator[tuple[Op, dict[str, Any]]]:
    for o in ops(h, "outbox"):
        for body in o.value["messages"]:
            yield o, body


def _worker_of(process: str) -> str:
    return process if process.startswith("worker-") else f"worker-{process.split('-', 1)[1]}"


# ---------------------------------------------------------------------------------------------- INV-1 ... INV-7


def envelope_carries_versions(s: InspectionState) -> Verdict:
    """INV-1: every message an IS node sends carries schema_version, resource_version, plan_version and
    slot_map_version (§2.4)."""
    keys = ("schema_version", "resource_version", "plan_version", "slot_map_version")
    bad = [Violation(str(b["message_id"]), f"missing {[k for k in keys if not isinstance(b.get(k), int)]}", [o.index])
           for o, b in _bodies(s.history) if any(not isinstance(b.get(k), int) for k in keys)]
    return judged(len(outboxed(s.history)), bad)


def is_never_sees_epochs(s: InspectionState) -> Verdict:
    """INV-2: an IS node never knows a lease epoch: no message it sends carries one."""
    def has_epoch(d: Any) -> bool:
        return isinstance(d, dict) and any("epoch" in k or has_epoch(v) for k, v in d.items())

    bad = [Violation(str(b["message_id"]), "the envelope carries a lease epoch", [o.index])
           for o, b in _bodies(s.history) if has_epoch(b)]
    return judged(len(outboxed(s.history)), bad)


def scaling_changes_only_epochs(s: InspectionState) -> Verdict:
    """INV-3: workers joining, leaving and dying change only lease epochs: every slot's slot_map_version is a map
    version the database holds (only a reshard writes one), and every message of the run carries the same resource
    and plan versions and a map version of that table."""
    versions = {int(r["version"]) for r in s.tables["slot_map_version"]}
    bad = [Violation(f"slot {r['slot_id']}", f"slot_map_version {r['slot_map_version']} is not one of {versions}")
           for r in s.tables["slot_lease"] if int(r["slot_map_version"]) not in versions]
    seen = {(b["resource_version"], b["plan_version"]) for _, b in _bodies(s.history)}
    if len(seen) > 1:
        bad.append(Violation(None, f"messages carry {len(seen)} different resource/plan versions: {sorted(seen)[:4]}"))
    bad += [Violation(str(b["message_id"]), f"slot_map_version {b['slot_map_version']} is not one of {versions}",
                      [o.index]) for o, b in _bodies(s.history) if b["slot_map_version"] not in versions]
    return judged(len(s.tables["slot_lease"]), bad)


def _maps(s: InspectionState) -> dict[int, tuple[float, int]]:
    """map version -> (effective_at in scenario seconds, TOTAL_SLOTS)."""
    return {int(r["version"]): (float(r["effective_at"]), int(r["total_slots"])) for r in s.tables["slot_map_version"]}


def _route_breaks(s: InspectionState, maps: dict[int, tuple[float, int]]) -> Iterator[Violation]:
    """Messages routed otherwise than by a map in force when they were collected."""
    origin = s.t0
    for o, b in _bodies(s.history):
        version, device = int(b["slot_map_version"]), str(b["device_id"])
        if version not in maps:
            continue  # V3's
        collected = (datetime.fromisoformat(str(b["collected_at"])).timestamp() - origin) * s.scale
        effective, total = maps[version]
        if int(b["slot_id"]) != slot_of(device, total) or collected < effective - 1e-6:
            yield Violation(str(b["message_id"]), f"slot {b['slot_id']} under map {version} (effective at "
                                                  f"{effective:.1f} s, {total} slots), collected at {collected:.1f} s",
                            [o.index])


def devices_move_only_by_resharding(s: InspectionState) -> Verdict:
    """INV-4: a device changes slot only through the resharding protocol (§3.4): each message is routed by a map in
    force when it was collected (its slot is that map's for the device); each current row sits on the slot its
    row's map version gives; and a device's applied messages never go back to an older map's route."""
    maps = _maps(s)
    bad = list(_route_breaks(s, maps))
    for r in s.tables["device_status_current"]:
        version = int(r.get("slot_map_version") or 1)
        want = slot_of(r["device_id"], maps[version][1]) if version in maps else None
        if int(r["current_slot"]) != want:
            bad.append(Violation(r["device_id"], f"current_slot {r['current_slot']} under map {version}, the map "
                                                 f"says {want}"))
    versions = {str(b["message_id"]): int(b["slot_map_version"]) for b in outboxed(s.history).values()}
    for device, chain in _applied_chains(s).items():
        route = [versions.get(r["message_id"], 0) for r in chain]
        bad += [Violation(device, f"{r['message_id']} applied from map {v} after map {before}")
                for r, before, v in zip(chain[1:], route, route[1:], strict=False) if v < before]
    return judged(len(s.tables["device_status_current"]) + len(versions), bad)


def seq_never_goes_back(s: InspectionState) -> Verdict:
    """INV-5: a device's (cycle_id, seq) grows with every message its IS node writes, across the node's restarts."""
    last: dict[str, tuple[int, int]] = {}
    bad = []
    for o, b in _bodies(s.history):
        key, device = (int(b["cycle_id"]), int(b["seq"])), str(b["device_id"])
        if device in last and key <= last[device]:
            bad.append(Violation(device, f"{b['message_id']}: (cycle_id, seq) {key} after {last[device]}", [o.index]))
        last[device] = max(key, last.get(device, key))
    return judged(len(last), bad)


def message_id_unique_and_stable(s: InspectionState) -> Verdict:
    """INV-6: a message_id names one message, the same on every publish and replay; no message has two ids."""
    content: dict[str, tuple[str, int, int]] = {}
    ids: dict[tuple[str, int, int], str] = {}
    bad = []
    for o, b in _bodies(s.history):
        mid, what = str(b["message_id"]), (str(b["device_id"]), int(b["cycle_id"]), int(b["seq"]))
        if content.setdefault(mid, what) != what:
            bad.append(Violation(mid, f"names {content[mid]} and {what}", [o.index]))
        if ids.setdefault(what, mid) != mid:
            bad.append(Violation(mid, f"{what} also has id {ids[what]}", [o.index]))
    published = {str(o.value["message_id"]) for o in ops(s.history, "publish")}
    bad += [Violation(m, "published under an id no outbox row has") for m in sorted(published - set(content))]
    return judged(len(content), bad)


def schema_versions_supported(s: InspectionState) -> Verdict:
    """INV-7: the workers read every schema version in flight (the current one and the one before)."""
    bad = [Violation(str(b["message_id"]), f"schema_version {b['schema_version']} not in {SUPPORTED_SCHEMAS}",
                     [o.index]) for o, b in _bodies(s.history) if b.get("schema_version") not in SUPPORTED_SCHEMAS]
    return judged(len(outboxed(s.history)), bad)


# ---------------------------------------------------------------------------------------------- INV-8 ... INV-10


def _applied_chains(s: InspectionState) -> dict[str, list[dict[str, Any]]]:
    chains: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in s.tables["device_status_history"]:  # id order: commit order per device
        if r["applied"]:
            chains[r["device_id"]].append(r)
    return chains


def _fold_breaks(s: InspectionState, across_epochs: bool) -> tuple[int, list[Violation]]:
    checked, bad = 0, []
    for device, chain in _applied_chains(s).items():
        before: dict[str, Any] | None = None
        epoch = None
        for r in chain:
            crossed = epoch is not None and r["writer_epoch"] != epoch
            if crossed == across_epochs or (before is None and not across_epochs):
                checked += 1
                want = fold(before, {"payload": r["payload"], "cycle_id": r["cycle_id"]})
                if r["snapshot"] != want:
                    bad.append(Violation(device, f"{r['message_id']} (epoch {r['writer_epoch']}): snapshot "
                                                 f"{r['snapshot']}, the fold says {want}"))
            before, epoch = r["snapshot"], r["writer_epoch"]
    return checked, bad


def no_unpersisted_state(s: InspectionState) -> Verdict:
    """INV-8: a worker keeps no state it has not persisted: within one owner's epoch, each snapshot a commit wrote is
    the fold of the one before and the message (nothing kept in memory alone changed it)."""
    return judged(*_fold_breaks(s, across_epochs=False))


def commit_writes_snapshot(s: InspectionState) -> Verdict:
    """INV-9: every batch commit writes the derived snapshot: each device's current row holds the snapshot and the
    (cycle_id, seq) of the last message that advanced it."""
    last = {d: chain[-1] for d, chain in _applied_chains(s).items()}
    bad = []
    for r in s.tables["device_status_current"]:
        h = last.get(r["device_id"])
        if h is None or r["derived_snapshot"] != h["snapshot"] or (r["cycle_id"], r["seq"]) != (h["cycle_id"],
                                                                                                h["seq"]):
            bad.append(Violation(r["device_id"], f"current row ({r['cycle_id']}, {r['seq']}) snapshot "
                                                 f"{r['derived_snapshot']}; its last applied message: "
                                                 f"{None if h is None else (h['cycle_id'], h['seq'], h['snapshot'])}"))
    return judged(len(s.tables["device_status_current"]), bad)


def takeover_loads_snapshots(s: InspectionState) -> Verdict:
    """INV-10: a worker taking a slot continues from the snapshots its devices had: the first snapshot written under
    a new epoch is the fold of the last one written under the old."""
    return judged(*_fold_breaks(s, across_epochs=True))


# ---------------------------------------------------------------------------------------------- INV-11 ... INV-13


def outbox_before_publish(s: InspectionState) -> Verdict:
    """INV-11: an IS node publishes a message only after its outbox row is written."""
    written: set[tuple[str, str]] = set()
    bad, checked = [], 0
    for o in s.history.ops:
        if o.f == "outbox":
            written.update((o.process, str(b["message_id"])) for b in o.value["messages"])
        elif o.f == "publish" and o.type == "invoke":
            checked += 1
            if (o.process, str(o.value["message_id"])) not in written:
                bad.append(Violation(str(o.value["message_id"]), f"{o.process} published it before writing its "
                                                                 "outbox row", [o.index]))
    return judged(checked, bad)


def message_id_reconstructible(s: InspectionState) -> Verdict:
    """INV-12: a message_id is rebuilt from the message ({is_node}:{cycle_id}:{device_id}:{seq}), so a restarted node
    makes the same one."""
    bad = [Violation(str(b["message_id"]), "not {is_node}:{cycle_id}:{device_id}:{seq}", [o.index])
           for o, b in _bodies(s.history)
           if b["message_id"] != f"{b['is_node']}:{b['cycle_id']}:{b['device_id']}:{b['seq']}"]
    return judged(len(outboxed(s.history)), bad)


def outbox_outlives_queues(s: InspectionState) -> Verdict:
    """INV-13: the outbox keeps a row at least the queues' message TTL plus a margin, and message_dedup keeps an id at
    least as long as the outbox may replay it."""
    c, bad = s.settings, []
    if c.outbox_retention_s < c.message_ttl_s + OUTBOX_MARGIN_S:
        bad.append(Violation(None, f"outbox retention {c.outbox_retention_s} s < TTL {c.message_ttl_s} s + "
                                   f"{OUTBOX_MARGIN_S} s"))
    if c.dedup_retention_s < c.outbox_retention_s:
        bad.append(Violation(None, f"dedup retention {c.dedup_retention_s} s < outbox retention "
                                   f"{c.outbox_retention_s} s"))
    return judged(2, bad)


# ---------------------------------------------------------------------------------------------- INV-14 ... INV-20


def _commits(h: History) -> Iterator[Op]:
    return ops(h, "batch.commit", OK)


def leases_come_from_the_database(s: InspectionState) -> Verdict:
    """INV-14: slot_lease is the source of truth: every batch a worker commits is under a (slot, epoch, owner) the
    database granted (a lease row of slot_audit); a lease notice on Redis (§4.1) names only slots whose lease its
    publisher had already changed in a committed tick (a notice never runs ahead of the database)."""
    leases = [r for r in s.tables["slot_audit"] if r["kind"] == "lease"]
    granted = {(r["slot_id"], r["lease_epoch"], r["owner_worker_id"]) for r in leases}
    bad = [Violation(o.value["worker"], f"committed slot {o.value['slot']} under epoch {o.value['epoch']}, never "
                                        "granted to it", [o.index])
           for o in _commits(s.history) if not o.value["fenced"]
           and (o.value["slot"], o.value["epoch"], o.value["worker"]) not in granted]
    notices = [o for o in s.history.ops if o.f == "notify"]
    for o in notices:
        ahead = [slot for slot in o.value["slots"] if not any(
            r["slot_id"] == slot and r["actor"] == o.process and r["at"] <= o.time for r in leases)]
        if ahead:
            bad.append(Violation(o.process, f"notified slots {ahead} at {o.time:.1f} s before it changed their "
                                            "lease", [o.index]))
    return judged(sum(1 for _ in _commits(s.history)) + len(notices), bad)


def lease_cache_fresh_at_commit(s: InspectionState) -> Verdict:
    """INV-15: a worker commits a batch only with a lease cache younger than 5 s."""
    limit = s.settings.cache_max_age_s
    bad = [Violation(o.value["worker"], f"committed slot {o.value['slot']} with a lease cache {o.value['cache_age_s']}"
                                        f" s old", [o.index])
           for o in _commits(s.history) if not o.value["cache_age_s"] < limit]
    return judged(sum(1 for _ in _commits(s.history)), bad)


def _closures(h: History) -> dict[str, list[float]]:
    """process -> when its connection or channels were lost (killed, paused past the AMQP heartbeat, an outage,
    consumer_timeout)."""
    out: dict[str, list[float]] = defaultdict(list)
    for o in h.ops:
        if o.f in ("kill", "channel-closed") and o.process in (NEMESIS, "broker"):
            out[str(o.value.get("process"))].append(o.time)
        elif o.f == "start-fault" and o.value.get("fault") == "broker-outage":
            out["*"].append(o.time)
    return out


def deliveries_are_settled(s: InspectionState) -> Verdict:
    """INV-16: a worker holds no delivery it will not process: each one is acked after its commit or nacked (a slot
    it no longer holds: cancel and nack), unless its channel closed (the worker killed, the broker away or
    consumer_timeout), which gives it back to the queue."""
    pending: dict[tuple[str, str], Op] = {}
    for o in s.history.ops:
        if o.f == "deliver":
            pending[(o.process, str(o.value["message_id"]))] = o
        elif o.f in ("ack", "nack") and o.type == OK:
            for mid in o.value["ids"]:
                pending.pop((o.process, str(mid)), None)
    closures = _closures(s.history)
    bad = [Violation(p, f"{mid} delivered at {o.time:.1f} s, never acked, nacked or given back", [o.index])
           for (p, mid), o in sorted(pending.items())
           if not any(t >= o.time for t in closures.get(p, []) + closures.get("*", []))]
    return judged(sum(1 for _ in ops(s.history, "deliver")), bad)


def current_written_by_template(s: InspectionState) -> Verdict:
    """INV-17: device_status_current is written only by the fenced UPSERT: each current row is one of the device's
    applied history rows, column for column (slot, cycle_id, seq, writer_epoch, payload)."""
    applied = {(r["device_id"], r["cycle_id"], r["seq"]): r for r in s.tables["device_status_history"] if r["applied"]}
    bad = []
    for r in s.tables["device_status_current"]:
        h = applied.get((r["device_id"], r["cycle_id"], r["seq"]))
        if h is None or (h["slot_id"], h["writer_epoch"], h["payload"]) != (r["slot_id"], r["writer_epoch"],
                                                                            r["status_payload"]):
            bad.append(Violation(r["device_id"], f"current row ({r['cycle_id']}, {r['seq']}, epoch "
                                                 f"{r['writer_epoch']}) matches no applied message"))
    return judged(len(s.tables["device_status_current"]), bad)


def alert_current_is_the_fold(s: InspectionState) -> Verdict:
    """INV-18: alert_current is the fold of alert_event in event time (§3.3), never written otherwise."""
    events: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in s.tables["alert_event"]:
        events[(e["device_id"], e["alert_key"])].append(e)
    current = {(r["device_id"], r["alert_key"]): r for r in s.tables["alert_current"]}
    bad = []
    for key, evs in sorted(events.items()):
        want = fold_alert(sorted(evs, key=lambda e: (e["event_time"], e["cycle_id"], e["seq"])))
        got = current.get(key)
        if want is None or got is None or (got["state"], got["severity"], got["last_event_id"]) != (
                want["state"], want["severity"], want["last_event_id"]):
            bad.append(Violation(key[0], f"{key[1]}: alert_current {None if got is None else got['state']}, the fold "
                                         f"of its {len(evs)} events says {None if want is None else want['state']}"))
    bad += [Violation(k[0], f"{k[1]}: alert_current without events") for k in sorted(set(current) - set(events))]
    return judged(len(events), bad)


def ack_after_commit(s: InspectionState) -> Verdict:
    """INV-19: a worker acks a message only after a batch commit of its own processed it (and the database kept
    it: message_dedup has it)."""
    done: set[tuple[str, str]] = set()
    dedup = {r["message_id"] for r in s.tables["message_dedup"]}
    bad, checked = [], 0
    for o in s.history.ops:
        if o.f == "batch.commit" and o.type == OK and not o.value["fenced"]:
            done.update((o.process, m) for k in ("applied", "superseded", "duplicates") for m in o.value[k])
        elif o.f == "ack" and o.type == OK:
            for mid in o.value["ids"]:
                checked += 1
                if (o.process, mid) not in done or mid not in dedup:
                    bad.append(Violation(str(mid), f"{o.process} acked it before any commit of it", [o.index]))
    return judged(checked, bad)


def history_append_only(s: InspectionState) -> Verdict:
    """INV-20: device_status_history is append-only: one row per processed message, none missing, none twice."""
    rows = [r["message_id"] for r in s.tables["device_status_history"]]
    dedup = {r["message_id"] for r in s.tables["message_dedup"]}
    counts: dict[str, int] = defaultdict(int)
    for m in rows:
        counts[m] += 1
    bad = [Violation(m, f"{n} history rows") for m, n in sorted(counts.items()) if n > 1]
    bad += [Violation(m, "in message_dedup, no history row") for m in sorted(dedup - set(counts))][:50]
    bad += [Violation(m, "a history row, not in message_dedup") for m in sorted(set(counts) - dedup)]
    return judged(len(rows), bad)


# ---------------------------------------------------------------------------------------------- beyond §11


def each_message_takes_effect_once(s: InspectionState) -> Verdict:
    """Each message an IS node wrote takes effect exactly once (one history row: applied, or superseded by a greater
    (cycle_id, seq)); none is lost (dropped from a full queue, skipped as a false duplicate, never published)."""
    sent = outboxed(s.history)
    rows: dict[str, int] = defaultdict(int)
    for r in s.tables["device_status_history"]:
        rows[r["message_id"]] += 1
    bad = [Violation(m, "lost: no history row" + (" (dropped from a full queue)" if m in s.dropped else ""))
           for m in sorted(sent) if rows.get(m, 0) == 0]
    bad += [Violation(m, f"took effect {n} times") for m, n in sorted(rows.items()) if n > 1]
    return judged(len(sent), bad)


def current_holds_the_greatest(s: InspectionState) -> Verdict:
    """The current row never goes back: each message that advanced it is newer by (cycle_id, seq) than the one
    before; and after heal it holds the greatest (cycle_id, seq) its IS node sent."""
    greatest: dict[str, tuple[int, int]] = {}
    for b in outboxed(s.history).values():
        key = (int(b["cycle_id"]), int(b["seq"]))
        greatest[str(b["device_id"])] = max(key, greatest.get(str(b["device_id"]), key))
    current = {r["device_id"]: (r["cycle_id"], r["seq"]) for r in s.tables["device_status_current"]}
    bad = [Violation(d, f"current row {current.get(d)}, greatest sent {g}") for d, g in sorted(greatest.items())
           if current.get(d) != g]
    for device, chain in _applied_chains(s).items():
        for before, after in zip(chain, chain[1:], strict=False):
            if (after["cycle_id"], after["seq"]) <= (before["cycle_id"], before["seq"]):
                bad.append(Violation(device, f"{after['message_id']} overwrote the newer ({before['cycle_id']}, "
                                             f"{before['seq']})"))
    return judged(len(greatest), bad)


def one_owner_per_epoch(s: InspectionState) -> Verdict:
    """One owner per (slot, epoch), epochs never going back, and no batch committed under a superseded epoch or by
    anyone but the slot's owner (slot_audit replayed in commit order)."""
    owner: dict[int, tuple[int, str | None]] = {}
    seen: dict[tuple[int, int], str] = {}
    bad = []
    for r in s.tables["slot_audit"]:
        slot, epoch, who = r["slot_id"], r["lease_epoch"], r["owner_worker_id"]
        held = owner.get(slot, (0, None))
        if r["kind"] == "batch":
            if (epoch, who) != held:
                bad.append(Violation(f"slot {slot}", f"{who} committed under epoch {epoch} at {r['at']:.1f} s; the "
                                                     f"lease was epoch {held[0]}, {held[1]}'s"))
            continue
        if epoch < held[0]:
            bad.append(Violation(f"slot {slot}", f"epoch went back from {held[0]} to {epoch}"))
        if who is not None and seen.setdefault((slot, epoch), who) != who:
            bad.append(Violation(f"slot {slot}", f"epoch {epoch} owned by {seen[(slot, epoch)]} and {who}"))
        owner[slot] = (epoch, who)
    return judged(len(s.tables["slot_audit"]), bad)


def every_slot_owned_and_drained(s: InspectionState) -> Verdict:
    """At the end, every slot is ACTIVE under a live (ACTIVE or DRAINING) worker, every queue is empty (nothing
    ready, nothing unacked) and every outbox row is confirmed."""
    workers = {w["worker_id"]: w["state"] for w in s.tables["worker_heartbeat"]}
    bad = [Violation(f"slot {r['slot_id']}", f"{r['state']} under {r['owner_worker_id']} "
                                             f"({workers.get(r['owner_worker_id'])})")
           for r in s.tables["slot_lease"] if r["state"] != ACTIVE or workers.get(r["owner_worker_id"]) not in (
               ACTIVE, DRAINING)]
    if s.broker_leftovers:
        bad.append(Violation(None, f"{len(s.broker_leftovers)} messages still in the queues: "
                                   f"{s.broker_leftovers[:3]}"))
    unconfirmed = [r["message_id"] for rows in s.outboxes.values() for r in rows if not r["confirmed"]]
    if unconfirmed:
        bad.append(Violation(None, f"{len(unconfirmed)} outbox rows unconfirmed: {unconfirmed[:3]}"))
    return judged(len(s.tables["slot_lease"]), bad)


def _outages(s: InspectionState) -> list[tuple[float, float]]:
    """Windows in which the leader could not supervise on time (the database or a web node away)."""
    return [(w.start, w.end if w.end is not None else s.end_time) for w in s.history.fault_windows()
            if w.fault in ("db-outage", "leader-pause")]


def worker_transitions_legal_and_timely(s: InspectionState) -> Verdict:
    """§2.2/§4.2: every worker transition is an edge of its state machine, SUSPECTED only after 15 s without a
    heartbeat and DEAD only after 30 s; and a worker silent past 30 s is DEAD within two leader ticks (unless the
    leader could not run then)."""
    c, bad = s.settings, []
    last: dict[str, str | None] = {}
    for r in s.tables["worker_log"]:
        w, edge = r["worker_id"], (r["from_state"], r["to_state"])
        if r["from_state"] != last.get(w) or edge not in WORKER_EDGES:
            bad.append(Violation(w, f"{last.get(w)} -> {r['to_state']} at {r['at']:.1f} s (logged {edge})"))
        silent = r["silent_s"]
        if (r["to_state"] == SUSPECTED and not silent > c.suspected_after_s) or (
                r["to_state"] == DEAD and not silent > c.dead_after_s):
            bad.append(Violation(w, f"{r['to_state']} after {silent} s of silence"))
        last[w] = r["to_state"]
    slack = 2 * c.leader_tick_s + c.heartbeat_s
    deaths: dict[str, list[float]] = defaultdict(list)
    offline: dict[str, float] = defaultdict(lambda: float("inf"))
    for r in s.tables["worker_log"]:
        if r["to_state"] == DEAD:
            deaths[r["worker_id"]].append(r["at"])
        elif r["to_state"] == OFFLINE:  # drained: it stops heartbeating on purpose
            offline[r["worker_id"]] = min(offline[r["worker_id"]], r["at"])
    for w, beats in _heartbeats(s.history).items():
        for (began, a), (_, b) in zip(beats, [*beats[1:], (s.end_time, s.end_time)], strict=True):
            due = a + c.dead_after_s + slack
            # the leader measures the silence from the row's time, written between the beat's invoke and its ok:
            # a death counts from the invoke on (on the real stack the ok comes a commit later)
            if b > due and a < offline[w] and not any(began + c.dead_after_s < d <= due for d in deaths[w]) and \
                    not any(lo <= due and hi >= a for lo, hi in _outages(s)):
                seen = ", ".join(f"{d:.1f} s" for d in deaths[w]) or "never"
                bad.append(Violation(w, f"silent from {a:.1f} s to {b:.1f} s, not DEAD by {due:.1f} s (DEAD at "
                                        f"{seen})"))
    return judged(len(s.tables["worker_log"]), bad)


def _heartbeats(h: History) -> dict[str, list[tuple[float, float]]]:
    """Each worker's successful heartbeats in order: (its invoke's time, its ok's time)."""
    began: dict[str, float] = {}
    beats: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for o in ops(h, "worker.heartbeat"):
        if o.type == INVOKE:
            began[o.process] = o.time
        elif o.type == OK:
            beats[_worker_of(o.process)].append((began.pop(o.process, o.time), o.time))
    return beats


def rebalance_within_limits(s: InspectionState) -> Verdict:
    """§4.3: a rebalance moves at most 5 slots at once, a slot at most once in 5 minutes, and a worker gives slots
    away at most once a minute."""
    c, bad = s.settings, []
    moves = [r for r in s.tables["slot_audit"] if r["kind"] == "lease" and r["why"] == "rebalance"]
    per_tick: dict[float, int] = defaultdict(int)
    slot_last: dict[int, float] = {}
    worker_last: dict[str, float] = {}
    for r in moves:
        per_tick[r["at"]] += 1
        if r["slot_id"] in slot_last and r["at"] - slot_last[r["slot_id"]] < c.slot_cooldown_s:
            bad.append(Violation(f"slot {r['slot_id']}", f"moved at {slot_last[r['slot_id']]:.1f} s and "
                                                         f"{r['at']:.1f} s"))
        w = r["owner_worker_id"]
        if w in worker_last and 0 < r["at"] - worker_last[w] < c.worker_cooldown_s:
            bad.append(Violation(w, f"gave slots away at {worker_last[w]:.1f} s and {r['at']:.1f} s"))
        slot_last[r["slot_id"]], worker_last[w] = r["at"], r["at"]
    bad += [Violation(None, f"{n} slots moved at {t:.1f} s") for t, n in sorted(per_tick.items()) if n > c.max_moves]
    return judged(len(moves), bad)


def rto_bound_s(c: Settings) -> float:
    """§4.4 D's RTO in this configuration: DEAD after dead_after_s, judged at the next leader tick (and the slot
    assigned in it), seen by the new owner at its next heartbeat, loaded at its next round, with two seconds' slack
    (40.5 s with the seed's figures; the seed estimates about 40)."""
    return c.dead_after_s + c.leader_tick_s + c.heartbeat_s + c.poll_s + 2.0


def _slowed(s: InspectionState, victim: str, t: float, bound: float) -> bool:
    """Whether something else held the takeover back on purpose around a kill at ``t``: the database or the leader
    away, or another worker killed or stopped."""
    lo, hi = t - s.settings.dead_after_s, t + bound
    if any(w.start <= hi and (w.end if w.end is not None else s.end_time) >= lo for w in s.history.fault_windows()
           if w.fault in ("db-outage", "leader-pause")):
        return True
    return any(o.process == NEMESIS and o.f in ("kill", "pause") and lo <= o.time <= hi
               and str(o.value.get("process", "")).startswith(("worker-", "heartbeat-"))
               and _worker_of(str(o.value["process"])) != victim for o in s.history.ops)


def killed_workers_slots_resume_in_time(s: InspectionState) -> Verdict:
    """§4.4 D: the slots of a worker killed -9 are loaded by an owner under a new epoch within the RTO bound
    (rto_bound_s), unless something else held the takeover back on purpose (_slowed)."""
    bound, bad, checked = rto_bound_s(s.settings), [], 0
    for k in s.history.ops:
        if not (k.process == NEMESIS and k.f == "kill" and str(k.value.get("process", "")).startswith("worker-")):
            continue
        victim, t = str(k.value["process"]), k.time
        if _slowed(s, victim, t, bound):
            continue
        held: dict[int, tuple[int, str | None]] = {}
        for r in s.tables["slot_audit"]:
            if r["kind"] == "lease" and r["at"] <= t:
                held[r["slot_id"]] = (r["lease_epoch"], r["owner_worker_id"])
        for slot, (epoch, owner) in sorted(held.items()):
            if owner != victim:
                continue
            loaded = [r["at"] for r in s.tables["slot_audit"] if r["kind"] == "lease" and r["slot_id"] == slot
                      and r["why"] == "loaded" and r["lease_epoch"] > epoch and r["at"] > t]
            if not loaded and s.end_time < t + bound:
                continue  # the run ended before the bound: nothing to judge
            checked += 1
            if not loaded or loaded[0] > t + bound:
                bad.append(Violation(f"slot {slot}", f"{victim} killed at {t:.1f} s; loaded again at "
                                                     f"{loaded[0] if loaded else None}, the bound is {t + bound:.1f} s",
                                     [k.index]))
    return judged(checked, bad)


def refused_only_when_superseded(s: InspectionState) -> Verdict:
    """§3.1/§3.4: a message is refused (processed, not applied) only when its device's current row already holds a
    newer (cycle_id, seq): while a reshard moves a device between slots, neither its old slot's backlog nor its new
    route's first messages are refused for their slot alone (device_status_history replayed in commit order)."""
    greatest: dict[str, tuple[int, int]] = {}
    bad = []
    for r in s.tables["device_status_history"]:  # id order: commit order per device
        device, key = r["device_id"], (int(r["cycle_id"]), int(r["seq"]))
        if r["applied"]:
            greatest[device] = max(key, greatest.get(device, key))
        elif device not in greatest or key > greatest[device]:
            bad.append(Violation(device, f"{r['message_id']} refused on slot {r['slot_id']} though newer than the "
                                         f"current row ({greatest.get(device)}): a lost update"))
    return judged(len(s.tables["device_status_history"]), bad)


INVARIANTS: Invariants[InspectionState] = Invariants({
    "V1": (envelope_carries_versions, "INV-1: every message carries schema, resource, plan and slot map versions"),
    "V2": (is_never_sees_epochs, "INV-2: an IS node never sees a lease epoch"),
    "V3": (scaling_changes_only_epochs, "INV-3: scaling changes only lease epochs"),
    "V4": (devices_move_only_by_resharding, "INV-4: a device changes slot only by resharding"),
    "V5": (seq_never_goes_back, "INV-5: a device's (cycle_id, seq) never goes back at its IS node"),
    "V6": (message_id_unique_and_stable, "INV-6: a message_id is unique and the same on every replay"),
    "V7": (schema_versions_supported, "INV-7: the workers read every schema version in flight"),
    "V8": (no_unpersisted_state, "INV-8: no unpersisted state: each snapshot is the fold of the one before"),
    "V9": (commit_writes_snapshot, "INV-9: every commit writes the derived snapshot with the current row"),
    "V10": (takeover_loads_snapshots, "INV-10: a new owner continues from the snapshots it loaded"),
    "V11": (outbox_before_publish, "INV-11: an IS node writes its outbox before it publishes"),
    "V12": (message_id_reconstructible, "INV-12: a message_id is rebuilt from node, cycle, device and seq"),
    "V13": (outbox_outlives_queues, "INV-13: outbox retention >= message TTL + margin, dedup retention >= outbox"),
    "V14": (leases_come_from_the_database, "INV-14: workers commit only under leases the database granted"),
    "V15": (lease_cache_fresh_at_commit, "INV-15: a batch commits only with a lease cache younger than 5 s"),
    "V16": (deliveries_are_settled, "INV-16: every delivery is acked after its commit, nacked or given back"),
    "V17": (current_written_by_template, "INV-17: device_status_current is written only by the fenced UPSERT"),
    "V18": (alert_current_is_the_fold, "INV-18: alert_current is the fold of alert_event by event time"),
    "V19": (ack_after_commit, "INV-19: a message is acked only after the commit that processed it"),
    "V20": (history_append_only, "INV-20: history holds one row per processed message, none removed"),
    "V21": (each_message_takes_effect_once, "each message takes effect exactly once or is superseded"),
    "V22": (current_holds_the_greatest, "after heal the current row holds the greatest (cycle_id, seq)"),
    "V23": (one_owner_per_epoch, "one owner per epoch, no write under a superseded epoch"),
    "V24": (every_slot_owned_and_drained, "every slot owned, every queue drained, every outbox row confirmed"),
    "V25": (worker_transitions_legal_and_timely, "worker transitions legal and on time (15 s / 30 s)"),
    "V26": (rebalance_within_limits, "rebalance within §4.3's limits (5 slots, 5 min a slot, 1 min a worker)"),
    "V27": (killed_workers_slots_resume_in_time, "a killed worker's slots are loaded again within the RTO (§4.4 D)"),
    "V28": (refused_only_when_superseded, "a message is refused only when superseded (no lost update, §3.4)"),
})
