"""loadtests.latency: raw and corrected latency in HDR histograms, per interval, merged across client processes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests import latency


def _records(samples: list[tuple[str, float, float, float]], processes: int) -> list[dict]:
    """The samples spread round-robin over ``processes`` recorders, as their client logs would hold them."""
    recorders = [latency.Recorder() for _ in range(processes)]
    for i, (name, raw, corrected, t) in enumerate(samples):
        recorders[i % processes].record(name, raw, corrected, t)
    return [rec for r in recorders for rec in r.closed()]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=0.05, max_value=5000.0), min_size=1, max_size=300), st.integers(1, 4))
def test_histograms_of_several_processes_merge_into_the_histogram_of_every_sample(values: list[float],
                                                                                   processes: int) -> None:
    samples = [("GET /x", v, v, 1000.0 + i) for i, v in enumerate(values)]
    total, _ = latency.merge(_records(samples, processes))
    h = total["GET /x"]["raw"]
    assert h.get_total_count() == len(values)
    ordered = sorted(values)
    for q in (50, 95, 99):
        exact = ordered[max(1, int(q / 100.0 * len(values) + 0.5)) - 1]  # the histogram's rank: n*q rounded
        got = latency.quantile_ms(h, q)
        assert got is not None
        # three significant figures (and the 1 us floor): the histogram's own resolution
        assert abs(got - exact) <= max(0.002, 0.002 * exact), (q, got, exact)


def test_the_corrected_latency_counts_the_wait_before_the_send_and_never_less_than_the_raw_one() -> None:
    rec = latency.Recorder()
    rec.record("POST /c", raw_ms=20.0, corrected_ms=1520.0, t=100.0)  # waited 1.5 s for a connection
    rec.record("POST /c", raw_ms=30.0, corrected_ms=25.0, t=101.0)  # a clock step: never below raw
    total, _ = latency.merge(rec.closed())
    # values to three significant figures (the histogram reports the top of a value's bucket)
    assert latency.quantile_ms(total["POST /c"]["raw"], 100) == pytest.approx(30.0, rel=1e-3)
    assert latency.quantile_ms(total["POST /c"]["corrected"], 100) == pytest.approx(1520.0, rel=1e-3)
    # the second one, raised to its raw latency
    assert total["POST /c"]["corrected"].get_min_value() == pytest.approx(30000, rel=1e-3)


def test_only_closed_intervals_are_written_and_each_only_once() -> None:
    rec = latency.Recorder(interval_s=10.0)
    rec.record("GET /x", 5.0, 5.0, t=101.0)
    rec.record("GET /x", 6.0, 6.0, t=112.0)
    assert [r["t"] for r in rec.closed(now=111.0)] == [100.0]  # 110-120 is still open
    assert rec.closed(now=111.0) == []
    assert [r["t"] for r in rec.closed()] == [110.0]  # the end of the run closes the rest


def test_figures_give_both_latencies_side_by_side_per_endpoint_and_over_time() -> None:
    rng = random.Random(3)
    samples = []
    for i in range(2000):
        t = 1000.0 + i * 0.02  # 40 s
        raw = rng.uniform(5.0, 15.0)
        stalled = 1010.0 <= t < 1012.0  # a 2 s stall: queued requests waited, the send itself was quick
        samples.append(("GET /t", raw, raw + ((1012.0 - t) * 1000.0 if stalled else 0.0), t))
    fig = latency.figures(_records(samples, 2), mode="open", connections=4)
    e = fig["endpoints"]["GET /t"]
    assert e["raw"]["n"] == e["corrected"]["n"] == 2000
    assert e["raw"]["p99_ms"] < 16.0
    assert e["corrected"]["p99_ms"] > 1500.0  # 5% of the requests waited up to 2 s: the p99 sees it
    lo, hi = e["corrected"]["p99_ci"]
    assert lo <= e["corrected"]["p99_ms"] and (hi is None or e["corrected"]["p99_ms"] <= hi)
    assert fig["endpoints"]["all"]["raw"]["n"] == 2000
    series = fig["series"]
    assert series["t"] == [1000.0, 1010.0, 1020.0, 1030.0]
    per = series["endpoints"]["GET /t"]
    assert sum(per["n"]) == 2000
    assert per["corrected_p99_ms"][1] > 1500.0 and per["corrected_p99_ms"][0] < 16.0  # the stall, in its interval
    assert max(per["raw_p99_ms"]) < 16.0
    assert fig["mode"] == "open" and fig["connections_per_process"] == 4


def test_an_interval_of_a_quantile_needs_two_samples_and_has_no_upper_end_past_the_largest() -> None:
    h = latency.new_histogram()
    h.record_value(1000)
    assert latency.quantile_ci_ms(h, 99) is None
    for v in range(2, 121):
        h.record_value(v * 1000)
    assert latency.quantile_ci_ms(h, 99)[1] is None  # a p99 of 120 samples: no upper bound from the data
    assert latency.figures([], mode="closed", connections=None)["endpoints"] == {}


def test_the_confirm_slo_is_judged_on_full_resolution_histograms_corrected_in_the_open_model() -> None:
    from systems.copilot.load_analysis import CONFIRM, slo_verdicts

    # 99 answers at 10 ms and one at 305 ms; in the open model every request also waited 290 ms for its send.
    samples = [(CONFIRM, 10.0, 300.0, 1000.0 + i) for i in range(99)] + [(CONFIRM, 305.0, 305.0, 1099.0)]
    records = _records(samples, 2)
    slo = {"confirm_p99_ms": 300.0, "confirm_to_executing_p99_s": 3.0, "error_rate_max": 0.001}
    locust = {CONFIRM: {"p99_ms": 300.0, "requests": 100}}  # Locust's figure: used only without histograms

    def verdict(mode: str | None) -> dict:
        lat = latency.figures(records, mode=mode, connections=None) if mode else None
        rows = slo_verdicts(slo, locust, {}, {"error_rate_excluding_faults": 0.0}, {}, lat)
        return next(r for r in rows if r["name"] == "confirm_p99_ms")

    closed, opened, without = verdict("closed"), verdict("open"), verdict(None)
    assert closed["source"].startswith("HDR raw") and closed["measured"] == pytest.approx(10.0, rel=0.01)
    assert closed["held"] and closed["n"] == 100
    assert opened["source"].startswith("HDR corrected") and opened["measured"] == pytest.approx(300.0, rel=0.002)
    assert not opened["held"]  # the wait before the send counts: 300 ms is not under 300 ms
    assert without["source"] == "Locust (rounded)" and without["measured"] == 300.0 and not without["held"]
