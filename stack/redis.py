"""A throwaway Redis on loopback: Debian's ``redis-server`` in the foreground, no persistence.

Redis only holds request dedup, short caches and notification fan-out (docs/systems/copilot.md), so the server
runs with ``--save "" --appendonly no``: a restart loses everything, which is exactly the B6
``redis-loss`` fault. ``start()`` returns once a real ``PING`` answered; a restart reuses the port so
clients configured with :attr:`LocalRedis.url` reconnect by themselves.

``ensure_installed()`` installs the Debian package when the binary is missing and we are root. On a
machine with systemd the package also starts a system service on 6379; ours uses a free port and
does not care.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Self

from stack.common import LOOPBACK, MissingDependency, ProcessBacked, ServerProcess, free_port

START_TIMEOUT_S = 20.0
APT_TIMEOUT_S = 600.0


class RedisServerError(RuntimeError):
    """redis-server is missing, could not be installed, or did not start."""


class RedisMissing(RedisServerError, MissingDependency):
    """No redis-server, and no way to install one."""


def find_redis_server() -> Path | None:
    explicit = os.environ.get("SORTIE_REDIS_SERVER")
    found = explicit or shutil.which("redis-server")
    return Path(found) if found and os.access(found, os.X_OK) else None


def ensure_installed() -> Path:
    """The ``redis-server`` binary; ``apt-get install -y redis-server`` first when missing and root."""
    found = find_redis_server()
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RedisMissing("redis-server is not installed and cannot be installed here "
                               "(needs root and apt-get): apt-get install redis-server")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"]
    output = ""
    for commands in ([install], [["apt-get", "update"], install]):  # a stale package index: update once
        output = ""
        ok = True
        for argv in commands:
            try:
                proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S,
                                      stdin=subprocess.DEVNULL, check=False)
            except subprocess.TimeoutExpired as exc:
                raise RedisServerError(f"{' '.join(argv)} did not finish within {APT_TIMEOUT_S:.0f}s") from exc
            output += proc.stdout + proc.stderr
            ok = proc.returncode == 0
            if not ok:
                break
        found = find_redis_server()
        if ok and found is not None:
            return found
    raise RedisServerError(f"apt-get install redis-server failed:\n{output[-4000:]}")


def redis_available() -> bool:
    """True when redis-server is installed or installable (root with apt-get)."""
    return find_redis_server() is not None or (os.geteuid() == 0 and shutil.which("apt-get") is not None)


class LocalRedis(ProcessBacked):
    """One ``redis-server`` on 127.0.0.1 under ``run_dir`` (``redis.log``; nothing is persisted)."""

    def __init__(self, run_dir: Path, port: int | None = None, *, binary: Path | None = None,
                 start_timeout_s: float = START_TIMEOUT_S, extra_args: list[str] | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.requested_port = port
        self.port: int | None = port
        self._binary = binary
        self.start_timeout_s = start_timeout_s
        self.extra_args = list(extra_args or [])
        self.log_path = self.run_dir / "redis.log"
        self._process: ServerProcess | None = None
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RedisServerError("redis is not started")
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` (what a Toxiproxy upstream wants)."""
        if self.port is None:
            raise RedisServerError("redis is not started")
        return f"{LOOPBACK}:{self.port}"

    def _argv(self, binary: Path, port: int) -> list[str]:
        return [str(binary), "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--dir", str(self.run_dir), "--logfile", "", "--databases", "16",
                *self.extra_args]

    def start(self) -> Self:
        """Start (a restart reuses the previous port) and return once ``PING`` answers."""
        if self._process is not None and self._process.alive():
            return self
        began = time.monotonic()
        binary = self._binary or ensure_installed()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None  # requested, or kept from the previous start
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            port = self.port if fixed else free_port()
            assert port is not None
            self.port = port
            self._process = ServerProcess("redis-server", self._argv(binary, port), self.log_path,
                                          cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(self._pings, began + self.start_timeout_s, "PING answers",
                                         RedisServerError, port=port)
                break
            except RedisServerError as exc:
                self._process.stop()
                if attempt + 1 == attempts or "address already in use" not in str(exc).lower():
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def _pings(self) -> bool:
        with self.client(socket_timeout=1.0) as r:
            return bool(r.ping())

    def client(self, **kwargs: Any) -> Any:
        """A ``redis.Redis`` for this server (short timeouts, no retries, unless overridden)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        kwargs.setdefault("socket_timeout", 2.0)
        kwargs.setdefault("socket_connect_timeout", 2.0)
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis.from_url(self.url, **kwargs)

    def flushall(self) -> None:
        with self.client() as r:
            r.flushall()
