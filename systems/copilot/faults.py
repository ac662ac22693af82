"""The Copilot's faults, registered in its fault registry (chaos.faults.registry("copilot")): the generic kinds on
its own links, tables, roles and services, and its own: the drone platform's knobs and partition, the clients'
streams cut, duplicate delivery by re-publishing outbox rows, a stale consumer in one of its consumer groups, crash
points of its workers and API, closed airspace, operators and supervisors at work (re-drives, reviews), an attacker
on the audit log, and tasks made unfit for flight. The order of registration is the order the incident README lists
them in (tests/core/test_fault_registry.py)."""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, text

from chaos import faults as chaos
from chaos.crashpoints import fixed_point
from chaos.faults import Fault, Params, Shell, cut_links
from harness.history import (
    AIRSPACE,
    DEVICES,
    FAIL,
    INFO,
    INVOKE,
    LOST_MESSAGE,
    NEMESIS,
    OK,
    REVOKE_APPROVAL,
)
from kernel.effects import Ack, BrokerUnavailable, Message, Receive, Sleep
from reference.copilot.errors import DomainError
from reference.copilot.models import (
    DeadLetter,
    Device,
    DroneTask,
    SiteArea,
    UserAreaPermission,
    UserDevicePermission,
)
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER, HANDLERS, redrive
from simulator.model import PLATFORM_CAPABILITIES, PlatformFaults, platform_defaults
from systems.copilot.users import in_request, request_id

if TYPE_CHECKING:
    from chaos.native import NativeNemesis
    from systems.copilot.sim import CopilotWorld as SimulatedWorld

FAULTS = chaos.registry("copilot")

# The tables whose inserts a db-error fault can fail on the real stack (a harness trigger on each: NativeNemesis
# .install_fault_triggers, when the Copilot's nemesis is made); the simulation can fail any table's.
FAULT_TABLES = ("task_event_outbox", "processed_event", "event_failure")
FAULTS.native_setup.append(lambda nemesis: nemesis.install_fault_triggers(FAULT_TABLES))

# Its crash points: fault name -> (role, effect, when, action)
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


# ---------------------------------------------------------------------------------------------- links


def _platform_partition_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.platform_partitioned = on


def _stream_disconnect_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.streams.set_cut(on)


STALL_DEPTH = 8  # stream-stall's default queue depth: a few tasks' changes


def _stall_depth(params: Params) -> int:
    return int(params.get("depth", STALL_DEPTH))


def _stream_stall_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.streams.set_stall(on, _stall_depth(params))


def _stream_stall_check(params: Params, shell: Shell) -> None:
    if _stall_depth(params) < 1:
        raise ValueError(f"stream-stall: params.depth is a queue depth, at least 1 (got {params.get('depth')})")


def _stream_disconnect_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    # The clients' links: to the API, and to the stream tier when the stack runs one (it serves the streams then).
    proxies = getattr(getattr(nemesis.stack, "endpoints", None), "proxies", None) or {}
    links = ["api", *(["stream"] if "stream" in proxies else [])]
    cut_links(*links)(nemesis, params, on)


# ---------------------------------------------------------------------------------------------- the platform


def _platform_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    # A window (with a duration) sets the knobs back to their defaults when it ends (capabilities stay).
    world.platform.faults = PlatformFaults.from_json(params if on else platform_defaults(params),
                                                     base=world.platform.faults)


def _platform_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    import requests  # the real stack's client only: the simulation shell does without it

    url = f"{nemesis.ep.app['platform_control_url']}/control/faults"
    if on:
        caps = {k: bool(params[k]) for k in PLATFORM_CAPABILITIES if k in params}
        if caps:
            # A platform without them is deployed knowing so: the reference is configured to match, before
            # the platform changes (a dispatcher still assuming a key would resend). A capability the step does not
            # name stays as it was, as on the platform.
            nemesis.stack.app.set_platform_capabilities(nemesis.stack, caps.get("idempotency_key"),
                                                        caps.get("query_supported"))
        requests.put(url, json=params, timeout=10).raise_for_status()
    else:  # the end of a window: the knobs it set go back to their defaults (capabilities stay)
        knobs = platform_defaults(params)
        if knobs:
            requests.put(url, json=knobs, timeout=10).raise_for_status()



# ---------------------------------------------------------------------------------------------- the broker


def _duplicate_delivery_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.broker.duplicate_prob = float(params.get("prob", 0.5)) if on else 0.0
    world.broker.duplicate_spread_s = float(params.get("spread_s", 0.0)) if on else 0.0


