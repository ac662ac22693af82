"""Reference components and the platform simulator as OS processes, each behind a handle the harness
can stop gracefully, SIGKILL, SIGSTOP/SIGCONT and restart. Readiness is the process's own health
endpoint (mirakuru polls it), never a sleep."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from mirakuru import HTTPExecutor
from mirakuru.exceptions import ProcessFinishedWithError


@dataclass
class Component:
    name: str
    command: list[str]
    health_url: str
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    start_timeout_s: float = 60.0
    wanted: bool = False  # the supervisor restarts a wanted component that died
    _executor: HTTPExecutor | None = field(default=None, repr=False)
    _log: object | None = field(default=None, repr=False)
    # start/stop/kill from different threads (the supervisor, a nemesis) must not interleave: mirakuru's
    # executor is not thread-safe (a kill during start's health wait clears its deadline; start then waits
    # forever).
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def start(self) -> Component:
        with self._lock:
            return self._start()

    def _start(self) -> Component:
        self.wanted = True
        env = {**os.environ, **self.env}
        if self.log_path is not None:
            self._log = self.log_path.open("ab")
        self._executor = HTTPExecutor(
            self.command, url=self.health_url, status=200, method="GET", timeout=self.start_timeout_s,
            envvars=env, stdin=None, stdout=self._log or None, stderr=self._log or None,
            stop_signal=signal.SIGTERM, kill_signal=signal.SIGKILL, expected_returncode=-signal.SIGTERM)
        self._executor.start()
        return self

    def restart_if_died(self) -> bool:
        """Start it again if it is wanted and not running (what a supervisor does), atomically with stop(): a
        supervisor that saw it wanted cannot restart it after a stop() it raced with."""
        with self._lock:
            if not self.wanted or self.running():
                return False
            self._start()
            return True

    @property
    def pid(self) -> int | None:
        ex = self._executor
        return ex.process.pid if ex is not None and ex.process is not None else None

    def running(self) -> bool:
        return self._executor is not None and self._executor.running()

    def died(self) -> bool:
        """Wanted but not running, judged under the lock: one being started, stopped or killed right now did not die
        (a supervisor that restarted it would start a second copy, and the first's executor, dropped, kills it)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self.wanted and not self.running()
        finally:
            self._lock.release()

    def serving(self) -> bool:
        """Running and not being started, stopped or killed right now: a start returns once its health check
        answered, so a component that is running and free has answered it."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self.running()
        finally:
            self._lock.release()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time (mirakuru's stop)."""
        with self._lock:
            self.wanted = False
            if self._executor is not None and self._executor.running():
                self.resume()  # a stopped process cannot handle SIGTERM
                try:
                    self._executor.stop()
                except ProcessFinishedWithError as exc:
                    # SIGKILLed by something else (a crash point, a job killing its worker) just before the SIGTERM
                    # reached it: it is stopped all the same. Any other exit code is a failed shutdown.
                    if exc.exit_code != -signal.SIGKILL:
                        raise
            self._close_log()

    def kill(self) -> None:
        """SIGKILL: no cleanup, as in a crash (the supervisor restarts it)."""
        with self._lock:
            if self._executor is not None and self._executor.running():
                self._executor.kill(wait=True, sig=signal.SIGKILL)
            self._close_log()

    def pause(self) -> list[int]:
        """SIGSTOP the process and every descendant (gunicorn's workers with their master: stopping the master
        alone leaves the API answering). The root first, so it cannot start a replacement for a stopped child.
        Returns the pids stopped."""
        return _signal_tree(self.pid, signal.SIGSTOP)

    def resume(self) -> list[int]:
        """SIGCONT the process and every descendant."""
        return _signal_tree(self.pid, signal.SIGCONT)

    def restart(self) -> Component:
        with self._lock:
            self.stop()
            return self.start()

    def pids_without(self, env: dict[str, str]) -> list[int]:
        """The pids of this process and its descendants whose environment lacks a value of ``env``: what a restart
        that was meant to give them ``env`` left behind (read from the OS, not from ``self.env``)."""
        if self.pid is None:
            return []
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        stale = []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if any(proc.environ().get(k) != v for k, v in env.items()):
                    stale.append(proc.pid)
        return stale

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None


def _signal_tree(pid: int | None, sig: int) -> list[int]:
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    done = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)
            done.append(proc.pid)
    return done


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
