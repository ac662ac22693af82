"""One process of the inspection pipeline on the real stack: ``python -m systems.inspection.node ROLE NAME``, ROLE one
of ``web`` (a web node: reference.inspection.leader.web_loop), ``worker`` (a heartbeat thread and a consumer thread:
reference.inspection.worker.worker_threads) or ``probe`` (an IS node: reference.inspection.probe.probe_loop).

The reference's effects performed for real: transactions on PostgreSQL (SQLAlchemy, through the stack's Toxiproxy
link), AMQP on RabbitMQ (pika, through its link: a channel per slot with a consumer per queue and its prefetch; a
confirmed mandatory publish, ``basic.return`` seen before the confirm), the IS node's outbox in a SQLite WAL file on
its disk (it outlives the process), the wall clock. Every operation the checkers read is appended to the process's
own JSON-lines history file (``time`` in epoch seconds; the runner merges and scales them).

Settings from the environment (the runner sets them): ``SORTIE_INSPECTION_DATABASE_URL``,
``SORTIE_INSPECTION_AMQP`` (JSON: host, ports (a RabbitMQ node's link each), vhost, user, password, heartbeat_s),
``SORTIE_INSPECTION_SETTINGS`` (JSON: reference.inspection.config.Settings fields, already in wall seconds),
``SORTIE_INSPECTION_HISTORY`` (a directory), ``SORTIE_INSPECTION_OUTBOX`` (the IS node's SQLite file),
``SORTIE_INSPECTION_DEVICES`` (JSON: the IS node's devices; or ``SORTIE_INSPECTION_DEVICES_FILE``, a file of that
JSON: a load's fleet is longer than an environment variable may be), ``SORTIE_INSPECTION_UNTIL`` (ISO time: the IS node
inspects until then), ``SORTIE_INSPECTION_BUG`` (defects switched on, comma-separated), ``SORTIE_FAILPOINTS`` (the
crash points file, kernel.failpoints: a thread's role is its process name's, ``probe-1`` -> probe),
``SORTIE_INSPECTION_PAUSE_AT`` (a file: ``{"effect", "seconds"}``, this process stopped when it next performs that
effect, the worker-pause fault's stop in the middle of a batch), ``SORTIE_INSPECTION_STALL`` (a file: while it exists
the worker's heartbeat thread is stuck before its next effect, its consumer going on: the heartbeat-stall fault),
``SORTIE_INSPECTION_REPLAY_HOLD`` (a file: while it exists the IS node's replayer finds nothing to replay: the
replay-hold fault), ``SORTIE_INSPECTION_REDIS`` (host:port: Redis through its link, for the leader's lease notices on
pub/sub; without it a notice is lost and a worker's wait for one is its poll). SIGTERM ends the process.

A crash point or a pause acts on the whole process, for real: SIGKILL, or SIGSTOP with a detached helper that sends
SIGCONT after the point's seconds (by pidfd, as the job system's instances do); each is noted first in the history
as the nemesis's ``kill`` or ``pause``."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK
from kernel.effects import BrokerUnavailable, Sleep, Transact, Tx, crash_name, run_sync
from kernel.failpoints import FilePoints, crash_this_process, role_of
from kernel.worker import serve_health
from reference.inspection.bugs import BUGS
from reference.inspection.config import Settings
from reference.inspection.effects import (
    HIGH,
    NORMAL,
    PRIORITIES,
    PUBLISH_ACK,
    PUBLISH_NACK,
    PUBLISH_RETURNED,
    AckDeliveries,
    AwaitLeaseNotice,
    Cancel,
    ChannelClosed,
    Consume,
    Delivery,
    Fetch,
    NackDeliveries,
    NotifyLeases,
    Now,
    OutboxAppend,
    OutboxConfirm,
    OutboxLastSeqs,
    OutboxPending,
    PublishConfirmed,
    SlotMaps,
    queue_name,
)
from reference.inspection.leader import Tick, web_loop
from reference.inspection.probe import Device, probe_loop
from reference.inspection.reshard import read_maps
from reference.inspection.worker import worker_threads

log = logging.getLogger("sortie.inspection.node")

EXCHANGE = "inspection.status"  # §5.1: direct
DEAD_LETTER_EXCHANGE = "inspection.dlx"
# The transactions whose outcome the checkers read (as the simulation records them: systems.inspection.sim)
RECORDED: dict[str, Callable[[Any], dict[str, Any]]] = {"batch.commit": lambda r: r.as_op(),
                                                         "worker.heartbeat": lambda r: {"state": r[0]}}
RESUME_HELPER = ("import contextlib, signal, sys, time; fd = int(sys.argv[1]); time.sleep(float(sys.argv[2]))\n"
                 "with contextlib.suppress(ProcessLookupError): signal.pidfd_send_signal(fd, signal.SIGCONT)")


class HistoryFile:
    """The process's operations, one JSON line each, appended with one write (a SIGKILL loses none written)."""

    def __init__(self, directory: str, process_name: str) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._fd = os.open(Path(directory) / f"{process_name}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def add(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), "process": process, "type": type_, "f": f, "value": value},
                          default=str) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())


