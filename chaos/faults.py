"""The catalogue's faults, one object each (Jepsen's nemesis): a name, what it does, its simulation half and
its real-stack half side by side. FAULTS is the one name set: an incident file's fault steps are checked
against it, and both shells apply a fault by looking it up here (chaos.simulated.apply_fault,
chaos.native.NativeNemesis.apply).

A half is ``(target, params, on) -> None``: it starts (on) or stops the fault. The simulation half acts on a
SimulatedWorld (chaos/simulated.py), the native half on a NativeNemesis (chaos/native.py: the Toxiproxy
client, the admin engine, the worker processes). A half is None where the shell has no form for the fault.
Crash points are one mechanism for both shells (chaos/crashpoints.py, kernel/failpoints.py): every
crash-point fault arms the same points in either one."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import select, text

from chaos.crashpoints import CRASH_FAULTS, GENERIC, crash_points
from harness.history import AIRSPACE, DEVICES, FAIL, INFO, INVOKE, LOST_MESSAGE, NEMESIS, OK, REVOKE_APPROVAL
from kernel.effects import Ack, BrokerUnavailable, Message, Receive, Sleep
from reference.copilot.errors import DomainError
from reference.copilot.models import DeadLetter, Device, DroneTask, SiteArea
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER, HANDLERS, redrive
from simulator.model import PlatformFaults, platform_defaults

if TYPE_CHECKING:
    from chaos.native import NativeNemesis
    from chaos.simulated import SimulatedWorld

Shell = Literal["sim", "native"]
Params = dict[str, Any]
SimHalf = Callable[["SimulatedWorld", Params, bool], None]
NativeHalf = Callable[["NativeNemesis", Params, bool], None]
Check = Callable[[Params, Shell], None]  # raises ValueError (or KeyError for a missing parameter)

_NO_FORM = {"sim": "the simulation cannot model {!r}", "native": "fault {!r} has no real-stack form"}


@dataclass(frozen=True)
class Fault:
    name: str
    doc: str  # one line: what the fault does
    sim: SimHalf | None  # None: the simulation cannot model it
    native: NativeHalf | None  # None: the real stack has no form for it
    check: Check | None = None  # the parameters, for a shell
    crash: bool = False  # arms crash points (chaos/crashpoints.py)

    def half(self, shell: Shell) -> SimHalf | NativeHalf | None:
        return self.sim if shell == "sim" else self.native

    def validate(self, params: Params, shell: Shell) -> None:
        """ValueError when the parameters do not make a fault this shell can apply."""
        if self.check is None:
            return
        try:
            self.check(params, shell)
        except KeyError as err:
            raise ValueError(f"{self.name}: params.{err.args[0]} is missing") from None


_FAULTS: dict[str, Fault] = {}
FAULTS: Mapping[str, Fault] = MappingProxyType(_FAULTS)


def _register(fault: Fault) -> None:
    assert fault.name not in _FAULTS, fault.name
    _FAULTS[fault.name] = fault


def names(shell: Shell) -> frozenset[str]:
    """The faults that have a form in ``shell``."""
    return frozenset(name for name, fault in FAULTS.items() if fault.half(shell) is not None)


def sim_names() -> frozenset[str]:
    return names("sim")


def native_names() -> frozenset[str]:
    return names("native")


def half_for(name: str, shell: Shell, params: Params) -> Callable[[Any, Params, bool], None]:
    """The half of fault ``name`` that ``shell`` applies, its parameters checked. ValueError for an unknown
    fault, a fault without a form in that shell, or bad parameters."""
    fault = FAULTS.get(name)
    if fault is None:
        raise ValueError(f"unknown fault {name!r}; known faults: {', '.join(sorted(FAULTS))}")
    apply = fault.half(shell)
    if apply is None:
        raise ValueError(_NO_FORM[shell].format(name))
    fault.validate(params, shell)
    return apply


def _needs(*keys: str) -> Check:
    def check(params: Params, shell: Shell) -> None:
        missing = [key for key in keys if key not in params]
        if missing:
            raise KeyError(missing[0])

    return check


# ---------------------------------------------------------------------------------------------- link cuts
# The real stack cuts Toxiproxy links for the window; the simulation flips the dependency's switch.


def _cut(*links: str) -> NativeHalf:
    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        for link in links:
            nemesis.stack.toxiproxy_client.set_enabled(link, not on)

    return native


def _db_outage_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.db_down = on


def _broker_outage_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.broker.down = on


def _platform_partition_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.platform_partitioned = on


def _object_store_outage_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.store.down = on


_register(Fault("db-outage", "the database is unreachable (link postgres cut)", _db_outage_sim, _cut("postgres")))
_register(Fault("broker-outage", "the broker is unreachable (link rocketmq cut)", _broker_outage_sim,
                _cut("rocketmq")))
_register(Fault("platform-partition", "the drone platform and its webhooks are unreachable (links platform, webhook "
                "cut)", _platform_partition_sim, _cut("platform", "webhook")))
_register(Fault("object-store-outage", "the object store is unreachable (link s3 cut)", _object_store_outage_sim,
                _cut("s3")))
def _stream_disconnect_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    # The clients' links: to the API, and to the stream tier when the stack runs one (it serves the streams then).
    proxies = getattr(getattr(nemesis.stack, "endpoints", None), "proxies", None) or {}
    links = ["api", *(["stream"] if "stream" in proxies else [])]
    _cut(*links)(nemesis, params, on)


_register(Fault("stream-disconnect", "the clients' links to the API and the stream tier are cut: open SSE streams "
                "drop, reconnects fail", None, _stream_disconnect_native))


# ---------------------------------------------------------------------------------------------- the platform


def _platform_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    # A window (with a duration) sets the knobs back to their defaults when it ends.
    world.platform.faults = PlatformFaults.from_json(params if on else platform_defaults(params),
                                                     base=world.platform.faults)


def _platform_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    import requests  # the real stack's client only: the simulation shell does without it

    url = f"{nemesis.ep.platform_control_url}/control/faults"
    if on:
        if "idempotency_key" in params or "query_supported" in params:
            # A platform without them is deployed knowing so: the reference is configured to match, before
            # the platform changes (a dispatcher still assuming a key would resend).
            nemesis.stack.set_platform_capabilities(bool(params.get("idempotency_key", True)),
                                                    bool(params.get("query_supported", True)))
        requests.put(url, json=params, timeout=10).raise_for_status()
    else:  # the end of a window: the knobs it set go back to their defaults (capabilities stay)
        knobs = platform_defaults({k: v for k, v in params.items() if k not in ("idempotency_key", "query_supported")})
        if knobs:
            requests.put(url, json=knobs, timeout=10).raise_for_status()


_register(Fault("platform", "the drone platform's fault knobs (errors, timeouts, accepted-then-timeout, flights that "
                "fail or are aborted, capabilities)",
                _platform_sim, _platform_native))


# ---------------------------------------------------------------------------------------------- the database


# The tables whose inserts a db-error fault can fail on the real stack (a harness trigger on each: NativeNemesis
# .install_fault_triggers); the simulation can fail any table's.
FAULT_TABLES = ("task_event_outbox", "processed_event", "event_failure")


def _db_error_check(params: Params, shell: Shell) -> None:
    tables = params["tables"]
    if not tables:
        raise ValueError("db-error: params.tables names no table")
    if shell == "native" and (others := sorted(set(tables) - set(FAULT_TABLES))):
        raise ValueError(f"db-error: on the real stack only {', '.join(FAULT_TABLES)} can fail, not {others}")


def _db_error_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    tables = set(params.get("tables", []))
    world.db_error_tables = world.db_error_tables | tables if on else world.db_error_tables - tables


def _db_error_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    # A real error raised by PostgreSQL inside the transaction (a harness trigger, NativeNemesis
    # .install_fault_triggers), as in C1.
    with nemesis.admin.begin() as conn:
        for table in params.get("tables", []):
            if on:
                conn.execute(text("INSERT INTO sortie_fault (target) VALUES (:t) ON CONFLICT DO NOTHING"), {"t": table})
            else:
                conn.execute(text("DELETE FROM sortie_fault WHERE target = :t"), {"t": table})


def _db_latency_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.db_extra_s = float(params.get("ms", 200)) / 1000.0 if on else 0.0


def _db_latency_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if on:
        nemesis.stack.toxiproxy_client.add_toxic("postgres", "sortie-db-latency", "latency",
                                                 attributes={"latency": int(params.get("ms", 200))})
    else:
        nemesis.stack.toxiproxy_client.remove_toxic("postgres", "sortie-db-latency")


_register(Fault("db-error", "inserts into params.tables fail with a database error inside their transaction",
                _db_error_sim, _db_error_native, _db_error_check))
_register(Fault("db-latency", "every database round trip takes params.ms (200) longer", _db_latency_sim,
                _db_latency_native))


# ---------------------------------------------------------------------------------------------- the broker


def _duplicate_delivery_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.broker.duplicate_prob = float(params.get("prob", 0.5)) if on else 0.0
    world.broker.duplicate_spread_s = float(params.get("spread_s", 0.0)) if on else 0.0


def _duplicate_delivery_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    prob = float(params.get("prob", 0.5))
    nemesis.window("duplicate-delivery", on, lambda stop: nemesis.republish(prob, stop))


_register(Fault("duplicate-delivery", "a share params.prob (0.5) of the events is delivered twice",
                _duplicate_delivery_sim, _duplicate_delivery_native))


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


def lost_to_group(record: Callable[[str, str, str, dict[str, Any]], None], group: str) -> Callable[[Message], None]:
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
    nemesis.window(STALE_CONSUMER, on, lambda stop: nemesis.stale_consumer(group, stop))


def _stale_consumer_check(params: Params, shell: Shell) -> None:
    group = _stale_group(params)
    if group not in HANDLERS:
        raise ValueError(f"stale-consumer: params.group {group!r} is not a consumer group ({', '.join(HANDLERS)})")


_register(Fault(STALE_CONSUMER, "a consumer of an old release left in consumer group params.group (dispatcher) takes "
                "its share of the group's messages and acks them unread", _stale_consumer_sim, _stale_consumer_native,
                _stale_consumer_check))


# ---------------------------------------------------------------------------------------------- crash points


def _arm_sim(name: str) -> SimHalf:
    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        if on:
            for point in crash_points(name, params):
                world.arm(point)

    return sim


def _arm_native(name: str) -> NativeHalf:
    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        if on:
            nemesis.arm_crash_points(crash_points(name, params))

    return native


def _points_check(name: str) -> Check:
    def check(params: Params, shell: Shell) -> None:
        crash_points(name, params)

    return check


def _crash_doc(role: str, effect: str, when: str, action: str) -> str:
    what = {"kill": "SIGKILL", "stop": "SIGSTOP (a zombie; SIGCONT after params.seconds)"}.get(action, action)
    effect, _, event = effect.partition(":")  # publish:TaskCreated: a publish of that event only
    of = f" of a {event}" if event else ""
    return f"{what} a process of role {role} {when} its {effect}{of} (params.count (1) times)"


_GENERIC_DOCS = {
    "crash-point": "any crash point: params role, effect (publish:<event type>: only that event), when (after), "
                   "action (kill), count (1), seconds",
    "hold-transaction": "a transaction params.tx of params.role is held params.seconds before its write",
}
for _name in (*CRASH_FAULTS, *GENERIC):
    _register(Fault(_name, _crash_doc(*CRASH_FAULTS[_name]) if _name in CRASH_FAULTS else _GENERIC_DOCS[_name],
                    _arm_sim(_name), _arm_native(_name), _points_check(_name), crash=True))


# ---------------------------------------------------------------------------------------------- processes


def _kill_workers(world: SimulatedWorld, roles: tuple[str, ...], every_s: float) -> Generator[Any, Any, None]:
    """SIGKILL, in turn, each worker whose name starts with one of ``roles``, every ``every_s`` seconds,
    while the window lasts (B4); the supervisor restarts them."""
    n = 0
    while world.kill_worker_window:
        victims = sorted(name for name in world.supervised if name.startswith(roles))
        if victims:
            world.kill(victims[n % len(victims)], "kill-worker")
            n += 1
        yield world.env.timeout(every_s)


def _kill_worker_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.kill_worker_window = on
    if on:
        world.env.process(_kill_workers(world, tuple(params.get("roles", ("dispatcher",))),
                                        float(params.get("every_s", 20.0))))


def _kill_worker_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    roles = tuple(params.get("roles", ("dispatcher",)))
    every = float(params.get("every_s", 20.0)) * nemesis.factor
    nemesis.window("kill-worker", on, lambda stop: nemesis.kill_workers(roles, every, stop))


def _restart_process_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if on:
        for name in sorted(world.supervised):
            if name.startswith(params["process"]):
                world.kill(name, "restart-process")


def _signal_processes(kind: Literal["restart", "pause"]) -> NativeHalf:
    """restart-process (on: restart) and pause-process (on: SIGSTOP, off: SIGCONT) of every process whose name
    starts with params.process."""

    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        for name, comp in list(nemesis.stack.components.items()):
            if not name.startswith(params["process"]):
                continue
            nemesis.record(NEMESIS, INFO, kind if on else "resume", {"process": name})
            if kind == "restart":
                if on:
                    comp.restart()
            elif on:
                comp.pause()
            else:
                comp.resume()

    return native


_register(Fault("kill-worker", "SIGKILL, in turn, a worker of params.roles (dispatcher) every params.every_s (20) "
                "seconds while the window lasts", _kill_worker_sim, _kill_worker_native))
_register(Fault("restart-process", "restart every process whose name starts with params.process",
                _restart_process_sim, _signal_processes("restart"), _needs("process")))
_register(Fault("pause-process", "SIGSTOP every process whose name starts with params.process; SIGCONT when the "
                "window ends", None, _signal_processes("pause"), _needs("process")))


# ---------------------------------------------------------------------------------------------- dependencies

# stop-service in the simulation: the dependencies it models, and the fault that stands for each one stopped
SIM_SERVICES = {"postgres": "db-outage", "rocketmq": "broker-outage", "s3": "object-store-outage"}


def _stop_service_check(params: Params, shell: Shell) -> None:
    service = params["service"]
    if shell == "sim" and service not in SIM_SERVICES:
        raise ValueError(f"stop-service: the simulation models {', '.join(SIM_SERVICES)}, not {service!r}")


def _stop_service_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    sim = FAULTS[SIM_SERVICES[params["service"]]].sim
    assert sim is not None
    sim(world, {}, on)


def _stop_service_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    service = nemesis.stack.services[params["service"]]
    if on:
        service.stop()
    else:
        service.start()


def _redis_loss_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if on:
        world.cache.flush()
    world.cache.down = on


def _redis_loss_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    redis = nemesis.stack.services["redis"]
    if on:
        redis.flushall()
        redis.stop()
    else:
        redis.start()


def _toxic_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    link, kind = params["link"], params["type"]
    if on:
        nemesis.stack.toxiproxy_client.add_toxic(link, f"sortie-{kind}", kind,
                                                 stream=params.get("stream", "downstream"),
                                                 attributes=params.get("attributes", {}))
    else:
        nemesis.stack.toxiproxy_client.remove_toxic(link, f"sortie-{kind}")


_register(Fault("stop-service", "a dependency params.service is stopped for the window (the simulation models "
                f"{', '.join(SIM_SERVICES)})", _stop_service_sim, _stop_service_native, _stop_service_check))
_register(Fault("redis-loss", "Redis (the request-dedup and snapshot cache) loses its data and stops for the window",
                _redis_loss_sim, _redis_loss_native))
_register(Fault("toxic", "any Toxiproxy toxic: params link, type, stream (downstream), attributes", None,
                _toxic_native, _needs("link", "type")))


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
    nemesis.set_airspace(int(params.get("sites", 1)), open_=not on)


Record = Callable[[str, str, str, dict[str, Any]], None]  # (process, type, f, value), stamped by the shell's clock


def redrive_all(transact: Any, record: Record) -> None:
    """The on-call operator re-drives every dead letter not yet re-driven (T2); each outcome is recorded."""
    ids = transact(lambda tx: list(tx.session.scalars(select(DeadLetter.id).where(DeadLetter.redriven_at.is_(None))
                                                      .order_by(DeadLetter.id))))
    for dl_id in ids:
        record("operator", INVOKE, "redrive", {"dead_letter": dl_id})
        try:
            event_id = transact(lambda tx, i=dl_id: redrive(tx, i, "operator-oncall"))
        except DomainError as err:
            record("operator", FAIL, "redrive", {"dead_letter": dl_id, "code": err.code})
        else:
            record("operator", OK, "redrive", {"dead_letter": dl_id, "event_id": event_id})


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
REVIEW_ORDER = ("executing", "completed", "failed", "cancelled")
REVIEW_REASON = "resolved by the on-call supervisor after checking the platform"


def _in_review(transact: Any) -> list[str]:
    from reference.copilot.models import DroneTask

    return [str(t) for t in transact(lambda tx: list(tx.session.scalars(
        select(DroneTask.id).where(DroneTask.status == "MANUAL_REVIEW").order_by(DroneTask.id))))]


def _review_value(task_id: str, resolution: str) -> dict[str, Any]:
    return {"task_id": task_id, "resolution": resolution}


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

    token = issue_token(nemesis.ep.token_secret, who.user_id, role=who.role, ttl_s=3600)

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
                value = _review_value(tid, resolution)
                record("supervisor", INVOKE, "review", value)
                cmd = api.ResolveReview(who, tid, {"resolution": resolution, "reason": REVIEW_REASON})
                if _recorded(record, "review", value, (yield world.drive("supervisor", api.handle(cmd, api.Ports())))):
                    break

    world.env.process(proc())


def _resolve_reviews_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if not on:
        return
    from sqlalchemy.orm import sessionmaker

    from reference.copilot import api
    from reference.copilot.runtime import Runtime

    who = _supervisor(params)
    call = _over_http(nemesis, who)
    for tid in _in_review(Runtime(sessionmaker(nemesis.admin, expire_on_commit=False)).transact):
        for resolution in REVIEW_ORDER:
            value = _review_value(tid, resolution)
            nemesis.record("supervisor", INVOKE, "review", value)
            cmd = api.ResolveReview(who, tid, {"resolution": resolution, "reason": REVIEW_REASON})
            if _recorded(nemesis.record, "review", value, call(cmd)):
                break


# A supervisor re-drives, through the API, everything that waits for one on their areas (GET /v1/ops/dead): outbox
# events and reports gone DEAD, consumers' dead letters. Each re-drive is recorded with what it re-drove.
_WAITING = (("outbox", "outbox", "event_id"), ("reports", "report", "task_id"), ("dead_letters", "dead-letter", "id"))
REDRIVE_REASON = "re-driven by the on-call supervisor after the outage"


def _waiting(listing: dict[str, Any]) -> list[tuple[str, str]]:
    return [(kind, str(item[key])) for field_, kind, key in _WAITING for item in listing.get(field_, [])]


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
            value = {"kind": kind, "id": item}
            record("supervisor", INVOKE, "redrive", value)
            cmd = api.Redrive(who, kind, item, {"reason": REDRIVE_REASON})
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
        value = {"kind": kind, "id": item}
        nemesis.record("supervisor", INVOKE, "redrive", value)
        _recorded(nemesis.record, "redrive", value, call(api.Redrive(who, kind, item, {"reason": REDRIVE_REASON})))


def _audit_tamper_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if on:
        nemesis.tamper_audit()


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
    return Unfit(*parts, revoke, low_pct=max(0.0, min_pct - 5.0), min_pct=min_pct, tasks=tasks)


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
        unfit = choose_unfit(*world.transact(lambda tx: _waiting_and_fleet(tx.session)), params)
        for device, online, battery in unfit.device_changes():
            world.platform.upsert_device(device, online, battery)
        for device in unfit.unknown:
            world.platform.remove_device(device)
        record(NEMESIS, INFO, DEVICES, unfit.record())
        for t in unfit.revoke:
            record("approver", INVOKE, REVOKE_APPROVAL, t)
            reply = yield world.drive("approver", api.handle(_revocation(who, t), api.Ports()))
            _recorded(record, REVOKE_APPROVAL, t, reply, process="approver")

    world.env.process(proc())


def _unfit_for_flight_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    if not on:
        return
    import requests

    with nemesis.admin.begin() as conn:
        unfit = choose_unfit(*_waiting_and_fleet(conn), params)
    for device, online, battery in unfit.device_changes():
        body = {"device_id": device, "online": online, "battery": battery}
        requests.post(f"{nemesis.ep.platform_control_url}/control/devices", json=body, timeout=10).raise_for_status()
    for device in unfit.unknown:
        requests.delete(f"{nemesis.ep.platform_control_url}/control/devices/{device}", timeout=10).raise_for_status()
    nemesis.record(NEMESIS, INFO, DEVICES, unfit.record())
    who = _approver(params)
    call = _over_http(nemesis, who)
    for t in unfit.revoke:
        nemesis.record("approver", INVOKE, REVOKE_APPROVAL, t)
        _recorded(nemesis.record, REVOKE_APPROVAL, t, call(_revocation(who, t)), process="approver")


_register(Fault("close-airspace", "close (reopen when the window ends) the airspace over the first params.sites (1) "
                "areas", _close_airspace_sim, _close_airspace_native))
_register(Fault("redrive-dead-letters", "the on-call operator re-drives every dead letter", _redrive_sim,
                _redrive_native))
_register(Fault("resolve-reviews", "a supervisor resolves every MANUAL_REVIEW task through the API, as the platform "
                "says", _resolve_reviews_sim, _resolve_reviews_native))
_register(Fault("redrive-dead", "a supervisor re-drives, through the API, every outbox event and report gone DEAD "
                "and every dead letter on their areas", _redrive_dead_sim, _redrive_dead_native))
_register(Fault("audit-tamper", "the application's database role tries to rewrite and erase the audit log", None,
                _audit_tamper_native))
_register(Fault("unfit-for-flight", "make waiting tasks unfit to fly, for good: shares of the fleet's devices (those "
                "of waiting tasks first) offline (params.offline), below the minimum battery (low_battery), at "
                "exactly it (at_min_battery: must still fly) or forgotten by the platform (unknown), and a share of "
                "the other waiting tasks' approvals revoked (revoke)",
                _unfit_for_flight_sim, _unfit_for_flight_native, check=_check_unfit))