def _duplicate_delivery_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    prob = float(params.get("prob", 0.5))
    nemesis.window("duplicate-delivery", on, lambda stop: republish(nemesis, prob, stop))




STALE_CONSUMER = "stale-consumer"  # its process name in the history
_STALE_BATCH = 32  # RocketMQ's proxy caps a receive at this many messages
# Its wait after the broker refused it, and the invisible time of what it receives: a message it could not ack goes
# back to the group's live members a second later.
_STALE_RETRY_S = 1.0


def stale_consumer(group: str, stopped: Callable[[], bool], on_lost: Callable[[Message], None]
                   ) -> Generator[Any, Any, None]:
    """A consumer of an old release left running in consumer group ``group`` (a host the deployment missed), whose
    code cannot read the current messages and acks them unread, as core effects (kernel.effects) that each shell
    performs. It receives like the group's live members, with their subscription, so it takes its share of the
    group's messages; each one it acks is lost to the group (``on_lost``). Until ``stopped()``."""
    while not stopped():
        try:
            deliveries = yield Receive(group, _STALE_BATCH, _STALE_RETRY_S)
        except BrokerUnavailable:
            yield Sleep(_STALE_RETRY_S)
            continue
        for d in deliveries:
            try:
                yield Ack(group, d)
            except BrokerUnavailable:
                continue  # not acked: the broker delivers it again, to whoever asks first
            on_lost(d.message)


def lost_to_group(record: Callable[[str, str, str, dict[str, Any]], object], group: str) -> Callable[[Message], None]:
    """Records (``record(process, type, f, value)``, into the history) a message the stale consumer took from
    ``group``: I6 excuses exactly these."""
    def lost(message: Message) -> None:
        record(NEMESIS, INFO, LOST_MESSAGE, {
            "group": group, "event_id": message.event_id, "event_type": message.event_type,
            "task_id": message.task_id})

    return lost


def _stale_group(params: Params) -> str:
    return str(params.get("group", DISPATCHER))


def _stale_consumer_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    group = _stale_group(params)
    lost = lost_to_group(lambda *op: world.history.add(world.env.now, *op), group)
    world.window(STALE_CONSUMER, on, lambda stopped: world.drive(STALE_CONSUMER, stale_consumer(group, stopped, lost)))


def _stale_consumer_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    group = _stale_group(params)
    nemesis.window(STALE_CONSUMER, on, lambda stop: stale_consumer_on_broker(nemesis, group, stop))


def _stale_consumer_check(params: Params, shell: Shell) -> None:
    group = _stale_group(params)
    if group not in HANDLERS:
        raise ValueError(f"stale-consumer: params.group {group!r} is not a consumer group ({', '.join(HANDLERS)})")



# ---------------------------------------------------------------------------------------------- operators and attackers


def _when_idle(world: SimulatedWorld, change: Callable[[], None]) -> None:
    """The harness's own database change, as soon as no simulated transaction holds the write lock (an
    operator's statement waits for locks like any other)."""

    def proc() -> Generator[Any, Any, None]:
        yield from world.db.idle()
        change()

    world.env.process(proc())


