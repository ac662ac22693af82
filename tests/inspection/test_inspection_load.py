"""`sortie load --system inspection` (systems.inspection.load): the pure parts, fast. The load itself starts the
whole native stack: scripts/nightly.sh runs it (systems/inspection/nightly.sh), never the test command."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.history import INFO, INVOKE, NEMESIS, OK, History
from loadtests.run import FaultWindow, LoadOptions
from reference.inspection.effects import PUBLISH_ACK, PUBLISH_NACK
from reference.inspection.probe import Device, Versions, envelope, padded
from systems.inspection.load import (
    MESSAGE_BYTES,
    _hold,
    _refuse_other_options,
    bottleneck,
    latencies,
    load_profile,
    migration,
    recovery,
    rto_s,
    slo_rows,
)


def test_profiles_are_the_seeds_rate_times_n() -> None:
    one, five = load_profile("1x"), load_profile("5x")
    assert one.msgs_per_s == 120.0  # 60 msg/s per IS node, two nodes
    assert five.msgs_per_s == 5 * one.msgs_per_s and five.devices == 5 * one.devices
    assert one.devices == one.msgs_per_s * one.cfg.cycle_s  # one message per device a cycle
    assert one.cfg.message_bytes == MESSAGE_BYTES
    for bad in ("lots", "0x", "x5"):
        with pytest.raises(ValueError):
            load_profile(bad)


def test_a_message_is_padded_to_its_size_on_the_wire() -> None:
    body = envelope("probe-1", Device("dev_00000001", 3, 2), 12, 4, datetime(2026, 1, 1, tzinfo=UTC), Versions())
    assert len(json.dumps(padded(body, MESSAGE_BYTES))) == MESSAGE_BYTES
    assert padded(body, 0) is body  # the simulation's messages as inspected
    assert padded(body, 10) is body  # already longer: left as it is


def test_options_of_other_systems_are_refused(tmp_path: Path) -> None:
    _refuse_other_options(LoadOptions(out=tmp_path))
    _refuse_other_options(LoadOptions(out=tmp_path, fault="db-outage"))  # §4.4 F under load
    for given in ({"fault": "queue-limit"}, {"stack": "docker"}, {"extra": {"variant": "seed"}},
                  {"arrival_rate": 2.0}):
        with pytest.raises(ValueError):
            _refuse_other_options(LoadOptions(out=tmp_path, **given))


def test_latencies_come_from_the_history() -> None:
    t0 = 1_000_000.0
    at = datetime.fromtimestamp(t0 + 1.0, UTC).isoformat()
    h = History()
    h.add(1.0, "probe-1", OK, "outbox", {"messages": [{"message_id": "a", "collected_at": at},
                                                      {"message_id": "b", "collected_at": at}]})
    h.add(1.5, "probe-1", OK, "publish", {"message_id": "a", "outcome": PUBLISH_ACK})
    h.add(1.6, "probe-1", OK, "publish", {"message_id": "b", "outcome": PUBLISH_NACK})  # not confirmed: replayed
    h.add(2.0, "probe-1", OK, "publish", {"message_id": "b", "outcome": PUBLISH_ACK})
    h.add(2.5, "worker-1", INVOKE, "batch.commit", {})
    h.add(2.75, "worker-1", OK, "batch.commit", {"applied": ["a", "b"], "superseded": [], "duplicates": []})
    lat = latencies(h, t0)
    assert lat["current_s"] == pytest.approx([1.75, 1.75])
    assert lat["collected_at"] == pytest.approx([1.0, 1.0])
    assert lat["published_s"] == pytest.approx([0.5, 1.0])
    assert lat["consumed_s"] == pytest.approx([1.25, 0.75])
    assert lat["commit_s"] == pytest.approx([0.25])


def test_the_bottleneck_is_named_from_what_was_measured() -> None:
    flat, rising = [0] * 9, [0, 0, 0, 5, 9, 20, 40, 60, 80]
    cpu = {"probes": 0.2, "workers": 0.5, "postgres": 0.3}
    assert bottleneck(cpu, flat, flat, 0.1, 2, 1.0, 10.0).startswith("none reached")
    assert "publishing" in bottleneck(cpu, flat, rising, 0.1, 2, 1.0, 10.0)
    assert "publishing" in bottleneck(cpu, flat, flat, 0.1, 2, 12.0, 10.0)  # a cycle took more than a cycle
    assert "the database" in bottleneck(cpu, rising, flat, 0.7, 2, 1.0, 10.0)
    assert "database" not in bottleneck(cpu, rising, flat, 0.2, 2, 1.0, 10.0)
    assert bottleneck({"workers": 1.9}, flat, flat, 0.1, 2, 1.0, 10.0).startswith("CPU")
    assert bottleneck(cpu, flat, flat, 0.1, 2, 1.0, 10.0, load_avg=6.0).startswith("CPU")  # others' load


def test_slos_are_judged_against_one_cycle_and_100_ms() -> None:
    rows = {r["name"]: r for r in slo_rows({"p99": 9.0, "n": 5}, {"p99": 120.0, "n": 3}, {"V21": "held"}, 10.0)}
    assert rows["current_p99_s"]["held"] and not rows["batch_commit_p99_ms"]["held"] and rows["invariants"]["held"]
    rows = {r["name"]: r for r in slo_rows({"p99": None, "n": 0}, {"p99": 1.0, "n": 3}, {"V21": "violated"}, 10.0)}
    assert not rows["current_p99_s"]["held"] and not rows["invariants"]["held"]


def _lease(slot: int, epoch: int, owner: str, why: str, at: float) -> dict[str, object]:
    return {"kind": "lease", "slot_id": slot, "lease_epoch": epoch, "owner_worker_id": owner, "why": why, "at": at}


def test_a_killed_workers_rto_is_until_its_last_slot_is_loaded_again() -> None:
    h = History()
    h.add(10.0, NEMESIS, INFO, "kill", {"process": "worker-1", "why": "worker-kill"})
    audit = [_lease(0, 1, "worker-1", "loaded", 1.0), _lease(1, 1, "worker-1", "loaded", 1.0),
             _lease(2, 1, "worker-2", "loaded", 1.0),
             _lease(0, 2, "worker-2", "loaded", 42.0), _lease(1, 2, "worker-3", "loaded", 47.5)]
    state = SimpleNamespace(history=h, tables={"slot_audit": audit})
    assert rto_s(state) == pytest.approx(37.5)
    state.tables["slot_audit"] = audit[:-1]  # slot 1 never came back
    assert rto_s(state) is None


def test_recovery_times_count_from_the_faults_end() -> None:
    rows = [{"t": t, "ready": r, "unconfirmed": u} for t, r, u in
            ((0, 0, 0), (10, 5, 900), (20, 300, 1200), (30, 120, 400), (40, 0, 0))]
    state = SimpleNamespace(history=History(), tables={"slot_audit": []})
    rec = recovery(rows, {"start": 8.0, "end": 25.0}, state, 0.0)
    assert (rec["peak_ready"], rec["peak_unconfirmed"]) == (300, 1200)
    assert rec["drain_s"] == rec["replay_s"] == 15.0 and rec["rto_s"] is None


def test_a_fault_under_load_is_in_the_history_as_a_window() -> None:
    """As a scenario's timeline records it: V25 excuses a worker not declared DEAD while the database was away."""
    applied: list[tuple[str, bool]] = []
    nemesis = SimpleNamespace(history=History(), now=lambda: 7.0,
                              apply=lambda fault, params, on: applied.append((fault, on)))
    fault = FaultWindow("db-outage", 0.0, 0.05, time.time(), _hold(nemesis, "db-outage"))
    fault.start()
    fault.join(5.0)
    assert applied == [("db-outage", True), ("db-outage", False)]
    assert [(w.fault, w.start, w.end) for w in nemesis.history.fault_windows()] == [("db-outage", 7.0, 7.0)]
    assert fault.window["start"] is not None and fault.window["end"] >= fault.window["start"]


