"""The containers provider: PostgreSQL, Redis, RocketMQ, MinIO and Toxiproxy as Docker containers
(testcontainers-python >= 4), the system's components (its stack.native.Application) as host processes,
exactly as in the native provider (this class is a NativeStack; only the dependencies differ).

Layout on the Docker engine (it must be on this host: see "Toxiproxy" below):

- ``postgres:16`` (``PostgresContainer``), ``redis:7`` (``RedisContainer``), ``minio/minio``
  (``MinioContainer``): each publishes its port on ``127.0.0.1:<a free port chosen here>``. A fixed host
  port (not Docker's random one) keeps the address stable when chaos stops and starts a container.
- ``apache/rocketmq:5.3.x``: a name server container and a broker container running the gRPC proxy in
  local mode (``ProxyStartup -pm local``, the broker inside the proxy's JVM, as native), on one
  user-defined network (the broker reaches ``namesrv:9876``). The proxy's gRPC port 8081 is published on
  loopback. The proxy gets the same tuning as native (:data:`stack.rocketmq.PROXY_TUNING`); topics,
  groups, dead-letter topics and their readers are created with ``mqadmin`` run inside the broker
  container (:class:`stack.rocketmq.MQAdmin`, the application's ``provision_broker``).
- ``ghcr.io/shopify/toxiproxy`` with **host networking**: its API and every proxy listen on 127.0.0.1 of
  this host, so it reaches the published container ports *and* the host processes (simulator, API) on
  loopback, and the components reach it on loopback; nothing binds a non-loopback address. Host
  networking needs a Docker engine on this Linux host (not a remote ``DOCKER_HOST``).

Readiness, never a sleep: PostgreSQL a ``psql`` query (testcontainers) and then the Alembic migration;
Redis a PING; MinIO its health endpoint and then a bucket put/get/delete round trip; RocketMQ the name
server's boot line, the proxy's start line and then a produce/receive/ack round trip through the gRPC
port; Toxiproxy ``GET /version``.

Teardown removes every container and the network (in reverse order, also when start fails half-way);
testcontainers' Ryuk reaper removes them if this process dies without cleaning up.

Not run on the machine this was written on (it has no Docker engine): its tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

from stack.app_database import DATABASE
from stack.common import LOOPBACK, free_port
from stack.native import Application, NativeStack

log = logging.getLogger("sortie.stack.containers")

IMAGES = {
    "postgres": os.environ.get("SORTIE_IMAGE_POSTGRES", "postgres:16"),
    "redis": os.environ.get("SORTIE_IMAGE_REDIS", "redis:7"),
    "rocketmq": os.environ.get("SORTIE_IMAGE_ROCKETMQ", "apache/rocketmq:5.3.1"),
    "minio": os.environ.get("SORTIE_IMAGE_MINIO", "minio/minio:RELEASE.2022-12-02T19-19-22Z"),
    "toxiproxy": os.environ.get("SORTIE_IMAGE_TOXIPROXY", "ghcr.io/shopify/toxiproxy:2.12.0"),
}
START_TIMEOUT_S = 180.0
GRPC_PORT = 8081  # the proxy's gRPC port inside the broker container
BROKER_PORT = 10911
NAMESRV_ALIAS = "namesrv"
LOCAL_DOCKER_HOSTS = {"localhost", "127.0.0.1", "::1"}


def docker_available(timeout_s: float = 3.0) -> tuple[bool, str]:
    """(True, where) if a Docker engine answers a ping; else (False, "no Docker engine reachable (...)")
    with the address tried and the error. Imports nothing of testcontainers, so it also answers when the
    ``containers`` extra is not installed."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        import docker
    except ImportError:
        return False, ("no Docker engine reachable (the 'docker' package is not installed: in the checkout, "
                       ".venv/bin/pip install -e '.[containers]')")
    client = None
    try:
        client = docker.from_env(timeout=max(1, int(timeout_s)))
        client.ping()
    except Exception as exc:  # DockerException, requests' ConnectionError, FileNotFoundError, ...
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return False, f"no Docker engine reachable ({host}: {detail})"
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
    return True, f"Docker engine at {host}"


def _bind_loopback(container: Any, port: int) -> int:
    """Publish the container's ``port`` on 127.0.0.1 and a free host port (docker-py's ``(ip, port)``
    binding; testcontainers' with_bind_ports only knows 0.0.0.0). Returns the host port."""
    host_port = free_port()
    container.ports[str(port)] = (LOOPBACK, host_port)
    return host_port


def _poll(what: str, check: Any, deadline: float) -> None:
    last: BaseException | None = None
    delay = 0.05
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:
            last = exc
        time.sleep(delay)  # a polling interval on a condition with a deadline
        delay = min(delay * 2, 1.0)
    raise RuntimeError(f"{what} not ready before the deadline: {last!r}")


