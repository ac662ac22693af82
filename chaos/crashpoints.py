"""The catalogue's crash-point faults as data (kernel.failpoints): one table, from which the fault registry
(chaos/faults.py) makes one fault each, so a scenario arms the same points in simulation and on the real stack
(tests/core/test_crash_points.py)."""

from __future__ import annotations

from typing import Any

from kernel.failpoints import CrashPoint

# fault name -> (role, effect, when, action)
CRASH_FAULTS: dict[str, tuple[str, str, str, str]] = {
    # C3: after the broker acked a TaskCreated (the event the dispatchers must dedupe; a plain "publish" point could
    # land on status events no consumer group subscribes to, and C3 then saw no duplicate: seeds 15 and 20)
    "kill-publisher-after-publish": ("publisher", "publish:TaskCreated", "after", "kill"),
    "kill-dispatcher-after-create": ("dispatcher", "create_flight", "after", "kill"),  # R2: before the write-back
    "kill-dispatcher-before-create": ("dispatcher", "create_flight", "before", "kill"),  # R13: DISPATCHING, no call
    "kill-consumer-before-ack": ("dispatcher", "consume.task_created", "after", "kill"),  # B1: committed, not acked
    "kill-api-after-create-commit": ("api", "confirm.create", "after", "kill"),  # B8: committed, not answered
    "pause-dispatcher-after-create": ("dispatcher", "create_flight", "after", "stop"),  # B5: a zombie
}
GENERIC = ("crash-point", "hold-transaction")  # incident files: any point; a transaction held before its write


def crash_points(fault: str, params: dict[str, Any]) -> list[CrashPoint]:
    """The points a crash-point fault arms (ValueError for bad parameters)."""
    count = int(params.get("count", 1))
    seconds = float(params.get("seconds", 0.0))
    if fault in CRASH_FAULTS:
        role, effect, when, action = CRASH_FAULTS[fault]
        return [CrashPoint(role, effect, when, action, count, seconds)]
    if fault == "hold-transaction":
        return [CrashPoint(str(params["role"]), str(params["tx"]), "before-write", "hold", count, seconds)]
    if fault == "crash-point":
        return [CrashPoint(str(params["role"]), str(params["effect"]), str(params.get("when", "after")),
                           str(params.get("action", "kill")), count, seconds)]
    raise ValueError(f"{fault!r} is not a crash-point fault")
