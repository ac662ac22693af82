"""Each of the inspection pipeline's invariants (systems/inspection/checkers.py) on a record that breaks it: one
simulated run with a takeover (a worker killed, its slots moved under new epochs) and a reshard (4 -> 6 slots, its
devices moved by their messages) gives a clean record on which every invariant holds; each test breaks one rule in
a copy of it and expects exactly that invariant to see it."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from harness.history import INFO, INVOKE, OK, History, Op
from scenarios.runner import simulate
from scenarios.scenario import FaultStep, Scenario
from scenarios.verdicts import HELD, VIOLATED
from systems.inspection.checkers import INVARIANTS, InspectionState
from systems.inspection.sim import InspectionSpec


@pytest.fixture(scope="module")
def clean() -> InspectionState:
    spec = InspectionSpec(devices=8, total_slots=4, workers=3, window_s=120.0, reshard_to=6, reshard_at_s=50.0)
    scenario = Scenario(id="T1", slug="t", title="t", workload=spec, recovery_bound_s=300.0,
                        faults=(FaultStep(40.0, "worker-kill", None, {"worker": "worker-2", "restart_after_s": 20.0}),),
                        exercised=lambda h, s: None, invariants=INVARIANTS.ids, shells=("sim",),
                        policy={"warming_s": 6.0, "reshard_notice_s": 10.0}, system="inspection")
    result = simulate(scenario, 1)
    assert result.passed, [(v.invariant, v.violations[:2]) for v in result.verdicts if v.status == VIOLATED]
    state = result.state
    assert isinstance(state, InspectionState)
    return state


def _copy(s: InspectionState) -> InspectionState:
    return dataclasses.replace(s, history=History.of(list(s.history.ops)), tables=copy.deepcopy(s.tables))


def _add(s: InspectionState, process: str, type_: str, f: str, value: dict[str, Any], at: int | None = None) -> None:
    ops = s.history.ops
    t = ops[-1].time + 1 if at is None else ops[at].time
    ops.insert(len(ops) if at is None else at, Op(0, t, process, type_, f, value))
    s.history.ops = [dataclasses.replace(o, index=i) for i, o in enumerate(ops)]


def _outbox(s: InspectionState) -> Op:
    return next(o for o in s.history.ops if o.f == "outbox" and o.value["messages"])


def _edit_body(s: InspectionState, change: Callable[[dict[str, Any]], None]) -> None:
    op = _outbox(s)
    body = copy.deepcopy(op.value["messages"][0])
    change(body)
    s.history.ops[op.index] = dataclasses.replace(op, value={"messages": [body, *op.value["messages"][1:]]})


def _chain_row(s: InspectionState, across_epoch: bool) -> dict[str, Any]:
    by_device: dict[str, list[dict[str, Any]]] = {}
    for r in s.tables["device_status_history"]:
        if r["applied"]:
            by_device.setdefault(r["device_id"], []).append(r)
    for chain in by_device.values():
        for before, after in zip(chain, chain[1:], strict=False):
            if (before["writer_epoch"] != after["writer_epoch"]) == across_epoch:
                return after
    raise AssertionError("no such row in the clean run")


def _commit(s: InspectionState) -> Op:
    return next(o for o in s.history.ops if o.f == "batch.commit" and o.type == OK)


def _set_commit(s: InspectionState, **values: Any) -> None:
    op = _commit(s)
    s.history.ops[op.index] = dataclasses.replace(op, value={**op.value, **values})


def _load_late(s: InspectionState, after: float, by: float) -> None:
    """Every takeover's load after ``after`` (the kill) comes ``by`` seconds later."""
    for r in s.tables["slot_audit"]:
        if r["why"] == "loaded" and r["at"] > after:
            r["at"] += by