class ContainerService:
    """A started container as a stack service: ``stop()``/``start()`` stop and start the same container
    (same published ports, so Toxiproxy's upstream stays valid) and wait for ``ready`` again;
    ``remove()`` is the teardown. chaos (redis-loss) uses this handle like LocalRedis."""

    def __init__(self, name: str, container: Any, ready: Any, flush: Any = None) -> None:
        self.name, self.container, self._ready, self._flush = name, container, ready, flush

    def start(self) -> ContainerService:
        self.container.get_wrapped_container().start()
        _poll(f"{self.name} (restarted)", self._ready, time.monotonic() + START_TIMEOUT_S)
        return self

    def stop(self) -> None:
        self.container.get_wrapped_container().stop(timeout=5)

    def flushall(self) -> None:
        if self._flush is not None:
            self._flush()

    @property
    def running(self) -> bool:
        try:
            self.container.get_wrapped_container().reload()
            return bool(self.container.get_wrapped_container().status == "running")
        except Exception:
            return False

    def remove(self) -> None:
        self.container.stop()  # testcontainers: force-remove with volumes


class ContainersStack(NativeStack):
    """NativeStack whose dependencies are containers. See the module docstring."""

    def __init__(self, run_dir: Path, app: Application, images: dict[str, str] | None = None) -> None:
        super().__init__(run_dir, app)
        self.images = {**IMAGES, **(images or {})}

    def _run_container(self, name: str, container: Any, ready: Any = None, flush: Any = None) -> ContainerService:
        svc = ContainerService(name, container, ready or (lambda: True), flush)
        # Registered before start: a container that was created but failed its wait strategy is removed too.
        self._stops.append((name, svc.remove))
        container.start()
        self.services[name] = svc
        return svc

    def _start_dependencies(self) -> None:
        from testcontainers.community.minio import MinioContainer
        from testcontainers.community.postgres import PostgresContainer
        from testcontainers.community.redis import RedisContainer
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.docker_client import DockerClient
        from testcontainers.core.network import Network

        from stack.app_database import app_database_url, prepare_database
        from stack.common import ProviderUnavailable
        from stack.s3 import minio_client
        from stack.toxiproxy import ToxiproxyClient

        if DockerClient().host() not in LOCAL_DOCKER_HOSTS:
            raise ProviderUnavailable("the containers provider needs a Docker engine on this host (Toxiproxy "
                                      "runs with host networking); DOCKER_HOST points elsewhere")
        ep, im = self.endpoints, self.images
        deadline = time.monotonic() + START_TIMEOUT_S

        # Toxiproxy first: every link goes through it.
        api_port = free_port()
        tp = DockerContainer(im["toxiproxy"]).with_kwargs(network_mode="host").with_command(
            ["-host=127.0.0.1", f"-port={api_port}"])
        ep.toxiproxy_api = f"http://{LOOPBACK}:{api_port}"
        self.toxiproxy_client = ToxiproxyClient(ep.toxiproxy_api)
        self._run_container("toxiproxy", tp, ready=lambda: bool(self.toxiproxy_client.version()))
        _poll("toxiproxy", lambda: bool(self.toxiproxy_client.version()), deadline)

        network = Network().create()
        self._stops.append(("network", network.remove))

        pg_password = secrets.token_hex(12)
        pg = PostgresContainer(im["postgres"], username="postgres", password=pg_password, dbname=DATABASE,
                               driver="psycopg")
        pg_port = _bind_loopback(pg, 5432)
        pg_ready = _pg_ready(f"postgresql+psycopg://postgres:{pg_password}@{LOOPBACK}:{pg_port}/{DATABASE}")
        self._run_container("postgres", pg, ready=pg_ready)
        ep.admin_database_url = f"postgresql+psycopg://postgres:{pg_password}@{LOOPBACK}:{pg_port}/{DATABASE}"
        _poll("postgres", pg_ready, deadline)
        app_password = prepare_database(self.app, ep.admin_database_url)
        ep.database_url = app_database_url(self.proxy("postgres", f"{LOOPBACK}:{pg_port}"), app_password, DATABASE)

        redis = RedisContainer(im["redis"])
        redis_port = _bind_loopback(redis, 6379)
        self._run_container("redis", redis, ready=lambda: bool(redis.get_client(socket_timeout=2).ping()),
                            flush=lambda: redis.get_client(socket_timeout=2).flushall())
        ep.redis_url = f"redis://{self.proxy('redis', f'{LOOPBACK}:{redis_port}')}/0"

        self._start_rocketmq(network, deadline)

        ep.s3_access_key, ep.s3_secret_key = "sortie" + secrets.token_hex(4), secrets.token_hex(16)
        minio = MinioContainer(im["minio"], access_key=ep.s3_access_key, secret_key=ep.s3_secret_key)
        s3_port = _bind_loopback(minio, 9000)
        s3_endpoint = f"{LOOPBACK}:{s3_port}"

        def s3_round_trip() -> bool:
            client = minio_client(s3_endpoint, ep.s3_access_key, ep.s3_secret_key)
            if not client.bucket_exists(ep.s3_bucket):
                client.make_bucket(ep.s3_bucket)
            key, body = f"sortie-ready/{secrets.token_hex(4)}", b"ready"
            client.put_object(ep.s3_bucket, key, io.BytesIO(body), len(body))
            resp = client.get_object(ep.s3_bucket, key)
            try:
                ok = resp.read() == body
            finally:
                resp.close()
                resp.release_conn()
            client.remove_object(ep.s3_bucket, key)
            return ok

        self._run_container("s3", minio, ready=s3_round_trip)
        _poll("minio (bucket round trip)", s3_round_trip, deadline)
        ep.s3_endpoint = self.proxy("s3", s3_endpoint)

    def _start_rocketmq(self, network: Any, deadline: float) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy as log_wait

        from stack.rocketmq import PROXY_TUNING, READY_GROUP, READY_TOPIC, MQAdmin, round_trip

        ep, image = self.endpoints, self.images["rocketmq"]
        java = ("exec java -server -Xms{xms} -Xmx{xmx} -XX:MaxDirectMemorySize={direct} -XX:+UseG1GC "
                "-Duser.home=/home/rocketmq -Drmq.logback.configurationFile=$ROCKETMQ_HOME/conf/{logback} "
                "-cp \"$ROCKETMQ_HOME/conf:$ROCKETMQ_HOME/lib/*\" {main} {args}")
        namesrv = (DockerContainer(image).with_network(network).with_network_aliases(NAMESRV_ALIAS)
                   .with_kwargs(entrypoint=["sh", "-c"])
                   .with_command([java.format(xms="128m", xmx="256m", direct="64m", logback="rmq.namesrv.logback.xml",
                                              main="org.apache.rocketmq.namesrv.NamesrvStartup", args="")])
                   .waiting_for(log_wait("The Name Server boot success")))
        self._run_container("rocketmq-namesrv", namesrv)

        broker_conf = "\n".join(f"{k}={v}" for k, v in {
            "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": 0,
            "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": f"{NAMESRV_ALIAS}:9876",
            "listenPort": BROKER_PORT, "storePathRootDir": "/tmp/sortie/store",
            "storePathCommitLog": "/tmp/sortie/store/commitlog", "autoCreateTopicEnable": "false",
            "autoCreateSubscriptionGroup": "false"}.items()) + "\n"
        proxy_json = json.dumps({"rocketMQClusterName": "DefaultCluster", "proxyMode": "local",
                                 "namesrvAddr": f"{NAMESRV_ALIAS}:9876", "grpcServerPort": GRPC_PORT,
                                 "remotingListenPort": 8080, "minInvisibleTimeMillsForRecv": 1000, **PROXY_TUNING})
        script = ("mkdir -p /tmp/sortie && printf '%s' \"$SORTIE_BROKER_CONF\" > /tmp/sortie/broker.conf && "
                  "printf '%s' \"$SORTIE_PROXY_JSON\" > /tmp/sortie/proxy.json && "
                  + java.format(xms="256m", xmx="768m", direct="512m", logback="rmq.proxy.logback.xml",
                                main="org.apache.rocketmq.proxy.ProxyStartup",
                                args=f"-pm local -bc /tmp/sortie/broker.conf -pc /tmp/sortie/proxy.json "
                                     f"-n {NAMESRV_ALIAS}:9876"))
        broker = (DockerContainer(image).with_network(network).with_network_aliases("broker")
                  .with_kwargs(entrypoint=["sh", "-c"]).with_command([script])
                  .with_env("SORTIE_BROKER_CONF", broker_conf).with_env("SORTIE_PROXY_JSON", proxy_json)
                  .waiting_for(log_wait("rocketmq-proxy startup successfully")))
        grpc_port = _bind_loopback(broker, GRPC_PORT)
        self._run_container("rocketmq", broker)

        def mqadmin(*args: str, done_marker: str | None = None) -> str:
            result = broker.exec(["sh", "-c", 'exec sh "$ROCKETMQ_HOME/bin/mqadmin" "$@"', "mqadmin", *args])
            return bytes(result.output or b"").decode(errors="replace")

        admin = MQAdmin(mqadmin, f"{NAMESRV_ALIAS}:9876", ["-b", f"127.0.0.1:{BROKER_PORT}"])
        def topic_created() -> bool:  # raises until the admin answers
            admin.create_topic(READY_TOPIC, 1)
            return True

        _poll("rocketmq admin", topic_created, deadline)
        admin.create_group(READY_GROUP, 1)
        self.app.provision_broker(admin)
        endpoint = f"{LOOPBACK}:{grpc_port}"
        round_trip(endpoint, deadline)
        ep.namesrv_addr = ""  # inside the Docker network only; administration goes through the container
        ep.rocketmq_endpoint = self.proxy("rocketmq", endpoint)


def _pg_ready(url: str) -> Any:
    def check() -> bool:
        from sqlalchemy import create_engine, text

        engine = create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                return conn.execute(text("SELECT 1")).scalar_one() == 1
        finally:
            engine.dispose()
    return check
