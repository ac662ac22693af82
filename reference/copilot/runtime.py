"""The real shell's effect performer: runs the core's generators synchronously against real adapters
(SQLAlchemy sessions, a PlatformClient, a Broker, an ObjectStore) and a wall clock."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from kernel.failpoints import CrashPoint, FilePoints, crash_this_process, effect_names
from reference.copilot.effects import (
    Ack,
    AwaitOutbox,
    BrokerUnavailable,
    CallPlatform,
    Jitter,
    Message,
    Publish,
    PutObject,
    Receive,
    Sleep,
    Transact,
    Tx,
    opens_unit,
    run_sync,
)
from reference.copilot.platform import PlatformClient
from reference.copilot.ports import Broker, Notifier, ObjectStore, OutboxListener
from reference.copilot.services.outbox import CLAIM, MARK_SENT, RELEASE

T = TypeVar("T")


class Stopping(BaseException):
    """The process was asked to stop (SIGTERM): raised between units of work, or from a sleep, it unwinds the worker
    generator (BaseException, so the core's 'except Exception' recovery paths do not swallow it)."""


@dataclass
class OpenTransaction:
    """What a thread knows of the transaction it is in: its name (crash points), whether its first write
    was seen (before-write holds), where to record a platform call made inside it, and whether the
    Runtime is recording one now (so the platform client does not record the same call again)."""

    name: str
    recorder: OpRecorder | None = None
    wrote: bool = False
    noting: bool = False
    autocommit_writes: int = 0  # write statements seen in an autocommit transaction (at most one is allowed)

    def platform_call(self, method: str, task_id: str | None, via: str) -> None:
        """A platform call starts while this transaction is open (invariant I18 is violated)."""
        if self.recorder is not None:
            self.recorder.op("info", PLATFORM_CALL_IN_TRANSACTION,
                             {"method": method, "task_id": task_id, "transaction": self.name, "via": via})


# The transaction this thread (or context) is in, set by Runtime.transact for every transaction: a
# ContextVar set and reset, cheap enough for every transaction.
_CURRENT_TX: ContextVar[OpenTransaction | None] = ContextVar("sortie_tx", default=None)

# Platform calls recorded in the history, as the simulation shell records them (scenarios.sim.world).
RECORDED_PLATFORM_CALLS = frozenset({"get_device", "create_flight", "find_by_request_id", "get_flight",
                                     "cancel_flight"})
# The history operation both shells record when a platform call starts inside an open database transaction
# (a transaction held across an external call: invariant I18, scenarios.checkers).
PLATFORM_CALL_IN_TRANSACTION = "platform-call-in-transaction"
# The history operation both shells record for a webhook batch of platform events that held duplicates
# (one per such batch, never per event): proof that duplicates reached the backend (scenario R3).
EVENTS_WITH_DUPLICATES = "events"


# The history operation both shells record for each publish of an outbox message to the broker: invoke, then ok or
# fail (the broker refused it); the publishers' backoff is judged from them (invariant I30).
PUBLISH = "publish"


def publish_value(message: Message) -> dict[str, Any]:
    """What a history records of a publish (both shells record the same)."""
    return {"event_id": message.event_id, "task_id": message.task_id, "event_type": message.event_type}


# The operation both shells record for each ack of a delivery (its value: Delivery.op_value): ok, or fail when the
# broker refused it. A consumer acks only once a delivery's outcome is committed (I33), and acks what it dead-lettered
# (I32).
ACK = "ack"
# Recorded when a supervised worker's loop ended without being stopped (its value: the process and the error): a
# loop must carry on from what its dependencies throw at it (I34).
LOOP_ENDED = "loop-ended"
# The transactions both shells record, each under its Transact name: invoke, then ok once it committed, or fail (the
# outcome may be unknown on a real database: the checkers count it as either). The outbox publisher's: a claim's ok
# names the rows it took, in its order; the publisher's rounds are judged from them (I36, I37).
RECORDED_TRANSACTIONS = frozenset({CLAIM, MARK_SENT, RELEASE})


def transaction_value(name: str, result: Any) -> dict[str, Any]:
    """What a history records of a recorded transaction's commit (both shells record the same)."""
    return {"ids": [m.event_id for m in result]} if name == CLAIM else {}


def events_value(accepted: int, duplicates: int) -> dict[str, int]:
    """What a history records of an ingested batch with duplicates (both shells record the same)."""
    return {"duplicates": duplicates, "accepted": accepted}


def open_transaction() -> OpenTransaction | None:
    """The transaction this thread is in (opened by Runtime.transact), or None."""
    return _CURRENT_TX.get()


def call_value(effect: CallPlatform) -> dict[str, Any]:
    """What a history records of a platform call (both shells record the same)."""
    value: dict[str, Any] = {"task_id": effect.task_id, "method": effect.method, "try": effect.try_no}
    if effect.method == "create_flight":
        value["request_id"] = effect.args[0].request_id
    return value


def platform_answer(result: Any) -> dict[str, Any]:
    """The fields of a platform answer that a history records (both shells record the same)."""
    from reference.copilot import platform as p

    if isinstance(result, p.FlightInfo):
        return {"external_id": result.external_id, "status": result.status}
    if isinstance(result, p.DeviceState):
        return {"online": result.online, "battery": result.battery}
    if isinstance(result, p.CancelResult):
        return {"accepted": result.accepted, "status": result.status}
    return {"found": False} if result is None else {}


class OpRecorder:
    """Appends this process's operations (platform calls, deliveries, publishes and acks, the outbox's transactions,
    crashes) to a JSONL file with epoch times; the stack runner merges every process's file into the run's history."""

    def __init__(self, path: str, process: str) -> None:
        import threading

        self.path, self.process = path, process
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole process life
        self._lock = threading.Lock()  # the API records from its request threads

    def op(self, type_: str, f: str, value: dict[str, Any]) -> None:
        import json

        line = json.dumps({"time": time.time(), "process": self.process, "type": type_, "f": f, "value": value},
                          default=str) + "\n"
        with self._lock:
            self._fh.write(line)

    def _broker_call(self, f: str, value: dict[str, Any], effect: Any, perform: Callable[[Any], Any], *,
                     invoke: bool) -> None:
        """A publish or an ack, recorded as the simulation records it: (invoke,) then ok, fail when the broker
        refused it, or info when the outcome is unknown (the process is stopping, or a defect)."""
        if invoke:
            self.op("invoke", f, value)
        try:
            perform(effect)
        except BrokerUnavailable as exc:
            self.op("fail", f, {**value, "error": str(exc)[:200]})
            raise
        except BaseException as exc:
            self.op("info", f, {**value, "error": type(exc).__name__})
            raise
        self.op("ok", f, value)

    def around(self, effect: Any, perform: Callable[[Any], Any]) -> Any:
        from reference.copilot import platform as p

        if isinstance(effect, Receive):
            deliveries = perform(effect)
            for d in deliveries:
                self.op("info", "deliver", d.op_value(effect.group))
            return deliveries
        if isinstance(effect, Ack):
            return self._broker_call(ACK, effect.delivery.op_value(effect.group), effect, perform, invoke=False)
        if isinstance(effect, Publish):
            return self._broker_call(PUBLISH, publish_value(effect.message), effect, perform, invoke=True)
        if isinstance(effect, Transact) and effect.name in RECORDED_TRANSACTIONS:
            self.op("invoke", effect.name, {})
            try:
                result = perform(effect)
            except Exception as exc:
                self.op("fail", effect.name, {"error": type(exc).__name__})
                raise
            self.op("ok", effect.name, transaction_value(effect.name, result))
            return result
        if not (isinstance(effect, CallPlatform) and effect.method in RECORDED_PLATFORM_CALLS):
            return perform(effect)
        value = call_value(effect)
        self.op("invoke", effect.method, value)
        try:
            result = perform(effect)
        except p.PlatformTimeout as exc:
            self.op("info", effect.method, {**value, "error": "TIMEOUT", "detail": exc.code})
            raise
        except p.PlatformError as exc:
            self.op("fail", effect.method, {**value, "error": exc.code})
            raise
        self.op("ok", effect.method, {**value, **platform_answer(result)})
        return result


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Runtime:
    """Adapters are optional: the API needs only the database; workers need their own adapters."""

    sessions: sessionmaker[Session]
    clock: Callable[[], datetime] = utc_now
    # Sessions for Transact(..., autocommit=True) (``autocommit_sessions``: PostgreSQL only); without them, such a
    # transaction is an ordinary one.
    autocommit_sessions: sessionmaker[Session] | None = None
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    platform: PlatformClient | None = None
    broker: Broker | None = None
    store: ObjectStore | None = None
    notifier: Notifier | None = None
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    failpoints: FilePoints | None = None
    recorder: OpRecorder | None = None
    # Notifications of committed outbox rows (reference.copilot.adapters.outbox_listen_pg); without one, AwaitOutbox
    # polls.
    outbox_listener: OutboxListener | None = None
    # Set by a worker's SIGTERM handler: the worker then stops before its next unit of work (kernel.effects.opens_unit)
    # instead of running through a backlog until it is killed.
    stop_requested: Callable[[], bool] = lambda: False

    def transact(self, fn: Callable[[Tx], T], name: str = "", *, autocommit: bool = False) -> T:
        """One transaction. ``name`` (a Transact effect's name) is what crash points call it. While it is
        open, the thread knows it (``open_transaction()``): a platform call made then is recorded. With
        ``autocommit`` (kernel.effects.Transact) and autocommit sessions, each statement is its own transaction."""
        token = _CURRENT_TX.set(OpenTransaction(name, self.recorder))
        sessions = self.autocommit_sessions if autocommit and self.autocommit_sessions is not None else self.sessions
        tx: Tx | None = None
        failed = True
        try:
            with sessions() as session, session.begin():
                tx = Tx(session, self.clock(), self.new_id)
                result = fn(tx)
            failed = False
        finally:
            _CURRENT_TX.reset(token)
            if failed and tx is not None:  # it rolled back: its callbacks run outside the open-transaction marker
                tx.rolled_back()
        assert tx is not None
        if self.notifier is not None:
            for task_id, user_id, status, version in tx.changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)
        return result

    def install_holds(self, engine: Any) -> None:
        """Let ``before-write`` crash points hold a named transaction after its reads, before its first
        write (the window in which a competing transaction commits)."""
        from sqlalchemy import event

        event.listen(engine, "before_cursor_execute", self._maybe_hold)

    def _maybe_hold(self, conn: Any, cursor: Any, statement: str, _params: Any, context: Any, *_: Any) -> None:
        current = _CURRENT_TX.get()
        if current is None or current.wrote or not current.name or not _writes(statement, context):
            return
        current.wrote = True  # only the first write of the transaction
        assert self.failpoints is not None
        point = self.failpoints.take(current.name, "before-write")
        if point is not None:
            self._note(point, current.name)
            self.sleep(point.seconds)

    def _note(self, point: CrashPoint, effect: str) -> None:
        if self.recorder is not None:
            verb = {"kill": "kill", "stop": "pause", "hold": "hold"}[point.action]
            self.recorder.op("info", verb, {"process": self.recorder.process, "why": f"{point.when} {effect}",
                                            **({"seconds": point.seconds} if point.action == "hold" else {})})

    def _crash_point(self, effect: Any, when: str) -> None:
        assert self.failpoints is not None
        for name in effect_names(effect):
            point = self.failpoints.take(name, when)
            if point is not None:
                break
        else:
            return
        if point.action == "hold":
            return
        self._note(point, name)
        crash_this_process(point.action)

    def perform(self, effect: Any) -> Any:
        if opens_unit(effect) and self.stop_requested():
            raise Stopping
        if self.failpoints:
            self._crash_point(effect, "before")
        if self.recorder is not None:
            result = self.recorder.around(effect, self._perform)
        else:
            result = self._perform(effect)
        if self.failpoints:
            self._crash_point(effect, "after")
        return result

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Transact):
            return self.transact(effect.fn, effect.name, autocommit=effect.autocommit)
        if isinstance(effect, CallPlatform):
            assert self.platform is not None, "no platform client configured"
            current = _CURRENT_TX.get()
            if current is None or effect.method == "capabilities":  # capabilities: configuration, no call
                return getattr(self.platform, effect.method)(*effect.args)
            # Performed from inside a transaction (a transaction function that drives work itself).
            current.platform_call(effect.method, effect.task_id, "runtime")
            current.noting = True
            try:
                return getattr(self.platform, effect.method)(*effect.args)
            finally:
                current.noting = False
        if isinstance(effect, Publish):
            assert self.broker is not None, "no broker configured"
            return self.broker.publish(effect.message)
        if isinstance(effect, Receive):
            assert self.broker is not None, "no broker configured"
            return self.broker.receive(effect.group, effect.max_messages, effect.invisible_s)
        if isinstance(effect, Ack):
            assert self.broker is not None, "no broker configured"
            return self.broker.ack(effect.group, effect.delivery)
        if isinstance(effect, Sleep):
            self.sleep(effect.seconds)
            return None
        if isinstance(effect, AwaitOutbox):
            if self.outbox_listener is None:
                self.sleep(effect.poll_s)
            else:
                self.outbox_listener.wait(effect.timeout_s, effect.poll_s, self.sleep)
            return None
        if isinstance(effect, Jitter):
            return self.rng.random() * effect.upper
        if isinstance(effect, PutObject):
            assert self.store is not None, "no object store configured"
            return self.store.put(effect.key, effect.data, effect.content_type)
        raise TypeError(f"unknown effect {effect!r}")

    def run(self, work: Generator[Any, Any, T]) -> T:
        return run_sync(work, self.perform)


