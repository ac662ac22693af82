"""The step ramp-up of every load run's Locust users (each system's locustfile has a LoadTestShape that asks this):
``steps`` equal steps of users over ``ramp_s``, then all of them until ``duration_s``. No Locust import here, so the
rule is testable without gevent's monkey-patching."""

from __future__ import annotations

import math


def step_ramp(t: float, total: int, steps: int, ramp_s: float, duration_s: float) -> tuple[int, float] | None:
    """(users, spawn rate per second) at ``t`` seconds into the run; None: the run is over."""
    if t >= duration_s:
        return None
    steps = max(1, steps)
    step = steps if ramp_s <= 0 else min(steps, int(t / (ramp_s / steps)) + 1)
    return math.ceil(total * step / steps), max(10.0, total / 5.0)
