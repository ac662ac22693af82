"""report.html built from a run directory: content, `sortie report DIR`, task-state files, downsampling."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from harness.history import History
from reports.html import DOWNSAMPLE_ABOVE, analyse, build_report, render_report
from reports.states import read_task_states
from sortie.cli import main


def _copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "summary.json", dst / "summary.json")
    shutil.copytree(src / "histories", dst / "histories")
    shutil.copytree(src / "states", dst / "states")
    return dst


def test_report_has_every_scenario_its_charts_and_fault_shading(sim_run, tmp_path):
    out, results = sim_run
    page = build_report(_copy_run(out, tmp_path / "run")).read_text()
    assert '<table id="scenarios">' in page
    for r in results:
        assert f'<tr data-scenario="{r.id}">' in page
        assert f'id="scenario-{r.id}"' in page
        assert f'<table class="invariants" id="invariants-{r.id}">' in page
        for cls, kind in (("timeline", "timeline"), ("plot latency", "latency"), ("plot throughput", "throughput")):
            fig = re.search(rf'<figure class="{cls}" id="{kind}-{r.id}"[^>]*>(.*?)</figure>', page, re.S)
            assert fig and "<svg" in fig.group(1), f"{kind} chart of {r.id} missing"
    # R1's platform fault is a window in its history: every chart of R1 shades it, and the table lists it.
    r1 = next(r for r in results if r.id == "R1")
    windows = r1.history.fault_windows()
    assert windows, "R1 is expected to record a fault window"
    for i, _ in enumerate(windows):
        for kind in ("timeline", "tasks", "latency", "throughput"):
            assert f'id="fault-R1-{kind}-{i}"' in page
    faults = re.search(r'<table class="fault-windows" id="faults-R1">.*?</table>', page, re.S)
    assert faults and "<td>platform</td>" in faults.group(0)
    # C4 has no fault window: nothing shaded, and the page says so.
    assert 'id="fault-C4-' not in page
    assert '<p class="fault-windows" id="faults-C4">No fault window' in page
    # unchecked invariants come with their reason
    unchecked = [(v.invariant, v.note) for v in r1.verdicts if v.status == "unchecked"]
    for inv, note in unchecked:
        assert re.search(rf"<b>{inv}</b> unchecked in [^<]*R1[^<]*: ", page)
        assert html.escape(note.split("(")[0].strip(), quote=True) in page  # as the page escapes text


def test_the_page_does_not_depend_on_how_many_processes_draw_it(sim_run, tmp_path):
    out, _ = sim_run
    run = _copy_run(out, tmp_path / "run")
    assert render_report(run, jobs=2) == render_report(run, jobs=1)


def test_report_is_self_contained(sim_run, tmp_path):
    out, _ = sim_run
    page = build_report(_copy_run(out, tmp_path / "run")).read_text()
    assert "<script" not in page and "<link" not in page and "<iframe" not in page
    assert not re.search(r'\b(src|href|xlink:href)="(https?:)?//', page), "an external reference"
    assert "url(http" not in page and "@import" not in page
    assert "default-src 'none'" in page  # the browser refuses any load the page might attempt


def test_report_command_rebuilds_from_stored_files(sim_run, tmp_path):
    out, _ = sim_run
    run = _copy_run(out, tmp_path / "run")
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    path = run / "report.html"
    assert result.output.strip().splitlines()[-1] == str(path)
    first = path.read_bytes()
    assert b'<table id="scenarios">' in first
    # the same files give the same page, byte for byte
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    assert path.read_bytes() == first
    # it is built from the stored history: without R1's history the page says so and draws no R1 chart
    (run / "histories" / "R1.jsonl").unlink()
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    page = path.read_text()
    assert "No stored history (histories/R1.jsonl)" in page
    assert 'id="timeline-R1"' not in page and 'id="timeline-C4"' in page


def test_report_command_fails_clearly_without_a_summary(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2  # an input error (sortie.exits)
    assert "has no summary.json" in result.output
    assert not (tmp_path / "report.html").exists()
    missing = CliRunner().invoke(main, ["report", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "has no summary.json" in missing.output


def test_a_violation_is_shown_with_its_task_and_operations(sim_run, tmp_path):
    out, results = sim_run
    run = _copy_run(out, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    r1 = next(s for s in summary["scenarios"] if s["id"] == "R1")
    history = History.read_jsonl(run / "histories" / "R1.jsonl")
    task = next(op.value["task_id"] for op in history.ops if op.f == "create_flight")
    ops = [op.index for op in history.ops if op.value.get("task_id") == task and op.f == "create_flight"][:2]
    i1 = next(v for v in r1["verdicts"] if v["invariant"] == "I1")
    i1.update(status="violated", violation_count=1,
              violations=[{"task_id": task, "message": "2 platform flights", "ops": ops}])
    r1["passed"] = summary["passed"] = False
    (run / "summary.json").write_text(json.dumps(summary))
    page = build_report(run).read_text()
    row = re.search(r'<tr data-scenario="R1">.*?</tr>', page, re.S).group(0)
    assert '<td class="fail">FAIL</td>' in row and '<td class="violated">violated (1)</td>' in row
    inv = re.search(r'<tr data-invariant="I1">.*?</tr>', page[page.index('id="invariants-R1"'):], re.S).group(0)
    assert task in inv and "2 platform flights" in inv
    assert f"ops {', '.join(map(str, ops))}" in inv
    for i in ops:  # the offending operations themselves are printed
        assert f"&quot;index&quot;: {i}," in inv
    assert '<p id="verdict" class="fail">' in page


def test_task_states_are_on_the_history_clock(sim_run):
    out, results = sim_run
    for r in results:
        states = read_task_states(out, r.id)
        assert states is not None and states["transitions"]
        assert {t["task_id"] for t in states["transitions"]} == {t["id"] for t in r.state.tasks}
        end = r.state.end_time
        assert all(0 <= t["at"] <= end for t in states["transitions"])
        # a task is created inside the confirm call that returned it
        created = {t["task_id"]: t["at"] for t in states["transitions"] if t["to"] == "CREATED"}
        invokes: dict[str, float] = {}
        for op in r.history.ops:
            if op.f == "confirm" and op.type == "invoke":
                invokes[op.process] = op.time
            elif op.f == "confirm" and op.type == "ok" and op.value.get("task_id") in created:
                tid = op.value["task_id"]
                if not op.value.get("replayed"):
                    assert invokes[op.process] - 1e-6 <= created[tid] <= op.time + 1e-6, tid


def test_pairs_invocations_with_their_answers():
    h = History()
    h.add(0.0, "user-1", "invoke", "confirm")
    h.add(0.5, "worker", "info", "deliver", {"task_id": "t"})
    h.add(1.0, "user-2", "invoke", "confirm")
    h.add(1.5, "user-1", "ok", "confirm")
    h.add(3.0, "user-2", "info", "confirm")
    h.add(4.0, "user-3", "invoke", "draft")
    h.fault_start(0.2, "db")
    h.fault_stop(2.0, "db")
    a = analyse(h)
    assert [(p.process, p.outcome, p.latency) for p in a.pairs] == [("user-1", "ok", 1.5), ("user-2", "info", 2.0)]
    assert [o.f for o in a.events] == ["deliver"]
    assert [o.process for o in a.open_invokes] == ["user-3"]
    assert [(w.fault, w.start, w.end) for w in a.windows] == [("db", 0.2, 2.0)]


def test_a_long_history_is_downsampled_to_a_sane_size(tmp_path):
    n = DOWNSAMPLE_ABOVE + 20_000
    h = History()
    h.fault_start(100.0, "broker", duration=50)
    for i in range(n // 2):
        t = i * 0.05
        proc = f"user-{i % 40}"
        h.add(t, proc, "invoke", "confirm", {"task_id": f"t{i}"})
        h.add(t + 0.01 + (i % 7) * 0.003, proc, "fail" if i % 997 == 0 else "ok", "confirm", {"task_id": f"t{i}"})
    h.fault_stop(150.0, "broker")
    (tmp_path / "histories").mkdir()
    h.write_jsonl(tmp_path / "histories" / "X1.jsonl")
    summary = {"shell": "sim", "seed": 1, "passed": True, "scenarios": [
        {"id": "X1", "slug": "synthetic", "title": "a long synthetic history", "passed": True, "exercised": True,
         "verdicts": [], "history_digest": h.digest(), "operations": len(h.ops)}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    page = build_report(tmp_path).read_text()
    assert len(page) < 1_500_000, len(page)
    assert "downsampled" in page
    assert 'id="fault-X1-latency-0"' in page and 'id="fault-X1-throughput-0"' in page
    assert "does not match the digest" not in page


def test_a_baseline_is_compared_scenario_by_scenario_and_a_new_failure_is_a_regression(sim_run, tmp_path):
    out, _ = sim_run
    old = _copy_run(out, tmp_path / "old")
    now = _copy_run(out, tmp_path / "now")
    summary = json.loads((now / "summary.json").read_text())
    r1 = next(s for s in summary["scenarios"] if s["id"] == "R1")
    r1["passed"], r1["outcome"], r1["invariants"]["I1"] = False, "violated", "violated"
    summary["passed"] = False
    (now / "summary.json").write_text(json.dumps(summary))
    page = build_report(now, baseline=old).read_text()
    section = page[page.index('<section id="baseline">'):]
    section = section[:section.index("</section>")]
    rows = re.findall(r"<tr><td>(\w+)</td>.*?</tr>", section, re.S)
    assert sorted(rows) == sorted(s["id"] for s in summary["scenarios"])
    r1_row = re.search(r"<tr><td>R1</td>.*?</tr>", section, re.S).group(0)
    assert "I1 held→violated" in r1_row and '<td class="fail">regressed</td>' in r1_row
    assert section.count("regressed</td>") == 1 and "<svg" in section  # only R1; the wall-time plot
    runner = CliRunner()
    assert runner.invoke(main, ["report", str(now), "--baseline", str(old), "--jobs", "1"]).exit_code == 3
    assert runner.invoke(main, ["report", str(old), "--baseline", str(old), "--jobs", "1"]).exit_code == 0
    assert runner.invoke(main, ["report", str(old), "--baseline", str(tmp_path), "--jobs", "1"]).exit_code == 2
