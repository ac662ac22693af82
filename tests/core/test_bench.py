"""`sortie bench` for the Copilot: a traffic profile in simulation, every invariant checked, and where the simulated
transactions' time goes by name (issue 9's benchmark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sortie.cli import main


def test_bench_reports_its_transactions_by_name_and_times_them_with_profile_code(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--hours", "0.01", "--profile-code", "--out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["invariants_held"] and figures["tasks"] > 0
    rows = figures["transactions_by_name"]
    names = {r["name"] for r in rows}
    assert {"draft.create", "confirm.create", "dispatch.begin", "outbox.claim"} <= names
    # Harness transactions outside virtual time (the fleet's seeding) count in `transactions`, not by name.
    assert 0 < sum(r["transactions"] for r in rows) <= figures["transactions"]
    assert all(r["statements"] >= 0 and "seconds" in r for r in rows)
    spent = [r["seconds"] for r in rows]
    assert spent == sorted(spent, reverse=True) and sum(spent) > 0
    assert "Simulated transactions by name" in result.output


def test_bench_without_profile_code_counts_but_does_not_time(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--hours", "0.01", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["transactions_by_name"]
    assert rows and all("seconds" not in r and r["transactions"] > 0 for r in rows)


def test_the_floor_is_a_positive_cost_and_the_bench_reports_its_wall_time_in_it(tmp_path: Path) -> None:
    """The floor (one SELECT 1 per simulated transaction) is measured in the same run, so the bench's wall time in
    floor transactions compares across machines; and the floor alone cannot exceed the window it is part of."""
    from systems.copilot.bench import floor_us_per_transaction

    assert floor_us_per_transaction(transactions=50, rounds=1) > 0
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--hours", "0.01", "--out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["floor_us_per_transaction"] > 0
    # Measured on both sides of the window (the machine's speed can change during it); the figure is their mean.
    before, after = figures["floor_us_before_after"]
    assert before > 0 and after > 0
    assert abs(figures["floor_us_per_transaction"] - (before + after) / 2) <= 0.1
    expected = figures["wall_seconds"] * 1e6 / figures["floor_us_per_transaction"]
    assert abs(figures["wall_in_floor_transactions"] - expected) <= 0.01 * expected + 1
    assert figures["floor_share_of_wall"] > 0


def test_the_bench_warns_when_the_floor_moved_during_the_window(monkeypatch: Any) -> None:
    """This VM's speed can halve within one window; the bench says so rather than print a figure as if it held."""
    import systems.copilot.bench as bench

    floors = iter([100.0, 200.0])
    monkeypatch.setattr(bench, "floor_us_per_transaction", lambda: next(floors))
    result = CliRunner().invoke(main, ["bench", "--hours", "0.01"])
    assert result.exit_code == 0, result.output
    assert "the floor moved by 2.00x" in " ".join(result.output.split())
