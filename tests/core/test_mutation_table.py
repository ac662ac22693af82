"""scripts/mutation_table.py (scripts/mutation.sh's table): which modules of a reference are mutated and why others
are not, how a triaged equivalent is recognised across reruns, and how the per-module counts and score add up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutation_table", ROOT / "scripts" / "mutation_table.py")
table = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = table  # dataclasses look their module up there
_spec.loader.exec_module(table)

DIFF = "--- a\n+++ b\n@@ -1 +1 @@\n-    if n < limit:\n+    if n <= limit:\n"


def mutant(outcome: str, module: str = "reference/x/a.py", occurrence: int = 0, diff: str = DIFF) -> dict:
    return {"module": module, "operator": "core/ReplaceComparisonOperator_Lt_LtE", "occurrence": occurrence,
            "line": 1, "outcome": outcome, "diff": diff}


def test_every_module_but_init_and_migrations_each_skip_with_its_reason(tmp_path: Path) -> None:
    for path in ("reference/jobs/__init__.py", "reference/jobs/repo.py", "reference/jobs/migrations.py",
                 "reference/copilot/migrations/versions/0001_initial.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    selected = table.select_modules(tmp_path, "jobs", [])
    assert selected["mutate"] == ["reference/jobs/repo.py"]
    assert set(selected["skipped"]) == {"reference/jobs/__init__.py", "reference/jobs/migrations.py"}
    assert all(selected["skipped"].values())
    assert table.skip_reason("reference/copilot/migrations/versions/0001_initial.py", {}) == table.MIGRATIONS_REASON


def test_an_equivalent_is_known_by_its_change_whatever_the_spacing_or_by_operator_and_occurrence() -> None:
    by_diff = [{"module": "reference/x/a.py", "diff": "- if n < limit:\n+ if n <=  limit:", "reason": "why"}]
    assert table.equivalence(mutant("survived"), by_diff) == "why"
    assert table.equivalence(mutant("survived", module="reference/x/b.py"), by_diff) is None
    by_place = [{"module": "reference/x/a.py", "operator": "core/ReplaceComparisonOperator_Lt_LtE", "occurrence": 3,
                 "reason": "because"}]
    assert table.equivalence(mutant("survived", occurrence=3), by_place) == "because"
    assert table.equivalence(mutant("survived", occurrence=4), by_place) is None


def test_score_is_killed_over_mutants_less_equivalents_and_a_killed_equivalent_is_not_one() -> None:
    triaged = [{"module": "reference/x/a.py", "occurrence": 9, "operator": "core/ReplaceComparisonOperator_Lt_LtE",
                "reason": "same"}]
    results = {"candidates": {"reference/x/a.py": 40, "reference/x/empty.py": 0},
               "mutants": [mutant("killed", occurrence=1), mutant("timeout", occurrence=2),
                           mutant("survived", occurrence=3), mutant("survived", occurrence=9),
                           mutant("killed", module="reference/x/c.py")]}
    rows, survivors, equivalents = table.tabulate(results, triaged)
    a = next(r for r in rows if r.module == "reference/x/a.py")
    assert (a.candidates, a.mutants, a.killed, a.timed_out, a.survived, a.equivalent) == (40, 4, 2, 1, 1, 1)
    assert a.score == round(2 / 3, 3)
    assert [s["occurrence"] for s in survivors] == [3] and [e["occurrence"] for e in equivalents] == [9]
    assert next(r for r in rows if r.module == "reference/x/empty.py").score is None
    killed_anyway = table.tabulate({"candidates": {}, "mutants": [mutant("killed", occurrence=9)]}, triaged)[0][0]
    assert (killed_anyway.killed, killed_anyway.equivalent, killed_anyway.score) == (1, 0, 1.0)


def test_a_mutant_no_judge_reaches_is_a_survivor_counted_as_not_reached_and_may_be_triaged() -> None:
    triaged = [{"module": "reference/x/a.py", "occurrence": 2, "operator": "core/ReplaceComparisonOperator_Lt_LtE",
                "reason": "dead code"}]
    results = {"candidates": {"reference/x/a.py": 9},
               "mutants": [mutant("killed", occurrence=0), mutant("not reached", occurrence=1),
                           mutant("not reached", occurrence=2)]}
    rows, survivors, equivalents = table.tabulate(results, triaged)
    assert (rows[0].killed, rows[0].survived, rows[0].not_reached, rows[0].equivalent) == (1, 1, 1, 1)
    assert rows[0].score == 0.5
    assert [s["occurrence"] for s in survivors] == [1] and [e["occurrence"] for e in equivalents] == [2]
    page = table.markdown({"system": "x", "seed": 1, "sample": 3, "modules_asked": False, "command": "c", "date": "d",
                           "commit": "e", "timeout_s": 60, "workers": 1}, rows, {}, equivalents, results["mutants"],
                          survivors, {"reference/x/": {"command": "python -m pytest", "why": "not simulated"}})
    assert "reference/x/a.py:1 core/ReplaceComparisonOperator_Lt_LtE #1 (not reached)" in page
    assert "- reference/x/: `python -m pytest`: not simulated" in page


def test_a_survivor_killed_since_its_run_stays_a_survivor_and_says_what_kills_it() -> None:
    results = {"candidates": {"reference/x/a.py": 9}, "mutants": [mutant("survived", occurrence=1)]}
    rows, survivors, _ = table.tabulate(results, [])
    since = [{"module": "reference/x/a.py", "diff": "- if n < limit:\n+ if n <= limit:", "by": "I99 (T9)"}]
    page = table.markdown({"system": "x", "seed": 1, "sample": 3, "modules_asked": False, "command": "c", "date": "d",
                           "commit": "e", "timeout_s": 60, "workers": 1}, rows, {}, [], results["mutants"],
                          survivors, {}, since)
    assert rows[0].survived == 1 and "**killed since** by I99 (T9)" in page
    assert "| 0% (100% with 1 killed since) |" in page  # the score stays the run's; beside it, what a rejudge counts


def test_a_killed_since_entry_may_name_one_copy_of_a_repeated_line_by_its_occurrence() -> None:
    """A line a module has twice makes the same diff twice: an entry by operator and occurrence names one copy."""
    twins = [mutant("survived", occurrence=1), mutant("survived", occurrence=2)]
    since = [{"module": "reference/x/a.py", "operator": "core/ReplaceComparisonOperator_Lt_LtE", "occurrence": 2,
              "by": "T9"}]
    assert [table.killed_since(m, since) for m in twins] == [None, "T9"]


def test_mutants_trusted_to_their_triage_are_equivalents_left_out_of_the_timing() -> None:
    """--trust-triage: a mutant mutation.yaml records as equivalent is recorded without a run (0 s); the timing line
    counts only the mutants judged, and says how many were not."""
    judged = [mutant("killed", occurrence=1) | {"seconds": 20.0}, mutant("survived", occurrence=2) | {"seconds": 40.0}]
    trusted = [mutant("survived", occurrence=3) | {"seconds": 0.0, "trusted": True}]
    line = " ".join(table.timing({"exec_seconds": 60.0, "workers": 1}, judged + trusted))
    assert "2 mutants in 60 s" in line and "median 40 s per survivor" in line
    assert "1 more, triaged equivalent in mutation.yaml, were not judged again (--trust-triage)" in line


def test_a_module_an_earlier_session_judged_more_of_takes_its_figures_named_by_its_commit() -> None:
    """A stopped session leaves modules pending: an earlier session that judged more of them lends its figures, and
    the page says which commit each row comes from (on a tie the newer session's)."""
    def session(commit: str, outcomes: dict[str, list[str]]) -> dict:
        meta = {"system": "x", "seed": 1, "sample": 3, "modules_asked": True, "command": f"run {commit}",
                "date": "d", "commit": commit, "timeout_s": 60, "workers": 1}
        return {"meta": meta, "candidates": {m: 9 for m in outcomes},
                "mutants": [mutant(o, module=m, occurrence=k) for m, os in outcomes.items() for k, o in enumerate(os)]}
    new = session("new", {"reference/x/a.py": ["killed", "survived"], "reference/x/b.py": ["killed", "pending"],
                          "reference/x/c.py": ["pending"]})
    old = session("old", {"reference/x/a.py": ["survived", "survived"], "reference/x/b.py": ["killed", "survived"]})
    results, source = table.combine(new, [old])
    assert {m: s["commit"] for m, s in source.items()} == {
        "reference/x/a.py": "new", "reference/x/b.py": "old", "reference/x/c.py": "new"}
    rows, survivors, _ = table.tabulate(results, [])
    for row in rows:
        row.commit = source[row.module]["commit"]
    b = next(r for r in rows if r.module == "reference/x/b.py")
    assert (b.killed, b.survived, b.pending) == (1, 1, 0)
    page = table.markdown(new["meta"], rows, {}, [], results["mutants"], survivors, {}, [], source)
    assert "| reference/x/b.py | 9 | 2 | 1 | 1 | 0 | 0 | 0 | 50% | `old` |" in page
    assert "- at commit `old` (d), by `run old`: b.py" in page
    assert "reference/x/b.py:1 (at `old`) core/ReplaceComparisonOperator_Lt_LtE #1" in page
    alone = table.markdown(new["meta"], *table.tabulate(new, [])[:1], {}, [], new["mutants"], [], {})
    assert " at |" not in alone and "earlier sessions" not in alone  # one session's page keeps its shape
