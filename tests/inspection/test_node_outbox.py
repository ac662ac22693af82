"""The IS node's outbox on the real stack (systems.inspection.node.SqliteOutbox, §3.5): a SQLite WAL file that outlives
the process, message_id unique, seq in write order, a device's greatest seq kept for the next incarnation (INV-5)."""

from __future__ import annotations

from pathlib import Path

from systems.inspection.node import SqliteOutbox


def _row(device: str, seq: int, cycle: int = 1) -> dict[str, object]:
    mid = f"probe-1:{cycle}:{device}:{seq}"
    return {"message_id": mid, "routing_key": "slot.0.normal",
            "body": {"message_id": mid, "device_id": device, "seq": seq, "cycle_id": cycle}}


def test_rows_survive_a_new_process_and_keep_their_order_and_last_seqs(tmp_path: Path) -> None:
    path = str(tmp_path / "probe-1.db")
    first = SqliteOutbox(path)
    stored = first.append((_row("d1", 1), _row("d2", 1), _row("d1", 2)))
    assert [r["seq"] for r in stored] == [1, 2, 3]
    assert first.append((_row("d1", 2),)) == []  # message_id UNIQUE: a replayed append stores nothing
    first.confirm((stored[1]["seq"],))
    again = SqliteOutbox(path)  # the restarted node opens the same file
    assert [r["message_id"] for r in again.pending(0.0)] == ["probe-1:1:d1:1", "probe-1:1:d1:2"]
    assert again.last_seqs() == {"d1": 2, "d2": 1}
    assert [r["confirmed"] for r in again.rows()] == [False, True, False]


def test_pending_leaves_out_rows_younger_than_asked(tmp_path: Path) -> None:
    outbox = SqliteOutbox(str(tmp_path / "probe-2.db"))
    outbox.append((_row("d1", 1),))
    assert outbox.pending(3600.0) == []
    assert len(outbox.pending(0.0)) == 1
