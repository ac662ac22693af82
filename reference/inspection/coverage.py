"""The inspection pipeline's coverage targets (kernel.coverage): the dangerous places a run must be seen to reach
before its green verdict means anything. Declared here, marked where they happen."""

from __future__ import annotations

from kernel.coverage import Coverage

COVERAGE = Coverage()

FENCED_BY_EPOCH = COVERAGE.target(
    "fenced-by-epoch", "a batch commit found the slot's lease under another epoch or owner: rolled back, nacked, "
    "its consumer cancelled")
FENCED_BY_SEQ = COVERAGE.target(
    "fenced-by-seq", "the UPSERT's (cycle_id, seq) predicate refused a message older than the current row")
DEDUP_HIT = COVERAGE.target(
    "dedup-hit", "a delivery's message_id was already in message_dedup (a redelivery after its commit)")
TAKEOVER_DEAD = COVERAGE.target(
    "takeover-dead-worker", "the leader took a slot from a worker that was no longer ACTIVE (DEAD, restarted, ...)")
TAKEOVER_EXPIRED = COVERAGE.target(
    "takeover-expired-lease", "the leader took a slot whose lease ran out unrenewed")
MIGRATED = COVERAGE.target(
    "migration-completed", "a slot went MOVING -> DRAINING_OLD -> LOADING_NEW -> ACTIVE under a new owner")
LEADER_CHANGED = COVERAGE.target(
    "leader-changed", "a web node took the leader lease from another, under a new term")
OUTBOX_REPLAYED = COVERAGE.target(
    "outbox-replayed", "an IS node published again an outbox row left unconfirmed (after a restart, a nack, a "
    "return or an outage)")
PUBLISH_NACKED = COVERAGE.target(
    "publish-nacked", "the broker nacked a publish (its queue full): the row stays unconfirmed")
PUBLISH_RETURNED = COVERAGE.target(
    "publish-returned", "the broker returned a mandatory publish (no queue bound) before confirming it")
STALE_CACHE = COVERAGE.target(
    "stale-lease-cache", "a worker held a batch back because its lease cache was older than 5 s (INV-15)")
NOT_OWNED = COVERAGE.target(
    "not-owned-nacked", "a worker gave a slot's deliveries back (nacked, its consumer cancelled) because it no longer "
    "held the slot or could not be sure it did (fenced, a stale lease cache): INV-16")
DB_ERROR_NACKED = COVERAGE.target(
    "db-error-nacked", "a batch commit failed on the database and its deliveries were nacked for redelivery")
RESHARD_HANDOVER = COVERAGE.target(
    "reshard-handover", "a device's first message on a new map's route moved its current row to its new slot (§3.4, "
    "the fixed handover)")
COMMIT_UNACKED = COVERAGE.window(
    "commit→ack", "a fault hit a worker between a batch's commit and its ack (the redelivery is a dedup hit)",
    ("batch.commit",), ("amqp.ack",), roles=("worker",))
