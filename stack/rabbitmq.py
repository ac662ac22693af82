"""A throwaway RabbitMQ node on loopback: Debian's ``rabbitmq-server`` (3.10) run as the project's own node.

Nothing of the package's own node is used: not its node name (``rabbit@<host>``), its ports (5672, 25672, epmd's
4369), its directories under ``/var/lib/rabbitmq`` and ``/var/log/rabbitmq``, its ``/etc/rabbitmq`` files nor its
Erlang cookie. Everything lives under ``run_dir``::

    rabbitmq.conf  advanced.config  enabled_plugins  rabbitmq-env.conf (empty)
    home/.erlang.cookie   (HOME for the server and the CLI: Erlang reads the cookie from $HOME)
    mnesia/               (RABBITMQ_MNESIA_BASE: the node's database, quorum queue logs, pid file)
    log/<node>.log        (RABBITMQ_LOG_BASE)
    rabbitmq.out  epmd.log (the processes' stdout and stderr)

Debian's ``/usr/sbin/rabbitmq-server`` and ``rabbitmqctl`` are wrapper scripts: as root they re-run the command
through ``su rabbitmq``, which keeps the environment but resets HOME to ``/var/lib/rabbitmq`` (so the CLI presents
the package's cookie and our node refuses it), changes to ``/var/lib/rabbitmq`` and sends the server's output to
``/var/log/rabbitmq/startup_log``; as any other user they refuse to run. So the real scripts are run directly,
``/usr/lib/rabbitmq/lib/rabbitmq_server-<version>/sbin/*``, as the current user (root included: neither the scripts
nor the Erlang VM refuse root, unlike PostgreSQL).

Two processes, both :class:`ServerProcess` (log file, SIGTERM then SIGKILL, SIGKILL with the harness):

- ``epmd -port P -address 127.0.0.1`` in the foreground, started first. A node that finds no epmd on
  ``ERL_EPMD_PORT`` starts one with ``-daemon``, which outlives the node: an orphan after every stop.
- the node: ``sbin/rabbitmq-server`` with ``RUNNING_UNDER_SYSTEMD=true`` in its environment, which makes the
  script ``exec`` the Erlang VM instead of running it as a child of a shell that traps signals. The process we
  started *is* ``beam.smp``: SIGTERM is RabbitMQ's graceful stop, and the parent-death signal survives the exec.

Ready when an AMQP connection as the application user opens a channel. The application's vhost and user are the
node's ``default_vhost`` / ``default_user`` (created at first boot; ``guest`` is then not created at all).

:class:`LocalRabbitMQCluster` runs several such nodes on one shared :class:`LocalEpmd` with one cookie, clustered by
classic peer discovery (each node's ``rabbitmq.conf`` lists the others).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from stack.common import LOOPBACK, MissingDependency, ProcessBacked, ServerProcess, free_port, tail

SBIN_ENV = "SORTIE_RABBITMQ_SBIN"  # an explicit sbin directory of a RabbitMQ distribution wins over discovery
DEBIAN_RABBITMQ_LIB = Path("/usr/lib/rabbitmq/lib")
INSTALL_COMMAND = "apt-get install -y --no-install-recommends rabbitmq-server"
START_TIMEOUT_S = 90.0  # a cold boot is ~9 s on an idle 2-core machine; a loaded one is several times slower
STOP_TIMEOUT_S = 30.0
CTL_TIMEOUT_S = 60.0
READY_CONNECT_TIMEOUT_S = 2.0
_PORT_TAKEN = ("eaddrinuse", "address already in use")  # beam's and epmd's words for a port someone else bound


class RabbitMQError(RuntimeError):
    """The node could not be started, reached or administered."""


class RabbitMQMissing(RabbitMQError, MissingDependency):
    """No RabbitMQ server here."""


def _is_sbin(path: Path) -> bool:
    return all(os.access(path / tool, os.X_OK) for tool in ("rabbitmq-server", "rabbitmqctl"))


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name)) or (0,)


def find_rabbitmq_sbin() -> Path | None:
    """The distribution's own ``sbin`` (not Debian's ``/usr/sbin`` wrappers): ``$SORTIE_RABBITMQ_SBIN``, else the
    newest ``/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin``; None when RabbitMQ is not installed."""
    explicit = os.environ.get(SBIN_ENV)
    if explicit:
        return Path(explicit) if _is_sbin(Path(explicit)) else None
    found = sorted((p for p in DEBIAN_RABBITMQ_LIB.glob("rabbitmq_server-*/sbin") if _is_sbin(p)), key=_version_key)
    return found[-1] if found else None


def rabbitmq_available() -> bool:
    return find_rabbitmq_sbin() is not None and shutil.which("epmd") is not None


def require_sbin() -> Path:
    """The distribution's ``sbin``, or :class:`RabbitMQMissing` naming the install command."""
    found = find_rabbitmq_sbin()
    if found is None or shutil.which("epmd") is None:
        raise RabbitMQMissing(f"RabbitMQ is not installed ({INSTALL_COMMAND})")
    return found


