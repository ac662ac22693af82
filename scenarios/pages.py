"""The reference pages generated from the systems themselves: docs/invariants.md from each system's invariant table
(System.invariants), docs/scenarios.md from each system's catalogue. `sortie invariants --markdown` and
`sortie scenarios --markdown` print them; tests/core/test_generated_pages.py fails when a committed page is stale."""

from __future__ import annotations

from pathlib import Path

from scenarios.catalogue import load_catalogue
from scenarios.systems import load_system, system_names

INVARIANTS_PAGE = Path("docs/invariants.md")
SCENARIOS_PAGE = Path("docs/scenarios.md")
INVARIANTS_COMMAND = f"sortie invariants --markdown > {INVARIANTS_PAGE}"
SCENARIOS_COMMAND = f"sortie scenarios --markdown > {SCENARIOS_PAGE}"


def table_cell(text: str) -> str:
    """Text as one cell of a Markdown table: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def invariants_section(system_name: str) -> str:
    """One system's invariants: a table (id, checker, what must hold), then each one's doc."""
    system = load_system(system_name)
    table = system.invariants
    lines = [f"## {system.name}: {system.title}", "", f"{len(table)} invariants, checked on every scenario run "
             f"unless its file names fewer (`systems/{system.name}/checkers.py`).", "",
             "| id | checker | what must hold |", "|---|---|---|"]
    lines += [f"| {i.id} | `{i.checker.__name__}` | {table_cell(i.title)} |" for i in table.values()]
    for i in table.values():
        if i.doc:
            lines += ["", f"### {i.id} `{i.checker.__name__}`", "", i.doc]
    return "\n".join(lines) + "\n"


def scenarios_section(system_name: str) -> str:
    """One system's catalogue: a table (id, slug, shells, what it does)."""
    system = load_system(system_name)
    catalogue = load_catalogue(system_name)
    lines = [f"## {system.name}: {system.title}", "", f"{len(catalogue)} scenarios, one YAML file each "
             f"(`systems/{system.name}/catalogue/`).", "", "| id | slug | shells | what it does |",
             "|---|---|---|---|"]
    for s in catalogue.values():
        not_run = "".join(f" (not {shell}: {why})" for shell, why in s.why_not.items())
        lines.append(f"| {s.id} | `{s.slug}` | {', '.join(s.shells)} | {table_cell(s.title + not_run)} |")
    return "\n".join(lines) + "\n"


def _page(title: str, command: str, sections: list[str]) -> str:
    head = f"# {title}\n\nGenerated from the code; do not edit by hand. Regenerate with `{command}`.\n"
    return "\n".join([head, *sections])


def invariants_page() -> str:
    return _page("Invariants", INVARIANTS_COMMAND, [invariants_section(n) for n in system_names()])


def scenarios_page() -> str:
    return _page("Scenarios", SCENARIOS_COMMAND, [scenarios_section(n) for n in system_names()])