# ---------------------------------------------------------------------------------------------- the outbox


class SqliteOutbox:
    """§3.5: the IS node's outbox, a SQLite file in WAL mode, each write committed with a full sync."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT "
                        "NOT NULL UNIQUE, routing_key TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL, "
                        "confirmed INTEGER NOT NULL DEFAULT 0)")
        # the greatest seq per device, kept past any cleaning of confirmed rows (INV-5)
        self.db.execute("CREATE TABLE IF NOT EXISTS device_seq (device_id TEXT PRIMARY KEY, seq INTEGER NOT NULL)")

    def append(self, rows: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        now, stored = time.time(), []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            for row in rows:
                cur = self.db.execute("INSERT OR IGNORE INTO outbox (message_id, routing_key, body, created_at) "
                                      "VALUES (?, ?, ?, ?)", (row["message_id"], row["routing_key"],
                                                              json.dumps(row["body"]), now))
                if cur.rowcount != 1:
                    continue  # message_id UNIQUE
                body = row["body"]
                self.db.execute("INSERT INTO device_seq VALUES (?, ?) ON CONFLICT (device_id) DO UPDATE SET seq = "
                                "max(seq, excluded.seq)", (str(body["device_id"]), int(body["seq"])))
                stored.append({**row, "seq": cur.lastrowid, "created_at": now, "confirmed": False})
        return stored

    def rows(self, where: str = "", args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [{"seq": seq, "message_id": mid, "routing_key": key, "body": json.loads(body), "created_at": at,
                 "confirmed": bool(confirmed)} for seq, mid, key, body, at, confirmed in self.db.execute(
            f"SELECT seq, message_id, routing_key, body, created_at, confirmed FROM outbox {where} ORDER BY seq",
            args)]

    def pending(self, older_than_s: float) -> list[dict[str, Any]]:
        return self.rows("WHERE confirmed = 0 AND created_at <= ?", (time.time() - older_than_s,))

    def confirm(self, seqs: tuple[int, ...]) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("UPDATE outbox SET confirmed = 1 WHERE seq = ?", [(s,) for s in seqs])

    def last_seqs(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT device_id, seq FROM device_seq"))


# ---------------------------------------------------------------------------------------------- AMQP


@dataclass
class SlotChannel:
    """A worker's channel for one slot (§5.3): a consumer per queue, what the broker pushed not yet fetched."""

    channel: Any
    ident: int
    consumers: list[str] = field(default_factory=list)
    pushed: dict[str, deque[Delivery]] = field(default_factory=lambda: {p: deque() for p in PRIORITIES})


