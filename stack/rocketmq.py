"""A throwaway RocketMQ 5 on loopback: NameServer plus Broker with the gRPC Proxy in local mode.

The jars come from Maven Central (``install()``: the runtime classpath of ``rocketmq-namesrv``,
``rocketmq-proxy`` and ``rocketmq-tools`` copied into ``cache_dir()/rocketmq/<version>/lib``) and run
with ``java -cp lib/*`` and capped heaps; nothing of the distribution's start scripts is used.

``LocalRocketMQ(run_dir).start()`` starts two JVMs, each in its own process group:

- ``org.apache.rocketmq.namesrv.NamesrvStartup -c namesrv.properties``
- ``org.apache.rocketmq.proxy.ProxyStartup -pm local -bc broker.conf -pc proxy.json -n <namesrv>``
  (local mode: the broker runs inside the proxy's JVM)

Every port is a free 127.0.0.1 port. RocketMQ hard-codes the wildcard address for some listeners (the
proxy's gRPC and remoting servers, the broker's HA port), so the JVMs run with a tiny ``LD_PRELOAD``
shim, compiled once by ``install()``, that turns a wildcard ``bind()`` into a loopback one.
``start()`` returns after a real produce / receive / ack round trip through the Python gRPC client on a
scratch topic; a failed start raises :class:`RocketMQError` with the tails of the server logs and leaves
no process behind. Topics and consumer groups are created with ``MQAdminStartup`` (the proxy never
creates them for gRPC clients, and the broker here is configured not to auto-create either).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from stack.common import LOOPBACK, MissingDependency, cache_dir, dying_with_parent, free_port, popen
from stack.common import tail as _tail

DEFAULT_VERSION = "5.3.3"
CLUSTER = "SortieCluster"
BROKER_NAME = "sortie-broker"
READY_TOPIC = "sortie-ready"
READY_GROUP = "sortie-ready"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
ADMIN_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 1800.0
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
ARTIFACTS = ("rocketmq-namesrv", "rocketmq-proxy", "rocketmq-tools")
MARKER = "installed.json"
SHIM_NAME = "libsortie_loopback_bind.so"

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
ADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
PROVISION_SOURCE = Path(__file__).resolve().parent / "java" / "Provision.java"

# bind() interposer: a wildcard IPv4 / IPv6 bind becomes a 127.0.0.1 bind (IPv6 sockets get the
# v4-mapped loopback so IPv4 clients still reach them). Everything else passes through unchanged.
_SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind = 0;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            static const unsigned char mapped[16] = {0,0,0,0,0,0,0,0,0,0,0xff,0xff,127,0,0,1};
            memcpy(&a.sin6_addr, mapped, 16);
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_bind(fd, addr, len);
}
"""


class RocketMQError(RuntimeError):
    """RocketMQ could not be installed, started, administered or reached."""


class RocketMQMissing(RocketMQError, MissingDependency):
    """A tool RocketMQ's install needs (a C compiler, Maven, Java) is not here."""


# --- install ---------------------------------------------------------------------------------


def _pom(version: str) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
        f"<version>{version}</version></dependency>" for a in ARTIFACTS)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sortie.stack</groupId>
  <artifactId>rocketmq-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Serialise installs across processes (pytest-xdist workers, parallel CI steps)."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _compile_shim(target: Path) -> None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise RocketMQMissing("no C compiler (cc/gcc) to build the loopback bind shim; "
                            "apt-get install gcc, or pass allow_wildcard_bind=True to LocalRocketMQ")
    src = target.with_suffix(".c")
    src.write_text(_SHIM_SOURCE)
    tmp = target.with_name(target.name + ".tmp")
    proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src), "-ldl"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise RocketMQError(f"compiling the loopback bind shim failed:\n{proc.stdout}{proc.stderr}")
    tmp.replace(target)


