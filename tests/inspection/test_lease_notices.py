"""The leader's lease notices (seed 001 §4.1, INV-14: slot_lease in the database is the truth, Redis only speeds things
up): the same run with the notices delivered, lost (the notice-loss fault: P17) or never sent ends in the same
devices' rows and alerts, with every invariant held; only the migrations' pace differs, and a delivered notice is
what makes them faster. In simulation, in virtual time (the Redis model: systems.inspection.sim.NoticeChannel); three
runs, 1.5-4 s: nightly (the test command's budget), while P17 itself runs in CI's simulated catalogue."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from systems.inspection.sim import InspectionSpec

P17 = load_catalogue("inspection")["P17"]
# P17's story on a smaller fleet and a shorter window (a unit's cost): a worker joins at 60 s, WARMING 30 s, every
# notice lost from 50 s on
SMALL = dataclasses.replace(P17, workload=InspectionSpec(devices=8, total_slots=4, workers=3,
                                                         worker_starts=(0.0, 0.0, 60.0), window_s=150.0),
                            policy={"warming_s": 30.0}, recovery_bound_s=150.0,
                            faults=(dataclasses.replace(P17.faults[0], at=50.0, duration=100.0),))


def _outcome(result: Any) -> tuple[Any, Any]:
    tables = result.state.tables
    rows = sorted((r["device_id"], r["cycle_id"], r["seq"], str(r["status_payload"]))
                  for r in tables["device_status_current"])
    alerts = sorted((r["device_id"], r["alert_key"], r["state"]) for r in tables["alert_current"])
    return rows, alerts


def _migration_s(result: Any) -> list[float]:
    """Per migration, from the leader's MOVING (rebalance) to the new owner's load."""
    audit = [r for r in result.state.tables["slot_audit"] if r["kind"] == "lease"]
    out = []
    for i, r in enumerate(audit):
        if r["why"] == "rebalance":
            loaded = next((x["at"] for x in audit[i:] if x["slot_id"] == r["slot_id"] and x["why"] == "loaded"), None)
            assert loaded is not None, f"slot {r['slot_id']} moved at {r['at']} and never loaded"
            out.append(loaded - r["at"])
    return out


@pytest.mark.nightly
def test_a_lost_notice_changes_nothing_but_the_migrations_pace() -> None:
    runs = {"lost": simulate(SMALL, 1),
            "delivered": simulate(dataclasses.replace(SMALL, faults=()), 1),
            "never sent": simulate(dataclasses.replace(SMALL, faults=(), policy={**SMALL.policy,
                                                                                 "lease_notices": 0}), 1)}
    for name, r in runs.items():
        assert not [v.invariant for v in r.verdicts if v.status == "violated"], name
        assert _migration_s(r), f"{name}: no slot migrated"
    assert runs["lost"].exercised is None  # a notice was lost, and the slots moved
    outcomes = {name: _outcome(r) for name, r in runs.items()}
    assert outcomes["lost"] == outcomes["delivered"] == outcomes["never sent"]
    pace = {name: max(_migration_s(r)) for name, r in runs.items()}
    assert pace["delivered"] < pace["lost"] and pace["delivered"] < pace["never sent"], pace