class Amqp:
    """The process's one AMQP connection (pika's BlockingConnection: used by one thread), opened when first needed
    and again after it was lost; losing it (or any channel: the reference then forgets every channel) is
    ChannelClosed to a consumer and BrokerUnavailable to a publisher."""

    def __init__(self, settings: dict[str, Any], history: HistoryFile, process: str) -> None:
        import pika

        self.pika = pika
        # a node of the cluster each (its link), tried in order
        self.params = [pika.ConnectionParameters(
            host=settings["host"], port=int(port), virtual_host=settings["vhost"],
            credentials=pika.PlainCredentials(settings["user"], settings["password"]),
            heartbeat=max(1, round(float(settings["heartbeat_s"]))), connection_attempts=1, socket_timeout=3.0,
            stack_timeout=6.0, blocked_connection_timeout=10.0) for port in settings["ports"]]
        self.history, self.process = history, process
        self.conn: Any = None
        self.publisher: Any = None
        self.slots: dict[int, SlotChannel] = {}
        self._idents = itertools.count(1)
        self.prefetch = {HIGH: 100, NORMAL: 300}

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        ex = self.pika.exceptions
        return (ex.AMQPError, OSError, AssertionError)

    def connection(self) -> Any:
        if self.conn is None or not self.conn.is_open:
            self.conn, self.publisher, self.slots = None, None, {}
            try:
                self.conn = self.pika.BlockingConnection(self.params)
            except self.errors as exc:
                raise BrokerUnavailable(f"AMQP connection refused: {type(exc).__name__}") from None
        return self.conn

    def lost(self, exc: BaseException) -> ChannelClosed:
        """The connection (or one of its channels) failed: close it all, the broker requeues what it held."""
        self.history.add("broker", INFO, "channel-closed", {"process": self.process, "why": type(exc).__name__})
        conn, self.conn, self.publisher, self.slots = self.conn, None, None, {}
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except self.errors:
                pass
        return ChannelClosed(f"{type(exc).__name__}: {exc}")

    # --- a worker's consumers

    def consume(self, slot: int) -> None:
        try:
            conn = self.connection()
            sc = self.slots.get(slot)
            if sc is None or not sc.channel.is_open:
                sc = self.slots[slot] = SlotChannel(conn.channel(), next(self._idents))
            for priority in PRIORITIES:
                sc.channel.basic_qos(prefetch_count=self.prefetch[priority])  # per consumer made after it
                sc.consumers.append(sc.channel.basic_consume(
                    queue_name(slot, priority), self._on_message(slot, priority, sc), auto_ack=False))
        except BrokerUnavailable as exc:
            raise ChannelClosed(str(exc)) from None
        except self.errors as exc:
            raise self.lost(exc) from None

    def _on_message(self, slot: int, priority: str, sc: SlotChannel) -> Callable[..., None]:
        def pushed(channel: Any, method: Any, properties: Any, body: bytes) -> None:
            count = int((properties.headers or {}).get("x-delivery-count", 0)) + 1  # the header is 0 at first
            sc.pushed[priority].append(Delivery(slot, priority, int(method.delivery_tag), sc.ident, json.loads(body),
                                                count, datetime.now(UTC)))
        return pushed

    def cancel(self, slot: int) -> None:
        """basic.cancel of the slot's consumers; what they pushed and the worker never took is given back."""
        sc = self.slots.get(slot)
        if sc is None:
            return
        try:
            for tag in sc.consumers:
                sc.channel.basic_cancel(tag)
            sc.consumers.clear()
            untaken = [d for p in PRIORITIES for d in sc.pushed[p]]
            for d in untaken:
                sc.channel.basic_nack(d.tag, requeue=True)
            for p in PRIORITIES:
                sc.pushed[p].clear()
        except self.errors as exc:
            raise self.lost(exc) from None
        if untaken:
            self.history.add(self.process, OK, "nack", {"ids": [d.message_id for d in untaken], "why": "cancelled"})

    def fetch(self, wants: tuple[tuple[int, str, int], ...]) -> list[Delivery]:
        if self.conn is None:
            raise ChannelClosed("no connection")
        try:
            self.conn.process_data_events(time_limit=0)
        except self.errors as exc:
            raise self.lost(exc) from None
        limits = {(slot, priority): n for slot, priority, n in wants}
        out: list[Delivery] = []
        for slot, sc in self.slots.items():
            for priority in PRIORITIES:
                q = sc.pushed[priority]
                n = limits.get((slot, priority), len(q))  # a slot not wanted any more: all of it (the worker nacks)
                out.extend(q.popleft() for _ in range(min(n, len(q))))
        for d in out:
            self.history.add(self.process, INFO, "deliver", {"slot": d.slot, "priority": d.priority,
                                                             "message_id": d.message_id, "count": d.delivery_count})
        return out

    def settle(self, deliveries: tuple[Delivery, ...], ack: bool) -> None:
        by_ident = {sc.ident: sc for sc in self.slots.values()}
        try:
            for d in deliveries:
                sc = by_ident.get(d.channel)
                if sc is None:  # its channel is gone: RabbitMQ closes a channel acking a tag it does not know
                    raise ChannelClosed(f"delivery {d.message_id}: its channel {d.channel} is closed")
                if ack:
                    sc.channel.basic_ack(d.tag)
                else:
                    sc.channel.basic_nack(d.tag, requeue=True)
        except self.errors as exc:
            raise self.lost(exc) from None
        except ChannelClosed as exc:
            raise self.lost(exc) from None

    def sleep(self, seconds: float) -> None:
        """Sleep answering the broker (heartbeats, deliveries) when connected."""
        if self.conn is None:
            time.sleep(seconds)
            return
        try:
            self.conn.sleep(seconds)
        except self.errors as exc:
            self.lost(exc)  # the consumer finds out at its next AMQP effect
            time.sleep(0)

    # --- an IS node's publishes

    def publish(self, key: str, message: dict[str, Any]) -> str:
        pika = self.pika
        try:
            if self.publisher is None or not self.publisher.is_open:
                self.publisher = self.connection().channel()
                self.publisher.confirm_delivery()
            self.publisher.basic_publish(EXCHANGE, key, json.dumps(message).encode(), pika.BasicProperties(
                delivery_mode=2, message_id=str(message["message_id"]), content_type="application/json"),
                mandatory=True)
        except pika.exceptions.UnroutableError:
            return PUBLISH_RETURNED  # basic.return came before the confirm
        except pika.exceptions.NackError:
            return PUBLISH_NACK
        except self.errors as exc:
            self.lost(exc)
            raise BrokerUnavailable(f"no confirm: {type(exc).__name__}") from None
        return PUBLISH_ACK


