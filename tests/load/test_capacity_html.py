"""capacity.html built from the FIXTURE load.json files and opened in headless Chromium (Debian's `chromium`
+ `chromium-driver` driven by Selenium, as tests/reports/test_report_html.py does): its tables and plots
render, nothing is fetched, the console has no errors; capacity.json gains a `model` section and keeps
what the load runner wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from systems.copilot.capacity_report import write_capacity

FIXTURES = Path(__file__).parent / "fixtures"
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("capacity")
    for run in ("1x", "5x", "5x-broker-outage"):
        shutil.copytree(FIXTURES / run, out / run)
    # What the load runner writes to capacity.json must survive the merge.
    (out / "capacity.json").write_text(json.dumps({"schema": "sortie.capacity/1", "figures": {"x": {"value": 1}}}))
    page = write_capacity(out, extrapolate_duration_s=30.0, duration_s=200.0, multiples=(10, 50))
    return page, json.loads((out / "capacity.json").read_text())


def test_capacity_json_keeps_the_measured_figures_and_adds_the_model(built):
    _, body = built
    assert body["schema"] == "sortie.capacity/1" and body["figures"] == {"x": {"value": 1}}
    model = body["model"]
    assert model["calibrated_on"]["run"] == "1x"
    assert {c["run"] for c in model["comparisons"]} == {"1x", "5x"}  # steady runs only
    for c in model["comparisons"]:
        assert any(f["figure"] == "confirm throughput (req/s)" and f["error_pct"] is not None for f in c["figures"])
    assert [r["multiple"] for r in model["extrapolation"][0]["predictions"]] == [10, 50]
    assert model["saturation"]["model"]["multiple"] > 0
    assert "confirm p99" in model["summary"] and "bottleneck" in model["summary"]
    assert model["assumptions"] and model["trust"]


def test_capacity_html_renders_in_chromium(built, browser):
    page, body = built
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org", "")
    browser.get_log("browser")
    browser.get(page.resolve().as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0, \
        "the page fetched something"

    slo = browser.find_element(By.CSS_SELECTOR, "table#slo")
    assert slo.is_displayed() and slo.size["height"] > 40
    verdicts = [td.text for td in slo.find_elements(By.CSS_SELECTOR, "td.held, td.failed")]
    assert verdicts and set(verdicts) <= {"held", "failed"}

    mvm = browser.find_element(By.CSS_SELECTOR, "section#model-vs-measured")
    rows = mvm.find_elements(By.CSS_SELECTOR, "table tr")
    assert len(rows) > 6
    assert any("%" in td.text for td in mvm.find_elements(By.CSS_SELECTOR, "td"))

    for cls in ("latency", "throughput", "backlog", "cpu", "rss", "model-vs-measured", "extrapolation"):
        figs = browser.find_elements(By.CSS_SELECTOR, f"figure.plot.{cls}")
        assert figs, f"no {cls} plot"
        svg = figs[0].find_element(By.CSS_SELECTOR, "svg")
        assert svg.size["width"] > 200 and svg.size["height"] > 80, cls
        assert figs[0].find_elements(By.CSS_SELECTOR, "svg path"), f"{cls} plot drew nothing"

    # The fault window is shaded on the faulted run's plots (matplotlib draws axvspan as a filled path).
    fault_run = browser.find_element(By.CSS_SELECTOR, "section.run#run-5x-broker-outage")
    assert fault_run.find_elements(By.CSS_SELECTOR, "figure.plot.backlog")
    assert "fault: broker-outage" in fault_run.get_attribute("innerHTML")

    for sid in ("summary", "saturation", "extrapolation", "assumptions"):
        section = browser.find_element(By.CSS_SELECTOR, f"section#{sid}")
        assert section.is_displayed() and section.text.strip(), sid
    assert browser.find_elements(By.CSS_SELECTOR, "ul#limits li")