def rabbitmq_version(sbin: Path) -> str:
    """``3.10.8`` from ``.../rabbitmq_server-3.10.8/sbin``."""
    return sbin.parent.name.removeprefix("rabbitmq_server-")


@dataclass(frozen=True)
class BrokerConfig:
    """What the node's ``rabbitmq.conf`` and ``advanced.config`` say beyond listeners, vhost and user.

    ``consumer_timeout_ms``: a channel whose consumer holds a delivery unacknowledged longer than this is closed
    (PRECONDITION_FAILED) and its unacked deliveries return to their queues. RabbitMQ checks it on the channel's
    tick, every ``channel_tick_interval_ms`` (60 s by default: a timeout could fire up to a minute late).
    ``settings`` are further ``rabbitmq.conf`` lines, key to value."""

    consumer_timeout_ms: int = 1_800_000  # RabbitMQ's default, 30 minutes
    channel_tick_interval_ms: int = 60_000
    disk_free_limit_bytes: int = 50_000_000
    settings: dict[str, str] = field(default_factory=dict)

    def rabbitmq_conf(self, amqp_port: int, vhost: str, user: str, password: str,
                      peers: tuple[str, ...] = ()) -> str:
        lines = {
            "listeners.tcp.default": f"{LOOPBACK}:{amqp_port}",
            "default_vhost": vhost,
            "default_user": user,
            "default_pass": password,
            "default_permissions.configure": ".*",
            "default_permissions.read": ".*",
            "default_permissions.write": ".*",
            "default_user_tags.administrator": "true",
            "loopback_users": "none",
            "consumer_timeout": str(self.consumer_timeout_ms),
            "disk_free_limit.absolute": str(self.disk_free_limit_bytes),
            "log.console": "false",
            "log.file.level": "info",
            **self.settings,
        }
        if peers:  # a node that finds one of them running joins its cluster at first boot
            lines["cluster_formation.peer_discovery_backend"] = "classic_config"
            lines.update({f"cluster_formation.classic_config.nodes.{i}": peer for i, peer in enumerate(peers, 1)})
        return "".join(f"{key} = {value}\n" for key, value in lines.items())

    def advanced_config(self) -> str:
        # Not settable in rabbitmq.conf: only the classic Erlang-term file reaches it.
        return f"[{{rabbit, [{{channel_tick_interval, {self.channel_tick_interval_ms}}}]}}].\n"


