"""What every native component shares: the install cache, free loopback ports, log tails, and
ServerProcess, the foreground supervision of one native server."""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self

LOOPBACK = "127.0.0.1"


class ProviderUnavailable(RuntimeError):
    """The chosen provider cannot run here (no Docker engine, no external configuration, ...). The
    message is one line meant for the user."""


class MissingDependency(RuntimeError):
    """A tool or server binary the stack needs is not installed here (and cannot be installed by Sortie): the
    environment's fault, not the harness's (sortie exits 4)."""


def cache_dir() -> Path:
    """Binaries and jars, keyed by component and version: ``$SORTIE_CACHE`` or ``~/.cache/sortie``.
    It lives outside the clone so a fresh checkout on the same machine reuses it."""
    root = Path(os.environ.get("SORTIE_CACHE") or Path.home() / ".cache" / "sortie")
    root.mkdir(parents=True, exist_ok=True)
    return root


# A port handed to a child is leased to it this long: no harness on this machine (a pytest-xdist worker, a nightly
# next to a test run) is handed it again meanwhile, whether or not the child has bound it yet.
PORT_LEASE_S = 600.0


def free_port() -> int:
    """A port for a server this harness is about to start, free now and leased to it (PORT_LEASE_S).

    It is an unassigned port outside the kernel's ephemeral range (port_for): an outgoing connection or a bind(0)
    takes its port from that range (bind(0) here chose from it too), so one could take the port between the choice
    and the child's bind: the likeliest reason a CI run lost a report worker that exited 1 before its health check
    (2026-12-06). The lease file keeps two harnesses from choosing the same port before either has bound it."""
    import fcntl
    import json
    import tempfile

    import port_for

    leases_path = Path(tempfile.gettempdir()) / "sortie-port-leases.json"
    with open(leases_path, "a+", encoding="utf-8") as leases_file:
        fcntl.flock(leases_file, fcntl.LOCK_EX)  # released when the file closes
        leases_file.seek(0)
        try:
            leases = {int(p): float(t) for p, t in json.loads(leases_file.read() or "{}").items()}
        except (ValueError, AttributeError):
            leases = {}  # a torn or foreign file: start again
        now = time.time()
        leases = {p: t for p, t in leases.items() if now - t < PORT_LEASE_S}
        port = int(port_for.select_random(exclude_ports=list(leases)))  # checks that it can bind and none listens
        leases[port] = now
        leases_file.seek(0)
        leases_file.truncate()
        leases_file.write(json.dumps(leases))
    return port


def all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (SIGSTOP takes effect when each thread is next scheduled, not when kill()
    returns: on a busy machine a thread can still serve a request after it)."""
    try:
        return all(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "Tt"
                   for tid in os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return False


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


# --- supervising a native server process (toxiproxy, versitygw, redis) ----------------------------

def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run through ``setpriv --pdeathsig KILL``: the kernel SIGKILLs the server when the thread
    that started it dies, so a SIGKILLed harness leaves no orphan. util-linux's setpriv sets the flag and execs,
    so the server keeps the pid Popen returned. Not a ``preexec_fn``: that forces Python's fork() path, which
    runs gRPC's fork handlers (the RocketMQ client loads gRPC); grpcio 1.81's restart a poller thread in the child,
    Popen's close_fds closes its epoll descriptor, and the child aborts before exec (grpc/grpc#43055: SIGABRT,
    "epoll_wait error: Bad file descriptor"). Without a preexec_fn Popen uses vfork, which runs no fork handler."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sortie-spawner")


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` started from a thread that lives as long as this process.

    A child run through ``dying_with_parent`` is killed when the *thread* that started it ends, not the process:
    a server a fault's timeline thread restarts (Redis after a redis-loss, RocketMQ after a broker outage) died the
    moment that thread finished, so every scenario after it on the same stack ran without it (the stream tier's relay
    found Redis gone for good). The executor's one worker thread waits for work until the interpreter exits."""
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _SPAWNER.submit(start).result()


class ServerProcess:
    """One foreground server process: output to a log file, SIGTERM then SIGKILL on stop, no orphans.

    The child gets ``PR_SET_PDEATHSIG=SIGKILL`` (``dying_with_parent``): if this Python process dies without
    running its cleanup (SIGKILL, OOM), the kernel kills the server too. Linux ties that signal to the *thread*
    that started the child, so the child is started by ``popen``: from the main thread or from one that lives as
    long as the process.
    """

    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        if self.alive():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {shlex.join(self.argv)}\n".encode())
            log.flush()
            self._proc = popen(dying_with_parent(self.argv), stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd, close_fds=True)
        atexit.register(self.stop)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def listens_on(self, port: int) -> bool:
        """This process holds a listening TCP socket on ``port``."""
        import psutil  # the stack extra's; this module is imported without it too (sortie.exits, the main job)

        if not self.alive():
            return False
        assert self._proc is not None
        try:
            sockets = psutil.Process(self._proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in sockets)

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL and reap. Idempotent."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        else:
            proc.wait()

    def wait_until(self, check: Callable[[], bool], deadline: float, what: str,
                   error: type[Exception] = RuntimeError, *, port: int | None = None) -> None:
        """Poll ``check`` (exceptions count as "not yet") until it is true or ``deadline`` passes;
        fail at once if the process exits. Errors carry the last exception and the log tail. With ``port``, the
        check counts only while this process listens there: a server of another test that took the port between
        free_port() and this one's bind would answer the check too, and the caller would then drive that server; this
        one exits with "address already in use" instead, and the caller retries on another port."""
        last: BaseException | None = None
        delay = 0.02
        while True:
            try:
                if check() and (port is None or self.listens_on(port)):
                    return
            except Exception as exc:
                last = exc
            if not self.alive():
                raise error(f"{self.name} exited with code {self.returncode} before {what}: {last}\n"
                            f"--- log tail ({self.log_path}) ---\n{tail(self.log_path)}")
            if time.monotonic() >= deadline:
                raise error(f"{self.name} (pid {self.pid}) did not reach '{what}' in time: {last}\n"
                            f"--- log tail ({self.log_path}) ---\n{tail(self.log_path)}")
            time.sleep(delay)  # a polling interval on a condition with a deadline
            delay = min(delay * 2, 0.25)


class ProcessBacked:
    """The lifecycle shared by every server run through a ServerProcess (Redis, versitygw, Toxiproxy):
    a subclass implements ``start()`` and sets ``self._process``; stopping, restarting and inspecting
    are the same for all."""

    _process: ServerProcess | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        """SIGTERM, SIGKILL if it hangs. Idempotent."""
        if self._process is not None:
            self._process.stop()
            self._process = None

    def restart(self) -> Self:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
