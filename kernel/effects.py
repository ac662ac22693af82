"""Effects every system under test shares: what a reference's workers ask a shell to do. Workers are generators
that yield these and receive results (or have an exception thrown in). A database transaction is atomic inside one
``Transact``; crashes, timeouts and duplicates land between effects, exactly where they can land in production
(docs/architecture.md, "Sans-IO effects"). A system adds effects of its own (the Copilot's CallPlatform,
reference.copilot.effects); ``crash_name`` is what a crash point calls an effect."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

T = TypeVar("T")


class Tx:
    """What a transaction function sees: the transaction's connection (``conn``, for Core statements) and ORM session,
    the clock's now, ids, post-commit hooks.

    Built on a session (``Tx(session, ...)``: the stack's runtime, one session per transaction) or on a connection
    whose transaction the shell has begun (``Tx.on_connection``: the simulation, where most transactions run Core
    statements only and setting up a Session for each cost as much as the transaction's own statements: the session
    is then opened on first use, joined to that transaction, and ``close`` writes what it holds pending)."""

    __slots__ = ("_session", "_connection", "now", "_new_id", "changes", "_after_rollback", "request_id")

    def __init__(self, session: Session | None, now: datetime, new_id: Callable[[], uuid.UUID], *,
                 connection: Connection | None = None) -> None:
        self._session = session
        self._connection = connection
        self.now = now
        self._new_id = new_id
        # (task_id, user_id, status, version) of every transition: notified after commit.
        self.changes: list[tuple[uuid.UUID, str, str, int]] = []
        self._after_rollback: list[Callable[[], None]] = []
        # The client request this transaction serves, when one does (its correlation id: what its audit rows carry).
        self.request_id: str | None = None

    @classmethod
    def on_connection(cls, connection: Connection, now: datetime, new_id: Callable[[], uuid.UUID]) -> Tx:
        return cls(None, now, new_id, connection=connection)

    @property
    def session(self) -> Session:
        if self._session is None:
            # rollback_only: the session's commit or close leaves the shell's transaction alone (only a rollback
            # reaches it).
            self._session = Session(bind=self._connection, expire_on_commit=False,
                                    join_transaction_mode="rollback_only")
        return self._session

    @property
    def conn(self) -> Connection:
        """The transaction's connection, for Core statements. They do not see ORM objects the session still holds
        pending: ``flushed`` writes those first."""
        return self._connection if self._connection is not None else self.session.connection()

    def flushed(self) -> Connection:
        """The connection after writing the ORM objects this transaction holds pending (what the ORM's own execute
        does first), so a Core statement sees and follows what the transaction did."""
        session = self._session
        if session is not None and (session.new or session.dirty or session.deleted):
            session.flush()
        return self.conn

    def after_rollback(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once, right after this transaction rolls back (never if it commits), when the shell calls
        ``rolled_back``. Not a Session event: that fires inside the transaction, where the runtime's autocommit guard
        refused the callback's own write as the failed transaction's second (tests/postgres/test_autocommit.py)."""
        self._after_rollback.append(callback)

    def rolled_back(self) -> None:
        """Called by the shell once the transaction has rolled back: runs the ``after_rollback`` callbacks."""
        callbacks, self._after_rollback = self._after_rollback, []
        for callback in callbacks:
            callback()

    def close(self, commit: bool) -> None:
        """On a connection, before the shell ends the transaction: with ``commit``, write what the session holds
        pending (raises if that fails: then close again without); without, roll back at once and run the
        ``after_rollback`` callbacks. Either way the session is closed. On a session: nothing (the session's
        own transaction does all of it, and the shell calls ``rolled_back``)."""
        if self._connection is None:
            return
        session = self._session
        if commit:
            if session is not None:
                session.flush()
                session.close()
            return
        if session is not None:
            session.close()
        if self._after_rollback:
            self._connection.rollback()
            self.rolled_back()

    def new_id(self) -> uuid.UUID:
        return self._new_id()


@dataclass(frozen=True)
class Transact(Generic[T]):
    fn: Callable[[Tx], T]
    name: str
    # The transaction takes new work (a publisher's claim): a process asked to stop stops before it, between units
    # of work, as a consumer does before a Receive (opens_unit).
    takes_work: bool = False
    # The function takes no lock and writes with at most one statement (a read, or the confirm's task + audit + outbox
    # in one statement: reference.copilot.db.insert_together), so each statement may be its own transaction: under READ
    # COMMITTED a transaction's statements each see what was committed before them anyway, and one statement is
    # atomic. PostgreSQL then saves the BEGIN and COMMIT round trips (kernel.runtime refuses a second write);
    # SQLite, where insert_together is three statements, runs a transaction as before.
    autocommit: bool = False


@dataclass(frozen=True)
class Message:
    """A broker message: the outbox row as it travels. ``event_id`` is what consumers dedupe on; ``occurred_at``
    (ISO 8601, UTC) is when the change it announces was committed (seed 000 §4: eventId, taskId, eventType,
    occurredAt and the version)."""

    event_id: str
    event_type: str
    task_id: str
    task_version: int
    payload: dict[str, Any] = field(default_factory=dict)
    occurred_at: str = ""  # "" only for a message that is not one of ours (a foreign broker message)

    def as_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "payload": self.payload,
            "occurred_at": self.occurred_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        return cls(
            event_id=str(data["event_id"]),
            event_type=str(data["event_type"]),
            task_id=str(data["task_id"]),
            task_version=int(data["task_version"]),
            payload=dict(data.get("payload") or {}),
            occurred_at=str(data.get("occurred_at") or ""),
        )


@dataclass(frozen=True)
class Delivery:
    """One delivery of a message to a consumer group (at least once: the same message may come again)."""

    message: Message
    delivery_attempt: int
    receipt: Any  # the shell's handle for ack

    def op_value(self, group: str) -> dict[str, Any]:
        """The value of the history's ``deliver`` op for this delivery to ``group``, the same in every shell (the
        checkers I6 and I16 read it)."""
        return {"group": group, "event_id": self.message.event_id, "event_type": self.message.event_type,
                "task_id": self.message.task_id, "attempt": self.delivery_attempt}


@dataclass(frozen=True)
class Publish:
    message: Message


@dataclass(frozen=True)
class Receive:
    group: str
    max_messages: int
    invisible_s: float


def opens_unit(effect: Any) -> bool:
    """Whether the effect starts a new unit of work: a stopping process ends there, with nothing half done."""
    return isinstance(effect, Receive) or (isinstance(effect, Transact) and effect.takes_work)


@dataclass(frozen=True)
class Ack:
    group: str
    delivery: Delivery


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class AwaitOutbox:
    """Wait until a commit has written outbox rows that are due (a notification), at most ``timeout_s``; a shell
    that cannot be notified sleeps ``poll_s`` instead. Notifications speed the publisher up and spare the database
    its idle polls; the timeout still finds what no notification announces (a claim whose lease ran out)."""

    timeout_s: float
    poll_s: float


@dataclass(frozen=True)
class Jitter:
    """A uniform random number in [0, upper): the shell's seeded randomness keeps runs deterministic."""

    upper: float


@dataclass(frozen=True)
class PutObject:
    key: str
    data: bytes
    content_type: str = "application/json"


Work = Generator[Any, Any, T]


def crash_name(effect: Any) -> str:
    """The name a crash point uses for an effect: a transaction's name, an effect's own ``crash_name`` (a platform
    method), else its kind in lower case (``publish``, ``ack``, ``receive``)."""
    if isinstance(effect, Transact):
        return effect.name
    own = getattr(effect, "crash_name", None)
    return own if isinstance(own, str) else type(effect).__name__.lower()


def crash_names(effect: Any) -> tuple[str, ...]:
    """Every name a crash point may use for an effect, the most specific first: a publish also answers to
    ``publish:<event type>``, so a point can kill the publisher after a TaskCreated, the event a consumer must
    dedupe (C3; the first publishes after a fault starts may carry events no consumer group subscribes to)."""
    name = crash_name(effect)
    return (f"{name}:{effect.message.event_type}", name) if isinstance(effect, Publish) else (name,)


class BrokerUnavailable(Exception):
    """The broker did not acknowledge a publish: the outbox row stays pending."""


class ObjectStoreError(Exception):
    """An upload failed."""


def run_sync(gen: Generator[Any, Any, T], perform: Callable[[Any], Any]) -> T:
    """Drive a worker generator to completion, performing each effect with ``perform``.

    Exceptions raised by ``perform`` are thrown into the generator so the core decides what they mean.
    """
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = gen.throw(error) if error is not None else gen.send(result)
        except StopIteration as stop:
            value: T = stop.value  # the generator's return value (StopIteration types it Any)
            return value
        result, error = None, None
        try:
            result = perform(effect)
        except Exception as exc:
            error = exc
