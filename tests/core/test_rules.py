"""The rule-traceability matrices (scenarios.rules, System.rules): every id a row names exists, every invariant and
every registered bug is traced to a rule, each row's bug is one its registry expects one of the row's invariants to
catch in one of the row's scenarios (so `sortie selfcheck` proves the row), and the generated pages
(docs/systems/NAME-rules.md) are current."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.catalogue import load_catalogue
from scenarios.rules import KINDS, Rule, page_command, page_path, rules_page
from scenarios.systems import load_system
from sortie.cli import main

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("copilot", "jobs", "inspection", "statussync")


@pytest.mark.parametrize("name", SYSTEMS)
def test_every_id_a_row_names_exists(name: str) -> None:
    system = load_system(name)
    catalogue = load_catalogue(name)
    wrong = []
    for r in system.rules:
        wrong += [f"{r.rule}: no invariant {i}" for i in r.invariants if i not in system.invariants]
        for shell in ("sim", "native"):
            wrong += [f"{r.rule}: no scenario {s} in {shell}" for s in r.scenarios(shell)
                      if s not in catalogue or shell not in catalogue[s].shells]
        wrong += [f"{r.rule}: no registered bug {b}" for b in r.bugs if b not in system.bugs]
        assert r.kind in KINDS
    assert not wrong


@pytest.mark.parametrize("name", SYSTEMS)
def test_a_system_that_runs_natively_fills_the_native_column(name: str) -> None:
    """A catalogue with native scenarios has a matrix naming them: an empty native column says the real stack
    exercises no rule. (A row may still leave it empty: a checker that reads what only the simulation observes.)"""
    native = {i for i, s in load_catalogue(name).items() if "native" in s.shells}
    named = {s for r in load_system(name).rules for s in r.native}
    assert named or not native, f"{name} runs {sorted(native)} natively, its matrix names none of them"


@pytest.mark.parametrize("name", SYSTEMS)
def test_every_invariant_and_every_bug_is_traced_to_a_rule(name: str) -> None:
    system = load_system(name)
    judged = {i for r in system.rules for i in r.invariants}
    broken = {b for r in system.rules for b in r.bugs}
    assert set(system.invariants) - judged == set()
    assert set(system.bugs) - broken == set()


@pytest.mark.parametrize("name", SYSTEMS)
def test_selfcheck_proves_each_rows_bug(name: str) -> None:
    """A row's bug is expected (its registry entry) to be caught by one of the row's invariants, in one of the row's
    scenarios: what `sortie selfcheck` runs and requires (in simulation; a row whose rule only the real stack can
    show, on it: `sortie selfcheck --stack native --named`)."""
    system = load_system(name)
    unproven = []
    for r in system.rules:
        for b in r.bugs:
            bug = system.bugs[b]
            if not set(bug.invariants) & set(r.invariants):
                unproven.append(f"{b} is caught by {bug.invariants}, none of the row's {r.invariants} ({r.rule})")
            if not set(bug.scenarios) & set(r.sim or r.native):
                unproven.append(f"{b} is caught in {bug.scenarios}, none of the row's {r.sim or r.native} ({r.rule})")
    assert not unproven


@pytest.mark.parametrize("name", SYSTEMS)
def test_a_rule_without_a_checker_says_why_or_is_a_gap(name: str) -> None:
    rows = load_system(name).rules
    assert rows
    assert all(r.invariants or r.reason or r.gap for r in rows)
    assert len({(r.section, r.rule) for r in rows}) == len(rows), "a rule listed twice"


def _edges(name: str) -> set[tuple[str, str]]:
    """The (from, to) of each edge row: its rule reads "FROM -> TO: ..." ("(none)" for a creation)."""
    out = set()
    for r in load_system(name).rules:
        if r.kind == "edge":
            frm, to = r.rule.split(":", 1)[0].split(" -> ")
            out.add((frm, to))
    return out


def test_every_edge_of_each_state_machine_has_its_row() -> None:
    from reference.copilot.states import OPERATOR_TRANSITIONS, SYSTEM_TRANSITIONS
    from systems.jobs.checkers import LEGAL, REDRIVE

    copilot = {("(none)", "CREATED")} | {(a.value, b.value) for table in (SYSTEM_TRANSITIONS, OPERATOR_TRANSITIONS)
                                         for a, tos in table.items() for b in tos}
    assert _edges("copilot") == copilot
    assert _edges("jobs") == {(a or "(none)", b) for a, b in LEGAL | {REDRIVE}}  # the system's and an operator's
    from reference.inspection.models import WORKER_EDGES

    assert _edges("inspection") == {(a or "(none)", b) for a, b in WORKER_EDGES}
    from systems.statussync.checkers import MOVES

    assert _edges("statussync") == {("(none)", "PENDING")} | {(a, b) for a, tos in MOVES.items() for b in tos
                                                              if a != b}


def test_a_row_is_refused_without_a_checker_a_reason_or_a_gap() -> None:
    with pytest.raises(ValueError):
        Rule("seed 000 §1", "a rule", "MUST")
    with pytest.raises(ValueError):
        Rule("seed 000 §1", "a rule", "MUST", reason="why", bugs=("a-bug",))
    with pytest.raises(ValueError):
        Rule("seed 000 §1", "a rule", "wish", invariants=("I1",))


def test_a_system_without_a_matrix_has_no_page() -> None:
    example = load_system("tests.example_system")
    assert not example.rules
    with pytest.raises(KeyError):
        rules_page("tests.example_system")


@pytest.mark.parametrize("name", SYSTEMS)
def test_committed_page_is_current(name: str) -> None:
    committed = (ROOT / page_path(name)).read_text(encoding="utf-8")
    assert committed == rules_page(name), f"{page_path(name)} is stale: regenerate it with `{page_command(name)}` " \
                                          "(from the repository root)"


def test_the_cli_prints_the_pages() -> None:
    runner = CliRunner()
    for name in SYSTEMS:
        assert runner.invoke(main, ["rules", "--system", name, "--markdown"]).output == rules_page(name)
    table = runner.invoke(main, ["rules", "--system", "jobs"])
    assert table.exit_code == 0 and "J8" in table.output