class LocalEpmd(ProcessBacked):
    """Erlang's port mapper in the foreground on 127.0.0.1 (``epmd.log`` under ``run_dir``); a restart keeps its
    port. The nodes of one cluster share one."""

    def __init__(self, run_dir: Path, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.port: int | None = None
        self.start_timeout_s = start_timeout_s
        self.log_path = self.run_dir / "epmd.log"
        self._process: ServerProcess | None = None

    def start(self) -> Self:
        if self.running:
            return self
        epmd = shutil.which("epmd")
        if epmd is None:
            raise RabbitMQMissing(f"epmd (Erlang) is not installed ({INSTALL_COMMAND})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None
        for attempt in range(1 if fixed else 3):
            port = self.port if fixed else free_port()
            assert port is not None
            self.port = port
            env = {key: value for key, value in os.environ.items() if not key.startswith("ERL_")}
            self._process = ServerProcess("epmd", [epmd, "-port", str(port), "-address", LOOPBACK], self.log_path,
                                          env=env, cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(lambda: True, time.monotonic() + self.start_timeout_s, "epmd listens",
                                         RabbitMQError, port=port)
                return self
            except RabbitMQError as exc:
                self._process.stop()
                if fixed or attempt == 2 or not any(sign in str(exc).lower() for sign in _PORT_TAKEN):
                    raise
        raise RabbitMQError("epmd did not start")  # not reached: the last attempt raises


class LocalRabbitMQ(ProcessBacked):
    """One RabbitMQ node on 127.0.0.1 under ``run_dir``, with its own node name, ports and cookie, and its own epmd
    unless it is given one to share (``epmd``: a cluster's; then the owner starts and stops it). ``peers`` are the
    names of the other nodes of its cluster (classic peer discovery), ``cookie`` the cluster's shared secret.

    A restart keeps the node name, the ports and the data: durable queues and their messages survive it."""

    def __init__(self, run_dir: Path, *, vhost: str = "sortie", user: str = "sortie", password: str | None = None,
                 config: BrokerConfig | None = None, sbin: Path | None = None, node_name: str | None = None,
                 epmd: LocalEpmd | None = None, cookie: str | None = None, peers: tuple[str, ...] = (),
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.vhost = vhost
        self.user = user
        self.password = password or secrets.token_urlsafe(18)
        self.config = config or BrokerConfig()
        self._sbin = sbin
        self.start_timeout_s = start_timeout_s
        self.node_name = node_name or f"sortie-{secrets.token_hex(4)}@localhost"
        self.cookie = cookie or secrets.token_hex(20)
        self.peers = tuple(peer for peer in peers if peer != self.node_name)
        self.amqp_port: int | None = None
        self.dist_port: int | None = None
        self.home = self.run_dir / "home"
        self.log_path = self.run_dir / "rabbitmq.out"
        self.node_log_path = self.run_dir / "log" / f"{self.node_name}.log"
        self._process: ServerProcess | None = None
        self._owns_epmd = epmd is None
        self.epmd = epmd or LocalEpmd(self.run_dir, start_timeout_s=start_timeout_s)
        self.start_seconds: float | None = None

    # --- configuration -------------------------------------------------------------------------

    @property
    def sbin(self) -> Path:
        if self._sbin is None:
            self._sbin = require_sbin()
        return self._sbin

    @property
    def version(self) -> str:
        return rabbitmq_version(self.sbin)

    @property
    def epmd_port(self) -> int | None:
        return self.epmd.port

    def env(self) -> dict[str, str]:
        """The environment every command for this node runs with (server and CLI alike)."""
        if self.amqp_port is None or self.dist_port is None or self.epmd_port is None:
            raise RabbitMQError("the node has no ports yet (start it first)")
        loopback_dist = "-kernel inet_dist_use_interface {127,0,0,1}"  # the distribution port, not 0.0.0.0
        env = {key: value for key, value in os.environ.items() if not key.startswith(("RABBITMQ_", "ERL_"))}
        env.pop("NOTIFY_SOCKET", None)
        env.update({
            "HOME": str(self.home),
            "LC_ALL": "C.UTF-8",
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "RABBITMQ_CONFIG_FILE": str(self.run_dir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.run_dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.run_dir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.run_dir / "rabbitmq-env.conf"),  # not /etc/rabbitmq's
            "RABBITMQ_MNESIA_BASE": str(self.run_dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.run_dir / "log"),
            "RABBITMQ_SCHEDULER_BIND_TYPE": "u",  # a shared machine: no scheduler pinned to a core
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": loopback_dist,
            "RABBITMQ_CTL_ERL_ARGS": loopback_dist,
            "ERL_CRASH_DUMP": str(self.run_dir / "erl_crash.dump"),
            "RUNNING_UNDER_SYSTEMD": "true",  # sbin/rabbitmq-server then execs the VM (see the module docstring)
        })
        return env

    def _write_files(self) -> None:
        assert self.amqp_port is not None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "log").mkdir(exist_ok=True)
        (self.run_dir / "mnesia").mkdir(exist_ok=True)
        self.home.mkdir(mode=0o700, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(self.cookie)
            cookie.chmod(0o400)  # Erlang refuses a cookie file others can read
        (self.run_dir / "rabbitmq.conf").write_text(
            self.config.rabbitmq_conf(self.amqp_port, self.vhost, self.user, self.password, self.peers))
        (self.run_dir / "advanced.config").write_text(self.config.advanced_config())
        (self.run_dir / "enabled_plugins").write_text("[].\n")
        (self.run_dir / "rabbitmq-env.conf").touch()

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start epmd (unless shared) and the node (a restart reuses the ports); return once an AMQP channel opens."""
        if self.running:
            return self
        began = time.monotonic()
        sbin = self.sbin
        if self._owns_epmd:
            self.epmd.start()
        elif not self.epmd.running:
            raise RabbitMQError("the shared epmd is not running: its owner starts it first")
        fixed = self.amqp_port is not None
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            if not fixed:
                self.amqp_port, self.dist_port = free_port(), free_port()
            self._write_files()
            try:
                self._start_processes(sbin, began + self.start_timeout_s)
                break
            except RabbitMQError as exc:
                self._stop_node()
                # Only a port taken by someone else between free_port() and bind() is worth a retry.
                if attempt + 1 == attempts or not any(sign in str(exc).lower() for sign in _PORT_TAKEN):
                    self.stop()
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def _start_processes(self, sbin: Path, deadline: float) -> None:
        assert self.amqp_port is not None
        self._process = ServerProcess("rabbitmq-server", [str(sbin / "rabbitmq-server")], self.log_path,
                                      env=self.env(), cwd=self.run_dir)
        self._process.start()
        try:
            self._process.wait_until(self._channel_opens, deadline, "an AMQP channel opens", RabbitMQError,
                                     port=self.amqp_port)
        except RabbitMQError as exc:
            raise RabbitMQError(f"{exc}\n--- node log tail ({self.node_log_path}) ---\n{tail(self.node_log_path)}"
                                ) from None

    def _channel_opens(self) -> bool:
        connection = self.connect(socket_timeout=READY_CONNECT_TIMEOUT_S)
        try:
            connection.channel().close()
            return True
        finally:
            connection.close()

    def stop(self) -> None:
        """SIGTERM the node (RabbitMQ's graceful stop), then its epmd unless shared. Idempotent."""
        self._stop_node()
        if self._owns_epmd:
            self.epmd.stop()

    def _stop_node(self) -> None:
        if self._process is not None:
            self._process.stop(timeout_s=STOP_TIMEOUT_S)
            self._process = None

    @property
    def epmd_pid(self) -> int | None:
        return self.epmd.pid

    # --- clients ---------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` of the AMQP listener (what a Toxiproxy upstream wants)."""
        if self.amqp_port is None:
            raise RabbitMQError("the node is not started")
        return f"{LOOPBACK}:{self.amqp_port}"

    def connection_parameters(self, *, host: str = LOOPBACK, port: int | None = None, **kwargs: Any) -> Any:
        """``pika.ConnectionParameters`` for the application user and vhost: one connection attempt and short
        socket timeouts unless overridden; ``host``/``port`` point elsewhere (a Toxiproxy link)."""
        import pika

        kwargs.setdefault("connection_attempts", 1)
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("blocked_connection_timeout", 30.0)
        if port is None and self.amqp_port is None:
            raise RabbitMQError("the node is not started")
        return pika.ConnectionParameters(host=host, port=port or self.amqp_port, virtual_host=self.vhost,
                                         credentials=pika.PlainCredentials(self.user, self.password), **kwargs)

    @property
    def url(self) -> str:
        """``amqp://user:password@127.0.0.1:port/vhost``."""
        from urllib.parse import quote

        return (f"amqp://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.address}/"
                f"{quote(self.vhost, safe='')}")

    def connect(self, **kwargs: Any) -> Any:
        """A ``pika.BlockingConnection`` as the application user."""
        import pika

        return pika.BlockingConnection(self.connection_parameters(**kwargs))

    def ctl(self, tool: str, *args: str, timeout_s: float = CTL_TIMEOUT_S) -> str:
        """Run a CLI tool of the distribution (``rabbitmqctl``, ``rabbitmq-diagnostics``, ``rabbitmq-queues``) against
        this node; its stdout, or :class:`RabbitMQError` with its output on failure."""
        if tool not in ("rabbitmqctl", "rabbitmq-diagnostics", "rabbitmq-queues", "rabbitmq-plugins"):
            raise RabbitMQError(f"not a RabbitMQ CLI tool: {tool!r}")
        argv = [str(self.sbin / tool), *args]
        try:
            proc = subprocess.run(argv, env=self.env(), cwd=self.run_dir, capture_output=True, text=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RabbitMQError(f"{tool} {' '.join(args)} did not finish within {timeout_s:.0f}s") from exc
        if proc.returncode != 0:
            raise RabbitMQError(f"{tool} {' '.join(args)} failed with exit code {proc.returncode}:\n"
                                f"{proc.stdout}{proc.stderr}")
        return proc.stdout


class LocalRabbitMQCluster:
    """``size`` nodes sharing one epmd, one cookie, one vhost and user, clustered by classic peer discovery: the
    first node boots a new cluster and each next one, started once the previous is ready, finds it and joins.
    ``nodes[i].stop()`` / ``.start()`` take one member down and bring it back (it rejoins with its data)."""

    def __init__(self, run_dir: Path, size: int = 3, *, vhost: str = "sortie", user: str = "sortie",
                 password: str | None = None, config: BrokerConfig | None = None,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        if size < 1:
            raise RabbitMQError(f"a cluster has at least one node, not {size}")
        self.run_dir = Path(run_dir).resolve()
        self.epmd = LocalEpmd(self.run_dir / "epmd", start_timeout_s=start_timeout_s)
        token, cookie, password = secrets.token_hex(4), secrets.token_hex(20), password or secrets.token_urlsafe(18)
        names = tuple(f"sortie-{token}-{i}@localhost" for i in range(size))
        self.nodes = [LocalRabbitMQ(self.run_dir / f"node{i}", vhost=vhost, user=user, password=password,
                                    config=config, node_name=name, epmd=self.epmd, cookie=cookie, peers=names,
                                    start_timeout_s=start_timeout_s) for i, name in enumerate(names)]
        self.start_seconds: float | None = None

    def start(self) -> Self:
        """Start epmd and every node in turn; raise :class:`RabbitMQError` unless all run as one cluster."""
        began = time.monotonic()
        try:
            self.epmd.start()
            for node in self.nodes:
                node.start()
            running = self.running_nodes()
            if running != {node.node_name for node in self.nodes}:
                raise RabbitMQError(f"the nodes did not form one cluster: {self.nodes[0].node_name} sees {running}")
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def running_nodes(self, via: LocalRabbitMQ | None = None) -> set[str]:
        """The cluster's running members as ``via`` (the first running node by default) sees them."""
        import json

        asked = via or next((node for node in self.nodes if node.running), None)
        if asked is None:
            raise RabbitMQError("no node of the cluster is running")
        return set(json.loads(asked.ctl("rabbitmqctl", "-q", "cluster_status", "--formatter", "json"))["running_nodes"])

    def stop(self) -> None:
        """Every node (last first), then epmd. Idempotent."""
        for node in reversed(self.nodes):
            node.stop()
        self.epmd.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