def _commit(h: History, t: float, slot: int, applied: list[str], superseded: list[str] = []) -> None:  # noqa: B006
    h.add(t, "worker-1", OK, "batch.commit", {"slot": slot, "applied": applied, "superseded": superseded})


def test_a_reshard_under_load_is_measured_from_the_tables_and_the_commits() -> None:
    """16 -> 24 slots at 100 s, in force at 160 s: dev_00000000 moves 0 -> 16 and dev_00000001 6 -> 14, dev_00000010
    stays on 1. The handover is each moved device's first commit applying it from its new slot; what its old slot
    delivers after that is counted, superseded or applied."""
    tables: dict[str, list[dict[str, Any]]] = {
        "slot_map_version": [{"version": 1, "total_slots": 16}, {"version": 2, "total_slots": 24}],
        "slot_audit": [_lease(s, 1, "worker-1", "loaded", 120.0 if s < 23 else 130.0) for s in range(16, 24)]
        + [_lease(0, 1, "worker-1", "loaded", 5.0)],
        "device_status_current": [{"device_id": d} for d in ("dev_00000000", "dev_00000001", "dev_00000010")],
    }
    h = History()
    _commit(h, 150.0, 0, ["p1:15:dev_00000000:1"])
    _commit(h, 161.0, 6, ["p2:16:dev_00000001:2"])
    _commit(h, 165.0, 16, ["p1:16:dev_00000000:2"])
    _commit(h, 170.0, 0, [], ["p1:15:dev_00000000:1"])
    _commit(h, 172.0, 14, ["p2:17:dev_00000001:3"], [])
    _commit(h, 175.0, 6, ["p2:16:dev_00000001:2"])
    _commit(h, 176.0, 1, ["p1:17:dev_00000010:3"])
    m = migration(tables, h, {"total_slots": 24, "effective_at": 160.0}, 100.0)
    assert m["total_slots"] == [16, 24] and m["notice_s"] == 60.0 and m["new_slots_loaded_s"] == 30.0
    assert m["devices_moved"] == 2 and m["devices_not_moved"] == []
    assert m["handover_s"]["max"] == 12.0 and m["handover_s"]["n"] == 2
    assert m["old_route_after_handover"] == {"applied": 1, "superseded": 1}
    h.ops[:] = h.ops[:3]  # dev_00000001 never applied from slot 14
    tables["slot_audit"] = tables["slot_audit"][1:]  # slot 16 never loaded
    m = migration(tables, h, {"total_slots": 24, "effective_at": 160.0}, 100.0)
    assert m["devices_not_moved"] == ["dev_00000001"] and m["new_slots_loaded_s"] is None
