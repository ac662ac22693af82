"""`sortie parity --load`: the capacity model's simulated confirm and confirm-to-EXECUTING p50/p99 against a measured
load run (systems.copilot.capacity_report.load_parity). Runs on the invented FIXTURE load.json files of tests/load
(no stack, virtual time only); what is tested is the comparison: which run calibrated the model and whether it is in
sample, the verdict of each row against the goal and the measured interval, parity.json, and the exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sortie.cli as cli
import systems.copilot.capacity_report as capacity
from systems.copilot.capacity_report import PARITY_FIGURES, PARITY_GOAL_PCT, _parity_verdict, load_parity

FIXTURES = Path(__file__).parents[1] / "load" / "fixtures"
SHORT = 600.0  # virtual seconds per model run: enough for the shape of the result, quick


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    for name in ("1x", "2x"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path


def test_calibrated_on_the_measured_run_says_it_is_in_sample(runs: Path) -> None:
    res = load_parity(runs / "1x", seed=1, duration_s=SHORT)
    assert res["calibrated_on"]["run"] == "1x" and res["in_sample"] == ["1x"]
    assert "in sample" in res["note"] or "fitted" in res["note"]
    (run,) = res["runs"]
    assert run["in_sample"] and run["multiple"] == 1.0
    assert [r["figure"] for r in run["rows"]] == list(PARITY_FIGURES)
    for r in run["rows"]:
        assert r["measured"] is not None and r["simulated"] is not None
        assert r["verdict"] == _parity_verdict({"error_pct": r["error_pct"], "model_within_ci": r["model_within_ci"]})
    assert res["held"] == (not res["missed"])
    assert res["missed"] == [f"1x: {r['figure']}" for r in run["rows"] if r["verdict"] == "missed"]


def test_calibrate_on_another_run_is_out_of_sample(runs: Path) -> None:
    res = load_parity(runs / "1x", runs / "2x", seed=1, duration_s=SHORT)
    assert res["calibrated_on"] == {"run": "2x", "path": str(runs / "2x"), "multiple": 2.0}
    assert res["in_sample"] == [] and "out of sample" in res["note"]
    assert not res["runs"][0]["in_sample"] and not res["runs"][0]["cpu_in_sample"]


def test_a_parent_directory_compares_every_fault_free_run_against_its_lowest_multiple(runs: Path) -> None:
    shutil.copytree(FIXTURES / "5x-broker-outage", runs / "5x-broker-outage")
    res = load_parity(runs, seed=1, duration_s=SHORT)
    assert [(r["run"], r["in_sample"]) for r in res["runs"]] == [("1x", True), ("2x", False)]  # the fault: none
    assert all(r["cpu_in_sample"] for r in res["runs"])  # CPU fitted over both multiples


def test_a_miss_inside_the_measured_interval_is_noise_not_a_miss() -> None:
    far = PARITY_GOAL_PCT + 10
    assert _parity_verdict({"error_pct": PARITY_GOAL_PCT, "model_within_ci": False}) == "held"
    assert _parity_verdict({"error_pct": -far, "model_within_ci": True}) == "noise"
    assert _parity_verdict({"error_pct": far, "model_within_ci": False}) == "missed"
    assert _parity_verdict({"error_pct": far, "model_within_ci": None}) == "missed"  # no interval measured
    assert _parity_verdict({"error_pct": None, "model_within_ci": None}) == "unmeasured"


def test_measured_intervals_are_carried_and_decide_between_noise_and_miss(runs: Path) -> None:
    path = runs / "1x" / "load.json"
    load = json.loads(path.read_text())
    confirm = next(e for n, e in load["endpoints"].items() if "confirm" in n)  # no steady table: the whole run's
    for q in (50, 99):  # intervals wide enough to hold any model value
        confirm[f"p{q}_ci_ms"] = [0.0, None]
        load["lifecycle_ms"]["executing"][f"p{q}_ci"] = [0.0, None]
    path.write_text(json.dumps(load))
    res = load_parity(runs / "1x", runs / "2x", seed=1, duration_s=SHORT)
    rows = res["runs"][0]["rows"]
    assert all(r["measured_ci"] == [0.0, None] and r["model_within_ci"] for r in rows)
    assert {r["verdict"] for r in rows} <= {"held", "noise"} and res["held"]


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli.main, ["parity", *args], catch_exceptions=False)


def test_cli_load_only_needs_no_stack_and_writes_parity_json(runs: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def no_stack(*a: Any, **k: Any) -> None:
        raise AssertionError("--load alone must not run scenarios or start a stack")

    monkeypatch.setattr(cli, "_scenario_parity", no_stack)
    real = capacity.load_parity
    monkeypatch.setattr(capacity, "load_parity", lambda *a, **k: real(*a, **k, duration_s=SHORT))
    out = tmp_path / "parity"
    res = _invoke(["--load", str(runs / "1x"), "--calibrate", str(runs / "2x"), "--out", str(out)])
    body = json.loads((out / "parity.json").read_text())
    assert set(body) == {"load"} and body["load"]["calibrated_on"]["run"] == "2x"
    assert res.exit_code == (0 if body["load"]["held"] else 3), res.output
    assert "load parity" in res.output and "confirm p99 (ms)" in res.output


@pytest.mark.parametrize("held, code", [(True, 0), (False, 3)])
def test_cli_exit_code_follows_the_load_verdict(held: bool, code: int, runs: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {"calibrated_on": {"run": "1x", "path": "1x"}, "goal_pct": PARITY_GOAL_PCT, "runs": [], "note": "n",
            "held": held}
    monkeypatch.setattr(capacity, "load_parity", lambda *a, **k: fake)
    res = _invoke(["--load", str(runs / "1x"), "--out", str(tmp_path / "p")])
    assert res.exit_code == code, res.output


def test_a_scenario_disagreement_outranks_a_load_miss(runs: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_scenario_parity", lambda *a, **k: {"agree": False, "scenarios": []})
    monkeypatch.setattr(capacity, "load_parity", lambda *a, **k: {
        "calibrated_on": {"run": "1x", "path": "1x"}, "goal_pct": PARITY_GOAL_PCT, "runs": [], "note": "n",
        "held": False})
    res = _invoke(["--scenario", "A1", "--load", str(runs / "1x"), "--out", str(tmp_path / "p")])
    assert res.exit_code == 1, res.output
    body = json.loads((tmp_path / "p" / "parity.json").read_text())
    assert body["agree"] is False and body["load"]["held"] is False


def test_calibrate_without_load_and_an_empty_directory_are_usage_errors(tmp_path: Path) -> None:
    assert _invoke(["--calibrate", str(tmp_path)]).exit_code == 2
    assert _invoke(["--load", str(tmp_path), "--out", str(tmp_path / "p")]).exit_code == 2


def test_capacity_calibrated_on_other_runs_predicts_every_run_out_of_sample(
        runs: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`sortie capacity DIR --calibrate CAL` (what it calls, with short model runs: the command's own model runs and
    its extrapolation take a minute): latencies from CAL's lowest multiple, the CPU line over all of CAL's runs; none
    of DIR's runs is in sample, for latencies or CPU (a planner predicting 5x from 1x and 2x)."""
    target = tmp_path_factory.mktemp("target")  # not under ``runs``
    shutil.copytree(runs / "2x", target / "2x")
    capacity.write_capacity(target, seed=1, calibrate_dir=runs, duration_s=SHORT, extrapolate_duration_s=15.0,
                            multiples=(10,))
    model = json.loads((target / "capacity.json").read_text())["model"]
    assert model["calibrated_on"]["run"] == "1x" and model["calibrated_on"]["path"] == str(runs / "1x")
    assert model["calibrated_on"]["cpu_line_from"] == [str(runs / "1x"), str(runs / "2x")]
    (c,) = model["comparisons"]
    assert c["run"] == "2x" and not c["in_sample"] and not c["cpu_in_sample"]
    # the same run, the report's way (calibrated on its own directory's runs): CPU in sample
    own = capacity.analyse(runs, duration_s=SHORT, extrapolate_duration_s=15.0, multiples=(10,))
    assert {x["run"]: (x["in_sample"], x["cpu_in_sample"]) for x in own["comparisons"]} == {
        "1x": (True, True), "2x": (False, True)}


def test_capacity_refuses_a_calibration_directory_without_runs(runs: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(cli.main, ["capacity", str(runs), "--calibrate", str(empty)])
    assert res.exit_code == 2 and "to calibrate on" in res.output, res.output
