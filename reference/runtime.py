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

from reference.effects import (
    Ack,
    CallPlatform,
    Jitter,
    Publish,
    PutObject,
    Receive,
    Sleep,
    Transact,
    Tx,
    run_sync,
)
from reference.failpoints import CrashPoint, FilePoints, effect_name
from reference.platform import PlatformClient
from reference.ports import Broker, Notifier, ObjectStore

T = TypeVar("T")


# The transaction this thread is in: [name, first write seen] (for before-write crash points).
_CURRENT_TX: ContextVar[list[Any] | None] = ContextVar("sortie_tx", default=None)

# Platform calls recorded in the history, as the simulation shell records them (scenarios.sim.world).
RECORDED_PLATFORM_CALLS = frozenset({"get_device", "create_flight", "find_by_request_id", "get_flight",
                                     "cancel_flight"})


def call_value(effect: CallPlatform) -> dict[str, Any]:
    """What a history records of a platform call (both shells record the same)."""
    value: dict[str, Any] = {"task_id": effect.task_id, "method": effect.method, "try": effect.try_no}
    if effect.method == "create_flight":
        value["request_id"] = effect.args[0].request_id
    return value


def platform_answer(result: Any) -> dict[str, Any]:
    """The fields of a platform answer that a history records (both shells record the same)."""
    from reference import platform as p

    if isinstance(result, p.FlightInfo):
        return {"external_id": result.external_id, "status": result.status}
    if isinstance(result, p.DeviceState):
        return {"online": result.online, "battery": result.battery}
    if isinstance(result, p.CancelResult):
        return {"accepted": result.accepted, "status": result.status}
    return {"found": False} if result is None else {}


class OpRecorder:
    """Appends this process's operations (platform calls, deliveries, crashes) to a JSONL file with epoch
    times; the stack runner merges every process's file into the run's history."""

    def __init__(self, path: str, process: str) -> None:
        self.path, self.process = path, process
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole process life

    def op(self, type_: str, f: str, value: dict[str, Any]) -> None:
        import json

        self._fh.write(json.dumps({"time": time.time(), "process": self.process, "type": type_, "f": f,
                                   "value": value}, default=str) + "\n")

    def around(self, effect: Any, perform: Callable[[Any], Any]) -> Any:
        from reference import platform as p

        if isinstance(effect, Receive):
            deliveries = perform(effect)
            for d in deliveries:
                self.op("info", "deliver", {"group": effect.group, "event_id": d.message.event_id,
                                            "event_type": d.message.event_type, "task_id": d.message.task_id,
                                            "attempt": d.delivery_attempt})
            return deliveries
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
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    platform: PlatformClient | None = None
    broker: Broker | None = None
    store: ObjectStore | None = None
    notifier: Notifier | None = None
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    failpoints: FilePoints | None = None
    recorder: OpRecorder | None = None

    def transact(self, fn: Callable[[Tx], T], name: str = "") -> T:
        """One transaction. ``name`` (a Transact effect's name) is what crash points call it."""
        token = _CURRENT_TX.set([name, False]) if self.failpoints is not None and name else None
        try:
            with self.sessions() as session, session.begin():
                tx = Tx(session, self.clock(), self.new_id)
                result = fn(tx)
        finally:
            if token is not None:
                _CURRENT_TX.reset(token)
        if self.notifier is not None:
            for task_id, user_id, status, version in tx.changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)
        return result

    def install_holds(self, engine: Any) -> None:
        """Let ``before-write`` crash points hold a named transaction after its reads, before its first
        write (the window in which a competing transaction commits)."""
        from sqlalchemy import event

        event.listen(engine, "before_cursor_execute", self._maybe_hold)

    def _maybe_hold(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        current = _CURRENT_TX.get()
        if current is None or current[1] or not statement.lstrip()[:7].upper().startswith(
                ("INSERT", "UPDATE", "DELETE")):
            return
        current[1] = True  # only the first write of the transaction
        assert self.failpoints is not None
        point = self.failpoints.take(current[0], "before-write")
        if point is not None:
            self._note(point, current[0])
            self.sleep(point.seconds)

    def _note(self, point: CrashPoint, effect: str) -> None:
        if self.recorder is not None:
            verb = {"kill": "kill", "stop": "pause", "hold": "hold"}[point.action]
            self.recorder.op("info", verb, {"process": self.recorder.process, "why": f"{point.when} {effect}",
                                            **({"seconds": point.seconds} if point.action == "hold" else {})})

    def _crash_point(self, effect: Any, when: str) -> None:
        import os
        import signal

        assert self.failpoints is not None
        name = effect_name(effect)
        point = self.failpoints.take(name, when)
        if point is None or point.action == "hold":
            return
        self._note(point, name)
        os.kill(os.getpid(), signal.SIGSTOP if point.action == "stop" else signal.SIGKILL)

    def perform(self, effect: Any) -> Any:
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
            return self.transact(effect.fn, effect.name)
        if isinstance(effect, CallPlatform):
            assert self.platform is not None, "no platform client configured"
            return getattr(self.platform, effect.method)(*effect.args)
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
        if isinstance(effect, Jitter):
            return self.rng.random() * effect.upper
        if isinstance(effect, PutObject):
            assert self.store is not None, "no object store configured"
            return self.store.put(effect.key, effect.data, effect.content_type)
        raise TypeError(f"unknown effect {effect!r}")

    def run(self, work: Generator[Any, Any, T]) -> T:
        return run_sync(work, self.perform)
