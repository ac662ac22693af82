"""S8: devices go offline, below the minimum battery or unknown to the platform, and approvals are revoked, while
their tasks wait for dispatch. The pre-flight check (seed 000 §7.3: 执行前重新检查空域、设备状态和有效审批) refuses
each, and a device at exactly the minimum battery still flies. Before S8 no scenario had an unfit device or a revoked
approval at dispatch time: a dispatcher that skipped either half of the check passed every scenario (mutation testing,
2026-12-05), and until the platform could forget a device, one that took an unknown device for a fit one did too. Now
I23 (device) and I14 (a revoked approval) catch each, in every seed tried."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

import reference.copilot.services.dispatch as dispatch
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.scenario import FaultStep
from scenarios.verdicts import VIOLATED
from systems.copilot.faults import FAULTS, choose_unfit

S8 = load_catalogue("copilot")["S8"]
SEEDS = [1, 2, 3]


def _violated(result: Any) -> set[str]:
    return {v.invariant for v in result.verdicts if v.status == VIOLATED}


@pytest.mark.parametrize("seed", SEEDS)
def test_each_kind_of_unfitness_is_refused_at_the_pre_flight_check_and_the_minimum_battery_flies(seed: int) -> None:
    result = simulate(S8, seed)
    assert result.passed, (result.outcome, result.exercised, _violated(result))
    codes = Counter(t.get("last_error_code") for t in result.state.tasks)
    assert all(codes[c] >= 2 for c in ("DEVICE_OFFLINE", "BATTERY_LOW", "DEVICE_UNKNOWN", "APPROVAL_REVOKED")), codes


def _skipping(code: str) -> Any:
    real = dispatch._recheck

    def recheck(tx: Any, task: Any, device: Any, policy: Any) -> Any:
        problem = real(tx, task, device, policy)
        return None if problem is not None and problem[0] == code else problem

    return recheck


@pytest.mark.parametrize("code,invariant", [("DEVICE_OFFLINE", "I23"), ("BATTERY_LOW", "I23"),
                                            ("DEVICE_UNKNOWN", "I23"), ("APPROVAL_REVOKED", "I14")])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_pre_flight_check_that_skips_a_half_is_caught_by_an_invariant(
        seed: int, code: str, invariant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "_recheck", _skipping(code))
    assert invariant in _violated(simulate(S8, seed))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_check_that_refuses_the_minimum_battery_itself_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before I28 only S8's expectation saw it (devices at exactly the minimum refused); now an invariant does."""
    real = dispatch._recheck

    def strict(tx: Any, task: Any, device: Any, policy: Any) -> Any:  # battery <= minimum instead of <
        problem = real(tx, task, device, policy)
        return ("BATTERY_LOW", "at the minimum") if problem is None and device.battery <= policy.min_battery \
            else problem

    monkeypatch.setattr(dispatch, "_recheck", strict)
    result = simulate(S8, seed)
    assert "I28" in _violated(result), (result.outcome, result.exercised)
    assert "exactly the minimum battery were refused" in str(result.exercised)


def test_a_second_fault_may_pick_a_device_the_platform_forgot() -> None:
    """The second unfit-for-flight of a run chooses from the database's fleet, which still lists the devices the
    first one made the platform forget: setting one offline brings it back, as POST /control/devices does natively
    (explore drew such a pair and the simulation raised KeyError before)."""
    again = FaultStep(110.0, "unfit-for-flight", None, {"offline": 1.0, "low_battery": 0.0, "at_min_battery": 0.0,
                                                         "unknown": 0.0, "revoke": 0.0})
    result = simulate(dataclasses.replace(S8, faults=(*S8.faults, again)), 1)
    records = [op.value for op in result.history.ops if op.f == "devices"]
    first_forgotten, second_offline = set(records[0]["unknown"]), set(records[1]["offline"])
    assert first_forgotten & second_offline
    assert not _violated(result), _violated(result)


class _Row:
    def __init__(self, n: int, device: str) -> None:
        self.id, self.device_id, self.draft_id, self.draft_version = f"t{n:02d}", device, f"d{n:02d}", 1


def test_the_devices_spoiled_are_disjoint_those_of_waiting_tasks_first_and_the_revoked_approvals_elsewhere() -> None:
    rows = [_Row(n, f"DEV-{n % 14 + 20:02d}") for n in range(30)]  # 30 waiting tasks on DEV-20..33 of DEV-00..39
    fleet = [f"DEV-{n:02d}" for n in range(40)]
    unfit = choose_unfit(rows, fleet, {"offline": 0.1, "low_battery": 0.1, "at_min_battery": 0.05, "unknown": 0.05,
                                       "revoke": 0.5})
    offline, low, at_min = set(unfit.offline), set(unfit.low_battery), set(unfit.at_min_battery)
    unknown = set(unfit.unknown)
    assert (len(offline), len(low), len(at_min), len(unknown)) == (4, 4, 2, 2)
    sets = [offline, low, at_min, unknown]
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:])
    spoiled = offline | low | at_min | unknown
    assert spoiled == {f"DEV-{n}" for n in range(20, 32)}  # the waiting tasks' devices come first
    assert at_min == {"DEV-28", "DEV-29"} and unknown == {"DEV-30", "DEV-31"}
    assert sorted(unfit.tasks["at_min_battery"]) == sorted(r.id for r in rows if r.device_id in at_min)
    assert sorted(unfit.tasks["unknown"]) == sorted(r.id for r in rows if r.device_id in unknown)
    by_id = {r.id: r for r in rows}
    assert all(by_id[t["task_id"]].device_id not in spoiled for t in unfit.revoke)
    assert len(unfit.revoke) == round(0.5 * sum(r.device_id not in spoiled for r in rows)) == 2  # of t12, 13, 26, 27
    assert unfit.device_changes() == ([(d, False, 100.0) for d in unfit.offline]
                                      + [(d, True, unfit.low_pct) for d in unfit.low_battery]
                                      + [(d, True, unfit.min_pct) for d in unfit.at_min_battery])  # unknown: removed
    assert sorted(unfit.tasks["offline"]) == sorted(r.id for r in rows if r.device_id in offline)
    assert unfit.low_pct < unfit.min_pct


@pytest.mark.parametrize("params", [{"offline": 1.5}, {"revoke": -0.1}, {"unknown": 2},
                                    {"offline": 0.5, "low_battery": 0.5, "at_min_battery": 0.1},
                                    {"min_battery": 2}])
def test_bad_parameters_are_refused_before_the_run(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        FAULTS.half_for("unfit-for-flight", "sim", params)
