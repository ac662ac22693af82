"""The simulation shell, for any system: drives a reference's worker generators in simpy virtual time against
SQLite (the interleaving database, with the system's schema), the broker model, an in-memory object store and
cache, supervised processes and crash points. A system brings its own models and effects (the Copilot's platform
model and platform calls) through a subclass of SimWorld and its ``performers``.

Effects are performed *then* their latency is charged, so a process killed during the latency has had
its effect (a commit, a platform create) without seeing the answer: the window where real crashes land.
"""

from __future__ import annotations

import logging
import random
import traceback
import uuid
import weakref
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import simpy
from sqlalchemy import Connection, MetaData, exc

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from kernel.coverage import Coverage
from kernel.effects import (
    Ack,
    AwaitOutbox,
    BrokerUnavailable,
    Jitter,
    ObjectStoreError,
    Publish,
    PutObject,
    Receive,
    Sleep,
    Transact,
    Tx,
    opens_unit,
)
from kernel.failpoints import CrashPoint, armed_roles, effect_name, effect_names, role_of
from kernel.logs import is_defect, one_line
from kernel.ports import Notifier
from kernel.runtime import (
    ACK,
    LOOP_ENDED,
    PUBLISH,
    RecordedTransactions,
    Stopping,
    loop_ended_value,
    publish_value,
)
from scenarios.sim.broker import SimBroker
from scenarios.sim.cache import SimCache
from scenarios.sim.db import SimDatabase

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH_TS = EPOCH.timestamp()
DRAIN = "drain"  # the interrupt that wakes a sleeping process asked to stop (SimWorld.drain)


class Killed(Exception):
    """Raised inside a simulated process to end it where it stands (SIGKILL)."""


@dataclass(frozen=True)
class Latency:
    db_s: float = 0.002  # the commit's answer on its way back (a kill in this window: committed, unanswered)
    statement_s: float = 0.0005  # one statement's round trip, jittered +-50% per statement
    broker_s: float = 0.002
    store_s: float = 0.01
    broker_long_poll_s: float = 0.0  # a receive waits this long for a message (0: answers at once)


@dataclass
class Supervised:
    name: str
    factory: Callable[[], Generator[Any, Any, Any]]
    restart_after_s: float
    process: simpy.Process | None = None
    alive: bool = False
    restarts: int = 0


@dataclass
class SimStore:
    """An in-memory object store with an outage switch."""

    objects: dict[str, bytes] = field(default_factory=dict)
    down: bool = False
    puts: int = 0

    def put(self, key: str, data: bytes) -> None:
        if self.down:
            raise ObjectStoreError("object store unavailable")
        self.puts += 1
        self.objects[key] = data


class _LogWatch(logging.Handler):
    """What the references log that the world running now (one at a time per process) must hear: the defects
    (kernel.logs.DEFECTS) their loops carried on from, which a redelivery or a reconciler may repair so no other
    record shows them (I27), and whatever else the system's world hears (SimWorld.heard: the Copilot's alerts)."""

    world: Callable[[], SimWorld | None] = staticmethod(lambda: None)  # a weak reference: never keeps a world alive

    def emit(self, record: logging.LogRecord) -> None:
        world = self.world()
        if world is None:
            return
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_defect(exc):
            world.defect(exc, record.name)
        world.heard(record)


_LOG_WATCH = _LogWatch(logging.WARNING)


