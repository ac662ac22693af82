"""The real shell's effect performer every system shares: runs a reference's worker generators synchronously against
real adapters (SQLAlchemy sessions, a Broker, an ObjectStore: kernel.ports) and a wall clock, with crash points
around each effect (kernel.failpoints) and, when the harness keeps a history, the operations both shells record.
A system extends it with its own effects (the Copilot's platform calls: reference.copilot.runtime)."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Generator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from kernel.effects import (
    Ack,
    AwaitOutbox,
    BrokerUnavailable,
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
from kernel.failpoints import CrashPoint, FilePoints, crash_this_process, effect_names
from kernel.logs import one_line
from kernel.ports import Broker, Notifier, ObjectStore, OutboxListener

T = TypeVar("T")


class Stopping(BaseException):
    """The process was asked to stop (SIGTERM): raised between units of work, or from a sleep, it unwinds the worker
    generator (BaseException, so the core's 'except Exception' recovery paths do not swallow it)."""


@dataclass
class OpenTransaction:
    """What a thread knows of the transaction it is in: its name (crash points), whether its first write
    was seen (before-write holds), where to record an external call made inside it, and whether the
    Runtime is recording one now (so the client does not record the same call again)."""

    name: str
    recorder: OpRecorder | None = None
    wrote: bool = False
    noting: bool = False
    autocommit_writes: int = 0  # write statements seen in an autocommit transaction (at most one is allowed)


# The transaction this thread (or context) is in, set by Runtime.transact for every transaction: a
# ContextVar set and reset, cheap enough for every transaction.
_CURRENT_TX: ContextVar[OpenTransaction | None] = ContextVar("sortie_tx", default=None)

# The history operation both shells record for each publish of an outbox message to the broker: invoke, then ok or
# fail (the broker refused it); the publishers' backoff is judged from them (invariant I30).
PUBLISH = "publish"
# The operation both shells record for each ack of a delivery (its value: Delivery.op_value): ok, or fail when the
# broker refused it. A consumer acks only once a delivery's outcome is committed (I33), and acks what it dead-lettered
# (I32).
ACK = "ack"
# Recorded when a supervised worker's loop ended without being stopped (its value: the process and the error): a
# loop must carry on from what its dependencies throw at it (I34, J11).
LOOP_ENDED = "loop-ended"

# The transactions a system has both shells record, each under its Transact name: invoke, then ok once it committed
# (with the value this function makes of its result), or fail (the outcome may be unknown on a real database).
RecordedTransactions = Mapping[str, Callable[[Any], dict[str, Any]]]


def publish_value(message: Message) -> dict[str, Any]:
    """What a history records of a publish (both shells record the same)."""
    return {"event_id": message.event_id, "task_id": message.task_id, "event_type": message.event_type}


def loop_ended_value(process: str, error: BaseException | None) -> dict[str, Any]:
    """What a history records of a loop that ended without being stopped (both shells record the same)."""
    return {"process": process, "error": None if error is None else one_line(error)[:300]}


def open_transaction() -> OpenTransaction | None:
    """The transaction this thread is in (opened by Runtime.transact), or None."""
    return _CURRENT_TX.get()


class OpRecorder:
    """Appends this process's operations (deliveries, publishes and acks, the system's recorded transactions,
    crashes) to a JSONL file with epoch times; the stack runner merges every process's file into the run's history."""

    def __init__(self, path: str, process: str, transactions: RecordedTransactions | None = None) -> None:
        self.path, self.process = path, process
        self.transactions: RecordedTransactions = transactions or {}
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole process life
        self._lock = threading.Lock()  # the API records from its request threads

    def op(self, type_: str, f: str, value: dict[str, Any]) -> None:
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
        if isinstance(effect, Receive):
            deliveries = perform(effect)
            for d in deliveries:
                self.op("info", "deliver", d.op_value(effect.group))
            return deliveries
        if isinstance(effect, Ack):
            return self._broker_call(ACK, effect.delivery.op_value(effect.group), effect, perform, invoke=False)
        if isinstance(effect, Publish):
            return self._broker_call(PUBLISH, publish_value(effect.message), effect, perform, invoke=True)
        if isinstance(effect, Transact) and (value_of := self.transactions.get(effect.name)) is not None:
            self.op("invoke", effect.name, {})
            try:
                result = perform(effect)
            except Exception as exc:
                self.op("fail", effect.name, {"error": type(exc).__name__})
                raise
            self.op("ok", effect.name, value_of(result))
            return result
        return perform(effect)


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
    broker: Broker | None = None
    store: ObjectStore | None = None
    notifier: Notifier | None = None
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    failpoints: FilePoints | None = None
    recorder: OpRecorder | None = None
    # Notifications of committed outbox rows (a LISTEN on the database); without one, AwaitOutbox polls.
    outbox_listener: OutboxListener | None = None
    # Set by a worker's SIGTERM handler: the worker then stops before its next unit of work (kernel.effects.opens_unit)
    # instead of running through a backlog until it is killed.
    stop_requested: Callable[[], bool] = lambda: False

    def transact(self, fn: Callable[[Tx], T], name: str = "", *, autocommit: bool = False) -> T:
        """One transaction. ``name`` (a Transact effect's name) is what crash points call it. While it is
        open, the thread knows it (``open_transaction()``): an external call made then is recorded. With
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
        event.listen(engine, "before_cursor_execute", self._maybe_hold)

    def _maybe_hold(self, conn: Any, cursor: Any, statement: str, _params: Any, context: Any, *_: Any) -> None:
        current = _CURRENT_TX.get()
        if current is None or current.wrote or not current.name or not writes(statement, context):
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
    auto = engine.execution_options(isolation_level="AUTOCOMMIT")
    event.listen(auto, "before_cursor_execute", _one_write_only)
    return sessionmaker(auto, expire_on_commit=False)


def _one_write_only(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, *_: Any) -> None:
    current = _CURRENT_TX.get()
    if current is None or not writes(statement, context):
        return
    current.autocommit_writes += 1
    if current.autocommit_writes > 1:
        raise SecondWriteInAutocommit(f"transaction {current.name!r} wrote a second statement in autocommit mode: "
                                      f"{statement.split(None, 3)[:3]}")


def writes(statement: str, context: Any) -> bool:
    """An INSERT, UPDATE or DELETE, also when it starts with data-modifying CTEs (WITH ... INSERT)."""
    if statement.lstrip()[:7].upper().startswith(("INSERT", "UPDATE", "DELETE")):
        return True
    return bool(context is not None and (context.isinsert or context.isupdate or context.isdelete))
