"""A throwaway PostgreSQL cluster on loopback: initdb into a run directory, start on a free port, stop.

Used by the PostgreSQL tests and by the native stack provider (docs/native-stack.md). PostgreSQL refuses to
run as root, so when this process is root every server-side command runs as the ``postgres`` OS user
(created by Debian's package) through ``runuser -u postgres --``, and the data directory, socket
directory and log are owned by that user. Otherwise the commands run directly as the current user.

``pg_ctl`` supervises the postmaster; ``start()`` returns only after a real ``SELECT 1`` succeeded,
and a failed start raises :class:`PostgresError` with the tail of the server log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from stack.common import (
    MissingDependency,
    free_port,  # re-exported: callers import it from here too
)
from stack.common import tail as _tail

PG_BIN_ENV = "SORTIE_PG_BIN"  # an explicit bin directory wins over discovery
DEBIAN_PG_ROOT = Path("/usr/lib/postgresql")
OS_USER = "postgres"  # the OS account the server runs under when we are root
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; "/.s.PGSQL.NNNNN" must fit too

# Throwaway clusters trade durability for speed; a crash loses the cluster, which is fine here.
FAST_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class PostgresError(RuntimeError):
    """A cluster could not be created, started or reached."""


class PostgresMissing(PostgresError, MissingDependency):
    """No PostgreSQL server binaries here."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name)) or (0,)


def _is_bin_dir(path: Path) -> bool:
    return all((path / tool).is_file() and os.access(path / tool, os.X_OK)
               for tool in ("initdb", "pg_ctl", "postgres"))


