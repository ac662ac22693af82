"""docs/invariants.md and docs/scenarios.md are generated from the systems' invariant tables and catalogues
(scenarios.pages): a committed page that no longer matches the code fails here, with the command that rewrites it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios import pages
from sortie.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("page", "generate", "command"), [
    (pages.INVARIANTS_PAGE, pages.invariants_page, pages.INVARIANTS_COMMAND),
    (pages.SCENARIOS_PAGE, pages.scenarios_page, pages.SCENARIOS_COMMAND),
])
def test_committed_page_is_current(page: Path, generate, command: str) -> None:  # type: ignore[no-untyped-def]
    committed = (ROOT / page).read_text(encoding="utf-8")
    assert committed == generate(), f"{page} is stale: regenerate it with `{command}` (from the repository root)"


def test_the_cli_prints_the_pages() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["invariants", "--markdown"]).output == pages.invariants_page()
    assert runner.invoke(main, ["scenarios", "--markdown"]).output == pages.scenarios_page()
    jobs = runner.invoke(main, ["invariants", "--system", "jobs", "--markdown"]).output
    assert jobs == pages.invariants_section("jobs") and "| J11 |" in jobs and "| I1 |" not in jobs
