"""The replay-hold fault (systems.inspection.faults): an IS node's replayer finds nothing to replay for the window and
after it, until the database processed a message the node wrote after the window (a condition read from its outbox
and the database, never a clock), so an older message's replay lands after a newer one's (P13 on both shells). Each
half on its own, with no stack: the simulated world's, the real node's file, the native nemesis's release."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import create_engine, insert

from harness.history import History
from reference.inspection.effects import OutboxPending
from reference.inspection.models import METADATA, message_dedup
from systems.inspection.faults import FAULTS, _replay_hold, _replay_hold_native, newer_processed
from systems.inspection.node import Node, SqliteOutbox
from systems.inspection.sim import InspectionSpec, InspectionWorld


def _row(mid: str, alert: bool = False) -> dict[str, Any]:
    return {"message_id": mid, "routing_key": "slot.0.normal",
            "body": {"message_id": mid, "device_id": mid.split(":")[2], "seq": 1, "cycle_id": 1,
                     "payload": {"status": "UP", "alert": {"type": "RESOLVED"} if alert else None}}}


def _pending(world: InspectionWorld, node: str) -> list[dict[str, Any]]:
    gen = world._pending(node, OutboxPending(0.0))
    try:
        next(gen)
    except StopIteration as done:
        return list(done.value)
    raise AssertionError("_pending waited")


def _processed(world: InspectionWorld, mid: str) -> None:
    with world.sessions() as s:
        s.execute(insert(message_dedup).values(message_id=mid, processed_at=world.now_dt()))
        s.commit()


def _released(history: History) -> list[tuple[str, str]]:
    return [(o.value["process"], o.value["why"]) for o in history.ops if o.f == "replay-released"]


def test_the_simulated_hold_lasts_until_a_newer_message_of_the_node_was_processed() -> None:
    world = InspectionWorld(1, InspectionSpec())
    world.outboxes["probe-1"] = outbox = __import__("systems.inspection.sim", fromlist=["NodeOutbox"]).NodeOutbox()
    outbox.append((_row("probe-1:1:d1:1"),), 0.0)
    _replay_hold(world, {"process": "probe-1"}, True)
    assert _pending(world, "probe-1") == [] and _pending(world, "probe-2") == []
    world.env.run(until=3.0)
    _replay_hold(world, {"process": "probe-1"}, False)  # the window closes at 3 s
    _processed(world, "probe-1:1:d1:1")  # an older message processed: not what the hold waits for
    world.env.run(until=5.0)
    outbox.append((_row("probe-1:2:d1:2"),), 5.0)
    world.env.run(until=8.0)
    assert _pending(world, "probe-1") == [] and _released(world.history) == []
    _processed(world, "probe-1:2:d1:2")
    world.env.run(until=9.0)
    assert [r["message_id"] for r in _pending(world, "probe-1")] == ["probe-1:1:d1:1", "probe-1:2:d1:2"]
    assert _released(world.history) == [("probe-1", "newer message processed")]


def test_the_simulated_hold_lets_go_at_its_bound() -> None:
    world = InspectionWorld(1, InspectionSpec())
    _replay_hold(world, {"process": "probe-2", "bound_s": 4.0}, True)
    _replay_hold(world, {"process": "probe-2", "bound_s": 4.0}, False)
    world.env.run(until=3.9)
    assert world.replays_held == {"probe-2"}
    world.env.run(until=4.6)
    assert world.replays_held == set() and _released(world.history) == [("probe-2", "bound")]


def test_until_alert_waits_for_a_processed_message_carrying_an_alert() -> None:
    engine = create_engine("sqlite://")
    METADATA.create_all(engine, tables=[message_dedup])
    rows = [{**_row("probe-1:5:d1:5"), "created_at": 10.0}, {**_row("probe-1:5:d2:5", alert=True), "created_at": 10.0}]
    with engine.begin() as conn:
        conn.execute(insert(message_dedup).values(message_id="probe-1:5:d1:5", processed_at=__import__(
            "datetime").datetime(2026, 1, 1)))
        assert newer_processed(conn, rows, 9.0, alert=False)
        assert not newer_processed(conn, rows, 9.0, alert=True)
        assert not newer_processed(conn, rows, 10.0, alert=False)  # written when the window closed: not after it


def test_the_real_node_replays_nothing_while_its_file_exists(tmp_path: Path) -> None:
    outbox = SqliteOutbox(str(tmp_path / "probe-1.db"))
    outbox.append((_row("probe-1:1:d1:1"),))
    hold = tmp_path / "hold"
    node = SimpleNamespace(outbox=outbox, replay_hold=hold, name="probe-1")
    assert len(Node._outbox(node, "probe-1", OutboxPending(0.0))) == 1  # type: ignore[arg-type]
    hold.touch()
    assert Node._outbox(node, "probe-1", OutboxPending(0.0)) == []  # type: ignore[arg-type]


def test_the_native_hold_is_released_by_the_database_not_by_the_clock(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    METADATA.create_all(engine, tables=[message_dedup])
    (tmp_path / "outbox").mkdir()
    (tmp_path / "replay-hold").mkdir()
    stack = SimpleNamespace(processes={"probe-1": None, "probe-2": None, "worker-1": None}, run_dir=tmp_path,
                            owner=engine, replay_hold_file=lambda n: tmp_path / "replay-hold" / n)
    history = History()
    nemesis = SimpleNamespace(stack=stack, factor=1.0, record=lambda p, t, f, v: history.add(0.0, p, t, f, v))
    _replay_hold_native(nemesis, {}, True)  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "replay-hold").iterdir()) == ["probe-1", "probe-2"]
    _replay_hold_native(nemesis, {"process": "probe-1", "bound_s": 60.0}, False)  # type: ignore[arg-type]
    time.sleep(0.05)
    SqliteOutbox(str(tmp_path / "outbox" / "probe-1.db")).append((_row("probe-1:9:d1:9"),))
    time.sleep(0.5)
    assert (tmp_path / "replay-hold" / "probe-1").exists()  # written after the window, not processed yet
    with engine.begin() as conn:
        conn.execute(insert(message_dedup).values(message_id="probe-1:9:d1:9", processed_at=__import__(
            "datetime").datetime(2026, 1, 1)))
    deadline = time.monotonic() + 10.0
    while (tmp_path / "replay-hold" / "probe-1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (tmp_path / "replay-hold" / "probe-1").exists()
    assert (tmp_path / "replay-hold" / "probe-2").exists()  # not the one released
    assert [(o.f, o.value.get("why")) for o in history.ops][-1] == ("replay-released", "newer message processed")


def test_replay_hold_runs_in_both_shells() -> None:
    fault = FAULTS["replay-hold"]
    assert fault.sim is not None and fault.native is not None