def _close_airspace_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    sites = int(params.get("sites", 1))

    def flip(tx: Any) -> list[str]:
        areas = list(tx.session.scalars(select(SiteArea).order_by(SiteArea.id).limit(sites)))
        for a in areas:
            a.airspace_open = not on
        return [a.id for a in areas]

    def change() -> None:
        # Committed at this instant of virtual time, then recorded: the checkers learn from the history which
        # areas were closed when (I12), as on the real stack.
        areas = world.transact(flip)
        world.history.add(world.env.now, NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": not on})

    _when_idle(world, change)


def _close_airspace_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    set_airspace(nemesis, int(params.get("sites", 1)), open_=not on)


# The nemesis op that says every operator's permissions were removed or given back, written by both shells once the
# change committed: {"users": [...], "revoked": bool}. S10's expectation reads it (cancels after the removal).
PERMISSIONS = "permissions"
OPERATOR_PREFIX = "operator-"  # the workload's operators (systems.copilot.workload.seed_fleet)
# The permission rows a revoke-permissions window removed, per world or nemesis, to give back when it ends.
_REVOKED: weakref.WeakKeyDictionary[Any, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = (
    weakref.WeakKeyDictionary())


def _take_permissions(session: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Delete every operator's area and device permissions; the (user, area) and (user, device) rows deleted."""
    areas = list(session.scalars(select(UserAreaPermission).where(UserAreaPermission.user_id.startswith(
        OPERATOR_PREFIX)).order_by(UserAreaPermission.user_id, UserAreaPermission.area_id)))
    devices = list(session.scalars(select(UserDevicePermission).where(UserDevicePermission.user_id.startswith(
        OPERATOR_PREFIX)).order_by(UserDevicePermission.user_id, UserDevicePermission.device_id)))
    for row in (*areas, *devices):
        session.delete(row)
    return [(a.user_id, a.area_id) for a in areas], [(d.user_id, d.device_id) for d in devices]


def _give_back(session: Any, rows: tuple[list[tuple[str, str]], list[tuple[str, str]]]) -> None:
    session.add_all([UserAreaPermission(user_id=u, area_id=a) for u, a in rows[0]]
                    + [UserDevicePermission(user_id=u, device_id=d) for u, d in rows[1]])


def _revoke_permissions_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    def change() -> None:
        if on:
            _REVOKED[world] = rows = world.transact(lambda tx: _take_permissions(tx.session))
        else:
            rows = _REVOKED.pop(world, ([], []))
            world.transact(lambda tx: _give_back(tx.session, rows))
        users = sorted({u for u, _ in rows[0]})
        world.history.add(world.env.now, NEMESIS, INFO, PERMISSIONS, {"users": users, "revoked": on})

    _when_idle(world, change)


def _revoke_permissions_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    from sqlalchemy.orm import Session

    with Session(nemesis.admin) as session, session.begin():
        if on:
            _REVOKED[nemesis] = rows = _take_permissions(session)
        else:
            rows = _REVOKED.pop(nemesis, ([], []))
            _give_back(session, rows)
    nemesis.record(NEMESIS, INFO, PERMISSIONS, {"users": sorted({u for u, _ in rows[0]}), "revoked": on})


Record = Callable[[str, str, str, dict[str, Any]], object]  # (process, type, f, value), stamped by the shell's clock


def redrive_all(transact: Any, record: Record) -> None:
    """The on-call operator re-drives every dead letter not yet re-driven (T2); each outcome is recorded. Each
    re-drive is a request of its own, with its correlation id (seed 000 §7.3: its audit row carries it, I55)."""
    ids = transact(lambda tx: list(tx.session.scalars(select(DeadLetter.id).where(DeadLetter.redriven_at.is_(None))
                                                      .order_by(DeadLetter.id))))
    for dl_id in ids:
        value = {"dead_letter": dl_id}
        value["correlation_id"] = request_id("operator", "redrive", value)
        record("operator", INVOKE, "redrive", value)
        try:
            event_id = transact(lambda tx, i=dl_id, rid=value["correlation_id"]: _as_request(
                tx, rid, lambda: redrive(tx, i, "operator-oncall")))
        except DomainError as err:
            record("operator", FAIL, "redrive", {**value, "code": err.code})
        else:
            record("operator", OK, "redrive", {**value, "event_id": event_id})


def _as_request(tx: Any, correlation_id: str, work: Callable[[], Any]) -> Any:
    """``work`` done in ``tx`` as the request ``correlation_id`` (what api.handle tells a request's transactions)."""
    tx.request_id = correlation_id
    return work()


def _requested(process: str, f: str, value: dict[str, Any], cmd: Any) -> tuple[dict[str, Any], Any]:
    """A supervisor's or approver's request (seed 000 §7.3): the value to record, with the request's correlation id,
    and the command carrying it (the X-Request-Id header over HTTP), as a user's (systems.copilot.users.call)."""
    correlation_id = request_id(process, f, value)
    return {**value, "correlation_id": correlation_id}, in_request(cmd, correlation_id)


def _redrive_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if on:
        _when_idle(world, lambda: redrive_all(world.transact, lambda *op: world.history.add(world.env.now, *op)))


def _redrive_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if on:
        from sqlalchemy.orm import sessionmaker

        from reference.copilot.runtime import Runtime

        redrive_all(Runtime(sessionmaker(nemesis.admin, expire_on_commit=False)).transact, nemesis.record)


# A supervisor resolves every task in MANUAL_REVIEW through the API, as the platform says: tries each resolution
# in turn; the API asks the platform and accepts only the one it agrees with (reference.copilot.services.review).
REVIEW_ORDER = ("executing", "completed", "redispatch", "failed", "cancelled")  # redispatch: no flight was made
REVIEW_REASON = "resolved by the on-call supervisor after checking the platform"


def _in_review(transact: Any) -> list[str]:
    from reference.copilot.models import DroneTask

    return [str(t) for t in transact(lambda tx: list(tx.session.scalars(
        select(DroneTask.id).where(DroneTask.status == "MANUAL_REVIEW").order_by(DroneTask.id))))]


def _review(who: Any, task_id: str, resolution: str) -> tuple[dict[str, Any], Any]:
    """One resolution the supervisor tries: the value to record and the request."""
    from reference.copilot import api

    return _requested("supervisor", "review", {"task_id": task_id, "resolution": resolution},
                      api.ResolveReview(who, task_id, {"resolution": resolution, "reason": REVIEW_REASON}))


def _supervisor(params: Params) -> Any:
    from reference.copilot import api

    return api.Principal(str(params.get("supervisor", "supervisor-1")), "supervisor")


def _recorded(record: Record, f: str, value: dict[str, Any], reply: Any, process: str = "supervisor") -> bool:
    """Record the answer to one request of a supervisor (or ``process``): ok with the answer, or fail with its
    code. True if ok."""
    if reply is not None and reply.ok:
        record(process, OK, f, {**value, **reply.body})
        return True
    code = "CONNECTION_RESET" if reply is None else reply.code or f"HTTP_{reply.status}"
    record(process, FAIL, f, {**value, "code": code})
    return False


def _over_http(nemesis: NativeNemesis, who: Any) -> Callable[[Any], Any]:
    """A supervisor's or approver's requests to the API (a short-lived token): command -> Reply, None if no answer."""
    import requests

    from reference.copilot.http.auth import issue_token
    from reference.copilot.http.client import headers_for, http_request, reply_of

    token = issue_token(nemesis.ep.app["token_secret"], who.user_id, role=who.role, ttl_s=3600)

    def call(cmd: Any) -> Any:
        req = http_request(cmd)
        try:
            resp = requests.request(req.method, nemesis.ep.api_url + req.path, json=req.body,
                                    headers=headers_for(req, token), timeout=30)
        except requests.RequestException:
            return None
        return reply_of(resp.status_code, resp.headers, resp.text)

    return call


def _resolve_reviews_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if not on:
        return
    from reference.copilot import api

    who = _supervisor(params)

    def record(*op: Any) -> None:
        world.history.add(world.env.now, *op)

    def proc() -> Generator[Any, Any, None]:
        yield from world.db.idle()
        for tid in _in_review(world.transact):
            for resolution in REVIEW_ORDER:
                value, cmd = _review(who, tid, resolution)
                record("supervisor", INVOKE, "review", value)
                if _recorded(record, "review", value, (yield world.drive("supervisor", api.handle(cmd, api.Ports())))):
                    break

    world.env.process(proc())


def _resolve_reviews_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if not on:
        return
    from sqlalchemy.orm import sessionmaker

    from reference.copilot.runtime import Runtime

    who = _supervisor(params)
    call = _over_http(nemesis, who)
    for tid in _in_review(Runtime(sessionmaker(nemesis.admin, expire_on_commit=False)).transact):
        for resolution in REVIEW_ORDER:
            value, cmd = _review(who, tid, resolution)
            nemesis.record("supervisor", INVOKE, "review", value)
            if _recorded(nemesis.record, "review", value, call(cmd)):
                break


# A supervisor re-drives, through the API, everything that waits for one on their areas (GET /v1/ops/dead): outbox
# events and reports gone DEAD, consumers' dead letters. Each re-drive is recorded with what it re-drove.
_WAITING = (("outbox", "outbox", "event_id"), ("reports", "report", "task_id"), ("dead_letters", "dead-letter", "id"))
REDRIVE_REASON = "re-driven by the on-call supervisor after the outage"


def _waiting(listing: dict[str, Any]) -> list[tuple[str, str]]:
    return [(kind, str(item[key])) for field_, kind, key in _WAITING for item in listing.get(field_, [])]


def _clicks(kind: str, item: str, params: Params) -> list[dict[str, Any]]:
    """The re-drive requests of one item: one, or with params.twice a double click (the second one must answer 409
    NOT_DEAD and change nothing)."""
    value = {"kind": kind, "id": item}
    return [value, {**value, "click": 2}] if params.get("twice") else [value]


def _redrive_dead_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if not on:
        return
    from reference.copilot import api

    who = _supervisor(params)

    def record(*op: Any) -> None:
        world.history.add(world.env.now, *op)

    def proc() -> Generator[Any, Any, None]:
        yield from world.db.idle()
        record("supervisor", INVOKE, "list-dead", {})
        listing = yield world.drive("supervisor", api.handle(api.ListDead(who), api.Ports()))
        if not _recorded(record, "list-dead", {}, listing):
            return
        for kind, item in _waiting(listing.body):
            for click in _clicks(kind, item, params):
                value, cmd = _requested("supervisor", "redrive", click,
                                        api.Redrive(who, kind, item, {"reason": REDRIVE_REASON}))
                record("supervisor", INVOKE, "redrive", value)
                _recorded(record, "redrive", value, (yield world.drive("supervisor", api.handle(cmd, api.Ports()))))

    world.env.process(proc())


def _redrive_dead_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if not on:
        return
    from reference.copilot import api

    who = _supervisor(params)
    call = _over_http(nemesis, who)
    nemesis.record("supervisor", INVOKE, "list-dead", {})
    listing = call(api.ListDead(who))
    if not _recorded(nemesis.record, "list-dead", {}, listing):
        return
    for kind, item in _waiting(listing.body):
        for click in _clicks(kind, item, params):
            value, cmd = _requested("supervisor", "redrive", click,
                                    api.Redrive(who, kind, item, {"reason": REDRIVE_REASON}))
            nemesis.record("supervisor", INVOKE, "redrive", value)
            _recorded(nemesis.record, "redrive", value, call(cmd))


def _audit_tamper_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if on:
        tamper_audit(nemesis)


# ---------------------------------------------------------------------------------------------- unfit-for-flight
# Seed 000 §7.3: the pre-flight check re-checks device state and a valid approval, not trusting the draft-time
# checks. The fault makes tasks unfit between confirm and dispatch (S8): devices of the fleet (those of waiting tasks
# first) go offline, drain below the minimum battery or are forgotten by the platform (unbound: it answers that it has
# no such device), approvals of waiting tasks are revoked; devices drained to exactly the minimum must still fly. It
# acts once (no window): what it changed stays so.

_QUEUED = (select(DroneTask.id, DroneTask.device_id, DroneTask.draft_id, DroneTask.draft_version)
           .where(DroneTask.status.in_(("CREATED", "QUEUED"))).order_by(DroneTask.id))  # not yet dispatched
_FLEET = select(Device.id).order_by(Device.id)
# The default shares of the fleet's devices taken offline, drained below the minimum, drained to exactly it, and
# forgotten by the platform, cut from the fleet in this order.
_DEVICE_SHARES = (("offline", 0.25), ("low_battery", 0.25), ("at_min_battery", 0.15), ("unknown", 0.1))
_DEVICE_SETS = tuple(key for key, _ in _DEVICE_SHARES)


def _waiting_and_fleet(conn: Any) -> tuple[list[Any], list[str]]:
    return list(conn.execute(_QUEUED)), [str(d) for d in conn.execute(_FLEET).scalars()]


@dataclass(frozen=True)
class Unfit:
    """What unfit-for-flight changes: disjoint sets of the fleet's devices, and approvals of waiting tasks on the
    devices left alone."""

    offline: list[str]
    low_battery: list[str]
    at_min_battery: list[str]
    unknown: list[str]
    revoke: list[dict[str, Any]]  # {"task_id", "draft_id", "draft_version"}
    low_pct: float
    min_pct: float
    tasks: dict[str, list[str]]  # each of _DEVICE_SETS -> the waiting tasks on those devices

    def record(self) -> dict[str, Any]:
        return {"offline": self.offline, "low_battery": self.low_battery, "at_min_battery": self.at_min_battery,
                "unknown": self.unknown, "battery": {"low": self.low_pct, "at_min": self.min_pct},
                "tasks": self.tasks}

    def device_changes(self) -> list[tuple[str, bool, float]]:
        """(device, online, battery) for each device changed and kept (``unknown`` goes), both fields set, as
        POST /control/devices stores them: an offline device keeps a full battery (a later fault's upsert of a
        forgotten device brings it back, in both shells)."""
        return ([(d, False, 100.0) for d in self.offline] + [(d, True, self.low_pct) for d in self.low_battery]
                + [(d, True, self.min_pct) for d in self.at_min_battery])


def choose_unfit(queued: list[Any], fleet: list[str], params: Params) -> Unfit:
    """Which devices and approvals to spoil, from the tasks waiting for dispatch (rows of id, device_id, draft_id,
    draft_version) and the fleet's devices: the devices in order, those of waiting tasks first, a share ``offline``
    of the fleet, then ``low_battery``, ``at_min_battery`` and ``unknown`` (later tasks on them meet them too); then a
    share ``revoke`` of the approvals of the waiting tasks on the other devices."""
    waiting = sorted({str(r.device_id) for r in queued})
    devices = waiting + sorted(set(map(str, fleet)) - set(waiting))
    parts, cut = [], 0
    for key, share in _DEVICE_SHARES:
        n = round(len(devices) * float(params.get(key, share)))
        parts.append(devices[cut:cut + n])
        cut += n
    spared = set(devices[cut:])
    candidates = [r for r in queued if str(r.device_id) in spared]
    revoke = [{"task_id": str(r.id), "draft_id": str(r.draft_id), "draft_version": int(r.draft_version)}
              for r in candidates[:round(len(candidates) * float(params.get("revoke", 0.3)))]]
    min_pct = float(params.get("min_battery", Policy().min_battery))
    tasks = {key: [str(r.id) for r in queued if str(r.device_id) in set(part)]
             for key, part in zip(_DEVICE_SETS, parts, strict=True)}
    offline, low_battery, at_min_battery, unknown = parts  # _DEVICE_SETS, in order
    return Unfit(offline, low_battery, at_min_battery, unknown, revoke, low_pct=max(0.0, min_pct - 5.0),
                 min_pct=min_pct, tasks=tasks)


def _check_unfit(params: Params, shell: Shell) -> None:
    for key in (*_DEVICE_SETS, "revoke"):
        if key in params and not 0.0 <= float(params[key]) <= 1.0:
            raise ValueError(f"{key}: a share of the fleet's devices (revoke: of the waiting tasks), in [0, 1]")
    if sum(float(params.get(k, d)) for k, d in _DEVICE_SHARES) > 1.0:
        raise ValueError(" + ".join(_DEVICE_SETS) + ": at most 1 (the device sets are disjoint)")
    if not 5.0 <= float(params.get("min_battery", Policy().min_battery)) <= 100.0:
        raise ValueError("min_battery: the pre-flight minimum, in [5, 100]")


def _approver(params: Params) -> Any:
    from reference.copilot import api

    return api.Principal(str(params.get("approver", "approver-1")), "approver")


def _revocation(who: Any, t: dict[str, Any]) -> Any:
    """The approver refuses the version it had approved: the latest decision wins (services.drafts)."""
    from reference.copilot import api

    return api.Approve(who, t["draft_id"], {"draft_version": t["draft_version"], "decision": "reject"})


def _unfit_for_flight_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if not on:
        return
    from reference.copilot import api

    who = _approver(params)

    def record(*op: Any) -> None:
        world.history.add(world.env.now, *op)

    def proc() -> Generator[Any, Any, None]:
        yield from world.db.idle()
        queued, fleet = world.transact(lambda tx: _waiting_and_fleet(tx.session))
        unfit = choose_unfit(queued, fleet, params)
        for device, online, battery in unfit.device_changes():
            world.platform.upsert_device(device, online, battery)
        for device in unfit.unknown:
            world.platform.remove_device(device)
        record(NEMESIS, INFO, DEVICES, unfit.record())
        for revoke in unfit.revoke:
            t, cmd = _requested("approver", REVOKE_APPROVAL, revoke, _revocation(who, revoke))
            record("approver", INVOKE, REVOKE_APPROVAL, t)
            reply = yield world.drive("approver", api.handle(cmd, api.Ports()))
            _recorded(record, REVOKE_APPROVAL, t, reply, process="approver")

    world.env.process(proc())


def _unfit_for_flight_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if not on:
        return
    import requests

    with nemesis.admin.begin() as conn:
        unfit = choose_unfit(*_waiting_and_fleet(conn), params)
    control = nemesis.ep.app["platform_control_url"]
    for device, online, battery in unfit.device_changes():
        body: dict[str, Any] = {"device_id": device, "online": online, "battery": battery}
        requests.post(f"{control}/control/devices", json=body, timeout=10).raise_for_status()
    for device in unfit.unknown:
        requests.delete(f"{control}/control/devices/{device}", timeout=10).raise_for_status()
    nemesis.record(NEMESIS, INFO, DEVICES, unfit.record())
    who = _approver(params)
    call = _over_http(nemesis, who)
    for revoke in unfit.revoke:
        t, cmd = _requested("approver", REVOKE_APPROVAL, revoke, _revocation(who, revoke))
        nemesis.record("approver", INVOKE, REVOKE_APPROVAL, t)
        _recorded(nemesis.record, REVOKE_APPROVAL, t, call(cmd), process="approver")


# ------------------------------------------------------------------------------------- the native halves' helpers


def set_airspace(nemesis: NativeNemesis, sites: int, *, open_: bool) -> None:
    """Close or reopen the airspace over the first ``sites`` areas, and record which, and when, in the
    history (I12). The time brackets the change on the side that keeps the check sound: a closure is
    recorded after it committed (a pre-flight check that started later must see it), a reopening before
    it starts (a check that finished earlier cannot have seen it)."""
    with nemesis.admin.begin() as conn:
        areas = [str(a) for a in conn.execute(text("SELECT id FROM site_area ORDER BY id LIMIT :n"),
                                              {"n": sites}).scalars()]
    if open_:
        nemesis.record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": True})
    with nemesis.admin.begin() as conn:
        conn.execute(text("UPDATE site_area SET airspace_open = :open WHERE id = ANY(:ids)"),
                     {"open": open_, "ids": areas})
    if not open_:
        nemesis.record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": False})


def republish(nemesis: NativeNemesis, prob: float, stop: threading.Event) -> None:
    """Duplicate delivery on the real broker: a share of freshly published events is put back in the
    outbox, so the publisher sends them again (same event id) and both dispatchers may race on them."""
    import random

    rng, seen = random.Random(7), set[Any]()
    while not stop.wait(0.2):
        with nemesis.admin.begin() as conn:
            rows = conn.execute(text("SELECT id FROM task_event_outbox WHERE status = 'SENT' AND "
                                     "sent_at > now() - interval '5 seconds'")).scalars().all()
            again = [r for r in rows if r not in seen and rng.random() < prob]
            seen.update(rows)
            if again:
                conn.execute(text("UPDATE task_event_outbox SET status = 'PENDING', available_at = now() "
                                  "WHERE id = ANY(:ids)"), {"ids": again})
        for event_id in again:
            nemesis.record(NEMESIS, INFO, "republish", {"event_id": str(event_id)})


def stale_consumer_on_broker(nemesis: NativeNemesis, group: str, stop: threading.Event) -> None:
    """The stale-consumer fault's native half (stale_consumer above): a RocketMQ client of its own in ``group``, with
    the group's subscription, through the application's broker link, until ``stop``. Its deliveries are
    recorded as the simulation records them."""
    from kernel.effects import run_sync
    from kernel.runtime import ACK
    from reference.copilot.adapters.broker_rocketmq import RocketMQBroker
    from reference.copilot.settings import TOPIC

    broker = RocketMQBroker(nemesis.ep.rocketmq_endpoint, TOPIC, {group: set(HANDLERS[group])})

    def perform(effect: Any) -> Any:
        if isinstance(effect, Receive):
            deliveries = broker.receive(effect.group, effect.max_messages, effect.invisible_s)
            for d in deliveries:
                nemesis.record(STALE_CONSUMER, INFO, "deliver", d.op_value(effect.group))
            return deliveries
        if isinstance(effect, Ack):  # recorded as the simulation records the stale consumer's acks
            acked = effect.delivery.op_value(effect.group)
            try:
                broker.ack(effect.group, effect.delivery)
            except BrokerUnavailable as exc:
                nemesis.record(STALE_CONSUMER, FAIL, ACK, {**acked, "error": str(exc)[:200]})
                raise
            nemesis.record(STALE_CONSUMER, OK, ACK, acked)
            return None
        if isinstance(effect, Sleep):
            stop.wait(effect.seconds)
            return None
        raise TypeError(f"the stale consumer performs no {effect!r}")

    try:
        run_sync(stale_consumer(group, stop.is_set, lost_to_group(nemesis.record, group)), perform)
    finally:
        broker.close()


def tamper_audit(nemesis: NativeNemesis) -> None:
    """S5: the application role tries to rewrite and erase the audit log; PostgreSQL must refuse."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError

    app = create_engine(nemesis.ep.database_url)
    try:
        for f, stmt in (("audit-update", "UPDATE task_audit_log SET actor = 'nobody'"),
                        ("audit-delete", "DELETE FROM task_audit_log")):
            nemesis.record("attacker-db", INVOKE, f, {"expect": ["INSUFFICIENT_PRIVILEGE"]})
            try:
                with app.begin() as conn:
                    n = conn.execute(text(stmt)).rowcount
            except DBAPIError as err:
                code = type(err.orig).__name__ if err.orig is not None else "DBAPIError"
                sqlstate = getattr(err.orig, "sqlstate", None)
                nemesis.record("attacker-db", FAIL, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "sqlstate": sqlstate,
                                                     "code": "INSUFFICIENT_PRIVILEGE" if sqlstate == "42501"
                                                     else _snake(code)})
            else:
                nemesis.record("attacker-db", OK, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "rows": n})
    finally:
        app.dispose()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


# ---------------------------------------------------------------------------------------------- the registry


FAULTS.register(
    Fault("db-outage", "the database is unreachable (link postgres cut)", chaos.db_down, cut_links("postgres")),
    Fault("broker-outage", "the broker is unreachable (link rocketmq cut)", chaos.broker_down, cut_links("rocketmq")),
    Fault("platform-partition", "the drone platform and its webhooks are unreachable (links platform, webhook cut)",
          _platform_partition_sim, cut_links("platform", "webhook")),
    Fault("object-store-outage", "the object store is unreachable (link s3 cut)", chaos.store_down, cut_links("s3")),
    Fault("stream-disconnect", "the clients' links to the API and the stream tier are cut: open SSE streams drop, "
          "reconnects fail", _stream_disconnect_sim, _stream_disconnect_native),
    Fault("stream-stall", "the operators' stream clients stop reading for the window; their queues at the stream tier "
          "are held to params.depth (8) changes meanwhile, and one that overflows is replaced by a resync hint",
          _stream_stall_sim, None, _stream_stall_check),
    Fault("platform", "the drone platform's fault knobs (errors, timeouts, accepted-then-timeout, flights that fail "
          "or are aborted, capabilities)", _platform_sim, _platform_native),
    chaos.db_error("db-error", "inserts into params.tables fail with a database error inside their transaction",
                   FAULT_TABLES),
    chaos.db_latency("db-latency", "every database round trip takes params.ms (200) longer", "postgres",
                     "sortie-db-latency"),
    Fault("duplicate-delivery", "a share params.prob (0.5) of the events is delivered twice", _duplicate_delivery_sim,
          _duplicate_delivery_native),
    Fault(STALE_CONSUMER, "a consumer of an old release left in consumer group params.group (dispatcher) takes its "
          "share of the group's messages and acks them unread", _stale_consumer_sim, _stale_consumer_native,
          _stale_consumer_check),
    *(chaos.crash_fault(name, chaos.crash_doc(*point), fixed_point(*point)) for name, point in CRASH_FAULTS.items()),
    chaos.any_crash_point(),
    chaos.hold_transaction(),
    chaos.kill_worker(("dispatcher",)),
    chaos.restart_process(),
    chaos.pause_process(),
    chaos.stop_service({"postgres": chaos.db_down, "rocketmq": chaos.broker_down, "s3": chaos.store_down}),
    chaos.redis_loss("Redis (the request-dedup and snapshot cache) loses its data and stops for the window"),
    chaos.toxic("toxic", "any Toxiproxy toxic: params link, type, stream (downstream), attributes"),
    Fault("close-airspace", "close (reopen when the window ends) the airspace over the first params.sites (1) areas",
          _close_airspace_sim, _close_airspace_native),
    Fault("redrive-dead-letters", "the on-call operator re-drives every dead letter", _redrive_sim, _redrive_native),
    Fault("resolve-reviews", "a supervisor resolves every MANUAL_REVIEW task through the API, as the platform says",
          _resolve_reviews_sim, _resolve_reviews_native),
    Fault("redrive-dead", "a supervisor re-drives, through the API, every outbox event and report gone DEAD and every "
          "dead letter on their areas (params.twice: each one twice in a row, a double click)", _redrive_dead_sim,
          _redrive_dead_native),
    Fault("audit-tamper", "the application's database role tries to rewrite and erase the audit log", None,
          _audit_tamper_native),
    Fault("revoke-permissions", "remove every operator's area and device permissions (give them back when the window "
          "ends): they may start nothing, and must still be able to stop their flights", _revoke_permissions_sim,
          _revoke_permissions_native),
    Fault("unfit-for-flight", "make waiting tasks unfit to fly, for good: shares of the fleet's devices (those of "
          "waiting tasks first) offline (params.offline), below the minimum battery (low_battery), at exactly it "
          "(at_min_battery: must still fly) or forgotten by the platform (unknown), and a share of the other waiting "
          "tasks' approvals revoked (revoke)", _unfit_for_flight_sim, _unfit_for_flight_native, check=_check_unfit),
)
