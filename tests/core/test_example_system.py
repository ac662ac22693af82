"""The smallest system (tests/example_system, a shared counter) runs through the harness's verbs with no edit to any
generic module: it is loaded by its module path, from outside systems/. Each verb runs as a user runs it, in a
subprocess from the repository's root; the bug it registers must be caught and found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "tests.example_system"
SORTIE = [str(Path(sys.executable).parent / "sortie")]  # the console script, as a user runs it


def sortie(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SORTIE, *args, "--system", SYSTEM], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_it_stays_small() -> None:
    source = (ROOT / "tests" / "example_system" / "__init__.py").read_text()
    assert len(source.splitlines()) < 200


def test_simulate_passes_and_catches_its_bug(tmp_path: Path) -> None:
    clean = sortie("simulate", "--all", "--seed", "1", "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert [(s["id"], s["passed"]) for s in summary["scenarios"]] == [("K1", True), ("K2", True)]
    assert (tmp_path / "clean" / "report.html").exists()
    buggy = sortie("simulate", "--scenario", "K1", "--seed", "1", "--inject-bug", "read-modify-write", "--no-report",
                   "--out", str(tmp_path / "bug"))
    assert buggy.returncode == 1 and "caught by K1 (N1 violated)" in buggy.stdout, buggy.stdout + buggy.stderr
    k1 = json.loads((tmp_path / "bug" / "summary.json").read_text())["scenarios"][0]
    assert k1["invariants"] == {"N1": "violated"}


def test_explore_finds_nothing_clean_and_finds_the_bug(tmp_path: Path) -> None:
    clean = sortie("explore", "--runs", "50", "--seed", "1", "--workers", "1", "--require-coverage",
                   "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    report = json.loads((tmp_path / "clean" / "explore.json").read_text())
    assert report["runs"] == 50 and not report["failures"] and not report["unreached"]
    found = sortie("explore", "--runs", "50", "--seed", "1", "--workers", "1", "--bug", "read-modify-write",
                   "--out", str(tmp_path / "bug"))
    assert found.returncode == 0, found.stdout + found.stderr
    repro = next((tmp_path / "bug" / "failures").glob("N1-*.yaml"))
    again = subprocess.run([*SORTIE, "simulate", str(repro), "--seed", "1", "--inject-bug", "read-modify-write",
                            "--system", SYSTEM, "--no-report", "--out", str(tmp_path / "repro")],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "caught by" in again.stdout, again.stdout + again.stderr


def test_selfcheck_catches_every_registered_bug(tmp_path: Path) -> None:
    done = sortie("selfcheck", "--seed", "1", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads((tmp_path / "selfcheck.json").read_text())
    assert table["all_caught"] and [(b["bug"], b["caught_by"]) for b in table["bugs"]] == [
        ("read-modify-write", {"K1": ["N1"], "K2": ["N1"]})]


@pytest.mark.parametrize("bad", ["tests.no_such_system", "tests.example_system.catalogue", "../x"])
def test_an_unknown_system_is_a_usage_error(bad: str) -> None:
    done = subprocess.run([*SORTIE, "scenarios", "--system", bad], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "unknown system" in done.stdout + done.stderr