def find_pg_bin() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres: ``$SORTIE_PG_BIN``, else the newest Debian
    ``/usr/lib/postgresql/<version>/bin``, else the directory of ``pg_ctl`` on PATH; None if absent."""
    explicit = os.environ.get(PG_BIN_ENV)
    if explicit:
        return Path(explicit) if _is_bin_dir(Path(explicit)) else None
    candidates = sorted((p for p in DEBIAN_PG_ROOT.glob("*/bin") if _is_bin_dir(p)), key=_version_key)
    if candidates:
        return candidates[-1]
    on_path = shutil.which("pg_ctl")
    if on_path:
        bin_dir = Path(on_path).resolve().parent
        if _is_bin_dir(bin_dir):
            return bin_dir
    return None




class LocalPostgres:
    """One PostgreSQL cluster under ``run_dir``: ``pgdata/``, ``postgres.log`` and a socket directory.

    The superuser (``superuser``, trust authentication, reachable only on 127.0.0.1 and the private
    socket) owns the schema; applications connect with roles created on top of it. ``database`` is
    created on start.
    """

    def __init__(
        self,
        run_dir: Path,
        port: int | None = None,
        *,
        superuser: str = "postgres",
        database: str = "sortie",
        bin_dir: Path | None = None,
        settings: dict[str, str] | None = None,
        durable: bool = False,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.requested_port = port
        self.port: int | None = None
        self.superuser = superuser
        self.database = database
        self._bin_dir = bin_dir
        self.settings = {**({} if durable else FAST_SETTINGS), **(settings or {})}
        self.start_timeout_s = start_timeout_s
        self.pgdata = self.run_dir / "pgdata"
        self.log_path = self.run_dir / "postgres.log"
        self.socket_dir = self.run_dir / "sock"
        self._private_socket_dir: Path | None = None  # a short /tmp dir when run_dir's path is too long
        self._running = False
        self.start_seconds: float | None = None  # wall time of the last start(), initdb included

    # --- paths and commands ------------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            found = find_pg_bin()
            if found is None:
                raise PostgresMissing("PostgreSQL server binaries not installed (apt-get install postgresql)")
            self._bin_dir = found
        return self._bin_dir

    @staticmethod
    def _as_root() -> bool:
        return os.geteuid() == 0

    def _owner(self) -> tuple[int, int] | None:
        """(uid, gid) that must own the server's files, or None when we run as ourselves."""
        if not self._as_root():
            return None
        try:
            pw = pwd.getpwnam(OS_USER)
        except KeyError:
            raise PostgresError(
                f"running as root needs the '{OS_USER}' OS user (apt-get install postgresql)") from None
        return pw.pw_uid, pw.pw_gid

    def _cmd(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bin_dir / tool), *args]
        return ["runuser", "-u", OS_USER, "--", *argv] if self._as_root() else argv

    def _run(self, tool: str, *args: str, timeout: float,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        env.pop("PGDATA", None)
        try:
            proc = subprocess.run(self._cmd(tool, *args), check=False, cwd=self.run_dir, env=env,
                                  capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise PostgresError(
                f"{tool} did not finish within {timeout:.0f}s\n{_tail(self.log_path)}") from exc
        if check and proc.returncode != 0:
            raise PostgresError(
                f"{tool} {' '.join(args)} failed with exit code {proc.returncode}:\n"
                f"{proc.stdout}{proc.stderr}\n"
                f"--- server log tail ({self.log_path}) ---\n{_tail(self.log_path)}"
            )
        return proc

    def _chown(self, path: Path) -> None:
        owner = self._owner()
        if owner is not None:
            os.chown(path, *owner)

    def _prepare_dirs(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        owner = self._owner()
        if owner is not None:
            # The server user must reach run_dir: make our own directory traversable, and fail clearly
            # when an ancestor we do not own blocks it (pytest's 0700 tmp dirs, /root, ...).
            self.run_dir.chmod(self.run_dir.stat().st_mode | 0o711)
            blocked = [p for p in [self.run_dir, *self.run_dir.parents]
                       if not (p.stat().st_mode & 0o001) and p.stat().st_uid != owner[0]]
            if blocked:
                raise PostgresError(
                    f"the '{OS_USER}' OS user cannot traverse {blocked[-1]} (mode "
                    f"{oct(blocked[-1].stat().st_mode & 0o777)}); use a run_dir whose parents are world-traversable, "
                    "e.g. tempfile.mkdtemp() itself (run_dir is opened up), not a directory inside it")
        if not self.pgdata.exists():
            self.pgdata.mkdir(mode=0o700)
        self._chown(self.pgdata)
        sock = self.socket_dir
        if len(str(sock)) + len("/.s.PGSQL.65535") > _SOCKET_PATH_MAX:
            self._private_socket_dir = Path(tempfile.mkdtemp(prefix="sortie-pgsock-"))
            sock = self._private_socket_dir
        sock.mkdir(exist_ok=True)
        sock.chmod(0o755)
        self._chown(sock)
        self.log_path.touch()
        self._chown(self.log_path)

    @property
    def socket_path_dir(self) -> Path:
        return self._private_socket_dir or self.socket_dir

    # --- lifecycle ---------------------------------------------------------------------------

    def initialized(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def start(self) -> Self:
        """initdb (first time only), start on 127.0.0.1, wait for ``SELECT 1``, create the database."""
        if self._running:
            return self
        began = time.monotonic()
        self._prepare_dirs()
        if not self.initialized():
            self._run("initdb", "-D", str(self.pgdata), "-A", "trust", "-U", self.superuser, "-E", "UTF8",
                      "--no-locale", "--no-sync", "--no-instructions", timeout=120)
        attempts = 1 if self.requested_port is not None else 3
        for attempt in range(attempts):
            self.port = self.requested_port or free_port()
            try:
                self._pg_ctl_start()
                break
            except PostgresError as exc:
                # Only a port lost to another process between free_port() and bind() is worth a retry.
                if attempt + 1 == attempts or "could not bind" not in str(exc).lower():
                    raise
        self._running = True
        atexit.register(self.stop)
        try:
            self._wait_ready(began + self.start_timeout_s)
            self.create_database(self.database, exist_ok=True)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _pg_ctl_start(self) -> None:
        options = [f"-p {self.port}", f"-k {self.socket_path_dir}", "-c listen_addresses=127.0.0.1"]
        options += [f"-c {k}={v}" for k, v in self.settings.items()]
        # -w: pg_ctl waits for the postmaster to report ready and fails fast if it exits instead.
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log_path), "-w",
                  "-t", str(int(self.start_timeout_s)), "-o", " ".join(options), "start",
                  timeout=self.start_timeout_s + 10)

    def _wait_ready(self, deadline: float) -> None:
        """Poll until a real query works (pg_ctl's readiness is not a working session)."""
        import psycopg

        last: Exception | None = None
        delay = 0.01
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.conninfo(self.superuser, "postgres"), connect_timeout=2,
                                     autocommit=True) as conn:
                    conn.execute("SELECT 1").fetchone()
                return
            except psycopg.OperationalError as exc:
                last = exc
            if self._postmaster_pid() is None:
                break
            time.sleep(delay)  # a polling interval on a condition with a deadline, not a fixed wait
            delay = min(delay * 2, 0.2)
        raise PostgresError(f"PostgreSQL on port {self.port} did not answer SELECT 1: {last}\n"
                            f"--- server log tail ({self.log_path}) ---\n{_tail(self.log_path)}")

    def _postmaster_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by another user
        return pid

    def _is_our_postmaster(self, pid: int) -> bool:
        """Never signal a stranger: a stale postmaster.pid may name a recycled pid."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return bool(args) and Path(os.fsdecode(args[0])).name in ("postgres", "postmaster") \
            and os.fsencode(str(self.pgdata)) in args

    def stop(self) -> None:
        """``pg_ctl stop -m fast``; escalate to immediate, then SIGKILL the postmaster. Idempotent."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self.initialized() and self._postmaster_pid() is not None:
            for mode in ("fast", "immediate"):
                try:
                    proc = self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w",
                                     "-t", str(int(STOP_TIMEOUT_S)), "stop",
                                     timeout=STOP_TIMEOUT_S + 10, check=False)
                except PostgresError:
                    continue  # pg_ctl itself hung: escalate
                if proc.returncode == 0 or self._postmaster_pid() is None:
                    break
            pid = self._postmaster_pid()
            if pid is not None and self._is_our_postmaster(pid):  # backends exit when the postmaster dies
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._running = False
        if self._private_socket_dir is not None:
            shutil.rmtree(self._private_socket_dir, ignore_errors=True)
            self._private_socket_dir = None

    @property
    def running(self) -> bool:
        return self._running and self._postmaster_pid() is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- connections -------------------------------------------------------------------------

    def _require_port(self) -> int:
        if self.port is None:
            raise PostgresError("the cluster is not started")
        return self.port

    def url(self, user: str | None = None, password: str | None = None, database: str | None = None) -> str:
        """A SQLAlchemy URL: ``postgresql+psycopg://user[:password]@127.0.0.1:port/database``."""
        user = user or self.superuser
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
        db = quote(database or self.database, safe="")
        return f"postgresql+psycopg://{auth}@127.0.0.1:{self._require_port()}/{db}"

    def conninfo(self, user: str | None = None, database: str | None = None,
                 password: str | None = None) -> str:
        """A libpq connection string for psycopg (TCP on 127.0.0.1)."""
        from psycopg.conninfo import make_conninfo

        extra: dict[str, Any] = {"password": password} if password is not None else {}
        return make_conninfo(host="127.0.0.1", port=self._require_port(), user=user or self.superuser,
                             dbname=database or self.database, **extra)

    def execute(self, sql: str, params: Sequence[Any] | None = None, database: str = "postgres") -> None:
        """Run one statement as the superuser in autocommit (CREATE DATABASE cannot run in a transaction)."""
        import psycopg

        with psycopg.connect(self.conninfo(self.superuser, database), autocommit=True) as conn:
            conn.execute(sql, params)

    def create_database(self, name: str, owner: str | None = None, exist_ok: bool = False) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo(self.superuser, "postgres"), autocommit=True) as conn:
            if exist_ok and conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return
            stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if owner is not None:
                stmt = sql.SQL("{} OWNER {}").format(stmt, sql.Identifier(owner))
            conn.execute(stmt)

    def drop_database(self, name: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo(self.superuser, "postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def server_log(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


@contextlib.contextmanager
def temporary_postgres(**kwargs: Any) -> Iterator[LocalPostgres]:
    """A cluster in a fresh temporary directory, removed with its data on exit."""
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-pg-"))
    try:
        with LocalPostgres(run_dir, **kwargs) as pg:
            yield pg
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
