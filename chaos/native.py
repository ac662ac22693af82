"""Faults on the real stack: each fault's native half (chaos/faults.py) applied through a nemesis. NativeTarget is
what the generic halves need of one (a Toxiproxy client, crash points, windows, a history to record in); a system
whose stack is its own brings a small one. NativeNemesis is the nemesis of a stack of stack.providers: Toxiproxy
link cuts and toxics, crash points in the workers (SIGKILL right after an effect; the stack's supervisor restarts
them), SIGSTOP/SIGCONT, stopped services, and a PostgreSQL trigger that fails inserts inside the transaction. The
helpers the halves share are its methods."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from sqlalchemy import Engine, text

from chaos.faults import FaultRegistry
from harness.history import INFO, NEMESIS, History
from kernel.failpoints import CrashPoint, fired_pids, marker_path


class NativeTarget(Protocol):
    """What the generic native halves act on (chaos/faults.py)."""

    factor: float  # scenario seconds -> wall seconds

    @property
    def links(self) -> Any: ...  # the stack's Toxiproxy client: set_enabled, add_toxic, remove_toxic

    def record(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None: ...

    def window(self, fault: str, on: bool, loop: Callable[[threading.Event], None]) -> None: ...

    def arm_crash_points(self, points: list[CrashPoint]) -> None: ...


class Nemesis:
    """The machinery every native nemesis shares: where it records what it did, and fault windows as threads."""

    def __init__(self, faults: FaultRegistry, time_factor: float) -> None:
        self.faults, self.factor = faults, time_factor
        self.history: History | None = None
        self.now: Callable[[], float] = time.monotonic
        self._windows: dict[str, list[threading.Event]] = {}  # the stop flags of each fault's open windows

    def attach(self, history: History, now: Callable[[], float]) -> None:
        """Where the nemesis records what it did itself (kills, re-drives, refused tampering)."""
        self.history, self.now = history, now

    def record(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        if self.history is not None:
            self.history.add(self.now(), process, type_, f, value)

    def window(self, fault: str, on: bool, loop: Callable[[threading.Event], None]) -> None:
        """Run ``loop(stop)`` in a thread while the fault's window is open. Closing it stops every loop it started
        (windows of the same fault may overlap: explore draws them independently)."""
        if on:
            stop = threading.Event()
            self._windows.setdefault(fault, []).append(stop)
            threading.Thread(target=loop, args=(stop,), name=fault, daemon=True).start()
        else:
            for stop in self._windows.pop(fault, ()):
                stop.set()

    def apply(self, fault: str, params: dict[str, Any], *, on: bool) -> None:
        """Start (on) or stop one fault of the system's registry on the running stack. ValueError for an unknown
        fault, one without a real-stack form, or bad parameters."""
        self.faults.half_for(fault, "native", params)(self, params, on)


class NativeNemesis(Nemesis):
    """The nemesis of a stack of stack.providers (its components, services, Toxiproxy client and crash points)."""

    def __init__(self, stack: Any, admin: Engine, time_factor: float, faults: FaultRegistry) -> None:
        super().__init__(faults, time_factor)
        self.stack, self.admin = stack, admin
        self.ep = stack.endpoints
        for setup in faults.native_setup:
            setup(self)

    @property
    def links(self) -> Any:
        return self.stack.toxiproxy_client

    def kill_workers(self, roles: tuple[str, ...], every_s: float, stop: threading.Event) -> None:
        """SIGKILL, in turn, each worker whose name starts with one of ``roles``, until ``stop`` (kill-worker); the
        stack's supervisor restarts them. The next kill comes ``every_s`` after the killed worker serves again, not
        after the kill: a restart takes what the machine gives it (seconds for gunicorn on a busy one), and counted
        in the interval it would leave the worker no time up between kills."""
        n = 0
        while not stop.is_set():
            victims = sorted(name for name, c in self.stack.components.items() if name.startswith(roles) and c.pid)
            if victims:
                name = victims[n % len(victims)]
                victim = self.stack.components[name]
                # the pid too: a process's own records name it role-pid (a check matches the kill to them)
                self.record(NEMESIS, INFO, "kill", {"process": name, "pid": victim.pid, "why": "kill-worker"})
                victim.kill()  # the stack's supervisor restarts it
                n += 1
                while not stop.is_set() and not victim.serving():
                    stop.wait(0.2)
            stop.wait(every_s)

    def install_fault_triggers(self, tables: tuple[str, ...]) -> None:
        """Harness objects, not the application's schema: a row in sortie_fault makes every INSERT into
        that table (one of ``tables``) fail with a database error (and roll its transaction back)."""
        with self.admin.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS sortie_fault (target text PRIMARY KEY)"))
            conn.execute(text("GRANT SELECT ON sortie_fault TO PUBLIC"))
            conn.execute(text("""
                CREATE OR REPLACE FUNCTION sortie_fault_check() RETURNS trigger AS $$
                BEGIN
                  IF EXISTS (SELECT 1 FROM sortie_fault WHERE target = TG_TABLE_NAME) THEN
                    RAISE EXCEPTION 'injected fault: insert into % refused', TG_TABLE_NAME
                      USING ERRCODE = '53000';  -- insufficient_resources: an OperationalError
                  END IF;
                  RETURN NEW;
                END $$ LANGUAGE plpgsql"""))
            for table in tables:
                conn.execute(text(f"DROP TRIGGER IF EXISTS sortie_fault_{table} ON {table}"))
                conn.execute(text(f"CREATE TRIGGER sortie_fault_{table} BEFORE INSERT ON {table} "
                                  "FOR EACH ROW EXECUTE FUNCTION sortie_fault_check()"))

    def resume_stopped(self, point: CrashPoint, marker: str, before: int) -> None:
        """SIGCONT each process that stops itself at ``point`` (its pid is in the point's marker after the ``before``
        firings that came before this arming), ``point.seconds`` after it stopped. Two stop points armed at once
        (B15) never resume each other's processes."""
        handled = before
        deadline = time.monotonic() + 600
        while handled < before + point.count and time.monotonic() < deadline:
            pids = fired_pids(marker)
            for pid in pids[handled:before + point.count]:
                for _ in range(100):  # it writes its pid, then stops itself
                    if _stopped(pid):
                        break
                    time.sleep(0.01)
                threading.Timer(point.seconds, self._resume, args=(point.role, pid)).start()
            handled = max(handled, min(len(pids), before + point.count))
            time.sleep(0.05)

    def _resume(self, role: str, pid: int) -> None:
        """SIGCONT, recorded as the simulation records it (a point's "pause" names the process as its recorder does:
        role-pid), so a check can tell what the process did after it woke up."""
        _cont(pid)
        name = next((n for n, c in list(self.stack.components.items()) if c.pid == pid), None)
        self.record(NEMESIS, INFO, "resume", {"process": f"{role}-{pid}", "component": name})

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        """Arm crash points in the workers; scenario seconds scale like every other window. A process that
        SIGSTOPs itself gets SIGCONT from here."""
        points = [replace(p, seconds=p.seconds * self.factor) for p in points]
        stops = [(p, marker_path(str(self.stack.failpoint_file), p)) for p in points if p.action == "stop"]
        before = [len(fired_pids(marker)) for _, marker in stops]  # firings of an earlier arming of the same point
        self.stack.arm_crash_points(points)
        for (p, marker), fired in zip(stops, before, strict=True):
            threading.Thread(target=self.resume_stopped, args=(p, marker, fired), name="resume-stopped",
                             daemon=True).start()


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _cont(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