BREAKS: dict[str, Callable[[InspectionState], None]] = {
    "V1": lambda s: _edit_body(s, lambda b: b.pop("plan_version")),
    "V2": lambda s: _edit_body(s, lambda b: b.update(lease_epoch=3)),
    "V3": lambda s: s.tables["slot_lease"][0].update(slot_map_version=9),
    "V4": lambda s: s.tables["device_status_current"][0].update(
        current_slot=(s.tables["device_status_current"][0]["current_slot"] + 1) % 4),
    "V5": lambda s: _add(s, "probe-1", OK, "outbox", {"messages": [_outbox(s).value["messages"][0]]}),
    "V6": lambda s: _add(s, "probe-1", OK, "outbox", {"messages": [
        {**_outbox(s).value["messages"][0], "seq": 10_000, "cycle_id": 10**12}]}),
    "V7": lambda s: _edit_body(s, lambda b: b.update(schema_version=3)),
    "V8": lambda s: _chain_row(s, False)["snapshot"].update(consec_failure_count=99),
    "V9": lambda s: s.tables["device_status_current"][0]["derived_snapshot"].update(applied=-1),
    "V10": lambda s: _chain_row(s, True)["snapshot"].update(applied=-1),
    "V11": lambda s: _add(s, "probe-1", "invoke", "publish",
                          {"message_id": _outbox(s).value["messages"][0]["message_id"]}, at=0),
    "V12": lambda s: _edit_body(s, lambda b: b.update(message_id=b["message_id"] + ":r1")),
    "V13": lambda s: setattr(s, "settings", dataclasses.replace(s.settings, outbox_retention_s=60.0)),
    "V14": lambda s: _set_commit(s, epoch=999),
    "V15": lambda s: _set_commit(s, cache_age_s=7.0),
    "V16": lambda s: _add(s, "worker-1", INFO, "deliver", {"slot": 0, "priority": "normal", "message_id": "m-x",
                                                           "count": 1}),
    "V17": lambda s: s.tables["device_status_current"][0].update(writer_epoch=999),
    "V18": lambda s: s.tables["alert_current"][0].update(
        state="ACTIVE" if s.tables["alert_current"][0]["state"] == "RESOLVED" else "RESOLVED"),
    "V19": lambda s: _add(s, "worker-3", OK, "ack", {"ids": ["never-committed"]}),
    "V20": lambda s: s.tables["device_status_history"].append(dict(s.tables["device_status_history"][0])),
    "V21": lambda s: _add(s, "probe-1", OK, "outbox", {"messages": [
        {**_outbox(s).value["messages"][0], "message_id": "lost", "seq": 10_000, "cycle_id": 10**12}]}),
    "V22": lambda s: s.tables["device_status_current"][0].update(seq=0, cycle_id=0),
    "V23": lambda s: s.tables["slot_audit"].append({**s.tables["slot_audit"][0], "kind": "batch", "lease_epoch": 0,
                                                    "owner_worker_id": "worker-1"}),
    "V24": lambda s: s.tables["slot_lease"][0].update(state="MOVING"),
    "V25": lambda s: s.tables["worker_log"].append({"id": 10**6, "worker_id": "worker-1", "from_state": "ACTIVE",
                                                    "to_state": "OFFLINE", "at": 1.0, "silent_s": None,
                                                    "actor": "x"}),
    "V26": lambda s: s.tables["slot_audit"].extend(
        {"id": 10**6 + i, "kind": "lease", "slot_id": 0, "lease_epoch": 99, "owner_worker_id": f"worker-{i}",
         "state": "MOVING", "actor": "web-1", "why": "rebalance", "term": 1, "at": 500.0 + 10 * i} for i in (1, 2)),
    "V27": lambda s: _load_late(s, after=40.0, by=100.0),
    "V28": lambda s: s.tables["device_status_history"].append({**s.tables["device_status_history"][0], "id": 10**6,
                                                               "applied": False, "cycle_id": 10**12}),
}


def test_every_invariant_has_a_breaking_record() -> None:
    assert set(BREAKS) == set(INVARIANTS.ids)


def test_every_invariant_holds_on_the_clean_run(clean: InspectionState) -> None:
    verdicts = INVARIANTS.check(clean)
    assert {v.invariant: v.status for v in verdicts} == dict.fromkeys(INVARIANTS.ids, HELD)
    assert all(v.checked > 0 for v in verdicts), [v.invariant for v in verdicts if not v.checked]


@pytest.mark.parametrize("invariant", list(INVARIANTS.ids))
def test_a_record_that_breaks_the_rule_is_caught(clean: InspectionState, invariant: str) -> None:
    broken = _copy(clean)
    BREAKS[invariant](broken)
    (verdict,) = INVARIANTS.check(broken, [invariant])
    assert verdict.status == VIOLATED, verdict
    assert verdict.violations and verdict.violations[0].message


