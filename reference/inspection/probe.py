"""An IS probe node (seed 001 §2.4, §3.5, §3.6): every cycle it inspects its devices, writes each message to its
local outbox first (INV-11), then publishes it (mandatory, with publisher confirms) and marks it confirmed on the
broker's ack; a nack or a return (no queue bound: RabbitMQ sends basic.return before the confirm) leaves the row
unconfirmed. A replayer publishes the unconfirmed rows again, in outbox order, every 5 s (and at start, before the
first cycle). A device's seq comes from the outbox, so it never goes back across restarts (INV-5), and the
message_id is made of (node, cycle, device, seq), the same on every replay (INV-6, INV-12). Each cycle it pulls
the slot maps and routes the cycle's messages by the one in force (§3.4: reference.inspection.reshard)."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kernel.effects import BrokerUnavailable, Sleep
from reference.inspection import coverage
from reference.inspection.bugs import BUGS
from reference.inspection.config import Settings
from reference.inspection.effects import (
    HIGH,
    NORMAL,
    PUBLISH_ACK,
    PUBLISH_NACK,
    PUBLISH_RETURNED,
    Now,
    OutboxAppend,
    OutboxConfirm,
    OutboxLastSeqs,
    OutboxPending,
    PublishConfirmed,
    SlotMaps,
    routing_key,
)
from reference.inspection.reshard import SlotMap, in_force

SCHEMA_VERSION = 2
ALERT_KEY = "device.offline"


@dataclass(frozen=True)
class Device:
    device_id: str
    slot: int
    priority: int  # 1 CRITICAL (the high queue), 2 NORMAL, 3 LOW (§7.1)


@dataclass(frozen=True)
class Versions:
    """What the node pulled from the web tier (INV-1): never the lease epoch (INV-2)."""

    resource_version: int = 1
    plan_version: int = 1
    slot_map_version: int = 1


def status_of(device_id: str, cycle_id: int) -> str:
    """The inspected status: DOWN about one period in five, each period three cycles long (deterministic: the
    device's real state, which a restarted node inspects the same)."""
    return "DOWN" if zlib.crc32(f"{device_id}:{cycle_id // 3}".encode()) % 5 == 0 else "UP"


def message_id(node: str, cycle_id: int, device_id: str, seq: int) -> str:
    """§3.6: {is_node}:{cycle_id}:{device_id}:{seq}."""
    return f"{node}:{cycle_id}:{device_id}:{seq}"


def envelope(node: str, device: Device, cycle_id: int, seq: int, collected_at: datetime,
             versions: Versions) -> dict[str, Any]:
    """§2.4's envelope, flattened: the message a worker receives."""
    status = status_of(device.device_id, cycle_id)
    before = status_of(device.device_id, cycle_id - 1)
    alert = None
    if status != before:
        alert = {"key": ALERT_KEY, "type": "FIRING" if status == "DOWN" else "RESOLVED",
                 "severity": 3 if status == "DOWN" else 0}
    return {"schema_version": SCHEMA_VERSION, "message_id": message_id(node, cycle_id, device.device_id, seq),
            "device_id": device.device_id, "slot_id": device.slot, "slot_map_version": versions.slot_map_version,
            "resource_version": versions.resource_version, "plan_version": versions.plan_version, "is_node": node,
            "cycle_id": cycle_id, "seq": seq, "collected_at": collected_at.isoformat(),
            "priority": HIGH if device.priority == 1 or alert else NORMAL,
            "payload": {"status": status, "alert": alert}}


def padded(body: dict[str, Any], size: int) -> dict[str, Any]:
    """The envelope with its payload's inspected ``detail`` filling it to ``size`` bytes as published (JSON, the
    wire's separators); as it is when it is already that long or ``size`` is 0."""
    room = size - len(json.dumps(body)) - len(', "detail": ""')
    return body if size <= 0 or room < 0 else {**body, "payload": {**body["payload"], "detail": "x" * room}}


def _publish(rows: Sequence[dict[str, Any]]) -> Generator[Any, Any, list[int]]:
    """Publish rows in outbox order; the seqs the broker confirmed. Stops at the first publish with no answer."""
    confirmed = []
    for row in rows:
        try:
            outcome = yield PublishConfirmed(row["routing_key"], row["body"])
        except BrokerUnavailable:
            break
        if outcome == PUBLISH_ACK:
            confirmed.append(int(row["seq"]))
        elif outcome == PUBLISH_RETURNED:
            coverage.COVERAGE.reached(coverage.PUBLISH_RETURNED)
            if BUGS.active("return-counted-as-confirmed"):
                confirmed.append(int(row["seq"]))
        elif outcome == PUBLISH_NACK:
            coverage.COVERAGE.reached(coverage.PUBLISH_NACKED)
    return confirmed


def _send(rows: Sequence[dict[str, Any]]) -> Generator[Any, Any, None]:
    confirmed = yield from _publish(rows)
    if confirmed:
        yield OutboxConfirm(tuple(confirmed))


def _replay(cfg: Settings, older_than_s: float) -> Generator[Any, Any, None]:
    pending = yield OutboxPending(older_than_s)
    if pending:
        coverage.COVERAGE.reached(coverage.OUTBOX_REPLAYED)
        yield from _send(pending)


def routed(device: Device, versions: Versions, live: SlotMap | None) -> tuple[Device, Versions]:
    """The device and versions a message collected under map ``live`` carries (§3.4: its slot and slot_map_version;
    None: the node knows no map yet, the device's own slot under ``versions``)."""
    if live is None:
        return device, versions
    return (dataclasses.replace(device, slot=live.slot_of(device.device_id)),
            dataclasses.replace(versions, slot_map_version=live.version))


def _produce(node: str, devices: Sequence[Device], seqs: dict[str, int], cycle_id: int, now: datetime,
             versions: Versions, message_bytes: int = 0,
             maps: tuple[SlotMap, ...] = ()) -> Generator[Any, Any, None]:
    rows = []
    live = in_force(maps, now)
    for device in devices:
        d, v = routed(device, versions, live)
        seqs[d.device_id] = seqs.get(d.device_id, 0) + 1
        body = padded(envelope(node, d, cycle_id, seqs[d.device_id], now, v), message_bytes)
        rows.append({"message_id": body["message_id"], "routing_key": routing_key(d.slot, body["priority"]),
                     "body": body})
    if BUGS.active("publish-before-outbox"):
        for row in rows:
            try:
                yield PublishConfirmed(row["routing_key"], row["body"])
            except BrokerUnavailable:
                pass
        yield OutboxAppend(tuple(rows))
        return
    stored = yield OutboxAppend(tuple(rows))
    yield from _send(stored)


def probe_loop(node: str, devices: Sequence[Device], cfg: Settings, produce_until: datetime,
               versions: Versions = Versions()) -> Generator[Any, Any, None]:
    """§3.5's start (replay what is unconfirmed, in order), then a cycle every cycle_s until ``produce_until`` and
    the replayer every replay_every_s, for ever."""
    seqs: dict[str, int] = {} if BUGS.active("seq-in-memory") else dict((yield OutboxLastSeqs()))
    yield from _replay(cfg, 0.0)
    start = yield Now()
    next_cycle = start.timestamp()
    next_replay = start.timestamp() + cfg.replay_every_s
    maps: tuple[SlotMap, ...] = ()
    while True:
        now = yield Now()
        t = now.timestamp()
        if t >= next_cycle and now < produce_until:
            maps = (yield SlotMaps()) or maps  # the web tier away: route by the maps known
            yield from _produce(node, devices, seqs, int(t // cfg.cycle_s), now, versions, cfg.message_bytes, maps)
            next_cycle = (t // cfg.cycle_s + 1) * cfg.cycle_s
        if t >= next_replay:
            yield from _replay(cfg, cfg.replay_after_s)
            next_replay = t + cfg.replay_every_s
        now = yield Now()
        wake = min(next_replay, next_cycle) if now < produce_until else next_replay
        yield Sleep(max(0.01, wake - now.timestamp()))
