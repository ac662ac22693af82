"""The safety invariants (I12-I17) get what they need from the simulation shell: the close-airspace fault
records which areas it closed and reopened, the runner passes the run's delivery limit, and S7 closes the
airspace over enough tasks to prove something; a reference that skips the airspace recheck is caught by I12."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import select

from chaos.simulated import apply_fault
from harness.history import AIRSPACE, NEMESIS
from reference.copilot.models import SiteArea
from reference.copilot.policy import Policy
from reference.copilot.services import dispatch
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.expectations import S7_MIN_REFUSED
from systems.copilot.faults import FAULTS
from systems.copilot.sim import CopilotWorld
from systems.copilot.workload import WorkloadSpec, seed_fleet

CATALOGUE = load_catalogue("copilot")

pytestmark = pytest.mark.sim


def test_close_airspace_records_which_areas_closed_and_reopened() -> None:
    world = CopilotWorld(1)
    world.transact(lambda tx: seed_fleet(tx, WorkloadSpec(confirms=1, window_s=1.0, sites=4)))
    world.env.run(until=5.0)
    apply_fault(FAULTS, world, "close-airspace", {"sites": 2}, on=True)
    world.env.run(until=9.0)
    apply_fault(FAULTS, world, "close-airspace", {"sites": 2}, on=False)
    world.env.run(until=10.0)  # the change is made as soon as no simulated transaction holds the write lock
    ops = [op for op in world.history.ops if op.f == AIRSPACE]
    assert [(op.time, op.process, op.value) for op in ops] == [
        (5.0, NEMESIS, {"areas": ["SITE-001", "SITE-002"], "open": False}),
        (9.0, NEMESIS, {"areas": ["SITE-001", "SITE-002"], "open": True})]
    assert world.transact(lambda tx: list(tx.session.scalars(select(SiteArea.airspace_open)))) == [True] * 4


def test_the_runner_checks_deliveries_against_its_own_policy() -> None:
    result = simulate(CATALOGUE["S1"], 1, policy=dataclasses.replace(Policy(), max_deliveries=7))
    i16 = next(v for v in result.verdicts if v.invariant == "I16")
    assert i16.status == HELD and i16.note.startswith("limit 7 deliveries"), i16.as_json()


def test_s7_meets_the_closed_airspace_with_enough_tasks_and_the_open_sites_fly() -> None:
    result = simulate(CATALOGUE["S7"], 1)
    assert result.passed, [v.as_json() for v in result.verdicts if v.status == VIOLATED]
    refused = [t for t in result.state.tasks if t["last_error_code"] == "AIRSPACE_CLOSED"]
    assert len(refused) >= S7_MIN_REFUSED
    assert {t["area_id"] for t in refused} == {"SITE-001", "SITE-002"}
    flown = {str(f["reference"]) for f in result.state.ledger}
    assert flown and not flown & {t["id"] for t in refused}
    i12 = next(v for v in result.verdicts if v.invariant == "I12")
    assert i12.status == HELD and i12.checked == len(flown)


def test_a_reference_that_skips_the_airspace_recheck_is_caught_by_i12(monkeypatch: pytest.MonkeyPatch) -> None:
    recheck = dispatch._recheck

    def airspace_ignored(tx, task, device, policy):  # type: ignore[no-untyped-def]
        problem = recheck(tx, task, device, policy)
        return None if problem and problem[0] == "AIRSPACE_CLOSED" else problem

    monkeypatch.setattr(dispatch, "_recheck", airspace_ignored)
    result = simulate(CATALOGUE["S7"], 25)  # the seed with the fewest tasks under the closed airspace (16)
    i12 = next(v for v in result.verdicts if v.invariant == "I12")
    assert i12.status == VIOLATED
    assert len(i12.violations) >= S7_MIN_REFUSED
    assert all("was closed" in v.message and v.ops for v in i12.violations)
