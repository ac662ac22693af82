"""Incident files: the catalogue is YAML, engineers' incident files run like catalogue scenarios, and a
malformed file is refused with the file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.catalogue import load_catalogue
from scenarios.incident import IncidentError, dump_incident, load_incident, parse_incident
from scenarios.systems import load_system
from sortie.cli import main
from systems.copilot.checkers import INVARIANTS

CATALOGUE = load_catalogue("copilot")

INCIDENTS = Path(__file__).resolve().parents[2] / "systems" / "copilot" / "incidents"
GOOD = """\
id: X1
slug: tiny
title: a tiny incident
workload: {confirms: 4, window_s: 20.0}
faults:
  - {at: 5.0, fault: broker-outage, duration: 20.0}
expect:
  - {check: broker-down-after-commit}
"""


def test_every_catalogue_id_of_design_section_5_is_a_file() -> None:
    want = {f"C{i}" for i in range(1, 6)} | {f"R{i}" for i in range(1, 6)} | {f"T{i}" for i in range(1, 5)} \
        | {f"B{i}" for i in range(1, 11)} | {f"S{i}" for i in range(1, 8)}
    assert want <= set(CATALOGUE), sorted(want - set(CATALOGUE))
    for s in CATALOGUE.values():
        assert Path(s.source).parent == load_system("copilot").catalogue_dir and s.shells
        for shell in ("sim", "native"):
            assert shell in s.shells or s.why_not.get(shell), f"{s.id} says nothing about {shell}"


def test_a_good_file_loads_with_defaults() -> None:
    s = parse_incident(GOOD, "x.yaml")
    assert (s.id, s.slug, s.shells, s.invariants) == ("X1", "tiny", ("sim", "native"), INVARIANTS.ids)
    assert s.policy == {}
    assert s.faults[0].fault == "broker-outage" and s.faults[0].duration == 20.0
    assert s.heal_time() == 25.0


def test_every_catalogue_scenario_survives_a_dump_and_a_parse() -> None:
    """What `sortie explore` writes of a scenario reads back as the same scenario (the stack-only knobs too)."""
    for s in CATALOGUE.values():
        back = parse_incident(dump_incident(s, {"invariant": "I1"}), f"{s.id}.yaml")  # found_by: no expectation needed
        assert back.faults == s.faults and back.workload == s.workload, s.id
    r4 = CATALOGUE["R4"].workload
    assert (r4.flight_median_s, r4.stack_flight_median_s, r4.stack_cancel_delay_s) == (300.0, 40.0, 8.0)
    assert "stack_" not in dump_incident(CATALOGUE["C1"], {"invariant": "I1"})  # unset knobs are left out


@pytest.mark.parametrize(("text", "line", "field", "fragment"), [
    (GOOD.replace("at: 5.0", "at: soon"), 6, "faults[0].at", "valid number"),
    (GOOD.replace("window_s: 20.0", "window_s: 20.0, colour: red"), 4, "workload.colour", "Extra inputs"),
    (GOOD.replace("broker-outage", "meteor-strike"), 6, "faults[0].fault", "no sim form"),
    (GOOD.replace("broker-down-after-commit", "nope"), 8, "expect[0].check", "unknown check"),
    (GOOD.replace("slug: tiny", "slug: Tiny Slug"), 2, "slug", "pattern"),
    (GOOD.replace("id: X1\n", ""), None, "id", "Field required"),
    (GOOD.replace("at: 5.0", "at: -1"), 6, "faults[0].at", "greater than or equal"),
    (GOOD.replace("window_s: 20.0", "window_s: 20.0, stack_cancel_delay_s: 0"), 4, "workload",
     "stack_cancel_delay_s: a duration, greater than 0"),
    (GOOD.replace("faults:", "flight_median_s: 60.0\nfaults:"), 5, "flight_median_s", "Extra inputs"),
    (GOOD.replace("faults:", "policy: {outbox_retries: 3}\nfaults:"), 5, "policy", "unknown policy field"),
    (GOOD.replace("faults:", "policy: {report_retry: {attempts: 2, tries: 9}}\nfaults:"), 5, "policy",
     "policy.report_retry"),
    (GOOD.replace("window_s: 20.0", "window_s: 20.0, operators: 1, bad_requests: [foreign-task]"), 4, "workload",
     "foreign-task needs two operators"),
])
def test_a_malformed_file_names_line_and_field(text: str, line: int | None, field: str, fragment: str) -> None:
    with pytest.raises(IncidentError) as info:
        parse_incident(text, "incident.yaml")
    err = info.value
    assert err.field == field and fragment in err.message
    if line is not None:
        assert err.line == line
    assert str(err).startswith("incident.yaml:")
    assert err.as_json()["code"] == "INVALID_INCIDENT_FILE"


def test_not_yaml_or_not_a_mapping_is_refused_with_a_line() -> None:
    with pytest.raises(IncidentError) as info:
        parse_incident("id: [unclosed\n", "bad.yaml")
    assert info.value.line is not None and "not valid YAML" in info.value.message
    with pytest.raises(IncidentError, match="is a mapping"):
        parse_incident("- just\n- a list\n", "list.yaml")


def test_a_native_only_fault_refuses_the_sim_shell() -> None:
    text = GOOD.replace("broker-outage, duration: 20.0", "audit-tamper, duration: 20.0")
    with pytest.raises(IncidentError, match="audit-tamper.*no sim form"):
        parse_incident(text, "x.yaml")
    assert parse_incident(text.replace("title:", "shells: [native]\ntitle:"), "x.yaml").shells == ("native",)


def test_fault_params_a_shell_refuses_are_refused_with_their_line() -> None:
    text = GOOD.replace("{at: 5.0, fault: broker-outage, duration: 20.0}",
                        "{at: 5.0, fault: stop-service, duration: 20.0,\n     params: {service: redis}}")
    with pytest.raises(IncidentError, match=r"x.yaml:7: faults\[0\].params: stop-service: the simulation models"):
        parse_incident(text, "x.yaml")
    assert parse_incident(text.replace("title:", "shells: [native]\ntitle:"), "x.yaml").shells == ("native",)


@pytest.mark.sim
@pytest.mark.parametrize("path", sorted(INCIDENTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_example_incidents_run_in_simulation(path: Path, tmp_path: Path) -> None:
    load_incident(path)
    result = CliRunner().invoke(main, ["simulate", str(path), "--seed", "3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "summary.json").exists()


def test_the_cli_reports_a_malformed_file_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("at: 5.0", "at: soon"))
    result = CliRunner().invoke(main, ["simulate", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2  # an input error (sortie.exits)
    assert f"{bad}:6: faults[0].at" in result.output and "Traceback" not in result.output
