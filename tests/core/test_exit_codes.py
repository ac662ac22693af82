"""Every verb's exit codes follow one table (sortie.exits, README "Exit codes"): a test per code, through the CLI.
The stack-bound verbs' own codes are exercised where their stacks run (tests/stack, tests/load); here each code is
reached the cheapest honest way: a real simulation for 0 and 1, real refusals for 2 and 4, the real load verdict
path for 3 (its measurement replaced: a load run takes minutes), a real unexpected exception for 5."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sortie import exits
from sortie.cli import main


def _sortie(*argv: str) -> Any:
    return CliRunner().invoke(main, list(argv))


@pytest.mark.sim
def test_0_when_every_invariant_held_and_1_when_one_was_violated(tmp_path: Path) -> None:
    held = _sortie("simulate", "--system", "jobs", "--scenario", "J1", "--seed", "1", "--jobs", "1",
                   "--out", str(tmp_path / "held"))
    assert held.exit_code == exits.OK, held.output
    violated = _sortie("simulate", "--system", "jobs", "--scenario", "J1", "--seed", "1", "--jobs", "1",
                       "--inject-bug", "claim-unlogged", "--out", str(tmp_path / "violated"))
    assert violated.exit_code == exits.VIOLATED, violated.output
    summary = json.loads((tmp_path / "violated" / "summary.json").read_text())
    assert any(v["status"] == "violated" for s in summary["scenarios"] for v in s["verdicts"])


@pytest.mark.parametrize("argv", [
    ["simulate", "--scenario", "NOPE", "--out", "{tmp}"],  # an unknown scenario id
    ["simulate", "--all", "--inject-bug", "no-such-bug", "--out", "{tmp}"],  # an unknown bug
    ["simulate", "{tmp}/broken.yaml", "--out", "{tmp}"],  # a malformed incident file
    ["report", "{tmp}"],  # a run directory without a summary
    ["load", "--system", "jobs", "--dispatchers", "3", "--out", "{tmp}"],  # an option the system does not take
    ["selfcheck", "--bug", "no-such-bug"],  # an unknown bug
    ["explore-bench", "--system", "jobs", "--bug", "nope"],
    ["bench", "--hours", "0"],  # nothing to simulate (was a division by zero)
    ["bench", "--hours", "-1"],  # (was random.sample's "Sample larger than population")
    ["bench", "--profile", "9y"],  # neither a profile file nor a multiple (was a FileNotFoundError)
    ["load", "--duration", "0s", "--out", "{tmp}"],  # (started a stack and ran a load of nothing)
])
def test_2_for_a_usage_or_input_error(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "broken.yaml").write_text("id: X1\nfaults: [{at: soon}]\n")
    result = _sortie(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert result.exit_code == exits.USAGE, result.output
    assert "Traceback" not in result.output


def test_3_when_a_load_missed_an_slo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict path of a job-system load (the CLI, System.load, run_load) with the pipeline's run replaced by one
    whose invariants held and whose enqueue p99 missed its SLO."""
    import loadtests.run

    def measured(hooks: Any, opts: Any, profile: Any, multiple: float, out: Path,
                 console: Any = None) -> dict[str, Any]:
        slo = [{"name": "enqueue_p99_ms", "target": "< 250 ms", "measured": 900.0, "held": False, "n": 10},
               {"name": "invariants", "target": "no violation", "measured": "none violated", "held": True, "n": None}]
        load = {"system": "jobs", "profile": profile.name, "duration_s": 5.0, "offered_jobs_per_s": 9.5,
                "done_per_s_steady_median": 9.0, "endpoints": {}, "slo": slo, "invariants": {"J1": "held"},
                "violations": {}, "recovery": None, "faults": [], "missing": [], "series": {"t": [0.0]},
                "counts": {"jobs": 1}, "assumptions": []}
        loadtests.run.write_outputs(out, load, opts.report)
        return load

    monkeypatch.setattr(loadtests.run, "run_once", measured)
    result = _sortie("load", "--system", "jobs", "--duration", "5s", "--out", str(tmp_path))
    assert result.exit_code == exits.REGRESSION, result.output
    assert (tmp_path / "load.html").exists()


def test_4_when_the_environment_lacks_what_the_verb_needs(tmp_path: Path) -> None:
    for argv in (["stack", "status", "--run-dir", str(tmp_path / "none")],
                 ["stack", "down", "--run-dir", str(tmp_path / "none")],
                 ["ops", "dead", "--run-dir", str(tmp_path / "none")]):
        result = _sortie(*argv)
        assert result.exit_code == exits.ENVIRONMENT, (argv, result.output)
        assert "Traceback" not in result.output


def test_5_for_a_harness_error_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.catalogue

    def broken(system: str = "copilot") -> Any:
        raise RuntimeError("the catalogue loader broke")

    monkeypatch.setattr(scenarios.catalogue, "load_catalogue", broken)
    result = _sortie("scenarios")
    assert result.exit_code == exits.HARNESS
    assert "harness error: RuntimeError: the catalogue loader broke" in result.output


def test_the_table_is_the_one_the_readme_documents() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Exit codes"):]
    for code, meaning in exits.TABLE.items():
        assert f"| {code} | {meaning}" in section, (code, meaning)


def test_4_when_a_tool_or_server_binary_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sortie stack install` where PostgreSQL's server binaries are missing (found nowhere): one line, exit 4."""
    import stack.native
    import stack.postgres
    import stack.redis

    monkeypatch.setattr(stack.redis, "ensure_installed", lambda: "/usr/bin/redis-server")
    monkeypatch.setattr(stack.postgres, "find_pg_bin", lambda: None)
    result = _sortie("stack", "install")
    assert result.exit_code == exits.ENVIRONMENT, result.output
    assert "PostgreSQL server binaries not found" in result.output and "Traceback" not in result.output


def test_4_when_a_package_of_an_extra_is_not_installed_with_the_command_that_installs_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A verb that needs the stack extra after the main job's install (no extras): exit 4, one line naming the pip
    command that installs the extra bringing the package (read from Sortie's own requirements)."""
    import stack.native

    def missing() -> None:
        raise ModuleNotFoundError("No module named 'mirakuru'", name="mirakuru")

    monkeypatch.setattr(stack.native, "install", missing)
    result = _sortie("stack", "install")
    assert result.exit_code == exits.ENVIRONMENT, result.output
    assert "-m pip install -e '" in result.output and "[stack]'" in result.output, result.output
    assert "Traceback" not in result.output
    assert exits.install_command("a_module_no_requirement_provides") is None
