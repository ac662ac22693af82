"""report.html opened in headless Chromium (Debian's `chromium` + `chromium-driver`, driven by Selenium with
no browser download): the scenario table, a timeline and the plots render and paint, nothing is fetched,
and the console stays free of errors."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image  # matplotlib's dependency (Pillow)
from selenium import webdriver
from selenium.webdriver.common.by import By

from reports.html import OUTCOME_COLOURS, build_report


def _open(driver: webdriver.Chrome, path: Path) -> list[dict]:  # type: ignore[type-arg]
    """Load a page and return what its console logged at error level."""
    driver.get_log("browser")  # drop anything left from an earlier page
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _painted(element, colour: str) -> int:  # type: ignore[no-untyped-def]
    """Pixels of the element's screenshot in ``colour`` (a chart that laid out but drew nothing has none)."""
    pixels = np.asarray(Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB"), dtype=int)
    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - want).max(axis=-1) <= 12).sum())


def test_report_renders_in_chromium_without_console_errors(sim_run, browser, tmp_path):
    out, results = sim_run
    page = build_report(out)
    errors = _open(browser, page)
    assert errors == [], errors
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0, \
        "the page fetched something"

    table = browser.find_element(By.CSS_SELECTOR, "table#scenarios")
    assert table.is_displayed() and table.size["height"] > 40
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.get_attribute("data-scenario") for r in rows] == [r.id for r in results]
    assert all(r.find_elements(By.CSS_SELECTOR, "td")[3].text in ("PASS", "FAIL") for r in rows)

    green = OUTCOME_COLOURS["ok"]
    for r in results:
        for selector in (f"figure.timeline#timeline-{r.id}", f"figure.plot.latency#latency-{r.id}",
                         f"figure.plot.throughput#throughput-{r.id}"):
            figure = browser.find_element(By.CSS_SELECTOR, selector)
            svg = figure.find_element(By.CSS_SELECTOR, "svg")
            assert svg.size["width"] > 300 and svg.size["height"] > 150, (selector, svg.size)
            drawn = browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('path'))"
                ".filter(p => { const b = p.getBBox(); return b.width > 0 || b.height > 0; }).length", svg)
            assert drawn > 20, (selector, drawn)
        # completed operations are drawn as green bars / points: the browser really painted them
        assert _painted(browser.find_element(By.CSS_SELECTOR, f"#timeline-{r.id} svg"), green) > 200
        assert _painted(browser.find_element(By.CSS_SELECTOR, f"#latency-{r.id} svg"), green) > 20

    # R1's fault window is drawn on its charts (an SVG element with a rendered box)
    shaded = browser.find_element(By.CSS_SELECTOR, "#timeline-R1 svg g#fault-R1-timeline-0 path")
    assert browser.execute_script("const b = arguments[0].getBBox(); return b.height", shaded) > 50


def test_the_console_check_catches_errors(sim_run, browser, tmp_path):
    """The checks above can fail: an external load in the report is refused and logged, and a script error
    on a page is seen."""
    out, _ = sim_run
    tampered = tmp_path / "tampered.html"
    tampered.write_text(build_report(out).read_text().replace(
        "<body>", '<body><img src="https://example.invalid/logo.png" alt="">', 1))
    errors = _open(browser, tampered)
    assert any("example.invalid" in e["message"] for e in errors), errors

    scripted = tmp_path / "scripted.html"
    scripted.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom')</script></body></html>")
    errors = _open(browser, scripted)
    assert any("boom" in e["message"] for e in errors), errors