def _silenced(clean: InspectionState, commit_s: float, dead_after_invoke_s: float | None) -> InspectionState:
    """worker-1 silent from a heartbeat 60 s before the end whose ok came ``commit_s`` after its invoke (a slow
    commit on the real stack), then SUSPECTED and DEAD by the leader's clock, which measures from the row's time
    (written between the two): DEAD ``dead_after_invoke_s`` after the invoke (None: never)."""
    s = _copy(clean)
    beats = [o for o in s.history.ops if o.process == "heartbeat-1" and o.f == "worker.heartbeat"]
    ok = [o for o in beats if o.type == OK and o.time < s.end_time - 60.0][-1]
    invoke = [o for o in beats if o.type == INVOKE and o.index < ok.index][-1]
    s.history.ops = [o for o in s.history.ops if o not in beats or o.index <= ok.index]
    s.history.ops = [dataclasses.replace(o, index=i, time=invoke.time + commit_s if o is ok else o.time)
                     for i, o in enumerate(s.history.ops)]
    assert [r["to_state"] for r in s.tables["worker_log"] if r["worker_id"] == "worker-1"][-1] == "ACTIVE"
    log = s.tables["worker_log"]
    if dead_after_invoke_s is not None:
        for state, silent in (("SUSPECTED", 15.5), ("DEAD", dead_after_invoke_s)):
            log.append({"id": 10**6 + len(log), "worker_id": "worker-1", "from_state": log[-1]["to_state"] if
                        log[-1]["worker_id"] == "worker-1" else "ACTIVE", "to_state": state,
                        "at": invoke.time + silent, "silent_s": silent, "actor": "web-1"})
    return s


def test_a_death_counts_from_the_heartbeats_invoke_not_its_ok(clean: InspectionState) -> None:
    """P4's native flake: the leader marked the worker DEAD 30.2 s after the heartbeat's row time, but the ok of that
    heartbeat came 0.5 s after its invoke, so DEAD was 29.7 s after the ok (within the fresh CI's failure)."""
    (held,) = INVARIANTS.check(_silenced(clean, 0.5, 30.2), ["V25"])
    assert held.status == HELD, held.violations
    (never,) = INVARIANTS.check(_silenced(clean, 0.5, None), ["V25"])
    assert never.status == VIOLATED and "not DEAD by" in never.violations[0].message


def test_the_clean_run_resharded_and_moved_devices_by_their_messages(clean: InspectionState) -> None:
    """The fixture's reshard took effect: devices sit on their new map's slot, moved by a message of the new route."""
    from systems.inspection import _resharded

    assert _resharded(clean.history, clean) is None
    assert {int(r["version"]) for r in clean.tables["slot_map_version"]} == {1, 2}


@pytest.mark.parametrize("change", [
    pytest.param(lambda b: b.update(slot_id=(b["slot_id"] + 1) % 6), id="a slot its map does not give"),
    pytest.param(lambda b: b.update(slot_map_version=2), id="a map not in force when collected"),
])
def test_a_message_routed_otherwise_than_by_its_map_breaks_v4(clean: InspectionState,
                                                               change: Callable[[dict[str, Any]], None]) -> None:
    broken = _copy(clean)
    _edit_body(broken, change)  # the run's first message, collected before the reshard
    (verdict,) = INVARIANTS.check(broken, ["V4"])
    assert verdict.status == VIOLATED, verdict


def test_a_device_written_again_from_its_old_route_breaks_v4(clean: InspectionState) -> None:
    """Once a device's row was written from the new map's route, an older route's message applied after it is a
    move back that no reshard made."""
    broken = _copy(clean)
    moved = next(r for r in broken.tables["device_status_history"] if r["applied"] and _version(broken, r) == 2)
    broken.tables["device_status_history"].append({**moved, "id": 10**6, "message_id": _old_route(broken, moved)})
    (verdict,) = INVARIANTS.check(broken, ["V4"])
    assert verdict.status == VIOLATED, verdict


def _version(s: InspectionState, row: dict[str, Any]) -> int:
    return next(int(b["slot_map_version"]) for o in s.history.ops if o.f == "outbox" for b in o.value["messages"]
                if b["message_id"] == row["message_id"])


def _old_route(s: InspectionState, row: dict[str, Any]) -> str:
    return next(str(b["message_id"]) for o in s.history.ops if o.f == "outbox" for b in o.value["messages"]
                if b["device_id"] == row["device_id"] and int(b["slot_map_version"]) == 1)


def test_a_lease_notice_ahead_of_the_database_breaks_v14(clean: InspectionState) -> None:
    """§4.1: the leader publishes after its tick committed; a notice naming a slot its publisher never changed (or
    before it did) runs ahead of the truth (INV-14)."""
    notices = [o for o in clean.history.ops if o.f == "notify"]
    assert notices, "the clean run's leader published no lease notice"
    early = _copy(clean)
    first = next(i for i, o in enumerate(early.history.ops) if o.f == "notify")
    op = early.history.ops[first]
    early.history.ops[first] = dataclasses.replace(op, time=-1.0)  # before any of its lease changes
    (v14,) = INVARIANTS.check(early, ["V14"])
    assert v14.status == VIOLATED and "before it changed their lease" in v14.violations[0].message
    foreign = _copy(clean)
    _add(foreign, "web-9", INFO, "notify", {"slots": [0], "reached": [], "lost": []})
    (v14,) = INVARIANTS.check(foreign, ["V14"])
    assert v14.status == VIOLATED