# ---------------------------------------------------------------------------------------------- lease notices

NOTICE_CHANNEL = "slot_lease_updated"  # §4.1 step 2


class Notices:
    """§4.1's Redis pub/sub: the leader publishes the slots it changed, a worker's heartbeat thread waits for them.
    Redis away (its link cut), a publish is lost and a wait lasts its whole time (the poll): INV-14."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.client: Any = None
        self.pubsub: Any = None

    def _client(self) -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if self.client is None:  # no retries: a notice lost is the poll's to make up, not worth a stalled tick
            host, port = str(self.address).rsplit(":", 1)
            self.client = redis.Redis(host=host, port=int(port), socket_connect_timeout=2.0, socket_timeout=5.0,
                                      retry=Retry(NoBackoff(), 0))
        return self.client

    def publish(self, slots: tuple[int, ...]) -> tuple[int, str]:
        """(the subscribers it reached, why it was lost: "" when it was not)."""
        import redis

        if self.address is None:
            return 0, "no Redis"
        try:
            return int(self._client().publish(NOTICE_CHANNEL, json.dumps(list(slots)))), ""
        except redis.RedisError as exc:
            return 0, type(exc).__name__

    def wait(self, seconds: float) -> tuple[int, ...]:
        import redis

        deadline = time.monotonic() + seconds
        got: list[int] = []
        try:
            if self.address is not None and self.pubsub is None:
                self.pubsub = self._client().pubsub(ignore_subscribe_messages=True)
                self.pubsub.subscribe(NOTICE_CHANNEL)
            while self.pubsub is not None and (left := deadline - time.monotonic()) > 0:
                message = self.pubsub.get_message(timeout=0.0 if got else left)
                if message is None and got:
                    break  # what was buffered is read: the notice brings the lease read forward now
                if message is not None and message.get("type") == "message":
                    got.extend(int(s) for s in json.loads(message["data"]))
        except (redis.RedisError, OSError, ValueError):
            self._drop()
        time.sleep(max(0.0, deadline - time.monotonic()) if not got else 0.0)
        return tuple(sorted(set(got)))

    def _drop(self) -> None:
        with contextlib.suppress(Exception):
            if self.pubsub is not None:
                self.pubsub.close()
        self.pubsub = None


# ---------------------------------------------------------------------------------------------- the leader's lock


LEADER_LOCK_KEY = 1_001_004_001  # §4.1: pg_try_advisory_lock(web_scheduler_leader)


class AdvisoryLock:
    """§4.1: a web node leads while it holds PostgreSQL's session advisory lock, on a connection of its own, and only
    then runs the leader's tick (whose lease row and term still fence every write: reference.inspection.leader).
    The session is closed by the server when idle past ``idle_s`` (idle_session_timeout): a stopped leader's lock
    is released then, as a live leader touches its session every tick."""

    def __init__(self, engine: Any, idle_s: float) -> None:
        self.engine, self.idle_ms = engine, max(1000, int(idle_s * 1000))
        self.conn: Any = None
        self.held = False

    def hold(self) -> bool:
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        try:
            if self.conn is None:
                self.conn = self.engine.connect()
                self.conn.execute(text(f"SET idle_session_timeout = {self.idle_ms}"))
                self.held = False
            if not self.held:
                self.held = bool(self.conn.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                                   {"key": LEADER_LOCK_KEY}).scalar())
            else:
                self.conn.execute(text("SELECT 1"))
            self.conn.commit()  # idle, not idle in a transaction: the timeout applies
        except DBAPIError:
            self.drop()
        return self.held

    def drop(self) -> None:
        conn, self.conn, self.held = self.conn, None, False
        if conn is not None:
            try:
                conn.invalidate()
            except Exception:  # a connection already gone
                pass


# ---------------------------------------------------------------------------------------------- performing


class Node:
    """The effects of one process's threads, performed against the real database, broker and disk."""

    def __init__(self, name: str, cfg: Settings, env: dict[str, str]) -> None:
        self.name, self.cfg = name, cfg
        self.history = HistoryFile(env["SORTIE_INSPECTION_HISTORY"], name)
        self.engine = create_engine(env["SORTIE_INSPECTION_DATABASE_URL"], pool_size=4, max_overflow=2,
                                    pool_pre_ping=True, connect_args={"connect_timeout": 3})
        self.amqp = Amqp(json.loads(env["SORTIE_INSPECTION_AMQP"]), self.history, name)
        self.amqp.prefetch = {HIGH: cfg.prefetch_high, NORMAL: cfg.prefetch_normal}
        outbox = env.get("SORTIE_INSPECTION_OUTBOX")
        self.outbox = SqliteOutbox(outbox) if outbox else None
        self.failpoints = env.get("SORTIE_FAILPOINTS")
        self.pause_at = Path(env["SORTIE_INSPECTION_PAUSE_AT"]) if env.get("SORTIE_INSPECTION_PAUSE_AT") else None
        self.threads: list[str] = []  # the history's names of this process's threads (a pause stops them all)
        self.stall = Path(env["SORTIE_INSPECTION_STALL"]) if env.get("SORTIE_INSPECTION_STALL") else None
        hold = env.get("SORTIE_INSPECTION_REPLAY_HOLD")
        self.replay_hold = Path(hold) if hold else None
        self.notices = Notices(env.get("SORTIE_INSPECTION_REDIS"))
        self.lock = AdvisoryLock(create_engine(env["SORTIE_INSPECTION_DATABASE_URL"], poolclass=NullPool,
                                               connect_args={"connect_timeout": 3}), cfg.leader_ttl_s)

    def performer(self, process: str) -> Callable[[Any], Any]:
        points = FilePoints(self.failpoints, role_of(process)) if self.failpoints else None

        def perform(effect: Any) -> Any:
            while self.stall is not None and process.startswith("heartbeat-") and self.stall.exists():
                time.sleep(0.05)  # stuck (a lock, a full disk, a GC pause): the heartbeat stalls, nothing else
            self._stop_here(process, effect)
            self._crash_point(points, process, effect, "before")
            result = self.perform(process, effect)
            self._crash_point(points, process, effect, "after")
            return result
        return perform

    def _crash_point(self, points: FilePoints | None, process: str, effect: Any, when: str) -> None:
        point = points.take(crash_name(effect), when) if points is not None else None
        if point is None or point.action == "hold":
            return
        why = f"{when} {crash_name(effect)}"
        if point.action == "kill":
            self.history.add(NEMESIS, INFO, "kill", {"process": process, "why": why})
            crash_this_process("kill")
        self._stop(process, [process], point.seconds, why)

    def _stop_here(self, process: str, effect: Any) -> None:
        """The worker-pause fault's stop at an effect: taken once (the file renamed away), the whole process."""
        if self.pause_at is None or process != self.name or not self.pause_at.exists():
            return
        try:
            order = json.loads(self.pause_at.read_text())
        except (OSError, ValueError):
            return
        if order.get("effect") != crash_name(effect):
            return
        try:
            self.pause_at.rename(self.pause_at.with_suffix(".taken"))
        except OSError:
            return
        self._stop(process, self.threads, float(order["seconds"]), "worker-pause")

    def _stop(self, process: str, noted: list[str], seconds: float, why: str) -> None:
        """SIGSTOP this process, SIGCONT after ``seconds`` by a detached helper holding a pidfd of it (never a pid:
        if this process is killed meanwhile and its pid reused, the SIGCONT must not wake another)."""
        for p in noted:
            self.history.add(NEMESIS, INFO, "pause", {"process": p, "seconds": seconds, "why": why})
        fd = os.pidfd_open(os.getpid())
        subprocess.Popen([sys.executable, "-c", RESUME_HELPER, str(fd), f"{seconds:.3f}"], pass_fds=(fd,),
                         start_new_session=True)
        os.close(fd)
        crash_this_process("stop")
        for p in noted:
            self.history.add(NEMESIS, INFO, "resume", {"process": p})

    def perform(self, process: str, effect: Any) -> Any:
        if isinstance(effect, Transact):
            return self._transact(process, effect)
        if isinstance(effect, Sleep):
            return self.amqp.sleep(max(0.0, effect.seconds)) if process == self.name else time.sleep(
                max(0.0, effect.seconds))
        if isinstance(effect, Now):
            return datetime.now(UTC)
        if isinstance(effect, Consume):
            return self.amqp.consume(effect.slot)
        if isinstance(effect, Cancel):
            return self.amqp.cancel(effect.slot)
        if isinstance(effect, Fetch):
            return self.amqp.fetch(effect.wants)
        if isinstance(effect, AckDeliveries | NackDeliveries):
            ack = isinstance(effect, AckDeliveries)
            self.amqp.settle(effect.deliveries, ack)
            self.history.add(process, OK, "ack" if ack else "nack", {
                "ids": [d.message_id for d in effect.deliveries],
                **({"why": effect.why} if isinstance(effect, NackDeliveries) else {})})
            return None
        if isinstance(effect, PublishConfirmed):
            return self._publish(process, effect)
        if isinstance(effect, SlotMaps):
            return self._slot_maps()
        if isinstance(effect, NotifyLeases):
            reached, lost = self.notices.publish(effect.slots)
            self.history.add(process, INFO, "notify", {"slots": list(effect.slots), "reached": reached, "lost": lost})
            return None
        if isinstance(effect, AwaitLeaseNotice):
            return self.notices.wait(effect.seconds)
        return self._outbox(process, effect)

    def _slot_maps(self) -> Any:
        """The maps as the web tier answers an IS node (its role reads slot_map_version); None when it cannot."""
        try:
            with self.engine.connect() as conn:
                return read_maps(conn)
        except DBAPIError:
            return None

    def _transact(self, process: str, effect: Transact) -> Any:
        if effect.name == "leader.tick" and not self.lock.hold():
            return Tick(False)  # another web node holds the lock: a follower's tick decides nothing
        value_of = RECORDED.get(effect.name)
        if value_of is not None:
            self.history.add(process, INVOKE, effect.name, {})
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                result = effect.fn(Tx(session, datetime.now(UTC), uuid.uuid4))
        except Exception as exc:
            if value_of is not None:
                self.history.add(process, FAIL, effect.name, {"error": type(exc).__name__})
            raise
        if value_of is not None:
            self.history.add(process, OK, effect.name, value_of(result))
        return result

    def _publish(self, process: str, effect: PublishConfirmed) -> str:
        mid = str(effect.message["message_id"])
        self.history.add(process, INVOKE, "publish", {"message_id": mid})
        try:
            outcome = self.amqp.publish(effect.routing_key, effect.message)
        except BrokerUnavailable as exc:
            self.history.add(process, FAIL, "publish", {"message_id": mid, "error": str(exc)})
            raise
        self.history.add(process, OK, "publish", {"message_id": mid, "outcome": outcome})
        return outcome

    def _outbox(self, process: str, effect: Any) -> Any:
        outbox = self.outbox
        if outbox is None:
            raise TypeError(f"{self.name} has no outbox for {effect!r}")
        if isinstance(effect, OutboxAppend):
            stored = outbox.append(effect.rows)
            self.history.add(process, OK, "outbox", {"messages": [r["body"] for r in stored]})
            return stored
        if isinstance(effect, OutboxPending):
            if self.replay_hold is not None and self.replay_hold.exists():
                return []  # held: an older message's replay waits (the replay-hold fault)
            return outbox.pending(effect.older_than_s)
        if isinstance(effect, OutboxConfirm):
            return outbox.confirm(effect.seqs)
        if isinstance(effect, OutboxLastSeqs):
            return outbox.last_seqs()
        raise TypeError(f"unknown effect {effect!r}")


