"""The inspection pipeline's tables (seed 001 §2.3, §3.1-§3.6, §4.2), SQLAlchemy 2 Core on their own MetaData, for
PostgreSQL (the source of truth) and SQLite (the simulation's interleaving database).

Port notes:
- ``slot_lease`` is §2.3's DDL plus ``state_since`` (when the state last changed: a migration's deadline, §4.3's
  five-minute slot cooldown) and ``moved_at``; the leader is the only writer of owner and epoch (§2.3);
- ``device_status_current`` is §3.1's, written only through the fenced UPSERT (reference.inspection.ingest);
- ``device_status_history`` (§6.4) is append-only; it also keeps the message's id, cycle, writer epoch, whether
  the row advanced the current row, and the derived snapshot after it (what the checkers fold);
- ``message_dedup`` (§3.6) keys on ``message_id`` alone: PostgreSQL refuses a primary key that leaves out the
  partition column, so the seed's ``PARTITION BY RANGE (processed_at)`` is not kept here (docs/systems/inspection.md);
- ``alert_event``/``alert_current`` are §3.3's; ``alert_current`` is only ever the fold of ``alert_event``;
- ``worker_heartbeat`` is §4.2's, with ``registered_at`` (WARMING's 60 s) and ``moved_out_at`` (§4.3's one-minute
  cooldown); ``worker_log`` and ``slot_audit`` are append-only records of every worker transition and every lease
  change or batch commit, in commit order per slot (what the checkers read);
- ``leader_lease`` stands for §4.1's advisory lock: one row, a holder, a term that every leader write is fenced by,
  and an expiry (a session-bound lock is lost with its session; the row's expiry is that loss, made visible);
- ``slot_map_version`` is §3.4's (a version, when IS nodes start routing by it, TOTAL_SLOTS under it, and the end
  of the seed's grace window, which only the seed-faithful variant reads); ``device_status_current`` also keeps
  the map version of the route its row was written from (the resharding handover: reference.inspection.reshard).
Timestamps come from the clock port (virtual time in simulation), never ``now()`` on the server."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    UniqueConstraint,
)

from kernel.schema import NAMING, TZ, BigId

METADATA = MetaData(naming_convention=NAMING)

# slot_lease.state (§2.3)
ACTIVE, MOVING, DRAINING_OLD, LOADING_NEW, ORPHANED, FREE = (
    "ACTIVE", "MOVING", "DRAINING_OLD", "LOADING_NEW", "ORPHANED", "FREE")
# worker_heartbeat.state (§2.2)
REGISTERED, WARMING, SUSPECTED, DEAD, QUARANTINE, DRAINING, OFFLINE = (
    "REGISTERED", "WARMING", "SUSPECTED", "DEAD", "QUARANTINE", "DRAINING", "OFFLINE")
WORKER_EDGES = frozenset({
    (None, REGISTERED), (REGISTERED, WARMING), (WARMING, ACTIVE), (ACTIVE, SUSPECTED), (SUSPECTED, ACTIVE),
    (SUSPECTED, DEAD), (DRAINING, SUSPECTED), (SUSPECTED, DRAINING), (DEAD, QUARANTINE), (QUARANTINE, WARMING),
    (ACTIVE, DRAINING), (DRAINING, OFFLINE),
    # a restarted process registers again whatever its row said (killed before anyone noticed, or after)
    *((s, REGISTERED) for s in (WARMING, ACTIVE, SUSPECTED, DEAD, QUARANTINE, DRAINING, OFFLINE)),
})

slot_lease = Table(
    "slot_lease", METADATA,
    Column("slot_id", SmallInteger, primary_key=True, autoincrement=False),
    Column("owner_worker_id", String(64), nullable=True),
    Column("lease_epoch", BigInteger, nullable=False, default=0),
    Column("state", String(16), nullable=False),
    Column("lease_until", TZ, nullable=True),
    Column("last_renewed_at", TZ, nullable=True),
    Column("slot_map_version", BigInteger, nullable=False),
    Column("weight", Integer, nullable=False, default=1),
    Column("state_since", TZ, nullable=True),
    Column("moved_at", TZ, nullable=True),
    Column("move_to", String(64), nullable=True),  # a migration's destination (§4.3), kept in the row, not in Redis
    Index("idx_slot_lease_owner", "owner_worker_id"),
)

device_status_current = Table(
    "device_status_current", METADATA,
    Column("device_id", String(64), primary_key=True),
    Column("slot_id", SmallInteger, nullable=False),
    Column("current_slot", SmallInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("cycle_id", BigInteger, nullable=False),
    Column("collected_at", TZ, nullable=False),
    Column("writer_epoch", BigInteger, nullable=False),
    # the map version of the route the row was last written from: a message on an older route never writes it
    Column("slot_map_version", BigInteger, nullable=False, default=1),
    Column("status_payload", JSON, nullable=False),
    Column("derived_snapshot", JSON, nullable=True),
    Column("updated_at", TZ, nullable=False),
    Index("idx_dsc_slot", "slot_id"),
)

device_status_history = Table(
    "device_status_history", METADATA,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("ts", TZ, nullable=False),
    Column("device_id", String(64), nullable=False),
    Column("message_id", String(128), nullable=False),
    Column("slot_id", SmallInteger, nullable=False),
    Column("cycle_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("writer_epoch", BigInteger, nullable=False),
    Column("applied", Boolean, nullable=False),
    Column("payload", JSON, nullable=False),
    Column("snapshot", JSON, nullable=True),
    Index("idx_history_device", "device_id"),
)

message_dedup = Table(
    "message_dedup", METADATA,
    Column("message_id", String(128), primary_key=True),
    Column("processed_at", TZ, nullable=False),
)

alert_event = Table(
    "alert_event", METADATA,
    Column("event_id", BigId, primary_key=True, autoincrement=True),
    Column("device_id", String(64), nullable=False),
    Column("alert_key", String(128), nullable=False),
    Column("event_type", String(16), nullable=False),  # FIRING / RESOLVED / UPDATED
    Column("severity", SmallInteger, nullable=False),
    Column("event_time", TZ, nullable=False),
    Column("cycle_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("payload", JSON, nullable=False),
    Column("ingest_writer_epoch", BigInteger, nullable=False),
    UniqueConstraint("device_id", "alert_key", "cycle_id", "seq", name="uq_alert_event_message"),
)

alert_current = Table(
    "alert_current", METADATA,
    Column("device_id", String(64), primary_key=True),
    Column("alert_key", String(128), primary_key=True),
    Column("state", String(16), nullable=False),  # ACTIVE / RESOLVED
    Column("severity", SmallInteger, nullable=False),
    Column("first_fired_at", TZ, nullable=False),
    Column("last_event_at", TZ, nullable=False),
    Column("last_event_id", BigInteger, nullable=False),
    Column("payload", JSON, nullable=False),
)

worker_heartbeat = Table(
    "worker_heartbeat", METADATA,
    Column("worker_id", String(64), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("last_heartbeat", TZ, nullable=False),
    Column("registered_at", TZ, nullable=False),
    Column("moved_out_at", TZ, nullable=True),
    Column("metadata", JSON, nullable=True),
    Column("backlog_metrics", JSON, nullable=True),
)

worker_log = Table(
    "worker_log", METADATA,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("worker_id", String(64), nullable=False),
    Column("from_state", String(16), nullable=True),
    Column("to_state", String(16), nullable=False),
    Column("at", TZ, nullable=False),
    Column("silent_s", JSON, nullable=True),  # seconds since the last heartbeat when the leader decided
    Column("actor", String(64), nullable=False),
)

# kind: "lease" (a lease change: owner, epoch, state) or "batch" (a batch commit under owner and epoch)
slot_audit = Table(
    "slot_audit", METADATA,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("kind", String(8), nullable=False),
    Column("slot_id", SmallInteger, nullable=False),
    Column("lease_epoch", BigInteger, nullable=False),
    Column("owner_worker_id", String(64), nullable=True),
    Column("state", String(16), nullable=True),
    Column("actor", String(64), nullable=False),
    Column("why", String(32), nullable=False),
    Column("term", BigInteger, nullable=True),
    Column("at", TZ, nullable=False),
)

leader_lease = Table(
    "leader_lease", METADATA,
    Column("name", String(64), primary_key=True),
    Column("holder", String(64), nullable=True),
    Column("term", BigInteger, nullable=False),
    Column("until", TZ, nullable=True),
)

slot_map_version = Table(
    "slot_map_version", METADATA,
    Column("version", BigInteger, primary_key=True, autoincrement=False),
    Column("effective_at", TZ, nullable=False),
    Column("total_slots", SmallInteger, nullable=False),
    Column("grace_until", TZ, nullable=True),  # §3.4's T0 + 10 min: read only by the seed-faithful variant
)

device_resource = Table(
    "device_resource", METADATA,
    Column("device_id", String(64), primary_key=True),
    Column("priority", SmallInteger, nullable=False, default=2),  # 1 CRITICAL, 2 NORMAL, 3 LOW (§7.1)
    Column("resource_version", BigInteger, nullable=False, default=1),
)

TABLES = tuple(METADATA.tables)


def aware(t: datetime) -> datetime:
    """A timestamp as written: SQLite hands TIMESTAMPTZ back naive (UTC), PostgreSQL aware."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