def _where(exc: BaseException) -> str:
    """The innermost frame of the traceback in the project's code (file:line), where the defect is."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/site-packages/" not in f.filename]
    return f"{'/'.join(frames[-1].filename.rsplit('/', 2)[-2:])}:{frames[-1].lineno}" if frames else ""


class SimWorld:
    """The world one simulated run plays in. A system gives its schema (``metadata``, and ``ddl`` run after the
    tables: its notification triggers), its broker's subscriptions (consumer group -> event types), the transactions
    both shells record (kernel.runtime.RecordedTransactions) and its coverage windows (``targets``); its own effects
    are performed by what it registers in ``performers``."""

    # Loggers whose WARNING records the world hears (_LogWatch): every reference's and the kernel's.
    watched_loggers: tuple[str, ...] = ("reference", "kernel")
    # The coverage target reached when a message already delivered to one process reaches another (None: none).
    redelivery_target: str | None = None

    def __init__(self, seed: int, *, metadata: MetaData, ddl: tuple[str, ...] = (), latency: Latency | None = None,
                 subscriptions: Mapping[str, frozenset[str]] | None = None,
                 recorded: RecordedTransactions | None = None, targets: Coverage | None = None) -> None:
        self.seed = seed
        self.env = simpy.Environment()
        self.latency = latency or Latency()
        self.rng_ids = random.Random(f"{seed}:ids")
        self.rng_jitter = random.Random(f"{seed}:jitter")
        self.rng_latency = random.Random(f"{seed}:latency")
        self.rng_db = random.Random(f"{seed}:db")
        self.db = SimDatabase(self.env, self._statement_latency, metadata=metadata, ddl=ddl)
        # effect type -> performer(process, effect): a system's own effects (the Copilot's platform calls, the job
        # system's service calls)
        self.performers: dict[type, Callable[[str, Any], Generator[Any, Any, Any]]] = {}
        self.recorded: RecordedTransactions = recorded or {}
        self.sessions = self.db.sessions
        self.history = History()
        self.broker = SimBroker(random.Random(f"{seed}:broker"), dict(subscriptions or {}))
        self.broker.on_publish = self._wake_receivers
        self._arrival: simpy.Event | None = None  # fired at the next publish: long-polling receivers wait on it
        self.store = SimStore()
        self.cache = SimCache(lambda: self.env.now)
        self.crash_points: list[list[Any]] = []  # [CrashPoint, firings left], armed by chaos
        self.targets = targets or Coverage()
        self._window_index: dict[str, Any] = {}  # process -> its role's coverage windows (_windows_of)
        self._open_windows: dict[str, set[str]] = {}  # process -> coverage windows it is inside now
        self._fault_windows: dict[str, list[list[bool]]] = {}  # fault -> the stop flags of its open windows (window)
        self._first_receiver: dict[tuple[str, str], str] = {}  # (group, event id) -> first process it reached
        self.db_down = False
        self.db_error_tables: set[str] = set()  # INSERTs into these tables fail (inside the transaction)
        self.db_extra_s = 0.0  # B10: latency added to every transaction (a slow database link)
        self.kill_worker_window = False  # B4: while True, workers are SIGKILLed in turn
        self.supervised: dict[str, Supervised] = {}
        self._draining: set[str] = set()  # processes asked to stop (drain), until they end
        self._sleeping: set[str] = set()  # processes in a Sleep now (a drain wakes them, as SIGTERM wakes a wait)
        self.notifications = 0
        # Told every committed task change, as the stack's runtime tells its notifier (kernel.runtime.Runtime.transact):
        # the system's stream tier in simulation; None: nobody listens.
        self.notifier: Notifier | None = None
        self.stats: dict[str, int] = {"transactions": 0}
        self.db.fail_statement = self._maybe_fail_statement
        # LISTEN on the notification channel, per process: notified since its last wait? (PostgreSQL queues a
        # listener's notifications on its connection, so none is lost while the publisher is busy claiming.)
        self._listeners: dict[str, bool] = {}
        self._outbox_notified: simpy.Event | None = None
        self.db.on_notify = self._outbox_notify
        self.defects: list[dict[str, Any]] = []  # see defect()
        for name in self.watched_loggers:
            logging.getLogger(name).addHandler(_LOG_WATCH)  # once per logger: addHandler skips a handler it has
        _LOG_WATCH.world = weakref.ref(self)

    # ------------------------------------------------------------------ clock and ids

    def now_dt(self) -> datetime:
        return EPOCH + timedelta(seconds=self.env.now)

    def new_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng_ids.getrandbits(128), version=4)

    # ------------------------------------------------------------------ database

    def _statement_latency(self) -> float:
        """One statement's round trip, jittered so that seeds differ in how transactions interleave."""
        return self.latency.statement_s * self.rng_db.uniform(0.5, 1.5) + self.db_extra_s

    def _maybe_fail_statement(self, statement: str, params: Any) -> None:
        if self.db_down:
            raise exc.OperationalError(statement, params, ConnectionError("database unavailable (injected)"))
        if self.db_error_tables and statement.startswith("INSERT INTO "):
            table = statement[len("INSERT INTO "):].split(" ", 1)[0].strip('"')
            if table in self.db_error_tables:
                raise exc.OperationalError(statement, params, RuntimeError(f"injected error inserting into {table}"))

    def transact(self, fn: Callable[[Tx], Any]) -> Any:
        """A transaction outside virtual time: setup, reads, and the harness's own changes (after
        ``self.db.idle()``, see chaos.simulated)."""
        self.stats["transactions"] += 1
        body = _TxBody(fn, self.now_dt(), self.new_id)
        result = self.db.transact_now(body)
        self._committed(body.changes())
        return result

    def transact_in_time(self, fn: Callable[[Tx], Any], process: str = "", name: str = ""
                         ) -> Generator[Any, Any, Any]:
        """A transaction of a simulated process: statement by statement in virtual time, interleaved with
        the other processes' transactions (scenarios.sim.db)."""
        self.stats["transactions"] += 1
        body = _TxBody(fn, self.now_dt(), self.new_id)
        hold = (lambda: self._hold(process, name)) if self.crash_points and name else None
        result = yield from self.db.transact(body, hold, name)
        self._committed(body.changes())
        return result

    def _committed(self, changes: list[tuple[uuid.UUID, str, str, int]]) -> None:
        """After a commit: its task changes go to the notifier, as on the stack."""
        self.notifications += len(changes)
        if self.notifier is not None:
            for task_id, user_id, status, version in changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)

    # ------------------------------------------------------------------ crash points (kernel.failpoints)

    def arm(self, point: CrashPoint) -> None:
        self.crash_points.append([point, point.count])

    def _take_point(self, process: str, names: tuple[str, ...], when: str) -> CrashPoint | None:
        """The point armed for one of the effect's names (the most specific first, as FilePoints on the stack), for the
        process's role or a group it belongs to."""
        roles = armed_roles(role_of(process))
        for name in names:
            for armed in self.crash_points:
                point, left = armed
                if left > 0 and point.role in roles and point.effect == name and point.when == when:
                    armed[1] -= 1
                    return point
        return None

    def _crash(self, process: str, point: CrashPoint) -> Generator[Any, Any, None]:
        why = f"{point.when} {point.effect}"
        if point.action == "kill":
            self.kill_note(process, why)
            raise Killed(process)  # its windows count where it dies (_died)
        self._fault_in_windows(process)
        self.history.add(self.env.now, NEMESIS, INFO, "pause", {"process": process, "seconds": point.seconds,
                                                                 "why": why})
        yield self.env.timeout(point.seconds)  # SIGSTOP: the world moves on without this process
        self.history.add(self.env.now, NEMESIS, INFO, "resume", {"process": process})

    def _hold(self, process: str, name: str) -> float:
        """Seconds a transaction waits after its reads, before its first write (a before-write point)."""
        point = self._take_point(process, (name,), "before-write") if self.crash_points else None
        if point is None:
            return 0.0
        self.history.add(self.env.now, NEMESIS, INFO, "hold", {"process": process, "seconds": point.seconds,
                                                                "why": f"before-write {name}"})
        return point.seconds

    # ------------------------------------------------------------------ effects

    def perform(self, process: str, effect: Any) -> Generator[Any, Any, Any]:
        """Perform one effect of a simulated process, with the crash points armed around it and its coverage
        windows (kernel.coverage) tracked."""
        windows = self._windows_of(process)
        if not self.crash_points and windows is None:
            return (yield from self._perform(process, effect))
        name = effect_name(effect)
        names = effect_names(effect)
        if self.crash_points and (point := self._take_point(process, names, "before")):
            yield from self._crash(process, point)
        try:
            result = yield from self._perform(process, effect)
        except (simpy.Interrupt, Killed):
            raise
        except Exception:
            self._fault_in_windows(process, name)  # the effect failed inside them
            raise
        if windows is not None:
            opens, closes = windows
            open_now = self._open_windows.setdefault(process, set())
            open_now.difference_update(closes.get(name, ()))
            open_now.update(opens.get(name, ()))
        if self.crash_points and (point := self._take_point(process, names, "after")):
            yield from self._crash(process, point)
        return result

    def _stop_if_draining(self, process: str, effect: Any) -> None:
        """A process asked to stop (drain) ends at its next unit of work or sleep, as kernel.runtime.Runtime.perform
        ends it on the stack: what it held is finished by then."""
        if self._draining and process in self._draining and (isinstance(effect, Sleep) or opens_unit(effect)):
            raise Stopping

    def _windows_of(self, process: str) -> tuple[dict[str, list[str]], dict[str, list[str]]] | None:
        """(effect -> windows it opens, effect -> windows it closes) for the process's role; None: no windows."""
        if process not in self._window_index:
            role = role_of(process)
            opens: dict[str, list[str]] = {}
            closes: dict[str, list[str]] = {}
            for w in self.targets.windows:
                if not w.roles or role in w.roles:
                    for e in w.opens:
                        opens.setdefault(e, []).append(w.target)
                    for e in w.closes:
                        closes.setdefault(e, []).append(w.target)
            self._window_index[process] = (opens, closes) if opens else None
        return self._window_index[process]

    def _fault_in_windows(self, process: str, failed: str | None = None) -> None:
        outcomes = {w.target: w.outcomes for w in self.targets.windows}
        for target in sorted(self._open_windows.get(process, ())):
            if failed not in outcomes.get(target, ()):
                self.targets.reached(target)

    def _perform(self, process: str, effect: Any) -> Generator[Any, Any, Any]:
        env = self.env
        self._stop_if_draining(process, effect)
        if (own := self.performers.get(type(effect))) is not None:
            return (yield from own(process, effect))
        if isinstance(effect, Transact):
            if (value_of := self.recorded.get(effect.name)) is None:
                result = yield from self.transact_in_time(effect.fn, process, effect.name)
            else:  # as OpRecorder.around on the stack; a process killed inside leaves the invoke alone
                self.history.add(env.now, process, INVOKE, effect.name, {})
                try:
                    result = yield from self.transact_in_time(effect.fn, process, effect.name)
                except (simpy.Interrupt, Killed):
                    raise
                except Exception as exc:
                    self.history.add(env.now, process, FAIL, effect.name, {"error": type(exc).__name__})
                    raise
                self.history.add(env.now, process, OK, effect.name, value_of(result))
            yield env.timeout(self.latency.db_s + self.db_extra_s)
            return result
        if isinstance(effect, Publish):
            published = publish_value(effect.message)
            self.history.add(env.now, process, INVOKE, PUBLISH, published)
            try:
                self.broker.publish(effect.message, env.now)
            except BrokerUnavailable as exc:
                self.history.add(env.now, process, FAIL, PUBLISH, {**published, "error": str(exc)})
                raise
            yield env.timeout(self.latency.broker_s)
            self.history.add(env.now, process, OK, PUBLISH, published)
            return None
        if isinstance(effect, Receive):
            deliveries = yield from self._long_poll(effect)
            for d in deliveries:
                first = self._first_receiver.setdefault((effect.group, d.message.event_id), process)
                if first != process and self.redelivery_target is not None:
                    self.targets.reached(self.redelivery_target)
                self.history.add(env.now, process, INFO, "deliver", d.op_value(effect.group))
            yield env.timeout(self.latency.broker_s)
            return deliveries
        if isinstance(effect, Ack):
            acked = effect.delivery.op_value(effect.group)
            try:
                self.broker.ack(effect.group, effect.delivery)
            except BrokerUnavailable as exc:
                self.history.add(env.now, process, FAIL, ACK, {**acked, "error": str(exc)})
                raise
            self.history.add(env.now, process, OK, ACK, acked)
            yield env.timeout(self.latency.broker_s)
            return None
        if isinstance(effect, Sleep):
            self._sleeping.add(process)
            try:
                yield env.timeout(max(0.0, effect.seconds))
            finally:
                self._sleeping.discard(process)
            return None
        if isinstance(effect, AwaitOutbox):
            return (yield from self._await_outbox(process, effect))
        if isinstance(effect, Jitter):
            return self.rng_jitter.random() * effect.upper
        if isinstance(effect, PutObject):
            self.store.put(effect.key, effect.data)
            yield env.timeout(self.latency.store_s)
            return None
        raise TypeError(f"unknown effect {effect!r}")

    def _long_poll(self, effect: Receive) -> Generator[Any, Any, list[Any]]:
        """A receive that waits up to the long-poll time for a message: one is published, or an invisible or
        delayed one becomes visible (RocketMQ's SimpleConsumer answers as soon as it has one)."""
        env, broker = self.env, self.broker
        deadline = env.now + self.latency.broker_long_poll_s
        while True:
            deliveries = broker.receive(effect.group, effect.max_messages, effect.invisible_s, env.now)
            if deliveries or env.now >= deadline:
                return deliveries
            visible = broker.next_visible(effect.group)
            until = deadline if visible is None else min(deadline, visible)
            if until <= env.now:
                return deliveries
            if self._arrival is None:
                self._arrival = env.event()
            yield env.timeout(until - env.now) | self._arrival

    def _await_outbox(self, process: str, effect: AwaitOutbox) -> Generator[Any, Any, None]:
        """As a LISTEN on the stack's database: the first wait starts listening and returns (the claim that follows
        misses nothing committed before); a queued notification returns at once; otherwise wait for one or the
        timeout. With the database down the listening connection is lost: sleep the poll time."""
        if self.db_down:
            self._listeners.pop(process, None)
            yield self.env.timeout(effect.poll_s)
            return
        if self._listeners.get(process) is None:
            self._listeners[process] = False
            return
        if not self._listeners[process]:
            if self._outbox_notified is None:
                self._outbox_notified = self.env.event()
            yield self.env.timeout(effect.timeout_s) | self._outbox_notified
        self._listeners[process] = False

    def _outbox_notify(self, _channel: str) -> None:
        for process in self._listeners:
            self._listeners[process] = True
        notified, self._outbox_notified = self._outbox_notified, None
        if notified is not None:
            notified.succeed()

    def _wake_receivers(self) -> None:
        arrival, self._arrival = self._arrival, None
        if arrival is not None:
            arrival.succeed()

    # ------------------------------------------------------------------ processes

    def window(self, fault: str, on: bool, start: Callable[[Callable[[], bool]], Any]) -> None:
        """Run ``start(stopped)`` while the fault's window is open: ``stopped()`` turns true when it closes, for
        every run it started (windows of the same fault may overlap)."""
        if on:
            stop: list[bool] = []
            self._fault_windows.setdefault(fault, []).append(stop)
            start(lambda: bool(stop))
        else:
            for stop in self._fault_windows.pop(fault, ()):
                stop.append(True)

    def defect(self, exc: BaseException, logger: str) -> None:
        """A defect in the code was raised and survived: logged by a loop that carried on, or out of a process."""
        self.defects.append({"t": round(self.env.now, 3), "logger": logger, "error": one_line(exc)[:300],
                             "where": _where(exc)})

    def heard(self, record: logging.LogRecord) -> None:
        """A WARNING (or worse) record of a watched logger: what a system's world keeps of it (nothing here)."""

    def drive(self, name: str, gen: Generator[Any, Any, Any],
              on_done: Callable[[Any, BaseException | None], None] | None = None) -> simpy.Process:
        """Run a core generator as a simpy process. A kill (interrupt or Killed) closes it wherever it is; a drain
        (drain()) where it stopped: at its next unit of work or sleep."""

        def proc() -> Generator[Any, Any, Any]:
            result: Any = None
            error: BaseException | None = None
            while True:
                try:
                    effect = gen.throw(error) if error is not None else gen.send(result)
                except StopIteration as stop:
                    self._loop_ended(name, None)
                    if on_done:
                        on_done(stop.value, None)
                    return stop.value
                except Exception as failure:
                    if is_defect(failure):
                        self.defect(failure, name)
                    self._loop_ended(name, failure)
                    if on_done:
                        on_done(None, failure)
                    return None
                result, error = None, None
                try:
                    result = yield from self.perform(name, effect)
                except Stopping:
                    gen.close()
                    self._ended(name, "drained")
                    return None
                except (simpy.Interrupt, Killed) as killed:
                    gen.close()
                    if isinstance(killed, simpy.Interrupt) and killed.cause == DRAIN:
                        self._ended(name, "drained")
                        return None
                    self._died(name)
                    if on_done:
                        on_done(None, killed if isinstance(killed, Killed) else Killed(name))
                    return None
                except Exception as failure:
                    error = failure

        return self.env.process(proc())

    def _loop_ended(self, name: str, error: BaseException | None) -> None:
        """A supervised worker's loop returned or raised on its own (not killed): recorded for I34 and J11."""
        if name in self.supervised:
            self.history.add(self.env.now, name, INFO, LOOP_ENDED, loop_ended_value(name, error))

    def supervise(self, name: str, factory: Callable[[], Generator[Any, Any, Any]],
                  restart_after_s: float = 5.0) -> None:
        s = Supervised(name, factory, restart_after_s)
        self.supervised[name] = s
        self._start(s)

    def _start(self, s: Supervised) -> None:
        s.alive = True
        s.process = self.drive(s.name, s.factory())

    def _died(self, name: str) -> None:
        self._fault_in_windows(name)
        self._ended(name)

    def _ended(self, name: str, how: str = "") -> None:
        """A supervised process is gone (killed, or ``how``: drained, noted so): its supervisor starts it again."""
        self._listeners.pop(name, None)  # its connection, and what it listened on, went with it
        self._open_windows.pop(name, None)
        self._draining.discard(name)
        if how:
            self.history.add(self.env.now, NEMESIS, INFO, how, {"process": name})
        s = self.supervised.get(name)
        if s is None or not s.alive:
            return
        s.alive = False

        def restart() -> Generator[Any, Any, Any]:
            yield self.env.timeout(s.restart_after_s)
            s.restarts += 1
            self.history.add(self.env.now, NEMESIS, INFO, "restart", {"process": name})
            self._start(s)

        self.env.process(restart())

    def kill(self, name: str, why: str) -> None:
        s = self.supervised[name]
        if s.alive and s.process is not None and s.process.is_alive:
            self.kill_note(name, why)
            s.process.interrupt("kill")

    def drain(self, name: str) -> None:
        """SIGTERM to supervised process ``name`` (a graceful stop): it finishes what it holds and ends at its next
        unit of work or sleep (kernel.effects.opens_unit: kernel.runtime.Stopping, as on the stack); its supervisor
        starts it again."""
        s = self.supervised[name]
        if not s.alive or s.process is None or not s.process.is_alive or name in self._draining:
            return
        self._draining.add(name)
        self.history.add(self.env.now, NEMESIS, INFO, DRAIN, {"process": name})
        if name in self._sleeping:
            s.process.interrupt(DRAIN)

    def kill_note(self, name: str, why: str) -> None:
        self.history.add(self.env.now, NEMESIS, INFO, "kill", {"process": name, "why": why})

    def close(self) -> None:
        """Roll back what is still open and remove the database file."""
        self.db.close()



class _TxBody:
    """``fn`` as a SimDatabase transaction body: the Tx on the transaction's connection, kept for after the commit; the
    session it opened (if any) writes what it holds pending before the commit, and is closed either way."""

    def __init__(self, fn: Callable[[Tx], Any], now: datetime, new_id: Callable[[], uuid.UUID]) -> None:
        self.fn, self.now, self.new_id = fn, now, new_id
        self.tx: Tx | None = None

    def __call__(self, conn: Connection) -> Any:
        tx = self.tx = Tx.on_connection(conn, self.now, self.new_id)
        try:
            result = self.fn(tx)
            tx.close(commit=True)
        except BaseException:
            tx.close(commit=False)
            raise
        return result

    def changes(self) -> list[tuple[uuid.UUID, str, str, int]]:
        assert self.tx is not None
        return self.tx.changes