class SecondWriteInAutocommit(RuntimeError):
    """A Transact(..., autocommit=True) function issued a second write statement: the first is already committed
    alone, so the function must run as an ordinary transaction (a defect of the reference, refused before it runs)."""


def autocommit_sessions(engine: Any) -> sessionmaker[Session]:
    """Sessions on ``engine``'s pool whose every statement is its own transaction: psycopg in autocommit mode sends
    no BEGIN and no COMMIT (two round trips of a read's three; the confirm's four become two). A second write
    statement in one such transaction raises SecondWriteInAutocommit before it reaches the database."""
    from sqlalchemy import event

    auto = engine.execution_options(isolation_level="AUTOCOMMIT")
    event.listen(auto, "before_cursor_execute", _one_write_only)
    return sessionmaker(auto, expire_on_commit=False)


def _one_write_only(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, *_: Any) -> None:
    current = _CURRENT_TX.get()
    if current is None or not _writes(statement, context):
        return
    current.autocommit_writes += 1
    if current.autocommit_writes > 1:
        raise SecondWriteInAutocommit(f"transaction {current.name!r} wrote a second statement in autocommit mode: "
                                      f"{statement.split(None, 3)[:3]}")


def _writes(statement: str, context: Any) -> bool:
    """An INSERT, UPDATE or DELETE, also when it starts with data-modifying CTEs (WITH ... INSERT)."""
    if statement.lstrip()[:7].upper().startswith(("INSERT", "UPDATE", "DELETE")):
        return True
    return bool(context is not None and (context.isinsert or context.isupdate or context.isdelete))
