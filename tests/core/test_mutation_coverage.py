"""scripts/mutation_coverage.py (scripts/mutation.sh's coverage-guided selection): which scenarios judge a mutant
from the lines each scenario executed, and the command that judges it."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutation_coverage", ROOT / "scripts" / "mutation_coverage.py")
cov = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cov
_spec.loader.exec_module(cov)

MODULE = '''\
LIMIT = 3


def retry(n, *, bound=LIMIT):
    if (n < bound
            and n > 0):
        return n + 1
    return 0


class Policy:
    timeout_s = 30.0

    def late(self, t):
        return t > self.timeout_s
'''
CATALOGUE = ["A1", "B2", "C3"]  # fastest first


def test_a_line_in_a_function_is_judged_by_the_scenarios_that_ran_its_statement_fastest_first(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    contexts = {1: [""], 4: [""], 5: ["C3", "A1"], 7: ["C3"], 15: ["B2"]}
    assert cov.reaching(5, path, contexts, CATALOGUE) == ("scenarios", ["A1", "C3"])
    # line 6 continues the statement that begins at line 5: coverage.py records it at line 5
    assert cov.reaching(6, path, contexts, CATALOGUE) == ("scenarios", ["A1", "C3"])
    assert cov.reaching(7, path, contexts, CATALOGUE) == ("scenarios", ["C3"])
    assert cov.reaching(8, path, contexts, CATALOGUE) == ("none", [])  # no scenario returned 0
    assert cov.reaching(15, path, contexts, CATALOGUE) == ("scenarios", ["B2"])


def test_a_line_run_at_import_is_judged_by_the_whole_catalogue_unless_the_module_is_never_imported(
        tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    contexts = {1: [""], 4: [""], 5: ["A1"]}
    for line in (1, 12):  # a constant another file may name (the default), a class attribute
        assert cov.reaching(line, path, contexts, CATALOGUE) == ("import", CATALOGUE)
        assert cov.reaching(line, path, {}, CATALOGUE) == ("none", [])


def test_a_constant_or_default_used_only_in_functions_is_judged_by_the_scenarios_that_run_those_uses(
        tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    contexts = {1: [""], 4: [""], 5: ["C3", "A1"], 7: ["C3"]}

    def nowhere(name: str) -> bool:
        return False

    # LIMIT (line 1) is read only as retry's default (line 4, at import): anything may depend on it
    assert cov.reaching(1, path, contexts, CATALOGUE, nowhere) == ("import", CATALOGUE)
    # retry's default (line 4) is used by retry's body: the scenarios that ran it
    assert cov.reaching(4, path, contexts, CATALOGUE, nowhere) == ("scenarios", ["A1", "C3"])
    assert cov.reaching(4, path, {1: [""], 4: [""]}, CATALOGUE, nowhere) == ("none", [])
    used_in_a_function = "WAIT = 3\n\n\ndef f():\n    return WAIT\n\n\ndef g():\n    return 1\n"
    path.write_text(used_in_a_function)
    cov.module_facts.cache_clear()
    assert cov.reaching(1, path, {1: [""], 5: ["B2"], 9: ["A1"]}, CATALOGUE, nowhere) == ("scenarios", ["B2"])
    assert cov.reaching(1, path, {1: [""], 5: ["B2"]}, CATALOGUE, lambda name: name == "WAIT") == \
        ("import", CATALOGUE)  # another file names it: it may import it
    ran_at_import = {5: ["", "A1"]}  # a function body run while the modules were imported: it may matter anywhere
    assert cov.reaching(5, path, ran_at_import, CATALOGUE) == ("scenarios", CATALOGUE)


def test_the_judge_command_runs_the_scenarios_in_order_then_the_modules_own_judge() -> None:
    only = cov.judge_command("copilot", 1, 2, "/venv/python", ["A1", "C3"], None)
    assert only is not None and "--scenario A1 --scenario C3 --fail-fast" in only
    assert only.startswith("env -C {worker}/tree PYTHONPATH={worker}/tree /venv/python -m sortie.cli simulate")
    extra = {"command": "python -m pytest -x tests/api"}
    both = cov.judge_command("copilot", 1, 2, "/venv/python", ["A1"], extra)
    assert both is not None
    argv = shlex.split(both)
    assert argv[:2] == ["bash", "-c"] and " && env -C {worker}/tree PYTHONPATH={worker}/tree /venv/python -m pytest " \
        "-x tests/api" in argv[2] and "--scenario A1" in argv[2]
    assert cov.judge_command("copilot", 1, 2, "/venv/python", [], extra) == \
        "env -C {worker}/tree PYTHONPATH={worker}/tree /venv/python -m pytest -x tests/api"
    assert cov.judge_command("copilot", 1, 2, "/venv/python", [], None) is None


def test_the_cheaper_of_the_scenarios_and_the_modules_own_judge_runs_first() -> None:
    extra = {"command": "python -m pytest -x tests/api", "seconds": 20}
    pytest_step = "env -C {worker}/tree PYTHONPATH={worker}/tree /venv/python -m pytest -x tests/api"
    first = shlex.split(cov.judge_command("copilot", 1, 2, "/venv/python", ["A1"], extra, 90.0) or "")[2]
    assert first.startswith(pytest_step + " && ") and "--scenario A1" in first
    last = shlex.split(cov.judge_command("copilot", 1, 2, "/venv/python", ["A1"], extra, 5.0) or "")[2]
    assert last.endswith(" && " + pytest_step)
