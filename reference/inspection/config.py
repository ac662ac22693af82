"""The pipeline's settings: the seed's figures (§4.2 heartbeats, §4.3 cooldowns, §5.4 prefetch, §7.4 weights), each a
field a scenario's policy may override (a shorter WARMING keeps a simulated run short)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Settings:
    heartbeat_s: float = 3.0  # §4.2: a worker's heartbeat
    suspected_after_s: float = 15.0  # §4.2: silent this long -> SUSPECTED
    dead_after_s: float = 30.0  # §4.2: silent this long -> DEAD, its slots taken
    lease_s: float = 30.0  # a lease's length, renewed by each heartbeat
    lease_grace_s: float = 5.0  # §4.2: a lease expired this long is taken over
    warming_s: float = 60.0  # §4.4 A: WARMING with a steady heartbeat this long -> ACTIVE
    leader_tick_s: float = 5.0  # §4.1: the leader renews (and decides) every 5 s
    leader_ttl_s: float = 15.0  # the leader lease outlives three missed renewals
    migration_deadline_s: float = 30.0  # a MOVING slot whose old owner never released it is taken over
    max_moves: int = 5  # §4.3: at most 5 slots per rebalance
    slot_cooldown_s: float = 300.0  # §4.3: a slot moves at most once in 5 minutes
    worker_cooldown_s: float = 60.0  # §4.3: a worker gives slots away at most once a minute
    imbalance: float = 0.25  # §4.3: rebalance when (max - min) / target >= 25%
    drain_every_s: float = 30.0  # §4.4 C: a draining worker's slots leave 5 at a time, 30 s apart
    cache_max_age_s: float = 5.0  # INV-15
    prefetch_high: int = 100  # §5.4
    prefetch_normal: int = 300
    batch_high: int = 150  # §7.4: high : normal = 3 : 1
    batch_normal: int = 50
    batch_max: int = 200  # §6.3: at most 200 per batch
    starvation_s: float = 60.0  # §7.4: a normal message older than this is served first
    poll_s: float = 0.5  # a worker with nothing to do looks again after this
    db_retry_s: float = 1.0  # a worker whose batch failed on the database tries again after this
    cycle_s: float = 10.0  # an IS node's inspection cycle
    replay_every_s: float = 5.0  # §3.5: the replayer's period
    replay_after_s: float = 3.0  # §3.5: a row unconfirmed this long is replayed
    outbox_retention_s: float = 86400.0  # §3.5: a confirmed outbox row is kept this long (INV-13)
    message_ttl_s: float = 3600.0  # the longest a message may wait in its queue (the queues' x-message-ttl)
    dedup_retention_s: float = 7 * 86400.0  # §3.6: message_dedup's daily partitions, kept 7 days
    reshard_notice_s: float = 300.0  # §3.4: a new slot map takes effect 5 minutes after it is written
    reshard_grace_s: float = 300.0  # §3.4: the seed's grace window ends 5 minutes after that (T0 + 10 min)
    message_bytes: int = 0  # §5.4's 500 B a message: the inspected fields padded to this size (0: as inspected)
    # §4.1: the leader publishes its lease changes on Redis and a worker reads its leases as soon as one comes (else
    # after its heartbeat's 3 s, the poll); 0: no notices, the poll alone (INV-14: the same outcome, later)
    lease_notices: int = 1

    @classmethod
    def with_overrides(cls, values: dict[str, Any]) -> Settings:
        """ValueError for a key that is not a setting."""
        known = {f.name: f.type for f in fields(cls)}
        if unknown := sorted(set(values) - set(known)):
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}")
        typed: dict[str, Any] = {k: (int(v) if known[k] == "int" else float(v)) for k, v in values.items()}
        return cls(**typed)
