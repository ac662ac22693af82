"""The confidence interval the capacity report puts beside measured percentiles (loadtests/quantiles.py)."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from loadtests.quantiles import percentile, percentile_ci


@given(st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), min_size=2, max_size=400),
       st.sampled_from([50, 90, 95, 99]))
def test_the_interval_brackets_the_point_estimate(values: list[float], q: int) -> None:
    ci = percentile_ci(values, q)
    assert ci is not None
    lo, hi = ci
    est = percentile(values, q)
    assert est is not None and lo <= est
    assert hi is None or est <= hi


def test_it_covers_the_true_percentile_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    true_p95 = math.exp(3.0 + 1.6449)  # lognormal(3, 1)
    trials = 400
    hits = 0
    for _ in range(trials):
        ys = [rng.lognormvariate(3.0, 1.0) for _ in range(200)]
        lo, hi = percentile_ci(ys, 95) or (0.0, 0.0)
        hits += lo <= true_p95 <= (math.inf if hi is None else hi)
    assert 0.91 <= hits / trials <= 0.99


def test_a_p99_of_120_samples_has_no_upper_bound_and_too_few_samples_no_interval() -> None:
    ys = [float(i) for i in range(120)]
    lo, hi = percentile_ci(ys, 99) or (None, 0.0)
    assert hi is None and lo is not None and lo < 119.0
    assert percentile_ci([1.0], 95) is None


def test_model_within_interval_reads_an_open_upper_end_as_unbounded() -> None:
    from systems.copilot.capacity_report import _within

    assert _within(500.0, [100.0, None]) is True
    assert _within(50.0, [100.0, 200.0]) is False
    assert _within(150.0, [100.0, 200.0]) is True
    assert _within(150.0, None) is None and _within(None, [1.0, 2.0]) is None
