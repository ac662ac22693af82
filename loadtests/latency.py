"""Request latency from the intended send time and from the actual one, in HDR histograms (issue 13).

A client that waits for a free connection (or, closed-loop, for its last answer) before it sends hides the slow
periods it caused: the requests it should have sent meanwhile are sent late and timed from the late send
(coordinated omission). So each request carries its *intended* time, the moment its arrival was scheduled (or, for
a later step of a user's journey, the moment the previous answer came), and two latencies are recorded:

- ``raw``: from the actual send to the answer (what Locust reports);
- ``corrected``: from the intended time to the answer (what a user waiting on the schedule saw).

Each Locust process keeps one pair of histograms per endpoint and 10-second interval, at full resolution
(1 microsecond to 120 s, 3 significant figures, the ``hdrhistogram`` package) and writes each interval once it
has closed, base64-encoded, to its client log. The harness adds the intervals of every process (histograms
merge exactly), so the percentiles are those of every sample of every worker, not an average of percentiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from hdrh.histogram import HdrHistogram

LOWEST_US, HIGHEST_US, SIGNIFICANT = 1, 120_000_000, 3
INTERVAL_S = 10.0
KINDS = ("raw", "corrected")
QUANTILES = (50, 95, 99)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT)


def _us(ms: float) -> int:
    return max(LOWEST_US, min(HIGHEST_US, int(round(ms * 1000.0))))


class Recorder:
    """One client process's histograms: (interval start, endpoint) -> {raw, corrected}."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._open: dict[tuple[float, str], dict[str, HdrHistogram]] = {}

    def record(self, name: str, raw_ms: float, corrected_ms: float, t: float) -> None:
        """One answered request at epoch ``t``. A corrected latency below the raw one (clock steps) counts as raw."""
        start = math.floor(t / self.interval_s) * self.interval_s
        pair = self._open.get((start, name))
        if pair is None:
            pair = self._open[(start, name)] = {k: new_histogram() for k in KINDS}
        pair["raw"].record_value(_us(raw_ms))
        pair["corrected"].record_value(_us(max(raw_ms, corrected_ms)))

    def closed(self, now: float | None = None) -> list[dict[str, Any]]:
        """The intervals that ended before ``now`` (every one when None), as log records, forgotten here."""
        out = []
        for key in sorted(self._open):
            start, name = key
            if now is not None and start + self.interval_s > now:
                continue
            pair = self._open.pop(key)
            out.append({"k": "hdr", "t": start, "interval_s": self.interval_s, "name": name,
                        **{k: pair[k].encode().decode("ascii") for k in KINDS}})
        return out


# ---------------------------------------------------------------------------------------------- the harness's side


def merge(records: Iterable[dict[str, Any]]) -> tuple[dict[str, dict[str, HdrHistogram]],
                                                      dict[float, dict[str, dict[str, HdrHistogram]]]]:
    """(endpoint -> {raw, corrected} over the run, interval start -> endpoint -> {raw, corrected}) from the
    records of every process. An interval's start is whatever clock the records carry (the sampler makes it
    seconds into the run)."""
    total: dict[str, dict[str, HdrHistogram]] = {}
    by_interval: dict[float, dict[str, dict[str, HdrHistogram]]] = {}
    for rec in records:
        name = rec["name"]
        for kind in KINDS:
            h = HdrHistogram.decode(rec[kind])
            for into in (total.setdefault(name, {}), by_interval.setdefault(float(rec["t"]), {}).setdefault(name, {})):
                if kind in into:
                    into[kind].add(h)
                else:
                    into[kind] = new_histogram()
                    into[kind].add(h)
    return total, by_interval


def quantile_ms(h: HdrHistogram, q: float) -> float | None:
    if h.get_total_count() == 0:
        return None
    return round(h.get_value_at_percentile(q) / 1000.0, 3)


def quantile_ci_ms(h: HdrHistogram, q: float, z: float = 1.96) -> list[float | None] | None:
    """The distribution-free ~95% interval of the q-th percentile (loadtests.quantiles.percentile_ci's ranks),
    read from the histogram: the values at the ranks bounding the binomial(n, q) count below it. The upper end
    is None when its rank falls past the largest sample."""
    n = h.get_total_count()
    if n < 2:
        return None
    p = q / 100.0
    half = z * math.sqrt(n * p * (1.0 - p))
    lo_rank, hi_rank = max(1, math.floor(n * p - half)), math.ceil(n * p + half)
    lo = h.get_value_at_percentile(100.0 * lo_rank / n) / 1000.0
    hi = None if hi_rank > n else h.get_value_at_percentile(100.0 * hi_rank / n) / 1000.0
    return [round(lo, 3), None if hi is None else round(hi, 3)]


def summary(h: HdrHistogram) -> dict[str, Any]:
    """n, p50/p95/p99 with their intervals, mean and max, in milliseconds."""
    n = h.get_total_count()
    out: dict[str, Any] = {"n": n}
    for q in QUANTILES:
        out[f"p{q}_ms"] = quantile_ms(h, q)
        out[f"p{q}_ci"] = quantile_ci_ms(h, q)
    out["mean_ms"] = round(h.get_mean_value() / 1000.0, 3) if n else None
    out["max_ms"] = round(h.get_max_value() / 1000.0, 3) if n else None
    return out


def figures(records: list[dict[str, Any]], *, mode: str, connections: int | None) -> dict[str, Any]:
    """load.json's ``latency``: per endpoint (and over all of them) raw and corrected summaries side by side,
    and per interval p50/p99 of each, for the plots over time."""
    total, by_interval = merge(records)
    everything = {k: new_histogram() for k in KINDS}
    for both in total.values():
        for k in KINDS:
            everything[k].add(both[k])
    endpoints = {name: {k: summary(pair[k]) for k in KINDS} for name, pair in sorted(total.items())}
    if total:
        endpoints["all"] = {k: summary(everything[k]) for k in KINDS}
    starts = sorted(by_interval)
    series: dict[str, Any] = {"t": starts, "endpoints": {}}
    for name in sorted(total):
        per: dict[str, list[Any]] = {f"{k}_p{q}_ms": [] for k in KINDS for q in (50, 99)} | {"n": []}
        for s in starts:
            pair = by_interval[s].get(name)
            per["n"].append(pair["raw"].get_total_count() if pair else 0)
            for k in KINDS:
                for q in (50, 99):
                    per[f"{k}_p{q}_ms"].append(quantile_ms(pair[k], q) if pair else None)
        series["endpoints"][name] = per
    interval = records[0].get("interval_s", INTERVAL_S) if records else INTERVAL_S
    return {"mode": mode, "connections_per_process": connections, "interval_s": interval,
            "histogram": {"lowest_us": LOWEST_US, "highest_us": HIGHEST_US, "significant_figures": SIGNIFICANT},
            "endpoints": endpoints, "series": series}


