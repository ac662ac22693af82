"""A system's rule-traceability matrix (issue 54): every normative rule of its seed, and the rules its reference adds,
each with what judges it on a history (invariants), what exercises it (scenarios, per shell) and the registered bug
that breaks it (so `sortie selfcheck` proves the row); a rule nothing judges says why no history can judge it, or is
an open gap naming the checker or scenario that would.

A system keeps its table as data (``System.rules``); `sortie rules` prints it and ``rules_page`` renders the page
docs/systems/NAME-rules.md, which tests/core/test_rules.py keeps current. Generic: the table is the system's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scenarios.pages import table_cell
from scenarios.systems import load_system

# What kind of rule a row is: the seed's MUSTs, its state machine's edges, guards (a check that refuses), bounds
# (counts, times), security and audit duties, timing policies, and what the reference adds on top of the seed.
KINDS = ("MUST", "edge", "guard", "bound", "security", "audit", "timing", "reference")
SHELLS = ("sim", "native")


@dataclass(frozen=True)
class Rule:
    section: str  # where the seed states it: "seed 000 §5.2"; "reference" rows name the reference's doc
    rule: str  # the rule, one line
    kind: str  # one of KINDS
    invariants: tuple[str, ...] = ()  # the invariants whose checkers judge it on a history
    sim: tuple[str, ...] = ()  # catalogue scenarios that exercise it in simulation
    native: tuple[str, ...] = ()  # ... and on the real stack
    bugs: tuple[str, ...] = ()  # registered bugs that break it (each caught by one of ``invariants``)
    reason: str = ""  # why no history can judge it (a design or deployment rule, or judged by a test elsewhere)
    gap: str = ""  # not judged yet: the checker or scenario that would judge it

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"rule kind {self.kind!r}: one of {', '.join(KINDS)}")
        if not (self.invariants or self.reason or self.gap):
            raise ValueError(f"rule {self.rule!r}: needs the invariants that judge it, a reason none can, or a gap")
        if self.invariants and self.reason:
            raise ValueError(f"rule {self.rule!r}: judged by {', '.join(self.invariants)}, so no reason")
        if self.bugs and not self.invariants:
            raise ValueError(f"rule {self.rule!r}: a bug needs the invariant that catches it")

    def scenarios(self, shell: str) -> tuple[str, ...]:
        return self.sim if shell == "sim" else self.native


def counts(rules: Sequence[Rule]) -> dict[str, int]:
    """Rows; those an invariant judges (some with a gap still open: an edge no scenario takes, a part of the rule
    no checker reads); those no history can judge (a reason); the open gaps."""
    return {"rows": len(rules), "checked": sum(1 for r in rules if r.invariants),
            "reason": sum(1 for r in rules if r.reason), "gap": sum(1 for r in rules if r.gap),
            "checked_with_gap": sum(1 for r in rules if r.invariants and r.gap)}


def page_path(system_name: str) -> Path:
    return Path(f"docs/systems/{system_name}-rules.md")


def page_command(system_name: str) -> str:
    return f"sortie rules --system {system_name} --markdown > {page_path(system_name)}"


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(ids) or "-"


def rules_page(system_name: str) -> str:
    """The page of a system's matrix (System.rules); KeyError for a system without one."""
    system = load_system(system_name)
    if not system.rules:
        raise KeyError(f"{system_name} has no rule matrix")
    return render(system.name, system.title, system.rules)


def render(system_name: str, title: str, rules: Sequence[Rule]) -> str:
    """The matrix as Markdown: the counts, one table (section, rule, kind, invariants, scenarios per shell, bugs,
    and the reason or the gap), then the gaps again as a list for whoever closes them."""
    n = counts(rules)
    lines = [f"# Rules of {system_name}: {title}", "",
             f"Generated from the code; do not edit by hand. Regenerate with `{page_command(system_name)}`.", "",
             f"Every normative rule of the seed, and the rules the reference adds, with the invariants that judge it "
             f"on a history, the scenarios that exercise it in each shell and the registered bugs that break it "
             f"(`systems/{system_name}/rules.py`). {n['rows']} rules: {n['checked']} judged by an invariant "
             f"({n['checked_with_gap']} of them with a gap still open), {n['reason']} that no history can judge (the "
             f"reason says why), {n['gap']} open gaps (listed after the table).", "",
             "| # | seed | rule | kind | invariants | sim | native | bugs | reason or gap |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rules, 1):
        why = r.reason or (f"**gap:** {r.gap}" if r.gap else "")
        lines.append(f"| {i} | {table_cell(r.section)} | {table_cell(r.rule)} | {r.kind} | {_ids(r.invariants)} | "
                     f"{_ids(r.sim)} | {_ids(r.native)} | {_ids([f'`{b}`' for b in r.bugs])} | {table_cell(why)} |")
    gaps = [(i, r) for i, r in enumerate(rules, 1) if r.gap]
    if gaps:
        lines += ["", "## Gaps", ""]
        lines += [f"- {i}. {table_cell(r.rule)} ({table_cell(r.section)}): {table_cell(r.gap)}" for i, r in gaps]
    return "\n".join(lines) + "\n"
