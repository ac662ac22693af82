"""A throwaway MariaDB server on loopback: its own data directory under a run directory, its own port and socket.

Debian's ``mariadb-server`` (10.11, InnoDB) stands in for MySQL 8.0 (docs/native-stack.md lists where the two differ
for the systems that use it). ``mariadb-install-db --no-defaults`` initialises ``run_dir/data`` once; ``mariadbd``
then runs in the foreground under :class:`stack.common.ServerProcess` (log file, SIGTERM then SIGKILL, no orphan),
bound to 127.0.0.1 on a free port, with its socket in ``run_dir`` (or a short /tmp directory when that path is too
long for a socket). ``--no-defaults`` everywhere: the package's /etc/mysql configuration (its datadir, its socket)
is never read.

As root, mariadbd refuses to start ("Please consult the MariaDB Documentation to find out how to run mariadbd as
root!") unless told ``--user=root``; it is given that rather than ``--user=mysql``, because switching to another user
would clear the parent-death signal that keeps a killed harness from leaving the server behind. As anyone else it
runs as that user. ``start()`` returns once a real ``SELECT 1`` answered on the port this server listens on.

The server is set up to behave like MySQL 8.0's defaults where the two differ and it matters: MySQL 8.0's sql_mode,
utf8mb4, UTC as the session time zone, REPEATABLE READ, and ``innodb_snapshot_isolation`` off (a locking read sees
the latest committed row, as in MySQL). ``root`` has no password and is reachable only on loopback and the private
socket; applications connect as a user made by :meth:`LocalMariaDB.create_app_user` with the grants they need.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from stack.common import LOOPBACK, MissingDependency, ProcessBacked, ServerProcess, free_port
from stack.common import tail as _tail

BIN_DIR_ENV = "SORTIE_MARIADB_BIN"  # a directory holding mariadbd and mariadb-install-db wins over discovery
INSTALL_COMMAND = "apt-get install mariadb-server"
START_TIMEOUT_S = 60.0
INSTALL_DB_TIMEOUT_S = 120.0
SUPERUSER = "root"
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux

# MySQL 8.0's default sql_mode; MariaDB 10.11's lacks ONLY_FULL_GROUP_BY, NO_ZERO_IN_DATE and NO_ZERO_DATE.
MYSQL80_SQL_MODE = ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
                    "NO_ENGINE_SUBSTITUTION")

SERVER_SETTINGS: dict[str, str] = {
    "sql-mode": MYSQL80_SQL_MODE,
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_unicode_ci",
    "default-time-zone": "+00:00",
    "transaction-isolation": "REPEATABLE-READ",
    "innodb-snapshot-isolation": "OFF",  # MySQL's behaviour; MariaDB 11.6.2 turned it on by default
    "skip-name-resolve": "ON",
    "innodb-buffer-pool-size": "64M",
}

# A throwaway server trades durability for speed; a crash loses the server's data, which is fine here.
FAST_SETTINGS: dict[str, str] = {
    "innodb-flush-log-at-trx-commit": "0",
    "innodb-doublewrite": "OFF",
    "sync-binlog": "0",
}

# What an application's user may do in its own database: rows, not schema.
APP_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


class MariaDBError(RuntimeError):
    """A server could not be initialised, started or reached."""


class MariaDBMissing(MariaDBError, MissingDependency):
    """No MariaDB server binaries here."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_mariadb_bin() -> tuple[Path, Path] | None:
    """(mariadbd, mariadb-install-db): from ``$SORTIE_MARIADB_BIN``, else PATH plus Debian's /usr/sbin and /usr/bin;
    None when either is missing."""
    explicit = os.environ.get(BIN_DIR_ENV)
    search = explicit or os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])
    server = shutil.which("mariadbd", path=search)
    install_db = shutil.which("mariadb-install-db", path=search)
    if server is None or install_db is None:
        return None
    return Path(server), Path(install_db)


def mariadb_available() -> bool:
    return find_mariadb_bin() is not None


def require_binaries() -> tuple[Path, Path]:
    found = find_mariadb_bin()
    if found is None:
        raise MariaDBMissing(f"MariaDB server binaries (mariadbd, mariadb-install-db) not installed: {INSTALL_COMMAND}")
    return found


def _quote_identifier(name: str) -> str:
    if not name or "`" in name or "\0" in name:
        raise MariaDBError(f"not a usable identifier: {name!r}")
    return f"`{name}`"