def _threads(role: str, name: str, node: Node, cfg: Settings, env: dict[str, str]) -> list[tuple[str, Any]]:
    """(the history's process name, the loop) of each thread of the process."""
    if role == "web":
        return [(name, web_loop(name, cfg, lambda who, what, value: node.history.add(who, INFO, what, value)))]
    if role == "worker":
        _, beat, consume = worker_threads(name, cfg)
        return [(f"heartbeat-{name.rsplit('-', 1)[1]}", beat()), (name, consume())]
    listed = env.get("SORTIE_INSPECTION_DEVICES") or Path(env["SORTIE_INSPECTION_DEVICES_FILE"]).read_text()
    devices = [Device(**d) for d in json.loads(listed)]
    return [(name, probe_loop(name, devices, cfg, datetime.fromisoformat(env["SORTIE_INSPECTION_UNTIL"])))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.inspection.node")
    parser.add_argument("role", choices=("web", "worker", "probe"))
    parser.add_argument("name")
    parser.add_argument("--health-port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.name} %(levelname)s %(message)s")
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # every lost link at length: the history records each
    env = dict(os.environ)
    cfg = Settings.with_overrides(json.loads(env["SORTIE_INSPECTION_SETTINGS"]))
    bug = [b for b in env.get("SORTIE_INSPECTION_BUG", "").split(",") if b]
    BUGS.activate(bug or None)  # for the process's life; an unknown name stops it here
    node = Node(args.name, cfg, env)
    state: dict[str, Any] = {"ready": False, "bug": bug}
    health = serve_health(args.health_port, args.name, state) if args.health_port else None
    failed: list[BaseException] = []

    def run(process: str, loop: Any) -> None:
        try:
            run_sync(loop, node.performer(process))
        except BaseException as exc:  # a bug of the reference: the process ends, its supervisor sees it
            log.exception("%s died", process)
            failed.append(exc)

    threads = [threading.Thread(target=run, args=t, name=t[0], daemon=True)
               for t in _threads(args.role, args.name, node, cfg, env)]
    node.threads = [t.name for t in threads]
    for t in threads:
        t.start()
    state["ready"] = True
    while all(t.is_alive() for t in threads):
        time.sleep(0.5)
    if health is not None:
        health.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
