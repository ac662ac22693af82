"""The real shell's effect performer: runs the core's generators synchronously against real adapters
(SQLAlchemy sessions, a PlatformClient, a Broker, an ObjectStore) and a wall clock."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Generator
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
from reference.platform import PlatformClient
from reference.ports import Broker, Notifier, ObjectStore

T = TypeVar("T")


class Failpoints:
    """Crash points for fault injection on the real stack, like etcd's gofail. The harness writes
    ``{"<role>": {"<effect>": {"count": n, "action": "kill" | "stop"}}}`` (or just ``n`` for kill) to a
    JSON file. A process of that role, right after performing that effect (``publish``, ``ack``,
    ``create_flight``, or a Transact name such as ``confirm.create``), SIGKILLs itself (``kill``: a crash;
    the supervisor restarts it) or SIGSTOPs itself (``stop``: a zombie; the harness sends SIGCONT later),
    ``n`` times in total across the role's processes and restarts (one marker byte per firing, appended
    under an exclusive lock)."""

    def __init__(self, path: str, role: str) -> None:
        self.path, self.role = path, role
        self._mtime = -1.0
        self._points: dict[str, tuple[int, str]] = {}

    @staticmethod
    def name_of(effect: Any) -> str:
        if isinstance(effect, CallPlatform):
            return effect.method
        if isinstance(effect, Transact):
            return effect.name
        return type(effect).__name__.lower()

    def _load(self) -> dict[str, tuple[int, str]]:
        import json
        import os

        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return {}
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                with open(self.path) as fh:
                    data = json.loads(fh.read()).get(self.role, {})
                self._points = {k: (int(v["count"]), str(v.get("action", "kill"))) if isinstance(v, dict)
                                else (int(v), "kill") for k, v in data.items()}
            except (OSError, ValueError, KeyError, TypeError):
                self._points = {}
        return self._points

    def fire(self, effect: Any, before: Callable[[str], None] | None = None) -> None:
        """If a point is armed for this effect, take one firing and act (never returns from a kill)."""
        points = self._load()
        point = points.get(self.name_of(effect)) if points else None
        if point is None or point[0] <= 0:
            return
        import fcntl
        import os
        import signal

        count, action = point
        with open(f"{self.path}.{self.role}.{self.name_of(effect)}.fired", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            if len(fh.read()) >= count:
                return
            fh.write("x")
            fh.flush()
            os.fsync(fh.fileno())
        if before is not None:
            before(action)
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)


# Platform calls recorded in the history, as the simulation shell records them (scenarios.sim.world).
RECORDED_PLATFORM_CALLS = frozenset({"get_device", "create_flight", "find_by_request_id", "get_flight",
                                     "cancel_flight"})


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
        value: dict[str, Any] = {"task_id": effect.task_id, "method": effect.method}
        if effect.method == "create_flight":
            value["request_id"] = effect.args[0].request_id
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
    failpoints: Failpoints | None = None
    recorder: OpRecorder | None = None

    def transact(self, fn: Callable[[Tx], T]) -> T:
        with self.sessions() as session, session.begin():
            tx = Tx(session, self.clock(), self.new_id)
            result = fn(tx)
        if self.notifier is not None:
            for task_id, user_id, status, version in tx.changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)
        return result

    def perform(self, effect: Any) -> Any:
        if self.recorder is not None:
            result = self.recorder.around(effect, self._perform)
        else:
            result = self._perform(effect)
        if self.failpoints:
            recorder = self.recorder

            def note(action: str) -> None:
                if recorder is not None:
                    recorder.op("info", "pause" if action == "stop" else "kill",
                                {"process": recorder.process, "why": f"after {Failpoints.name_of(effect)}"})

            self.failpoints.fire(effect, note)
        return result

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Transact):
            return self.transact(effect.fn)
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