class LocalMariaDB(ProcessBacked):
    """One ``mariadbd`` under ``run_dir``: ``data/``, ``mariadb.log`` and its socket. ``database`` is created on
    start; a restart keeps the data directory and the port."""

    def __init__(self, run_dir: Path, port: int | None = None, *, database: str = "sortie",
                 settings: dict[str, str] | None = None, durable: bool = False,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.port: int | None = port
        self.database = database
        self.settings = {**SERVER_SETTINGS, **({} if durable else FAST_SETTINGS), **(settings or {})}
        self.start_timeout_s = start_timeout_s
        self.datadir = self.run_dir / "data"
        self.log_path = self.run_dir / "mariadb.log"
        self._socket_dir: Path | None = None
        self._process: ServerProcess | None = None
        self.start_seconds: float | None = None  # wall time of the last start(), initialisation included

    # --- paths ---------------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        if self._socket_dir is None:
            if len(str(self.run_dir / "mariadb.sock")) <= _SOCKET_PATH_MAX:
                self._socket_dir = self.run_dir
            else:
                self._socket_dir = Path(tempfile.mkdtemp(prefix="sortie-mysock-"))
        return self._socket_dir / "mariadb.sock"

    @staticmethod
    def _as_root() -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def initialized(self) -> bool:
        return (self.datadir / "mysql").is_dir()

    # --- lifecycle -----------------------------------------------------------------------------

    def _install_db(self, install_db: Path) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(install_db), "--no-defaults", f"--datadir={self.datadir}", "--skip-test-db",
                "--auth-root-authentication-method=normal", *self._as_root()]
        try:
            proc = subprocess.run(argv, cwd=self.run_dir, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=INSTALL_DB_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise MariaDBError(f"mariadb-install-db did not finish within {INSTALL_DB_TIMEOUT_S:.0f}s") from exc
        if proc.returncode != 0 or not self.initialized():
            shutil.rmtree(self.datadir, ignore_errors=True)  # half-initialised: the next start begins again
            raise MariaDBError(f"mariadb-install-db failed with exit code {proc.returncode}:\n"
                               f"{(proc.stdout + proc.stderr)[-4000:]}")

    def _argv(self, server: Path, port: int) -> list[str]:
        return [str(server), "--no-defaults", *self._as_root(), f"--datadir={self.datadir}",
                f"--port={port}", f"--bind-address={LOOPBACK}", f"--socket={self.socket_path}",
                f"--pid-file={self.run_dir / 'mariadb.pid'}", *(f"--{k}={v}" for k, v in self.settings.items())]

    def start(self) -> Self:
        """Initialise (first time only), start, wait for ``SELECT 1``, create the database."""
        if self._process is not None and self._process.alive():
            return self
        began = time.monotonic()
        server, install_db = require_binaries()
        if not self.initialized():
            self._install_db(install_db)
        fixed = self.port is not None  # requested, or kept from the previous start
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            port = self.port if fixed else free_port()
            assert port is not None
            self.port = port
            self._process = ServerProcess("mariadbd", self._argv(server, port), self.log_path, cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(self._answers, began + self.start_timeout_s, "SELECT 1 answers",
                                         MariaDBError, port=port)
                break
            except MariaDBError as exc:
                self._process.stop()
                # Only a port lost to another process between free_port() and bind() is worth a retry.
                if attempt + 1 == attempts or "already in use" not in str(exc).lower():
                    raise
        self.execute(f"CREATE DATABASE IF NOT EXISTS {_quote_identifier(self.database)}")
        self.start_seconds = time.monotonic() - began
        return self

    def _answers(self) -> bool:
        with contextlib.closing(self.connect(connect_timeout=2)) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchone() == (1,)

    def stop(self) -> None:
        """SIGTERM (mariadbd shuts down cleanly on it), SIGKILL if it hangs. Idempotent; the data stays."""
        super().stop()
        if self._socket_dir is not None and self._socket_dir != self.run_dir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    # --- connections ---------------------------------------------------------------------------

    def _require_port(self) -> int:
        if self.port is None:
            raise MariaDBError("the server is not started")
        return self.port

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` (what a Toxiproxy upstream wants)."""
        return f"{LOOPBACK}:{self._require_port()}"

    def url(self, user: str = SUPERUSER, password: str | None = None, database: str | None = None) -> str:
        """A SQLAlchemy URL: ``mysql+pymysql://user[:password]@127.0.0.1:port/database?charset=utf8mb4``."""
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
        db = quote(database or self.database, safe="")
        return f"mysql+pymysql://{auth}@{self.address}/{db}?charset=utf8mb4"

    def connect(self, user: str = SUPERUSER, password: str = "", database: str | None = None,
                **kwargs: Any) -> Any:
        """A PyMySQL connection over TCP (autocommit off, as a DB-API connection is)."""
        import pymysql

        kwargs.setdefault("connect_timeout", 5)
        return pymysql.connect(host=LOOPBACK, port=self._require_port(), user=user, password=password,
                               database=database, charset="utf8mb4", **kwargs)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """One statement as root, committed."""
        with contextlib.closing(self.connect(autocommit=True)) as conn, conn.cursor() as cur:
            cur.execute(sql, params)

    def create_app_user(self, user: str, password: str, *, database: str | None = None,
                        privileges: Sequence[str] = APP_PRIVILEGES) -> None:
        """``user``@127.0.0.1 with ``privileges`` on ``database`` only (idempotent: the password and grants are
        set again)."""
        db = _quote_identifier(database or self.database)
        allowed = {p.upper() for p in privileges}
        if not allowed or not all(p.replace(" ", "").isalpha() for p in allowed):
            raise MariaDBError(f"not a list of privileges: {list(privileges)!r}")
        with contextlib.closing(self.connect(autocommit=True)) as conn, conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (user, LOOPBACK, password))
            cur.execute("ALTER USER %s@%s IDENTIFIED BY %s", (user, LOOPBACK, password))
            cur.execute(f"GRANT {', '.join(sorted(allowed))} ON {db}.* TO %s@%s", (user, LOOPBACK))

    def server_log(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


@contextlib.contextmanager
def temporary_mariadb(**kwargs: Any) -> Iterator[LocalMariaDB]:
    """A server in a fresh temporary directory, removed with its data on exit."""
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-mariadb-"))
    try:
        with LocalMariaDB(run_dir, **kwargs) as server:
            yield server
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
