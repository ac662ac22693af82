"""The ``Server-Timing`` header of the API's answers (``reference.copilot.settings.Settings.server_timing``): the
handler's
wall time and the CPU time of the thread that ran it, in ms. Written by the API, read by every client that records it
(the Locust users, the platform simulator's webhook sender), so its format lives in one place."""

from __future__ import annotations

import math


def header(wall_s: float, cpu_s: float) -> str:
    return f"app;dur={wall_s * 1000:.3f}, cpu;dur={cpu_s * 1000:.3f}"


def parse(value: str | None) -> dict[str, float]:
    """``app;dur=3.2, cpu;dur=1.9`` as {"app": 3.2, "cpu": 1.9}. Metrics without a parseable duration are left out."""
    out: dict[str, float] = {}
    for metric in (value or "").split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, raw = param.partition("=")
            if key.strip().lower() == "dur" and name:
                try:
                    dur = float(raw.strip().strip('"'))
                except ValueError:
                    continue
                if math.isfinite(dur) and dur >= 0:
                    out[name] = dur
    return out
