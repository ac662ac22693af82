"""`sortie load --system jobs` (systems.jobs.load, systems.jobs.locustfile): its profiles, its figures from a
series and the clients' log, and a short run on the real stack with a database outage under load."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadtests.run import LoadOptions
from systems.jobs.checkers import INVARIANTS
from systems.jobs.load import answered, completion_from_spans, load_profile, recovery, run_load, series, slo_rows


def test_5x_scales_the_rates_and_the_users_and_widens_the_dag() -> None:
    one, five = load_profile("1x"), load_profile("5x")
    assert five.multiple == 5.0 and five.dag_width == 8 and one.dag_width == 4
    for field in ("jobs_per_s", "missions_per_s"):
        assert getattr(five, field) == pytest.approx(5 * getattr(one, field))
    assert (five.producers, five.planners) == (5 * one.producers, 5 * one.planners)
    assert (five.work_median_s, five.slo) == (one.work_median_s, one.slo)  # per-job behaviour unchanged
    assert five.offered_jobs_per_s == pytest.approx(five.jobs_per_s + five.missions_per_s * 11)
    assert five.assumptions[: len(one.assumptions)] == one.assumptions and len(five.assumptions) > len(one.assumptions)


def test_a_profile_with_an_unknown_field_or_name_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((Path(load_profile.__globals__["PROFILES_DIR"]) / "1x.yaml").read_text() + "jobs_per_hour: 3\n")
    with pytest.raises(ValueError, match="jobs_per_hour"):
        load_profile(str(bad))
    with pytest.raises(ValueError, match="no job-system profile 'nope'"):
        load_profile("nope")


def test_the_copilots_options_are_a_usage_error_before_anything_starts() -> None:
    result = CliRunner().invoke(_cli(), ["load", "--system", "jobs", "--dispatchers", "3", "--duration", "5s",
                                         "--out", tempfile.mkdtemp()])
    assert result.exit_code == 2 and "--dispatchers" in result.output, result.output
    result = CliRunner().invoke(_cli(), ["load", "--system", "jobs", "--fault", "broker-outage", "--duration", "5s",
                                         "--out", tempfile.mkdtemp()])
    assert result.exit_code == 2 and "db-outage, worker-kill" in result.output, result.output
    result = CliRunner().invoke(_cli(), ["load", "--variant", "seed", "--duration", "5s"])
    assert result.exit_code == 2 and "not a variant of copilot" in result.output, result.output


def _cli():  # type: ignore[no-untyped-def]
    from sortie.cli import main

    return main


def test_throughput_is_done_jobs_over_a_trailing_window_and_recovery_is_read_from_it() -> None:
    # 1 s samples: 10 jobs/s done, nothing done during a fault at 20-30 s (backlog grows by 10/s), then 20/s until
    # the backlog is back at its level.
    rows, done, backlog = [], 0, 5
    for t in range(0, 60):
        if 20 <= t < 30:
            backlog += 10
        elif t >= 30 and backlog > 5:
            done, backlog = done + 20, backlog - 10
        else:
            done += 10
        rows.append({"t": float(t), "done": done, "pending": backlog - 2, "running": 2})
    s = series(rows)
    assert s["done_per_s"][0] is None and s["done_per_s"][15] == pytest.approx(10.0)
    assert s["done_per_s"][29] == pytest.approx(0.0)
    r = recovery(s, {"fault": "db-outage", "start": 20.0, "end": 30.0}, load_end=60.0)
    assert r is not None
    assert r["peak_backlog"] == 105 and r["baseline_backlog_p95"] == 5
    assert r["drain_s"] == pytest.approx(9.0)  # 100 extra jobs at 10/s net: the 39 s sample is back at 5
    assert r["pre_fault_done_per_s"] == pytest.approx(10.0) and r["lowest_done_per_s_in_fault"] == pytest.approx(0.0)
    assert r["recover_s"] is not None and 0 < r["recover_s"] <= 4.0  # the 5 s window reaches 9.5/s within 4 s
    assert recovery(s, None, 60.0) is None


def test_recovery_is_measured_against_the_offered_rate_when_the_pre_fault_median_was_above_it() -> None:
    # Before the fault a backlog is worked off at 16 jobs/s while 9.5/s arrive; after it, once its own backlog is
    # gone, nothing completes faster than 9.5/s. Against the pre-fault median alone it would never recover.
    rows, done, backlog = [], 0, 200
    for t in range(0, 60):
        if t < 20:
            step = 16 if backlog > 0 else 9
            backlog -= step - 9
        elif t < 30:
            step, backlog = 0, backlog + 9
        elif backlog > 0:
            step, backlog = 14, backlog - 5
        else:
            step = 9 + (t % 2)  # 9.5/s on average
        done += step
        rows.append({"t": float(t), "done": done, "pending": max(backlog, 0), "running": 0})
    s = series(rows)
    fault = {"fault": "db-outage", "start": 20.0, "end": 30.0}
    alone = recovery(s, fault, load_end=60.0, steady_from=10.0)
    capped = recovery(s, fault, load_end=60.0, steady_from=10.0, offered=9.5)
    assert alone is not None and capped is not None
    assert alone["pre_fault_done_per_s"] == pytest.approx(16.0) and alone["recovery_target_done_per_s"] == 16.0
    assert alone["recover_s"] is None  # 14/s while draining, 9.5/s after: never within 5% of 16/s
    assert capped["recovery_target_done_per_s"] == 9.5
    assert capped["recover_s"] is not None and 0 < capped["recover_s"] <= 5.0  # the drain at 14/s reaches 9.0/s


def test_what_the_clients_were_told_names_every_job_of_a_mission_by_the_simulations_key() -> None:
    ops = [{"t": 1, "process": "p1", "type": "invoke", "f": "enqueue", "value": {"key": "k1", "try": 0}},
           {"t": 2, "process": "p1", "type": "ok", "f": "enqueue", "value": {"key": "k1", "job_id": 7}},
           {"t": 2, "process": "p2", "type": "invoke", "f": "enqueue", "value": {"key": "k2", "try": 0}},
           {"t": 3, "process": "p2", "type": "fail", "f": "enqueue", "value": {"key": "k2", "status": 503}},
           {"t": 3, "process": "p3", "type": "invoke", "f": "create-mission", "value": {"key": "m1", "try": 0}},
           {"t": 4, "process": "p3", "type": "ok", "f": "create-mission",
            "value": {"key": "m1", "jobs": {"survey": 8, "report": 9}}},
           {"t": 6, "process": "p2", "type": "fail", "f": "enqueue", "value": {"key": "k2", "gave_up": True}}]
    assert answered(ops) == [{"key": "k1", "job_id": 7}, {"key": "m1:survey", "job_id": 8},
                             {"key": "m1:report", "job_id": 9}]
    # Still retried by its client, the work waits outside the table: the backlog counts it until an answer.
    s = series([{"t": float(t), "pending": 1} for t in range(8)], ops)
    assert s["client_waiting"] == [0, 1, 1, 2, 1, 1, 0, 0] and s["backlog"] == [1, 2, 2, 3, 2, 2, 1, 1]


def test_completion_is_judged_outside_fault_windows_and_reported_with_them() -> None:
    t0 = 1_000.0
    window = {"fault": "db-outage", "start": 20.0, "end": 30.0}
    spans = {"mission_done_s": [(t0 + 5, t0 + 7),  # before the outage
                                (t0 + 18, t0 + 33),  # in flight across it: 15 s
                                (t0 + 33, t0 + 35),  # starts inside end + grace (30 + 10): the fault's
                                (t0 + 41, t0 + 44)],  # after the grace
             "job_done_s": [(t0 + 25, t0 + 26)]}
    c = completion_from_spans(spans, t0, [window], grace_s=10.0)
    assert (c["mission_done_s"]["n"], c["mission_done_s"]["max"]) == (4, 15.0)
    assert (c["mission_done_s_outside_faults"]["n"], c["mission_done_s_outside_faults"]["max"]) == (2, 3.0)
    assert c["job_done_s_outside_faults"]["n"] == 0
    never_closed = completion_from_spans(spans, t0, [{**window, "end": None}], grace_s=10.0)
    assert never_closed["mission_done_s_outside_faults"]["n"] == 1
    profile = load_profile("1x")
    endpoints = {"POST /v1/jobs": {"p99_ms": 10.0, "requests": 100}}
    rows = {r["name"]: r for r in slo_rows(profile, endpoints, c, {"error_rate_excluding_faults": 0.0}, {},
                                           faults=True)}
    assert rows["mission_done_p99_s"]["n"] == 2 and rows["mission_done_p99_s"]["held"]
    assert rows["mission_done_p99_s"]["target"].endswith("(outside faults)")
    calm = {r["name"]: r for r in slo_rows(profile, endpoints, c, {"error_rate_excluding_faults": 0.0}, {})}
    assert calm["mission_done_p99_s"]["n"] == 4 and not calm["mission_done_p99_s"]["held"]  # 15 s > 8 s


@pytest.mark.stack
@pytest.mark.whole_stack
@pytest.mark.nightly  # scripts/load.sh runs the same load (1x, a database outage) in CI
def test_a_short_load_with_a_database_outage_loses_and_duplicates_nothing_and_reports_its_recovery() -> None:
    from stack.postgres import find_pg_bin

    if importlib.util.find_spec("locust") is None:
        pytest.skip("locust is not installed")  # only looked for: importing it would monkey-patch this process
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (scripts/system-deps.sh installs them)")
    with tempfile.TemporaryDirectory(prefix="sortie-jobs-load-") as tmp:
        out = Path(tmp)
        code = run_load(LoadOptions(out=out, profile="1x", duration_s=40.0, seed=3, fault="db-outage",
                                    fault_window="6s", fault_at_s=15.0))
        load = json.loads((out / "load.json").read_text())
        assert load["missing"] == [], load["missing"]
        assert code == (0 if all(r["held"] for r in load["slo"]) else 3), load["slo"]  # 3: an SLO missed
        assert set(load["invariants"]) == set(INVARIANTS)
        assert "violated" not in load["invariants"].values(), load["violations"]
        assert load["duplicate_effects"] == 0 and set(load["counts"]) <= {"jobs", "done", "dead"}
        enqueue = load["endpoints"]["POST /v1/jobs"]
        assert enqueue["requests"] > 100 and enqueue["p99_ms"] is not None
        # The outage was felt (refused requests, retried with their keys) and counted as the fault's, not as errors.
        assert load["errors"]["failed"] > 0 and load["errors"]["by_code"]["DATABASE_UNAVAILABLE"]["in_fault_window"] > 0
        assert load["errors"]["error_rate_excluding_faults"] < 0.01, load["errors"]
        rec = load["recovery"]
        assert rec["peak_backlog"] > rec["baseline_backlog_p95"] and rec["drain_s"] is not None, rec
        assert rec["pre_fault_done_per_s"] > 0 and rec["recover_s"] is not None, rec
        reqs = [json.loads(line) for p in (out / "client").glob("*.jsonl") for line in p.read_text().splitlines()
                if '"k":"req"' in line]
        # From the intended send, never shorter than from the actual one (the first try of each arrival).
        assert all(r["corrected_ms"] >= r["ms"] - 5.0 for r in reqs), [r for r in reqs if r["corrected_ms"] < r["ms"]]
        assert (out / "load.html").read_text().count("<svg") >= 4
        # Missions in flight across the outage are reported, and left out of the SLO's figure.
        completion = load["completion"]
        assert completion["mission_done_s_outside_faults"]["n"] < completion["mission_done_s"]["n"], completion
        assert "outside faults" in next(r for r in load["slo"] if r["name"] == "mission_done_p99_s")["target"]
        assert "Completion, seconds" in (out / "load.html").read_text()
