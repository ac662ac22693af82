"""The simulation's database: transactions of different simulated processes interleave, statement by
statement, with PostgreSQL READ COMMITTED's conflict semantics, deterministically (docs/architecture.md). The
schema is the system's: its tables (``metadata``) and what runs after them (``ddl``: its triggers).

Mechanism. SQLite in WAL mode on a throwaway file, one connection per open transaction. Each ``Transact``
runs its function in a greenlet; every statement it is about to execute switches back to the simpy
process that drives it, which charges the statement's latency in virtual time (other processes run their
statements meanwhile) and then lets it execute. So the order of statements across transactions is decided
by the simpy schedule alone: one seed, one interleaving, one history.

Conflict semantics, as READ COMMITTED on PostgreSQL:
- every statement sees what was committed before it ran: a transaction's reads before its first write run
  outside any SQLite transaction (pysqlite begins one only at the first INSERT/UPDATE/DELETE), so each read
  takes a fresh snapshot; uncommitted writes of other transactions are invisible (WAL);
- a transaction's first write, or its ``SELECT ... FOR UPDATE``, takes the write lock, held until it commits
  or rolls back; another writer waits for it in virtual time (a lock wait is a yield), then runs its
  statement against the committed rows: a conditional UPDATE re-evaluates its WHERE after the wait, and a
  duplicate key fails after the winner commits, exactly as a blocked statement does on PostgreSQL;
- a process killed mid-transaction loses its connection: the transaction rolls back;
- a system's notification triggers (the Copilot's outbox trigger) are SQLite triggers calling ``pg_notify`` back
  in Python: a transaction that fired one notifies its channel when it commits, never when it rolls back.
A savepoint is a write here (it takes the write lock and begins the SQLite transaction): pysqlite would not begin
one before it, and SQLite's RELEASE of a savepoint opened outside a transaction commits what it wrote.
Coarser than PostgreSQL in one respect: the write lock covers the database, not a row, so writers of
different rows also wait for each other (and ``SKIP LOCKED`` waits instead of skipping). Every interleaving
a reference's rules guard against (a read, a competing commit, then the conditional write) is reachable.

Why not PostgreSQL under a statement scheduler: it needs a server (the main job must run with none), lock
waits would have to be detected from outside (pg_blocking_pids) to stay deterministic, and it is an order
of magnitude slower per statement. Why not one atomic block per transaction (the previous design): no two
transactions ever interleaved, so a missing version predicate could not be caught.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy
from greenlet import greenlet
from sqlalchemy import Connection, MetaData, create_engine, event
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import QueuePool

# A savepoint counts as a write: it begins the SQLite transaction (see _before_statement), so it takes the lock.
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "SAVEPOI")


class _TxGreenlet(greenlet):
    """A greenlet running one simulated transaction (the statement hook switches out of these only)."""

    tx_name = ""  # the Transact effect's name, for the history


def open_transaction() -> str | None:
    """The name of the simulated transaction the caller runs inside ('' if unnamed), or None outside any: an
    external call made from there would hold the transaction open across it (the Copilot's invariant I20)."""
    current = greenlet.getcurrent()
    return current.tx_name if isinstance(current, _TxGreenlet) else None


@dataclass(frozen=True)
class _Statement:
    write: bool


@dataclass(frozen=True)
class _Done:
    value: Any


class _Abort(BaseException):
    """Thrown into a transaction whose process was killed: its connection is gone, it rolls back."""


class LockHeld(RuntimeError):
    """A write outside virtual time was asked for while a simulated transaction holds the write lock."""


class SimDatabase:
    def __init__(self, env: simpy.Environment, statement_latency: Callable[[], float], *,
                 metadata: MetaData, ddl: tuple[str, ...] = ()) -> None:
        """A fresh database with ``metadata``'s tables and ``ddl`` run after them (a system's triggers, which may call
        ``pg_notify(channel, payload)``: ``on_notify(channel)`` after the transaction commits)."""
        self.env = env
        self.statement_latency = statement_latency  # virtual seconds per statement round trip
        fd, self.path = tempfile.mkstemp(prefix="sortie-sim-", suffix=".db",
                                         dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(fd)
        # timeout=0: the scheduler never lets two writers at SQLite; if it did, fail at once, never block.
        # pool_reset_on_return=None: every transaction ends in its own commit or rollback already.
        self.engine = create_engine(f"sqlite:///{self.path}", poolclass=QueuePool, pool_size=64, max_overflow=-1,
                                    pool_reset_on_return=None, connect_args={"check_same_thread": False, "timeout": 0})
        event.listen(self.engine, "connect", self._on_connect)
        metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            for statement in ddl:
                conn.exec_driver_sql(statement)
        self.on_notify: Callable[[str], None] | None = None  # called with a channel after a notifying commit
        self._notifying: dict[greenlet, set[str]] = {}  # the channels each open transaction will notify
        event.listen(self.engine, "before_cursor_execute", self._before_statement)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)  # for reads outside virtual time
        # Connections kept checked out, reused transaction after transaction: a pool checkout costs more than a
        # one-statement transaction itself (a third of it, measured). One per transaction open at a time.
        # Transactions get the connection, not an ORM Session (kernel.effects.Tx opens one on first use only):
        # setting one up and ending it cost as much as the cheapest transaction's own work (88 -> 60 µs, measured).
        self._idle_connections: list[Connection] = []
        self.writer: greenlet | None = None  # the transaction holding the write lock
        self._waiters: deque[tuple[greenlet, simpy.Event]] = deque()
        self._live: weakref.WeakSet[greenlet] = weakref.WeakSet()
        self.fail_statement: Callable[[str, Any], None] | None = None  # fault injection, per simulated statement
        self.stats = {"statements": 0, "lock_waits": 0}
        # Per transaction name: [transactions, statements, seconds inside them]; the seconds only while ``timing``
        # is on (`sortie bench --profile-code`: where a simulated hour goes, by use case).
        self.by_name: dict[str, list[float]] = {}
        self.timing = False
        # Seconds SQLite itself spent on this database (statements, commits, rollbacks), timed around the driver
        # calls (fetching rows not counted): the part of a run no change above the driver removes (`sortie bench`).
        self._driver_seconds = [0.0]
        dialect = self.engine.dialect
        for call in ("do_execute", "do_executemany", "do_execute_no_params", "do_commit", "do_rollback"):
            setattr(dialect, call, _timed(getattr(dialect, call), self._driver_seconds))
        # The file goes with the database even when nobody calls close() (a test's throwaway world).
        self._finalizer = weakref.finalize(self, _remove, self.engine, self.path, self._idle_connections)

    # ------------------------------------------------------------------ statements

    def _before_statement(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any,
                          executemany: bool) -> None:
        current = greenlet.getcurrent()
        write = _is_write(statement, context)
        if isinstance(current, _TxGreenlet):
            current.parent.switch(_Statement(write))
        elif write and self.writer is not None:
            raise LockHeld("a write outside virtual time while a simulated transaction holds the write lock")
        if write and statement.lstrip()[:9].upper() == "SAVEPOINT":
            dbapi = conn.connection.dbapi_connection
            if not dbapi.in_transaction:  # SQLite's RELEASE of a savepoint opened outside a transaction commits it
                dbapi.execute("BEGIN")
        self.stats["statements"] += 1
        if self.fail_statement is not None and isinstance(current, _TxGreenlet):
            # The faults cut the application's link; the harness's own statements (transact_now) go round it,
            # as the real stack's admin connection does (it does not pass through Toxiproxy).
            self.fail_statement(statement, params)

    # ------------------------------------------------------------------ transactions

    def transact(self, fn: Callable[[Connection], Any], hold: Callable[[], float] | None = None, name: str = ""
                 ) -> Generator[Any, Any, Any]:
        """Run ``fn(connection)`` in a transaction as part of a simpy process, one statement at a time.
        Returns its result, or raises what it raised (after the rollback). ``hold`` is asked once, at the
        first write: the seconds to wait there first (a crash point holding the transaction between its
        reads and its conditional write, while others commit)."""
        g = _TxGreenlet(lambda: _Done(self._run(fn)))
        g.tx_name = name
        self._live.add(g)
        tally = self.by_name.get(name)
        if tally is None:
            tally = self.by_name[name] = [0, 0, 0.0]
        tally[0] += 1
        switch = self._timed_switch if self.timing else _switch
        try:
            step = switch(g, tally)
            while isinstance(step, _Statement):
                tally[1] += 1
                if step.write and self.writer is not g:
                    if hold is not None:
                        seconds, hold = hold(), None
                        if seconds > 0:
                            yield self.env.timeout(seconds)
                    yield from self._acquire(g)
                yield self.env.timeout(self.statement_latency())
                step = switch(g, tally)
            return step.value
        except BaseException:
            if not g.dead:
                with contextlib.suppress(_Abort):
                    g.throw(_Abort())
            raise
        finally:
            if self.writer is g:
                self._release()

    @staticmethod
    def _timed_switch(g: greenlet, tally: list[float]) -> Any:
        t0 = time.perf_counter()
        try:
            return g.switch()
        finally:
            tally[2] += time.perf_counter() - t0

    def _run(self, fn: Callable[[Connection], Any]) -> Any:
        conn = self._idle_connections.pop() if self._idle_connections else self.engine.connect()
        me = greenlet.getcurrent()
        try:
            with conn.begin():
                result = fn(conn)
        finally:
            self._idle_connections.append(conn)
            channels = self._notifying.pop(me, None)
        if channels and self.on_notify is not None:  # committed: PostgreSQL delivers NOTIFY now
            for channel in sorted(channels):
                self.on_notify(channel)
        return result

    def _notify(self, channel: str) -> None:
        """pg_notify from inside a statement: held until the transaction commits."""
        self._notifying.setdefault(greenlet.getcurrent(), set()).add(channel)

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=OFF")
        cur.execute("PRAGMA temp_store=MEMORY")  # RETURNING in memory, not a temp file (measured)
        cur.close()
        dbapi_conn.create_function("pg_notify", 2, lambda channel, _payload: self._notify(channel))

    def _acquire(self, g: greenlet) -> Generator[Any, Any, None]:
        if self.writer is None:
            self.writer = g
            return
        self.stats["lock_waits"] += 1
        granted = self.env.event()
        self._waiters.append((g, granted))
        try:
            yield granted
        except BaseException:
            if self.writer is not g:  # killed while waiting: leave the queue
                self._waiters = deque(w for w in self._waiters if w[0] is not g)
            raise

    def _release(self) -> None:
        """Hand the lock to the longest waiter (FIFO, as PostgreSQL's lock queue)."""
        self.writer = None
        if self._waiters:
            g, granted = self._waiters.popleft()
            self.writer = g
            granted.succeed()

    def transact_now(self, fn: Callable[[Connection], Any]) -> Any:
        """A transaction outside virtual time (setup, reads, the harness's own faults): runs at once,
        atomically. Its writes are refused while a simulated transaction holds the write lock (they would
        have to wait: run them after ``idle()`` in a simpy process)."""
        return self._run(fn)

    def idle(self) -> Generator[Any, Any, None]:
        """Wait (in a simpy process) until no transaction holds the write lock."""
        while self.writer is not None:
            yield self.env.timeout(self.statement_latency())

    @property
    def sqlite_seconds(self) -> float:
        return self._driver_seconds[0]

    def close(self) -> None:
        for g in list(self._live):
            if not g.dead:
                with contextlib.suppress(BaseException):
                    g.throw(_Abort())
        self._finalizer()


def _timed(call: Callable[..., Any], seconds: list[float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            seconds[0] += time.perf_counter() - t0

    return timed


def _switch(g: greenlet, _tally: list[float]) -> Any:
    return g.switch()


def _remove(engine: Any, path: str, connections: list[Connection]) -> None:
    for conn in connections:  # these are checked out: dispose() would leave them open
        with contextlib.suppress(Exception):
            conn.close()
    connections.clear()
    engine.dispose()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(path + suffix)


def _is_write(statement: str, context: Any) -> bool:
    if statement.lstrip()[:7].upper().startswith(_WRITES):
        return True
    compiled = getattr(context, "compiled", None)
    return getattr(getattr(compiled, "statement", None), "_for_update_arg", None) is not None

