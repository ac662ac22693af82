"""The pipeline's roles on a real PostgreSQL (reference.inspection.grants): INV-2 (the IS role cannot read slot_lease),
INV-17 (only the worker role writes device_status_current, and nobody deletes from it), INV-20 (history is
append-only), §2.3 (a worker cannot change a lease's owner or epoch). One server for the module."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, insert, select, text, update
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.inspection.grants import IS, WEB, WORKER, create_roles
from reference.inspection.ingest import commit_batch
from reference.inspection.models import METADATA, device_status_history, slot_audit, slot_lease, slot_map_version
from reference.inspection.reshard import reshard
from stack.postgres import find_pg_bin

PASSWORDS = {WORKER: "worker-pw", WEB: "web-pw", IS: "is-pw"}


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, Engine]]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (scripts/system-deps.sh installs them)")
    from stack.postgres import LocalPostgres

    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="sortie-inspection-grants-")))
    pg.start()
    try:
        pg.create_database("inspection", exist_ok=True)
        owner = create_engine(pg.url(database="inspection"))
        METADATA.create_all(owner)
        now = datetime.now(UTC)
        with owner.begin() as conn:
            create_roles(conn, PASSWORDS)
            conn.execute(insert(slot_map_version).values(version=1, effective_at=now, total_slots=1))
            conn.execute(insert(slot_lease).values(slot_id=0, owner_worker_id="worker-1", lease_epoch=1,
                                                   state="ACTIVE", slot_map_version=1, weight=1, state_since=now))
        engines = {"owner": owner, **{r: create_engine(pg.url(r, p, "inspection")) for r, p in PASSWORDS.items()}}
        yield engines
        for engine in engines.values():
            engine.dispose()
    finally:
        pg.stop()
        shutil.rmtree(pg.run_dir, ignore_errors=True)


def _refused(engine: Engine, statement: object) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(statement)  # type: ignore[call-overload]
    except ProgrammingError as exc:
        return "permission denied" in str(exc)
    return False


def _message(seq: int) -> dict[str, object]:
    return {"message_id": f"probe-1:1:dev_1:{seq}", "device_id": "dev_1", "slot_id": 0, "cycle_id": 1, "seq": seq,
            "collected_at": datetime.now(UTC).isoformat(), "payload": {"status": "UP", "alert": None}}


def test_the_worker_commits_a_batch_through_the_fenced_upsert_and_cannot_rewrite_history(
        engines: dict[str, Engine]) -> None:
    with Session(engines[WORKER]) as session, session.begin():
        result = commit_batch(Tx(session, datetime.now(UTC), uuid.uuid4), "worker-1", 0, 1,
                              [_message(1)], {}, 0.0)
    assert result.applied == ["probe-1:1:dev_1:1"]
    assert _refused(engines[WORKER], update(device_status_history).values(applied=False))  # INV-20
    assert _refused(engines[WORKER], device_status_history.delete())
    assert _refused(engines[WORKER], text("DELETE FROM device_status_current"))  # INV-17
    assert _refused(engines[WORKER], text("TRUNCATE message_dedup"))
    assert _refused(engines[WORKER], update(slot_lease).values(lease_epoch=2))  # §2.3: the leader's column
    assert _refused(engines[WORKER], update(slot_audit).values(why="rewritten"))


def test_the_web_role_moves_leases_but_writes_no_device_row(engines: dict[str, Engine]) -> None:
    with engines[WEB].begin() as conn:
        assert conn.execute(update(slot_lease).where(slot_lease.c.slot_id == 0).values(lease_epoch=1)).rowcount == 1
    assert _refused(engines[WEB], text("UPDATE device_status_current SET seq = 0"))  # INV-17
    assert _refused(engines[WEB], text("DELETE FROM worker_log"))


def test_the_web_role_reshards_but_cannot_move_a_device_row_itself(engines: dict[str, Engine]) -> None:
    """The operator's reshard (a new map, the new slots' leases) runs as the web role; the seed's §3.4 step 3, an
    UPDATE of device_status_current's current_slot by the web tier, is refused (INV-17)."""
    with Session(engines[WEB]) as session, session.begin():
        new = reshard(Tx(session, datetime.now(UTC), uuid.uuid4), 2, notice_s=300.0, grace_s=300.0)
    assert new.total_slots == 2
    assert _refused(engines[WEB], text("UPDATE device_status_current SET current_slot = 1, slot_id = 1"))


def test_the_is_role_never_sees_a_lease(engines: dict[str, Engine]) -> None:
    assert _refused(engines[IS], select(slot_lease.c.lease_epoch))  # INV-2
    assert _refused(engines[IS], text("SELECT * FROM device_status_current"))
    with engines[IS].connect() as conn:
        conn.execute(text("SELECT count(*) FROM slot_map_version")).scalar_one()
