"""An incident file with several mistakes is refused once, naming every one with its line and field (and, for a
misspelt key, the field it probably means): one edit-and-rerun round, not one per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.incident import IncidentError, load_incidents, parse_incident
from sortie.cli import main

# Five mistakes: no slug, `kind:` for `fault:`, a negative `at`, a duration that is no number, no workload.confirms.
FIVE_MISTAKES = """\
id: X9
title: five mistakes in one file
workload:
  window_s: 20.0
faults:
  - at: -3
    kind: broker-outage
    duration: abc
expect:
  - {check: broker-down-after-commit}
"""
NAMED = [
    (1, "slug", "Field required"),
    (3, "workload.confirms", "Field required"),
    (6, "faults[0].at", "greater than or equal to 0"),
    (7, "faults[0].kind", "did you mean 'fault'?"),
    (8, "faults[0].duration", "valid number"),
]


def test_one_run_of_simulate_names_all_five_mistakes_with_their_lines(tmp_path: Path) -> None:
    incident = tmp_path / "that.yaml"
    incident.write_text(FIVE_MISTAKES)
    result = CliRunner().invoke(main, ["simulate", str(incident), "--out", str(tmp_path / "out"), "--no-report"])
    assert result.exit_code == 2, result.output
    reported = [line for line in result.output.splitlines() if f"{incident}:" in line]
    assert len(reported) == len(NAMED), result.output
    for (line, field, says), text in zip(NAMED, reported, strict=True):
        assert text.split(f"{incident}:", 1)[1].startswith(f"{line}: {field}: ") and says in text, result.output
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_the_error_lists_every_problem_and_keeps_the_first_as_its_own() -> None:
    with pytest.raises(IncidentError) as info:
        parse_incident(FIVE_MISTAKES, "x.yaml")
    err = info.value
    assert [(p.line, p.field) for p in err.problems] == [(line, field) for line, field, _ in NAMED]
    assert (err.line, err.field) == (1, "slug")
    assert [e["field"] for e in err.as_json()["errors"]] == [field for _, field, _ in NAMED]
    assert str(err).count("\n") == len(NAMED) - 1


def test_a_key_close_to_a_field_is_suggested_even_when_nothing_is_missing() -> None:
    text = FIVE_MISTAKES.replace("id: X9", "id: X9\nslug: five").replace("  window_s: 20.0", "  confirms: 2\n"
                                                                           "  window_s: 20.0\n  windw_s: 3")
    text = text.replace("at: -3", "at: 3").replace("kind:", "fault:").replace("abc", "5")
    with pytest.raises(IncidentError) as info:
        parse_incident(text, "x.yaml")
    assert [(p.field, p.message.split("; ")[-1]) for p in info.value.problems] == \
        [("workload.windw_s", "did you mean 'window_s'?")]


def test_several_files_are_refused_together(tmp_path: Path) -> None:
    paths = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path in paths:
        path.write_text(FIVE_MISTAKES)
    with pytest.raises(IncidentError) as info:
        load_incidents(paths)
    assert [p.source for p in info.value.problems] == [str(paths[0])] * 5 + [str(paths[1])] * 5


def test_simulate_refuses_two_bad_files_in_one_run(tmp_path: Path) -> None:
    paths = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path in paths:
        path.write_text(FIVE_MISTAKES)
    result = CliRunner().invoke(main, ["simulate", *map(str, paths), "--out", str(tmp_path / "out"), "--no-report"])
    assert result.exit_code == 2, result.output
    assert [sum(line.count(f"{path}:") for line in result.output.splitlines()) for path in paths] == [5, 5]
