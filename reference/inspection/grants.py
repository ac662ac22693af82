"""The pipeline's PostgreSQL roles (seed 001 §11): what the grants can enforce of the invariants, on the real database.

- ``inspection_worker`` (the workers): writes ``device_status_current`` (the fenced UPSERT of
  reference.inspection.ingest is its only statement there: INV-17) but never deletes from it; appends to the
  history tables (``device_status_history``, ``message_dedup``, ``alert_event``, ``worker_log``, ``slot_audit``)
  and can neither change nor remove a row of them (INV-20); of ``slot_lease`` it may change only the state and the
  lease's time, never its owner or epoch (§2.3: the leader is their only writer).
- ``inspection_web`` (the web nodes: the leader, the drain API, the reshard): the leader lease, the workers' states,
  the leases and their audit, a new slot map (reference.inspection.reshard); it reads the devices' rows and writes
  none (INV-17: so the seed's §3.4 switch, an UPDATE of device_status_current by the web tier, is refused here).
- ``inspection_is`` (the IS nodes): reads the versions it stamps on messages (INV-1) and nothing of the leases
  (INV-2: it never sees an epoch).

No role may TRUNCATE or DELETE anything. The tables' owner (the migration role) grants; the roles log in."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from reference.inspection.models import METADATA

WORKER, WEB, IS = "inspection_worker", "inspection_web", "inspection_is"
APPEND_ONLY = ("device_status_history", "message_dedup", "alert_event", "worker_log", "slot_audit")
GRANTS: dict[str, tuple[tuple[str, str], ...]] = {  # role -> (privileges, table)
    WORKER: (*(("INSERT", t) for t in APPEND_ONLY),
             ("INSERT, UPDATE", "device_status_current"), ("INSERT, UPDATE", "alert_current"),
             ("INSERT, UPDATE", "worker_heartbeat"),
             ("UPDATE (state, state_since, lease_until, last_renewed_at)", "slot_lease")),
    WEB: (("INSERT", "worker_log"), ("INSERT", "slot_audit"), ("UPDATE", "leader_lease"),
          ("UPDATE", "worker_heartbeat"), ("INSERT, UPDATE", "slot_lease"),
          ("INSERT", "slot_map_version")),  # the operator's reshard: the new map and the new slots' leases
    IS: (),
}
READS: dict[str, tuple[str, ...]] = {  # role -> the tables it may read (default: all)
    IS: ("device_resource", "slot_map_version"),
}


def create_roles(conn: Any, passwords: dict[str, str]) -> None:
    """Create (or reset) the three login roles with ``passwords`` and grant them what they need, no more."""
    for role, password in sorted(passwords.items()):
        if role not in GRANTS:
            raise ValueError(f"unknown role {role!r}: one of {', '.join(sorted(GRANTS))}")
        exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(text(f"{verb} ROLE {role} LOGIN PASSWORD '{password.replace(chr(39), '')}'"))
        conn.execute(text(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        for table in READS.get(role, tuple(METADATA.tables)):
            conn.execute(text(f"GRANT SELECT ON {table} TO {role}"))
        for privileges, table in GRANTS[role]:
            conn.execute(text(f"GRANT {privileges} ON {table} TO {role}"))
        if GRANTS[role]:  # the appended tables' ids
            conn.execute(text(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}"))
