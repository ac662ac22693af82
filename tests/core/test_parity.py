"""`sortie parity`: the same scenarios in both shells, side by side. The real stack is a recording fake here (the
native runner itself is exercised by tests/stack and scripts/stack.sh); what is tested is the comparison: outcomes
must agree, differing invariants and fired faults are named, parity.json is written, and the exit code follows."""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sortie.cli as cli
from scenarios.runner import simulate_many
from scenarios.systems import load_system
from scenarios.verdicts import VIOLATED, Verdict


def _with_fake_stack(monkeypatch: pytest.MonkeyPatch, change: Any) -> list[tuple[str, int]]:
    """The Copilot whose "native" stack runs each scenario in simulation and hands the result to ``change``."""
    ran: list[tuple[str, int]] = []

    @contextmanager
    def stack_runner(req: Any):  # type: ignore[no-untyped-def]
        def run(scenario: Any, seed: int) -> Any:
            ran.append((scenario.id, seed))
            return change(simulate_many([scenario], seed)[0])

        yield type("Runner", (), {"run": staticmethod(run), "time_factor": 0.25})()

    system = dataclasses.replace(load_system("copilot"), stack_runner=stack_runner)
    monkeypatch.setattr(cli, "_system", lambda name, bug=None: system)
    return ran


def test_outcomes_that_agree_exit_0_with_the_faults_each_shell_fired(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    ran = _with_fake_stack(monkeypatch, lambda r: r)
    result = CliRunner().invoke(cli.main, ["parity", "--scenario", "C1", "--scenario", "R1", "--seed", "2",
                                           "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert ran == [("C1", 2), ("R1", 2)]
    body = json.loads((tmp_path / "parity.json").read_text())
    assert body["agree"] and [r["id"] for r in body["scenarios"]] == ["C1", "R1"]
    for r in body["scenarios"]:
        assert r["sim"] == r["native"] == "passed" and r["invariants_differ"] == {}
        assert r["faults_fired"]["sim"] and r["faults_fired"]["sim"] == r["faults_fired"]["native"]
        assert r["task_counts"]["sim"]["tasks"] > 0


def test_an_outcome_that_differs_is_named_with_its_invariant_and_exits_1(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    def violate(r: Any) -> Any:
        verdicts = [dataclasses.replace(v, status=VIOLATED) if v.invariant == "I1" else v for v in r.verdicts]
        assert any(isinstance(v, Verdict) and v.status == VIOLATED for v in verdicts)
        return dataclasses.replace(r, verdicts=verdicts, passed=False)

    _with_fake_stack(monkeypatch, violate)
    result = CliRunner().invoke(cli.main, ["parity", "--scenario", "C1", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    body = json.loads((tmp_path / "parity.json").read_text())
    assert body["disagree"] == ["C1"]
    row = body["scenarios"][0]
    assert row["sim"] == "passed" and row["native"] == "invariant violated"
    assert row["invariants_differ"] == {"I1": ["held", "violated"]}


def test_a_scenario_without_a_native_form_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from scenarios.catalogue import load_catalogue

    sim_only = next((s.id for s in load_catalogue("copilot").values() if "native" not in s.shells), None)
    if sim_only is None:
        pytest.skip("every scenario of the catalogue runs on the native stack")
    _with_fake_stack(monkeypatch, lambda r: r)
    result = CliRunner().invoke(cli.main, ["parity", "--scenario", sim_only, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
