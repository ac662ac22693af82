"""Crash-point faults as data (kernel.failpoints): what points a fault arms, from its parameters, so a scenario arms
the same points in simulation and on the real stack (tests/core/test_crash_points.py). The generic faults take any
point; a system names its own fixed points with ``fixed_point`` (the fault registry, chaos/faults.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel.failpoints import CrashPoint

Points = Callable[[dict[str, Any]], list[CrashPoint]]  # a crash-point fault's parameters -> the points it arms
GENERIC = ("crash-point", "hold-transaction")  # incident files: any point; a transaction held before its write


def _times(params: dict[str, Any]) -> tuple[int, float]:
    return int(params.get("count", 1)), float(params.get("seconds", 0.0))


def fixed_point(role: str, effect: str, when: str, action: str) -> Points:
    """A fault that arms one point known in advance; its parameters say only how often (count) and how long
    (seconds)."""
    return lambda params: [CrashPoint(role, effect, when, action, *_times(params))]


def crash_points(fault: str, params: dict[str, Any]) -> list[CrashPoint]:
    """The points a generic crash-point fault arms (ValueError for bad parameters, KeyError for a missing one)."""
    if fault == "hold-transaction":
        return [CrashPoint(str(params["role"]), str(params["tx"]), "before-write", "hold", *_times(params))]
    if fault == "crash-point":
        return [CrashPoint(str(params["role"]), str(params["effect"]), str(params.get("when", "after")),
                           str(params.get("action", "kill")), *_times(params))]
    raise ValueError(f"{fault!r} is not a generic crash-point fault")
