"""The inspection pipeline's known defects (kernel.bugs): each a guarded branch where its rule lives, off unless a run
switches it on. Several are the seed's own (docs/systems/inspection.md tells which)."""

from __future__ import annotations

from kernel.bugs import Bug, BugRegistry

BUGS = BugRegistry([
    Bug("row-epoch-fencing", "the UPSERT is fenced by the row's writer_epoch, not by the slot's lease",
        "seed 001 §3.1: a stale owner's write must not land (fenced by slot_lease.lease_epoch)",
        "reference/inspection/ingest.py commit_batch",
        "the seed's template: no lease check, only EXCLUDED.writer_epoch >= row.writer_epoch; a zombie whose "
        "devices the new owner has not written yet writes them under its superseded epoch", ("V23",), ("P6",)),
    Bug("no-seq-predicate", "the UPSERT overwrites the current row whatever its (cycle_id, seq)",
        "seed 001 §3.1: incoming seq > current seq (an old message never overwrites a newer one)",
        "reference/inspection/ingest.py _apply",
        "an older message replayed from an outbox after a newer cycle's message was processed overwrites the newer row",
        ("V22",), ("P13",)),
    Bug("fenced-batch-keeps-dedup", "a fenced batch still commits its dedup rows",
        "seed 001 §3.1/§3.6: a fenced batch changes nothing, so its redelivery is processed",
        "reference/inspection/ingest.py commit_batch",
        "the fenced messages are marked seen; the new owner skips their redelivery as duplicates: lost updates",
        ("V21",), ("P6",)),
    Bug("ack-before-commit", "deliveries are acked before their batch commits",
        "seed 001 INV-19: ack only after the DB commit succeeded", "reference/inspection/worker.py _commit",
        "a batch whose commit fails (the database away) was acked already: its messages are lost", ("V19", "V21"),
        ("P7",)),
    Bug("wait-for-redelivery", "a batch that failed on the database is left unacked, not nacked",
        "seed 001 §3.1 F (fixed): a database error nacks; RabbitMQ redelivers an unacked message only when its "
        "channel closes", "reference/inspection/worker.py _commit",
        "the seed's 'don't ack, wait for redelivery': the messages stay unacked on the open channel and the slot "
        "stalls at its prefetch until consumer_timeout", ("V21", "V24"), ("P7",)),
    Bug("suspected-never-dead", "heartbeat supervision scans only ACTIVE workers",
        "seed 001 §4.2: a worker silent 30 s is DEAD", "reference/inspection/leader.py _supervise",
        "the seed's scheduler selects WHERE state = ACTIVE, so a SUSPECTED worker is never marked DEAD",
        ("V25",), ("P4",)),
    Bug("seq-in-memory", "an IS node counts seq from zero after a restart",
        "seed 001 INV-5: a device's (cycle_id, seq) never goes back", "reference/inspection/probe.py probe_loop",
        "the per-device seq lives in memory: after a restart the node's messages go back to seq 1",
        ("V5",), ("P9",)),
    Bug("publish-before-outbox", "an IS node publishes before it writes the outbox",
        "seed 001 INV-11: persist first, then publish", "reference/inspection/probe.py _produce",
        "a node killed between the publish and the outbox write loses what it had not written", ("V11",), ("P9",)),
    Bug("return-counted-as-confirmed", "a returned (unroutable) publish counts as confirmed",
        "seed 001 §3.5 (fixed): mandatory publishes handle basic.return; a return precedes its confirm",
        "reference/inspection/probe.py _publish",
        "with mandatory and no return listener the confirm still arrives: the row is marked confirmed and the "
        "message is gone", ("V21",), ("P11",)),
    Bug("drop-head-overflow", "a full queue drops its oldest message and confirms the new one",
        "seed 001 §5.2 (fixed): overflow reject-publish, so a confirmed message is never dropped",
        "systems/inspection/broker.py BrokerModel.publish",
        "x-overflow drop-head (what a quorum queue does with the seed's reject-publish-dlx on 3.10 without a "
        "dead-letter strategy): confirmed messages are dropped from the head", ("V21",), ("P12",)),
    Bug("alert-fold-by-event-id", "alert_current folds alert_event in insertion order, not event time",
        "seed 001 §3.3: the fold orders events by event_time", "reference/inspection/ingest.py _fold_alert",
        "a FIRING committed after its RESOLVED (replayed from an outbox) leaves the alert ACTIVE", ("V18",), ("P13",)),
    Bug("snapshot-not-loaded", "a new owner folds from an empty derived snapshot",
        "seed 001 INV-10: a worker taking a slot loads its devices' derived_snapshot",
        "reference/inspection/ingest.py _apply",
        "after a takeover the debounce counters restart from zero", ("V10",), ("P4",)),
    Bug("stale-lease-cache", "a worker commits whatever the age of its lease cache",
        "seed 001 INV-15: a batch commits only with a lease cache younger than 5 s",
        "reference/inspection/worker.py consumer_loop", "a worker whose heartbeat thread is stuck keeps committing",
        ("V15",), ("P5",)),
    Bug("reshard-switch-by-clock", "resharding moves a device's current row by the clock, not by its messages",
        "seed 001 §3.4 (fixed): no message newer than a device's current row is refused while the device moves",
        "reference/inspection/reshard.py switch_by_clock, reference/inspection/ingest.py _fenced_upsert",
        "the seed's step 3: at effective_at the leader UPDATEs every remapped device's current_slot (outside the "
        "template, INV-17) and the UPSERT writes only from current_slot; the new route's messages that arrive before "
        "that UPDATE and the old slot's backlog that arrives after it are refused though newer: lost updates",
        ("V28", "V4"), ("P15",)),
    Bug("reshard-grace-drop", "a worker drops the old map's messages once the grace window is over",
        "seed 001 §3.4 (fixed): a message on the old route is processed whenever it comes (applied or superseded)",
        "reference/inspection/reshard.py past_grace, reference/inspection/ingest.py commit_batch",
        "the seed's T0+10min: 'workers refuse any v=N message; the IS's buffered v=N messages are ignored by "
        "message_id' - but an outbox row replayed late (a broker outage across the window) was never processed, so "
        "nothing dedups it: it is acked unprocessed and lost", ("V21",), ("P16",)),
])
NAMES = BUGS.names

# The seed-faithful variant: the defects above that are the seed's design as written (docs/systems/inspection.md),
# all on at once.
SEED = "seed"
SEED_DEFECTS = ("row-epoch-fencing", "fenced-batch-keeps-dedup", "wait-for-redelivery", "suspected-never-dead",
                "return-counted-as-confirmed", "drop-head-overflow", "alert-fold-by-event-id",
                "reshard-switch-by-clock", "reshard-grace-drop")