def install(version: str = DEFAULT_VERSION) -> Path:
    """The RocketMQ ``version`` directory under the cache, with ``lib/`` (the runtime classpath of the
    name server, proxy and tools) and the loopback bind shim. Idempotent and safe to call concurrently:
    ``installed.json`` is written only after a complete install, so an interrupted one is redone."""
    home = cache_dir() / "rocketmq" / version
    marker = home / MARKER
    shim = home / SHIM_NAME
    if marker.is_file() and (home / "lib").is_dir() and shim.is_file():
        return home
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".install.lock"):
        if not (marker.is_file() and (home / "lib").is_dir()):
            marker.unlink(missing_ok=True)
            mvn = shutil.which("mvn")
            if mvn is None:
                raise RocketMQMissing("Maven ('mvn') is not installed: apt-get install maven")
            if shutil.which("java") is None:
                raise RocketMQMissing("Java ('java') is not installed: apt-get install openjdk-17-jre-headless")
            shutil.rmtree(home / "lib", ignore_errors=True)
            (home / "pom.xml").write_text(_pom(version))
            began = time.monotonic()
            try:
                proc = subprocess.run(
                    [mvn, "-q", "-B", f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DoutputDirectory=lib",
                     "-DincludeScope=runtime"],
                    cwd=home, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                    stdin=subprocess.DEVNULL, check=False)
            except subprocess.TimeoutExpired as exc:
                raise RocketMQError(f"mvn copy-dependencies did not finish in {INSTALL_TIMEOUT_S:.0f}s") from exc
            jars = sorted(p.name for p in (home / "lib").glob("*.jar")) if (home / "lib").is_dir() else []
            missing = [a for a in ARTIFACTS if f"{a}-{version}.jar" not in jars]
            if proc.returncode != 0 or missing:
                raise RocketMQError(
                    f"mvn copy-dependencies for RocketMQ {version} failed (exit {proc.returncode}, "
                    f"missing {missing}):\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
            marker.write_text(json.dumps({"version": version, "jars": jars,
                                          "seconds": round(time.monotonic() - began, 1)}, indent=1))
        if not shim.is_file():
            _compile_shim(shim)
    return home


# --- helpers ---------------------------------------------------------------------------------


def _port_is_free(port: int) -> bool:
    if not 1024 <= port <= 65535:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _free_port_block(offsets: Sequence[int], taken: set[int]) -> int:
    """A port p with p+o free for every offset (the broker also listens on p-2 and p+1)."""
    for _ in range(200):
        p = free_port()
        ports = {p + o for o in offsets}
        if not ports & taken and all(_port_is_free(q) for q in ports):
            taken.update(ports)
            return p
    raise RocketMQError(f"no free loopback port block with offsets {list(offsets)}")


def _properties(values: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return "".join(f"{k}={fmt(v)}\n" for k, v in values.items())


def _tcp_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


_LIVE: set[LocalRocketMQ] = set()
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for mq in live:
        with contextlib.suppress(Exception):
            mq.stop()


atexit.register(_stop_all_at_exit)


class _Jvm:
    """One JVM in its own process group (session), output to a file; stop() ends the whole group."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path, out: Path) -> None:
        self.name, self.out = name, out
        with open(out, "ab") as fh:
            self.proc = popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=fh,
                              stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own process group

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.out.read_text(errors="replace")
        except OSError:
            return ""

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, timeout_s: float) -> None:
        """SIGTERM to the group (the JVM runs its shutdown hooks), SIGKILL after ``timeout_s``. The
        group is only signalled while its leader is unreaped, so a recycled process group is never hit."""
        if self.proc.poll() is not None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(timeout=30)


def round_trip(endpoint: str, deadline: float, *, invisible_s: int = 1, poll_s: int = 1,
               alive: Callable[[], bool] = lambda: True, diagnostics: Callable[[], str] = lambda: "") -> None:
    """Readiness of any RocketMQ 5 proxy: send a message to the scratch topic (``READY_TOPIC``, read by
    ``READY_GROUP``, both created beforehand), receive it, ack it, through the gRPC endpoint. Every step is
    retried (polling, under ``deadline``) until it works; ``alive()`` false fails at once."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    token = uuid.uuid4().hex.encode()
    cfg = ClientConfiguration(endpoint, Credentials(), request_timeout=3)
    producer = Producer(cfg, (READY_TOPIC,))
    consumer = SimpleConsumer(cfg, READY_GROUP, {READY_TOPIC: FilterExpression("*")}, await_duration=poll_s)
    last: BaseException | None = None
    sent = started = False
    delay = 0.05
    try:
        while time.monotonic() < deadline:
            if not alive():
                raise RocketMQError(f"the broker/proxy exited during the readiness round trip:\n{diagnostics()}")
            try:
                if not started:
                    producer.startup()
                    consumer.startup()
                    started = True
                if not sent:
                    msg = Message()
                    msg.topic, msg.body, msg.tag = READY_TOPIC, token, "ready"
                    producer.send(msg)
                    sent = True
                # The first receive can fail while the proxy has not yet seen the consumer's
                # settings (it reports an internal error): poll again.
                for m in consumer.receive(16, invisible_s):
                    consumer.ack(m)
                    if m.body == token:
                        return
                continue
            except Exception as exc:
                last = exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    finally:
        for client in (consumer, producer):
            with contextlib.suppress(Exception):
                client.shutdown()
    raise RocketMQError(f"no produce/receive/ack round trip through {endpoint}: {last!r}\n{diagnostics()}")


# Proxy settings the reference's clients rely on (every provider that configures its proxy sets them):
# 1 s minimum long poll (the default 5 s makes every empty receive take 5 s and needs request timeout +
# await >= 5 s), quick cache refreshes so new topics and groups are usable at once, a short gRPC shutdown.
PROXY_TUNING: dict[str, Any] = {
    "grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
    "topicRouteServiceCacheRefreshSeconds": 1,
    "topicConfigCacheRefreshSeconds": 1,
    "subscriptionGroupConfigCacheRefreshSeconds": 1,
    "grpcShutdownTimeSeconds": 1,
}


class LocalRocketMQ:
    """NameServer + Broker/gRPC Proxy (local mode) under ``run_dir``.

    Layout: ``conf/`` (namesrv.properties, broker.conf, proxy.json), ``store/`` (commit log, queues,
    broker metadata), ``home/`` (the JVMs' ``user.home``: ``home/logs/rocketmqlogs/*.log``), ``logs/``
    (each JVM's stdout/stderr). Clients use :attr:`endpoint` (the proxy's gRPC address).

    ``min_invisible_ms`` is the proxy's ``minInvisibleTimeMillsForRecv`` (default 10 s upstream; 1 s here
    so tests can use short invisible times). ``broker_config`` / ``proxy_config`` override or add keys of
    ``broker.conf`` / ``proxy.json``. Heaps: name server ``-Xmx256m``, broker+proxy ``-Xmx1024m`` and
    ``-XX:MaxDirectMemorySize=1024m``. ``stop_timeout_s`` bounds the graceful stop (about 12 s for the
    broker's own shutdown hooks) before SIGKILL; throwaway test brokers can use a few seconds.
    """

    def __init__(
        self,
        run_dir: Path,
        version: str = DEFAULT_VERSION,
        *,
        cluster: str = CLUSTER,
        broker_name: str = BROKER_NAME,
        namesrv_heap_mb: int = 256,
        broker_heap_mb: int = 1024,
        broker_direct_mb: int = 1024,
        min_invisible_ms: int = 1000,
        broker_config: dict[str, Any] | None = None,
        proxy_config: dict[str, Any] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
        allow_wildcard_bind: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.version = version
        self.cluster = cluster
        self.broker_name = broker_name
        self.namesrv_heap_mb = namesrv_heap_mb
        self.broker_heap_mb = broker_heap_mb
        self.broker_direct_mb = broker_direct_mb
        self.min_invisible_ms = min_invisible_ms
        self.extra_broker_config = dict(broker_config or {})
        self.extra_proxy_config = dict(proxy_config or {})
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.allow_wildcard_bind = allow_wildcard_bind
        # The JVMs get SIGKILL when the thread that started them dies (prctl PDEATHSIG via setpriv), so a
        # SIGKILLed test run leaves nothing behind. Turn off when the starter exits before the stack.
        self.die_with_parent = die_with_parent
        self.conf_dir = self.run_dir / "conf"
        self.store_dir = self.run_dir / "store"
        self.home_dir = self.run_dir / "home"
        self.log_dir = self.run_dir / "logs"
        self.rocketmq_log_dir = self.home_dir / "logs" / "rocketmqlogs"
        self.namesrv_port: int | None = None
        self.broker_port: int | None = None
        self.ha_port: int | None = None
        self.grpc_port: int | None = None
        self.remoting_port: int | None = None
        self._home: Path | None = None
        self._namesrv: _Jvm | None = None
        self._proxy: _Jvm | None = None
        self.start_seconds: float | None = None  # wall time of the last start(), install included
        self.install_seconds: float | None = None
        self.timings: dict[str, float] = {}  # seconds per start phase

    # --- addresses ---------------------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        if self.namesrv_port is None:
            raise RocketMQError("RocketMQ is not started")
        return f"{LOOPBACK}:{self.namesrv_port}"

    @property
    def endpoint(self) -> str:
        """The proxy's gRPC address for 5.x clients: ``127.0.0.1:port``."""
        if self.grpc_port is None:
            raise RocketMQError("RocketMQ is not started")
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def broker_addr(self) -> str:
        if self.broker_port is None:
            raise RocketMQError("RocketMQ is not started")
        return f"{LOOPBACK}:{self.broker_port}"

    # --- configuration -----------------------------------------------------------------------

    def broker_properties(self) -> dict[str, Any]:
        assert self.broker_port is not None and self.ha_port is not None
        return {
            "brokerClusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": LOOPBACK,
            "bindAddress": LOOPBACK,  # NettyServerConfig: the broker's listenPort and listenPort-2
            "listenPort": self.broker_port,
            "haListenPort": self.ha_port,
            "storePathRootDir": self.store_dir,
            "storePathCommitLog": self.store_dir / "commitlog",
            "flushDiskType": "ASYNC_FLUSH",
            "mappedFileSizeCommitLog": 32 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 60_000 * 20,  # a multiple of the 20-byte unit
            "mappedFileSizeTimerLog": 16 * 1024 * 1024,
            "autoCreateTopicEnable": False,
            "autoCreateSubscriptionGroup": False,
            **self.extra_broker_config,
        }

    def proxy_properties(self) -> dict[str, Any]:
        return {
            "rocketMQClusterName": self.cluster,
            "proxyMode": "local",
            "namesrvAddr": self.namesrv_addr,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            "localServeAddr": LOOPBACK,
            "minInvisibleTimeMillsForRecv": self.min_invisible_ms,
            **PROXY_TUNING,
            **self.extra_proxy_config,
        }

    def _java(self, heap_mb: int, direct_mb: int, logback: str, main: str, *args: str,
              initial_heap_mb: int | None = None) -> list[str]:
        assert self._home is not None
        xms = initial_heap_mb or max(64, heap_mb // 4)
        argv = [
            "java", "-server", f"-Xms{xms}m", f"-Xmx{heap_mb}m", f"-XX:MaxDirectMemorySize={direct_mb}m",
            "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
            "-Djava.net.preferIPv4Stack=true",
            f"-Drocketmq.home.dir={self.run_dir}",
            f"-Duser.home={self.home_dir}",
            f"-Djava.io.tmpdir={self.run_dir / 'tmp'}",
            f"-Drmq.logback.configurationFile={logback}",
            "-cp", f"{self._home / 'lib'}/*",
            main, *args,
        ]
        return dying_with_parent(argv) if self.die_with_parent else argv

    def _env(self) -> dict[str, str]:
        assert self._home is not None
        env = {k: v for k, v in os.environ.items()
               if k not in ("NAMESRV_ADDR", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
                            "RMQ_PROXY_HOME", "CLASSPATH")}
        env.update({"ROCKETMQ_HOME": str(self.run_dir), "LC_ALL": "C", "LANG": "C"})
        if not self.allow_wildcard_bind:
            shim = self._home / SHIM_NAME
            env["LD_PRELOAD"] = " ".join(filter(None, [str(shim), os.environ.get("LD_PRELOAD", "")]))
        return env

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Install (cached), start the name server and the broker+proxy, wait for a real round trip."""
        if self._proxy is not None and self._proxy.alive():
            return self
        began = time.monotonic()
        self._home = install(self.version)
        self.install_seconds = time.monotonic() - began
        deadline = began + self.install_seconds + self.start_timeout_s
        for d in (self.conf_dir, self.store_dir, self.home_dir, self.log_dir, self.run_dir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.timings = {"install": round(self.install_seconds, 2)}
        try:
            for phase, step in (("namesrv", lambda: self._start_namesrv(deadline)),
                                ("broker_proxy", lambda: self._start_proxy(deadline)),
                                ("admin", self._create_ready_resources),
                                ("round_trip", lambda: self._round_trip(deadline))):
                t = time.monotonic()
                step()
                self.timings[phase] = round(time.monotonic() - t, 2)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _create_ready_resources(self) -> None:
        self.create_topic(READY_TOPIC)
        self.create_group(READY_GROUP, retry_max_times=1)

    def _start_namesrv(self, deadline: float) -> None:
        for attempt in range(3):
            taken: set[int] = set()
            self.namesrv_port = _free_port_block([0], taken)
            conf = self.conf_dir / "namesrv.properties"
            conf.write_text(_properties({"listenPort": self.namesrv_port, "bindAddress": LOOPBACK,
                                         "rocketmqHome": self.run_dir}))
            self._namesrv = _Jvm("namesrv", self._java(self.namesrv_heap_mb, 64, "rmq.namesrv.logback.xml",
                                                       NAMESRV_MAIN, "-c", str(conf),
                                                       initial_heap_mb=min(128, self.namesrv_heap_mb)),
                                 self._env(), self.run_dir, self.log_dir / "namesrv.out")
            if self._wait_for(self._namesrv, "The Name Server boot success", deadline,
                              port=self.namesrv_port):
                return
            self._namesrv.stop(0)
            if attempt == 2 or "Address already in use" not in self._namesrv.output():
                raise RocketMQError(f"the name server did not start:\n{self.diagnostics()}")

    def _start_proxy(self, deadline: float) -> None:
        for attempt in range(3):
            taken = {self.namesrv_port or 0}
            self.broker_port = _free_port_block([-2, 0, 1], taken)
            self.ha_port = self.broker_port + 1
            self.grpc_port = _free_port_block([0], taken)
            self.remoting_port = _free_port_block([0], taken)
            broker_conf = self.conf_dir / "broker.conf"
            broker_conf.write_text(_properties(self.broker_properties()))
            proxy_conf = self.conf_dir / "proxy.json"
            proxy_conf.write_text(json.dumps(self.proxy_properties(), indent=1, default=str))
            self._proxy = _Jvm("proxy", self._java(self.broker_heap_mb, self.broker_direct_mb,
                                                   "rmq.proxy.logback.xml", PROXY_MAIN, "-pm", "local",
                                                   "-bc", str(broker_conf), "-pc", str(proxy_conf),
                                                   "-n", self.namesrv_addr, initial_heap_mb=256),
                               self._env(), self.run_dir, self.log_dir / "proxy.out")
            if self._wait_for(self._proxy, "rocketmq-proxy startup successfully", deadline, port=self.grpc_port):
                return
            self._proxy.stop(0)
            if attempt == 2 or "Address already in use" not in self.diagnostics():
                raise RocketMQError(f"the broker/proxy did not start:\n{self.diagnostics()}")
            shutil.rmtree(self.store_dir, ignore_errors=True)
            self.store_dir.mkdir()

    @staticmethod
    def _wait_for(jvm: _Jvm, banner: str, deadline: float, port: int) -> bool:
        """Poll the JVM's output for its start banner and its port for a listener; False if it exited."""
        delay = 0.05
        while time.monotonic() < deadline:
            if banner in jvm.output() and _tcp_open(port):
                return True
            if not jvm.alive():
                return False
            time.sleep(delay)  # polling a condition under a deadline
            delay = min(delay * 2, 0.25)
        raise RocketMQError(f"{jvm.name} did not print {banner!r} before the deadline:\n{_tail(jvm.out)}")

    def _round_trip(self, deadline: float) -> None:
        proxy = self.proxy_properties()  # the client's durations are whole seconds within the proxy's bounds
        round_trip(self.endpoint, deadline,
                   invisible_s=max(1, math.ceil(int(proxy["minInvisibleTimeMillsForRecv"]) / 1000)),
                   poll_s=max(1, math.ceil(int(proxy["grpcClientConsumerMinLongPollingTimeoutMillis"]) / 1000)),
                   alive=lambda: bool(self._proxy and self._proxy.alive()), diagnostics=self.diagnostics)

    def stop(self) -> None:
        """SIGTERM both JVMs' process groups, SIGKILL after ``stop_timeout_s``. Idempotent."""
        for jvm in (self._proxy, self._namesrv):
            if jvm is not None:
                jvm.stop(self.stop_timeout_s)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    @property
    def running(self) -> bool:
        return bool(self._proxy and self._proxy.alive() and self._namesrv and self._namesrv.alive())

    def pids(self) -> list[int]:
        return [j.proc.pid for j in (self._namesrv, self._proxy) if j is not None and j.alive()]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- administration ----------------------------------------------------------------------

    def admin(self, *args: str, done_marker: str | None = None, timeout_s: float = ADMIN_TIMEOUT_S,
              main: str = ADMIN_MAIN) -> str:
        """Run one ``mqadmin`` sub-command (or another admin ``main``: a class or a Java source file) and
        return its output. mqadmin exits 0 even when it failed, so callers check the output. With
        ``done_marker`` the JVM is killed as soon as that text appears: the work is done by then, and the
        admin client's Netty shutdown would idle for seconds more."""
        if self._home is None:
            raise RocketMQError("RocketMQ is not started")
        argv = self._java(256, 64, "rmq.tools.logback.xml", main, *args, initial_heap_mb=64)
        argv[argv.index("-XX:+UseG1GC")] = "-XX:+UseSerialGC"
        argv.insert(argv.index("-server") + 1, "-XX:TieredStopAtLevel=1")  # a short-lived JVM
        out_path = self.log_dir / f"admin-{uuid.uuid4().hex[:8]}.out"
        jvm = _Jvm("mqadmin", argv, self._env(), self.run_dir, out_path)
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        try:
            while jvm.alive():
                if done_marker is not None and done_marker in jvm.output():
                    break
                if time.monotonic() > deadline:
                    raise RocketMQError(f"mqadmin {' '.join(args)} did not finish in {timeout_s:.0f}s:\n"
                                        f"{jvm.output()[-2000:]}")
                time.sleep(delay)  # polling the command's output under a deadline
                delay = min(delay * 2, 0.1)
        finally:
            jvm.stop(0)
        out = jvm.output()
        with contextlib.suppress(OSError):
            out_path.unlink()
        return out

    def admin_client(self) -> MQAdmin:
        """Topic and group administration of this broker (``-b``: right after start the broker may not
        have registered with the name server yet, and a ``-c`` cluster lookup would then fail)."""
        return MQAdmin(self.admin, self.namesrv_addr, ["-b", self.broker_addr],
                       batch=lambda specs: provision_in_one_jvm(self.admin, self.namesrv_addr, self.broker_addr,
                                                                specs))

    def create_topic(self, topic: str, queues: int = 4, perm: int | None = None) -> None:
        self.admin_client().create_topic(topic, queues, perm=perm)

    def create_group(self, group: str, retry_max_times: int = 16) -> None:
        """A consumer group: a message is delivered at most ``retry_max_times + 1`` times, then it goes
        to ``%DLQ%<group>``."""
        self.admin_client().create_group(group, retry_max_times)

    # --- diagnostics -------------------------------------------------------------------------

    def diagnostics(self, lines: int = 30) -> str:
        parts = []
        for name in ("namesrv.out", "proxy.out"):
            p = self.log_dir / name
            if p.exists():
                parts.append(f"--- {p} ---\n{_tail(p, lines)}")
        for name in ("namesrv.log", "proxy.log", "broker.log", "broker_default.log"):
            p = self.rocketmq_log_dir / name
            if p.exists():
                parts.append(f"--- {p} ---\n{_tail(p, lines)}")
        return "\n".join(parts) or "(no logs yet)"


# --- administration shared by every provider ---------------------------------------------------

PERM_READ_WRITE = 6  # PermName.PERM_READ | PermName.PERM_WRITE


class MQAdmin:
    """``mqadmin`` topic and consumer-group administration against any name server.

    ``run(*args, done_marker=...)`` runs one mqadmin sub-command and returns its output: the cached jars
    on this host (:meth:`LocalRocketMQ.admin`, :func:`host_admin` for a broker someone else runs) or
    ``sh mqadmin`` inside a container (the containers provider). ``target`` picks the broker: ``["-b",
    "host:port"]`` or ``["-c", "ClusterName"]``. mqadmin exits 0 even when it failed, so every call
    checks the output."""

    def __init__(self, run: Callable[..., str], namesrv_addr: str, target: Sequence[str],
                 batch: Callable[[Sequence[str]], None] | None = None) -> None:
        self.run = run
        self.namesrv_addr = namesrv_addr
        self.target = list(target)
        self.batch = batch  # topics and groups in one JVM, where the jars are on this host

    def create_topic(self, topic: str, queues: int = 4, *, perm: int | None = None,
                     message_type: str = "NORMAL") -> None:
        args = ["updateTopic", "-n", self.namesrv_addr, *self.target, "-t", topic, "-r", str(queues),
                "-w", str(queues), "-a", f"+message.type={message_type}"]
        if perm is not None:
            args += ["-p", str(perm)]
        out = self.run(*args, done_marker="success.")
        if "create topic to" not in out or "success." not in out:
            raise RocketMQError(f"updateTopic {topic} failed:\n{out[-3000:]}")

    def create_group(self, group: str, retry_max_times: int = 16) -> None:
        out = self.run("updateSubGroup", "-n", self.namesrv_addr, *self.target, "-g", group,
                       "-r", str(retry_max_times), done_marker="success.")
        if "create subscription group to" not in out or "success." not in out:
            raise RocketMQError(f"updateSubGroup {group} failed:\n{out[-3000:]}")


def provision_in_one_jvm(run: Callable[..., str], namesrv_addr: str, broker_addr: str, specs: Sequence[str]) -> None:
    """Every topic and group in one JVM (stack/java/Provision.java, RocketMQ's admin client), where mqadmin
    would start one JVM per command."""
    out = run(namesrv_addr, broker_addr, *specs, main=str(PROVISION_SOURCE), done_marker="provisioned.")
    if "provisioned." not in out:
        raise RocketMQError(f"provisioning {', '.join(specs)} failed:\n{out[-3000:]}")


def host_admin(namesrv_addr: str, run_dir: Path, *, broker_addr: str | None = None, cluster: str | None = None,
               version: str = DEFAULT_VERSION) -> MQAdmin:
    """mqadmin from the cached jars (``install()``) for a broker this project did not start (the external
    provider): nothing is started, ``run_dir`` only holds the tool's logs."""
    if not (broker_addr or cluster):
        raise RocketMQError("give the broker address or the cluster name to administer")
    tool = LocalRocketMQ(run_dir)
    tool._home = install(version)
    for d in (tool.home_dir, tool.log_dir, tool.run_dir / "tmp"):
        d.mkdir(parents=True, exist_ok=True)
    if broker_addr:
        return MQAdmin(tool.admin, namesrv_addr, ["-b", broker_addr],
                       batch=lambda specs: provision_in_one_jvm(tool.admin, namesrv_addr, broker_addr, specs))
    return MQAdmin(tool.admin, namesrv_addr, ["-c", str(cluster)])


# An application's consumer groups are created with this many retries; a dead letter has then been
# reconsumed retry_max_times + 1 times, and the group that reads its dead-letter topic must allow more than that
# (the proxy forwards a message reconsumed more often than its reading group allows to that group's DLQ).
GROUP_RETRY_MAX_TIMES = 16
DLQ_READER_RETRY_MAX_TIMES = 1000


def provision(admin: MQAdmin, topic: str, groups: Sequence[str], dead_letters: Callable[[str], tuple[str, str]], *,
              queues: int = 4, retry_max_times: int = GROUP_RETRY_MAX_TIMES) -> None:
    """What an application needs on any broker: its topic; each consumer group with its retry limit; for each
    group its dead-letter topic (``dead_letters(group)``: that topic and the group that reads it, as the
    application names them) created up front as readable and writable (the broker would otherwise create it only
    when the first message dies, and a reader subscribed before then finds no route), and the group that reads
    it."""
    if admin.batch is not None:
        specs = [f"topic={topic};{queues};{PERM_READ_WRITE};+message.type=NORMAL"]
        for group in groups:
            dlq_topic, reader = dead_letters(group)
            specs += [f"group={group};{retry_max_times}",
                      f"topic={dlq_topic};1;{PERM_READ_WRITE};+message.type=NORMAL",
                      f"group={reader};{DLQ_READER_RETRY_MAX_TIMES}"]
        admin.batch(specs)
        return
    admin.create_topic(topic, queues)
    for group in groups:
        dlq_topic, reader = dead_letters(group)
        admin.create_group(group, retry_max_times)
        admin.create_topic(dlq_topic, 1, perm=PERM_READ_WRITE)
        admin.create_group(reader, DLQ_READER_RETRY_MAX_TIMES)


@contextlib.contextmanager
def temporary_rocketmq(**kwargs: Any) -> Iterator[LocalRocketMQ]:
    """A NameServer + Broker/Proxy in a fresh temporary directory, removed on exit."""
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rmq-"))
    try:
        with LocalRocketMQ(run_dir, **kwargs) as mq:
            yield mq
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
