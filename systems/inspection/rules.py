"""The inspection pipeline's rule-traceability matrix (scenarios.rules): seed 001's rules of §2.2-§2.4 (state
machines, the lease, the envelope), §3.1-§3.6 (fencing, snapshots, alerts, resharding, the IS outbox, dedup), §4.1-§4.4
(leader, heartbeats, rebalance, scenarios A-G), §5 (queues, prefetch, mailboxes), §7 (priorities) and §11 (INV-1 ...
INV-20), with the invariant that judges each, the scenarios that exercise it and the registered bug that breaks it,
or why none does. A row's native scenarios are its simulated ones that also run on the real stack (all of them).
docs/systems/inspection-rules.md is generated from it."""

from __future__ import annotations

from scenarios.rules import Rule

REF = "reference (docs/systems/inspection.md)"
ALL = "P1 P2 P3 P4 P5 P6 P7 P8 P9 P10 P11 P12 P13 P14 P15 P16 P17"
RESHARD = "P15 P16"
NATIVE = frozenset(ALL.split())  # the scenarios whose shells say native (every one)
GRANTS = "judged on a real PostgreSQL by tests/inspection/test_grants.py: the roles of reference/inspection/grants.py"


def _r(section: str, kind: str, rule: str, inv: str = "", sim: str = "", bugs: str = "", reason: str = "",
       gap: str = "") -> Rule:
    return Rule(section, rule, kind, tuple(inv.split()), sim=tuple(sim.split()),
                native=tuple(s for s in sim.split() if s in NATIVE), bugs=tuple(bugs.split()), reason=reason, gap=gap)


