"""The external provider: Sortie against dependencies the user already runs.

Sortie starts only what is its own: the system's components (its stack.native.Application) as host
processes, exactly as the native provider does
(this class is a NativeStack; only ``_start_dependencies`` differs). Against the user's services it:

- PostgreSQL: refuses a database that holds tables but none of the application's Alembic history (unless
  ``allow_foreign_database``), applies its migrations, and creates its role, unless ``app_database_url``
  names a role the user made.
- RocketMQ: creates the application's topic, consumer groups, their dead-letter topics and readers with mqadmin
  from the cached jars (``sortie stack install``) when the name server and the broker address or cluster
  are given and ``rocketmq_provision`` is on; then a produce/receive/ack round trip.
- S3: creates the bucket if absent and checks a put/get round trip.
- Toxiproxy: ``toxiproxy_api: local`` (default) starts Sortie's own toxiproxy-server on loopback, a URL
  uses the user's (Sortie creates its proxies there and deletes them at teardown; a proxy of the same
  name already there is an error), ``none`` connects the components directly (link faults unavailable).

Teardown stops only what Sortie started (components, its proxies, its Toxiproxy); the user's services,
database contents and bucket are left as they are.

Configuration: a YAML or JSON file (``--external-config`` or ``SORTIE_EXTERNAL_CONFIG``) with the keys of
:class:`ExternalConfig`, and/or the environment variables ``SORTIE_EXTERNAL_<KEY>`` (upper case), which
override the file. Example::

    postgres_url: postgresql+psycopg://owner:secret@db.local:5432/sortie
    redis_url: redis://cache.local:6379/0
    rocketmq_endpoint: mq.local:8081          # the 5.x proxy's gRPC port
    rocketmq_namesrv: mq.local:9876
    rocketmq_broker_addr: mq.local:10911      # or rocketmq_cluster: DefaultCluster
    s3_endpoint: s3.local:9000
    s3_access_key: ...
    s3_secret_key: ...
    s3_bucket: sortie-reports
    toxiproxy_api: local
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stack.native import Application, NativeStack

ENV_FILE = "SORTIE_EXTERNAL_CONFIG"
ENV_PREFIX = "SORTIE_EXTERNAL_"
REQUIRED = ("postgres_url", "redis_url", "rocketmq_endpoint", "s3_endpoint", "s3_access_key", "s3_secret_key")
READY_TIMEOUT_S = 60.0


@dataclass
class ExternalConfig:
    postgres_url: str = ""  # the schema owner (migrations; creates the app role unless app_database_url is set)
    app_database_url: str = ""  # optional: the role the components use, made by the user
    redis_url: str = ""
    rocketmq_endpoint: str = ""  # host:port of the RocketMQ 5 proxy's gRPC port
    rocketmq_namesrv: str = ""  # host:port; needed to create topics and groups
    rocketmq_broker_addr: str = ""  # host:port of the broker (mqadmin -b) ...
    rocketmq_cluster: str = ""  # ... or its cluster name (mqadmin -c)
    rocketmq_provision: bool = True
    s3_endpoint: str = ""  # host:port
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_bucket: str = "sortie-reports"
    toxiproxy_api: str = "local"  # local | none | http://host:port

    @classmethod
    def load(cls, path: str | Path | None = None, env: dict[str, str] | None = None) -> ExternalConfig:
        """From the file (``path`` or ``$SORTIE_EXTERNAL_CONFIG``), then ``SORTIE_EXTERNAL_*`` variables.
        Raises ProviderUnavailable naming what is missing."""
        from stack.common import ProviderUnavailable

        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        path = path or env.get(ENV_FILE)
        if path:
            p = Path(path)
            if not p.is_file():
                raise ProviderUnavailable(f"external stack configuration {p} does not exist")
            text = p.read_text()
            if p.suffix == ".json":
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text) or {}
            if not isinstance(data, dict):
                raise ProviderUnavailable(f"{p}: expected a mapping of settings")
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise ProviderUnavailable(f"{p}: unknown setting(s) {', '.join(unknown)}")
            values.update(data)
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = raw
        if isinstance(values.get("rocketmq_provision"), str):
            values["rocketmq_provision"] = values["rocketmq_provision"].strip().lower() in ("1", "true", "yes", "on")
        settings: dict[str, Any] = {k: (v if isinstance(v, bool) else str(v)) for k, v in values.items()}
        config = cls(**settings)
        missing = [k for k in REQUIRED if not getattr(config, k)]
        if missing:
            raise ProviderUnavailable(
                "the external provider needs " + ", ".join(ENV_PREFIX + m.upper() for m in missing)
                + f" (or those keys in a YAML/JSON file given by --external-config or ${ENV_FILE})")
        return config


def _host_port(url: str, default_port: int) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or default_port}"


def _with_host_port(url: str, host_port: str) -> str:
    """``url`` with its host:port replaced (credentials, path and query kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{auth}@{host_port}" if auth else host_port))


class ExternalStack(NativeStack):
    """NativeStack whose dependencies belong to someone else. See the module docstring."""

    def __init__(self, run_dir: Path, app: Application, config: ExternalConfig, *,
                 allow_foreign_database: bool = False) -> None:
        super().__init__(run_dir, app)
        self.config = config
        self.allow_foreign_database = allow_foreign_database
        self.toxiproxy_client: Any = None
        self.timings: dict[str, float] = {}

    def proxy(self, name: str, upstream: str) -> str:
        if self.toxiproxy_client is None:  # toxiproxy_api: none
            self.endpoints.proxies[name] = upstream
            return upstream
        address = super().proxy(name, upstream)
        if self.config.toxiproxy_api not in ("local", "none"):  # the user's Toxiproxy: remove what we added
            client = self.toxiproxy_client
            self._stops.append((f"proxy {name}", lambda: client.delete_proxy(name)))
        return address

    def _step(self, name: str, began: float) -> None:
        self.timings[name] = round(time.monotonic() - began, 2)

    def _start_dependencies(self) -> None:
        from stack.app_database import APP_ROLE, app_database_url, check_database_is_ours, prepare_database
        from stack.common import ProviderUnavailable
        from stack.toxiproxy import LocalToxiproxy, ToxiproxyClient

        cfg, ep, rd = self.config, self.endpoints, self.run_dir
        t = time.monotonic()
        if cfg.toxiproxy_api == "local":
            tp = self._service("toxiproxy", LocalToxiproxy(rd / "toxiproxy"))
            ep.toxiproxy_api = tp.api_url
            self.toxiproxy_client = ToxiproxyClient(tp.api_url)
        elif cfg.toxiproxy_api != "none":
            ep.toxiproxy_api = cfg.toxiproxy_api.rstrip("/")
            self.toxiproxy_client = ToxiproxyClient(ep.toxiproxy_api)
            self.toxiproxy_client.version()
            # The services' links; an application's own (the Copilot's platform, webhook, ...) are refused by
            # Toxiproxy itself (409, a ToxiproxyError) when a name is taken.
            taken = sorted(set(self.toxiproxy_client.proxies()) & {"postgres", "redis", "rocketmq", "s3"})
            if taken:
                raise ProviderUnavailable(f"the Toxiproxy at {ep.toxiproxy_api} already has proxies named "
                                          f"{', '.join(taken)}: Sortie would not own them")
        self._step("toxiproxy", t)

        t = time.monotonic()
        if not self.allow_foreign_database:
            check_database_is_ours(self.app, cfg.postgres_url)
        ep.admin_database_url = cfg.postgres_url
        pg_link = self.proxy("postgres", _host_port(cfg.postgres_url, 5432))
        if cfg.app_database_url:
            self.app.migrate(cfg.postgres_url)
            ep.database_url = _with_host_port(cfg.app_database_url, pg_link)
        else:
            password = prepare_database(self.app, cfg.postgres_url)
            database = urlsplit(cfg.postgres_url).path.lstrip("/") or "postgres"
            ep.database_url = app_database_url(pg_link, password, database, APP_ROLE)
        self._step("postgres", t)

        t = time.monotonic()
        import redis as redis_py

        redis_py.Redis.from_url(cfg.redis_url, socket_timeout=3, socket_connect_timeout=3).ping()
        ep.redis_url = _with_host_port(cfg.redis_url, self.proxy("redis", _host_port(cfg.redis_url, 6379)))
        self._step("redis", t)

        t = time.monotonic()
        self._prepare_rocketmq()
        ep.namesrv_addr = cfg.rocketmq_namesrv
        ep.rocketmq_endpoint = self.proxy("rocketmq", cfg.rocketmq_endpoint)
        self._step("rocketmq", t)

        t = time.monotonic()
        ep.s3_access_key, ep.s3_secret_key, ep.s3_bucket = cfg.s3_access_key, cfg.s3_secret_key, cfg.s3_bucket
        self._s3_round_trip()
        ep.s3_endpoint = self.proxy("s3", cfg.s3_endpoint)
        self._step("s3", t)

    def _prepare_rocketmq(self) -> None:
        from stack.rocketmq import READY_GROUP, READY_TOPIC, host_admin, round_trip

        cfg = self.config
        deadline = time.monotonic() + READY_TIMEOUT_S
        if cfg.rocketmq_provision and cfg.rocketmq_namesrv and (cfg.rocketmq_broker_addr or cfg.rocketmq_cluster):
            admin = host_admin(cfg.rocketmq_namesrv, self.run_dir / "mqadmin", broker_addr=cfg.rocketmq_broker_addr
                               or None, cluster=cfg.rocketmq_cluster or None)
            admin.create_topic(READY_TOPIC, 1)
            admin.create_group(READY_GROUP, 1)
            self.app.provision_broker(admin)
            round_trip(cfg.rocketmq_endpoint, deadline)
        else:  # the user provisioned it: the application's topics must have a route
            from rocketmq import ClientConfiguration, Credentials, Producer

            producer = Producer(ClientConfiguration(cfg.rocketmq_endpoint, Credentials(), request_timeout=3),
                                self.app.broker_topics())
            try:
                producer.startup()
            finally:
                with contextlib.suppress(Exception):
                    producer.shutdown()

    def _s3_round_trip(self) -> None:
        from stack.s3 import minio_client

        cfg = self.config
        client = minio_client(cfg.s3_endpoint, cfg.s3_access_key, cfg.s3_secret_key)
        if not client.bucket_exists(cfg.s3_bucket):
            client.make_bucket(cfg.s3_bucket)
        key, body = f"sortie-ready/{secrets.token_hex(6)}", b"ready"
        client.put_object(cfg.s3_bucket, key, io.BytesIO(body), len(body))
        resp = client.get_object(cfg.s3_bucket, key)
        try:
            if resp.read() != body:
                raise RuntimeError(f"S3 round trip through {cfg.s3_endpoint} returned other bytes")
        finally:
            resp.close()
            resp.release_conn()
        client.remove_object(cfg.s3_bucket, key)
