"""Faults in the simulation shell: the same names as the catalogue's fault steps, applied to the
simulated world (its database, broker model, platform model, object store and process triggers)."""

from __future__ import annotations

from typing import Any

from scenarios.sim.world import SimWorld
from simulator.model import PlatformFaults

SIM_FAULTS = frozenset({
    "db-error", "db-outage", "broker-outage", "duplicate-delivery", "platform-partition", "object-store-outage",
    "platform", "kill-publisher-after-publish", "kill-dispatcher-after-create", "kill-consumer-before-ack",
    "kill-api-after-create-commit", "pause-dispatcher-after-create",
})


def apply_fault(world: SimWorld, fault: str, params: dict[str, Any], *, on: bool) -> None:
    """Start (on) or stop one fault of the catalogue in a simulated world."""
    if fault == "db-error":
        tables = set(params.get("tables", []))
        world.db_error_tables = world.db_error_tables | tables if on else world.db_error_tables - tables
    elif fault == "db-outage":
        world.db_down = on
    elif fault == "broker-outage":
        world.broker.down = on
    elif fault == "duplicate-delivery":
        world.broker.duplicate_prob = float(params.get("prob", 0.5)) if on else 0.0
    elif fault == "platform-partition":
        world.platform_partitioned = on
    elif fault == "object-store-outage":
        world.store.down = on
    elif fault == "platform":
        world.platform.faults = PlatformFaults.from_json(params, base=world.platform.faults)
    elif fault == "kill-publisher-after-publish":
        world.triggers.kill_publisher_after_publish += int(params.get("count", 1))
    elif fault == "kill-dispatcher-after-create":
        world.triggers.kill_dispatcher_after_create += int(params.get("count", 1))
    elif fault == "kill-consumer-before-ack":
        world.triggers.kill_consumer_before_ack += int(params.get("count", 1))
    elif fault == "kill-api-after-create-commit":
        world.triggers.kill_api_after_create_commit += int(params.get("count", 1))
    elif fault == "pause-dispatcher-after-create":
        world.triggers.pause_dispatcher_after_create += [float(params["seconds"])] * int(params.get("count", 1))
    else:
        raise ValueError(f"unknown fault {fault!r}")