RULES: tuple[Rule, ...] = (
    # §2.2: the worker state machine (reference/inspection/models.py WORKER_EDGES); V25 judges every edge taken.
    _r("seed 001 §2.2, §4.4 A", "edge", "(none) -> REGISTERED: a worker registers its heartbeat row", "V25", ALL),
    _r("seed 001 §2.2, §4.4 A", "edge", "REGISTERED -> WARMING: at once, with its registration", "V25", ALL),
    _r("seed 001 §2.2, §4.4 A", "edge", "WARMING -> ACTIVE: after 60 s of steady heartbeats (the leader)", "V25",
       "P1 P2"),
    _r("seed 001 §2.2, §4.2", "edge", "ACTIVE -> SUSPECTED: silent more than 15 s", "V25", "P4 P5 P6 P10"),
    _r("seed 001 §2.2, §4.2", "edge", "SUSPECTED -> DEAD: silent more than 30 s; its slots are taken", "V25",
       "P4 P5 P6 P10", "suspected-never-dead"),
    _r(REF, "edge", "SUSPECTED -> ACTIVE: its heartbeat came back within 15 s (not in the seed)", "V25",
       gap="no catalogue scenario stalls a heartbeat between 15 and 30 s (explore does)"),
    _r("seed 001 §2.2, §4.4 E", "edge", "DEAD -> QUARANTINE: the worker reads DEAD on its heartbeat and stops "
       "consuming", "V25", "P5 P6"),
    _r("seed 001 §2.2", "edge", "QUARANTINE -> WARMING: it warms up again", "V25", "P5 P6"),
    _r("seed 001 §2.2, §4.4 C", "edge", "ACTIVE -> DRAINING: the operator's drain", "V25", "P3"),
    _r("seed 001 §2.2, §4.4 C", "edge", "DRAINING -> OFFLINE: holding no slot; the worker stops", "V25", "P3"),
    _r(REF, "edge", "DRAINING -> SUSPECTED: a draining worker that goes silent", "V25",
       gap="no scenario kills a draining worker"),
    _r(REF, "edge", "SUSPECTED -> DRAINING: a silent draining worker that came back", "V25",
       gap="no scenario kills a draining worker"),
    *(_r(REF, "edge", f"{state} -> REGISTERED: a restarted worker process registers again, whatever its row said",
         "V25", sim, gap=gap) for state, sim, gap in (
        ("ACTIVE", "P4 P10 P12 P13", ""),
        ("WARMING", "", "no scenario kills a worker while it warms up (explore does)"),
        ("SUSPECTED", "", "no scenario restarts a worker within 30 s of its kill (explore does)"),
        ("DEAD", "P4 P10 P12 P13", ""), ("QUARANTINE", "", "a worker quarantines and warms up in one transaction"),
        ("DRAINING", "", "no scenario kills a draining worker"),
        ("OFFLINE", "", "a drained worker is not restarted in any scenario"))),
    _r("seed 001 §2.2", "MUST", "ORPHANED -> LOADING_NEW -> ACTIVE (the lease): a taken slot is loaded, then "
       "consumed", "V23 V10", "P4 P5 P6", "snapshot-not-loaded"),
    _r("seed 001 §2.2", "MUST", "ABORT_BATCH -> STOP_CONSUMER: a fenced batch is aborted and the slot's consumer "
       "stopped", "V16 V23", "P6", "row-epoch-fencing"),
    # §2.3 slot_lease
    _r("seed 001 §2.3", "MUST", "lease_epoch grows by one at every owner change and never goes back; one owner per "
       "epoch", "V23", "P2 P3 P4 P6", "row-epoch-fencing"),
    _r("seed 001 §2.3", "MUST", "the web scheduler is the only writer of lease_epoch; workers only read it", "V14",
       ALL),
    _r("seed 001 §2.3", "MUST", "slot_map_version of a slot changes only with the slot map", "V3", ALL),
    # §2.4 envelope
    _r("seed 001 §2.4, §11 INV-1", "MUST", "the envelope carries schema_version, resource_version, plan_version and "
       "slot_map_version", "V1", ALL),
    _r("seed 001 §11 INV-2", "security", "an IS node never sees a lease epoch", "V2", ALL),
    _r("seed 001 §11 INV-2", "security", "the IS role cannot read slot_lease (a grant)", reason=GRANTS),
    _r("seed 001 §11 INV-17, INV-20", "security", "only the worker role writes device_status_current; no role "
       "updates or deletes a history row, or deletes a current row (grants)", reason=GRANTS),
    _r("seed 001 §2.3", "security", "a worker's role cannot change a lease's owner or epoch (a column grant)",
       reason=GRANTS),
    # §3.1 fencing
    _r("seed 001 §3.1", "guard", "a batch commits only under the worker's current lease (slot, owner, epoch): the "
       "lease row is the transaction's first write, so a stale owner's batch rolls back", "V23 V14", "P6",
       "row-epoch-fencing"),
    _r("seed 001 §3.1", "guard", "an older message never overwrites a newer one: the UPSERT's (cycle_id, seq) "
       "predicate", "V22", "P12 P13", "no-seq-predicate"),
    _r("seed 001 §3.1, §11 INV-17", "MUST", "device_status_current is written only by the fenced UPSERT template",
       "V17", ALL),
    _r("seed 001 §3.1", "MUST", "a fenced batch changes nothing (its dedup rows included), is nacked and its "
       "consumer cancelled; its messages reach the new owner", "V21 V16", "P6", "fenced-batch-keeps-dedup"),
    _r("seed 001 §3.1, §11 INV-19", "MUST", "ack only after the commit succeeded", "V19", "P7", "ack-before-commit"),
    _r("seed 001 §3.1 (fixed)", "MUST", "a database error nacks the batch (RabbitMQ redelivers an unacked message "
       "only when its channel closes)", "V16 V21 V24", "P7", "wait-for-redelivery"),
    _r("seed 001 §3.1", "MUST", "superseded messages are acked: they were processed (replaced by newer ones)",
       "V19 V21", "P12 P13"),
    # §3.2 snapshots
    _r("seed 001 §3.2, §11 INV-8", "MUST", "no state lives only in a worker's memory: each snapshot is the fold of "
       "the one before and the message", "V8", ALL),
    _r("seed 001 §3.2, §11 INV-9", "MUST", "every batch commit writes the derived snapshot with the current row",
       "V9", ALL),
    _r("seed 001 §3.2, §11 INV-10", "MUST", "a worker taking a slot loads its devices' snapshots before consuming",
       "V10", "P4 P5 P6", "snapshot-not-loaded"),
    # §3.3 alerts
    _r("seed 001 §3.3", "MUST", "alert_event is append-only and idempotent (UNIQUE device, key, cycle, seq)", "V18",
       "P13"),
    _r("seed 001 §3.3, §11 INV-18", "MUST", "alert_current is the fold of alert_event ordered by event time, never "
       "written otherwise", "V18", "P8 P13", "alert-fold-by-event-id"),
    # §3.4 resharding (reference/inspection/reshard.py)
    _r("seed 001 §3.4, §4.5, §11 INV-4", "MUST", "a device changes slot only through the resharding protocol: each "
       "message routed by the map in force when it was collected, each current row on its map's slot, a device's "
       "writes never back to an older map's route", "V4", ALL),
    _r("seed 001 §3.4, §4.5", "MUST", "a reshard writes map version N+1 (TOTAL_SLOTS grown, effective after a "
       "notice) with the new slots' leases FREE, their queues declared first; the new slots are owned and drained",
       "V3 V24", RESHARD),
    _r("seed 001 §3.4, §4.5", "guard", "a reshard that does not grow TOTAL_SLOTS, or comes before the previous one "
       "took effect, is refused and writes nothing", reason="an operator's request, judged by "
       "tests/inspection/test_reshard.py (no scenario asks for a bad reshard)"),
    _r("seed 001 §3.4 (fixed)", "MUST", "an IS node pulls the maps every cycle and routes each message by the one in "
       "force when it collected it; a replay goes where its first publish went", "V4", RESHARD),
    _r("seed 001 §3.4 (fixed)", "guard", "the handover: a device moves to its new slot with its first message on the "
       "new route (the fenced UPSERT, under that slot's lease and the device's row lock); the old slot's backlog, "
       "redeliveries and late replays are applied if newer or superseded, never refused for their slot alone",
       "V28 V22 V21", RESHARD, "reshard-switch-by-clock"),
    _r("seed 001 §3.4 (fixed)", "MUST", "a message of the old map is processed whenever it comes, also after the "
       "seed's grace window (an outbox replay after a broker outage)", "V21 V19", "P16", "reshard-grace-drop"),
    _r("seed 001 §3.4", "security", "the web tier reshards but never writes device_status_current (the seed's "
       "current_slot switch is an UPDATE outside the template, INV-17: refused by the grants)", reason=GRANTS),
    # §3.5 outbox
    _r("seed 001 §3.5, §11 INV-11", "MUST", "an IS node writes its outbox before it publishes", "V11", "P9",
       "publish-before-outbox"),
    _r("seed 001 §3.5", "MUST", "unconfirmed rows are replayed in outbox order; nacked and returned publishes stay "
       "unconfirmed", "V21 V24", "P8 P11 P12", "return-counted-as-confirmed"),
    _r("seed 001 §5.2 (fixed)", "MUST", "a full queue refuses the publish (reject-publish): a confirmed message is "
       "never dropped", "V21", "P12", "drop-head-overflow"),
    _r("seed 001 §11 INV-12", "MUST", "a message_id is {is_node}:{cycle_id}:{device_id}:{seq}, rebuilt the same "
       "after a restart", "V12 V6", "P9"),
    _r("seed 001 §11 INV-13", "bound", "outbox retention >= message TTL + margin; dedup retention >= outbox "
       "retention", "V13", ALL),
    _r("seed 001 §11 INV-5", "MUST", "a device's (cycle_id, seq) only grows at its IS node, across restarts", "V5",
       "P9", "seq-in-memory"),
    # §3.6 dedup
    _r("seed 001 §3.6, §11 INV-6", "MUST", "message_id is unique and stable; a processed id is never processed "
       "again", "V6 V21 V20", "P4 P6 P7 P8 P9"),
    _r("seed 001 §3.6", "reference", "message_dedup keys on message_id alone (PostgreSQL refuses a primary key "
       "without the partition column)", reason="a schema choice, not a behaviour: docs/systems/inspection.md"),
    # §4.1 leader
    _r("seed 001 §4.1", "MUST", "one leader at a time (advisory lock); only the leader writes slot_lease", "V23",
       "P10"),
    _r("seed 001 §4.1, §11 INV-14", "MUST", "slot_lease in the database is the truth; notifications only speed "
       "things up (a lost one changes nothing but the pace: P17, tests/inspection/test_lease_notices.py)", "V14",
       ALL),
    _r("seed 001 §4.1", "MUST", "the leader publishes slot_lease_updated (the slots it changed) on Redis after its "
       "tick committed; a worker reads its leases as soon as a notice comes, else at its heartbeat (the poll)", "V14",
       "P2 P3 P4 P17"),
    _r("seed 001 §11 INV-15", "guard", "a batch commits only with a lease cache younger than 5 s", "V15", "P5",
       "stale-lease-cache"),
    _r("seed 001 §11 INV-16", "guard", "a delivery of a slot the worker does not hold is nacked and the consumer "
       "cancelled", "V16", "P4 P5 P6"),
    # §4.2 heartbeats and leases
    _r("seed 001 §4.2", "timing", "heartbeat every 3 s; SUSPECTED after 15 s, DEAD after 30 s, judged within two "
       "leader ticks", "V25", "P4 P5 P6 P10", "suspected-never-dead"),
    _r("seed 001 §4.2 (fixed)", "MUST", "a heartbeat renews the leases held at their epochs; an expired lease is "
       "taken over (epoch + 1)", "V23 V24", "P7"),
    # §4.3 rebalance
    _r("seed 001 §4.3", "bound", "at most 5 slots per rebalance, a slot at most once in 5 minutes, a worker giving "
       "at most once a minute", "V26", "P1 P2"),
    _r("seed 001 §4.3", "MUST", "a migration goes MOVING -> DRAINING_OLD (old owner drained) -> LOADING_NEW -> "
       "ACTIVE, each step under the epoch", "V23 V21", "P1 P2 P3"),
    _r("seed 001 §4.3", "reference", "the weights of §4.3 (device count, rate, backlog, time, priority devices)",
       gap="every slot weighs 1: the weighted rebalance is not built"),
    # §4.4 scenarios
    _r("seed 001 §4.4 A-G", "MUST", "cold start, join, drain, kill, zombie, database and broker outages lose nothing "
       "and apply nothing twice", "V21 V22 V24", "P1 P2 P3 P4 P5 P6 P7 P8"),
    _r("seed 001 §4.4 D", "bound", "a killed worker's slots are loaded again under a new epoch within about 40 s "
       "(the RTO: 30 s to DEAD, a leader tick, a heartbeat, a round)", "V27", "P4 P12 P13"),
    _r("seed 001 §4.4 F, §7.2", "MUST", "backpressure: IS nodes slow down on the leader's word during a database "
       "outage", gap="backpressure and degrade mode (§7.5) are not built"),
    # §5 queues
    _r("seed 001 §5.1-§5.3", "reference", "a queue per slot and priority, a single active consumer, a channel per "
       "slot", reason="the broker model's structure (systems/inspection/broker.py), checked against RabbitMQ by "
       "the parity test (tests/inspection/test_broker_parity.py); the real stack declares the queues so "
       "(systems/inspection/stack.py) and its workers open a channel per slot (systems/inspection/node.py)"),
    _r("seed 001 §5.4-§5.5", "bound", "prefetch 100 high / 300 normal; a mailbox holds at most its prefetch",
       gap="no checker counts a worker's unacked deliveries per consumer"),
    _r("seed 001 §7.4", "timing", "batches take high : normal = 3 : 1; a normal message older than 60 s goes first",
       gap="no checker reads the priority frequencies or the starvation guard yet"),
    _r("seed 001 §11 INV-3", "MUST", "scaling changes only lease epochs", "V3", "P2 P3 P4"),
    _r("seed 001 §11 INV-7", "MUST", "workers read the current schema version and the one before", "V7", ALL,
       gap="no rolling schema change scenario (every message is version 2)"),
    _r("seed 001 §11 INV-20", "MUST", "history is append-only: one row per processed message", "V20", ALL),
    _r("issue 57", "MUST", "every slot owned and every backlog drained after heal", "V24", ALL, "wait-for-redelivery"),
)
