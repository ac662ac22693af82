"""The one percentile of the load harness: measured figures, the capacity model's simulated ones and the report all
go through here, so `parity --load` compares a measured p99 with a predicted p99 computed the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (q in 0..100): the smallest sample with at least q% of the samples at or
    below it; None for no values.

    Nearest rank, not linear interpolation, because every other percentile a load run reports is one: Locust's
    percentiles and the HDR histograms (loadtests/latency.py) answer with a recorded value, and
    :func:`percentile_ci` bounds the estimate with order statistics, which brackets a sample, not a point between
    two. An interpolated p99 of the model against a nearest-rank p99 of the run would differ by the gap between
    the two largest samples, a difference of method, not of the system."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return float(s[k])


def percentile_ci(values: Sequence[float], q: float, z: float = 1.96) -> tuple[float, float | None] | None:
    """A distribution-free ~95% confidence interval of the q-th percentile: the order statistics whose ranks
    bound the binomial(n, q) count of samples below it (normal approximation). The upper end is None when
    its rank falls past the largest sample (a p99 of 120 samples has no upper bound from the data)."""
    if len(values) < 2:
        return None
    s = sorted(values)
    n, p = len(s), q / 100.0
    half = z * math.sqrt(n * p * (1.0 - p))
    lo_rank, hi_rank = math.floor(n * p - half), math.ceil(n * p + half)  # 1-based ranks
    return s[max(0, lo_rank - 1)], (s[hi_rank - 1] if hi_rank <= n else None)
