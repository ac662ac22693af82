"""Centrifugo v6 on loopback: the server built from the Go module proxy, its generated configuration, its HTTP server
API, and the HMAC tokens its clients present.

``install()`` builds ``centrifugo`` (``go install github.com/centrifugal/centrifugo/v6@v6.9.1``) into the project
cache (stack/gobin.py); ``install_js_client()`` fetches the official JavaScript client (npm ``centrifuge``) for pages
in a browser (stack/npm.py). :class:`LocalCentrifugo` writes a v6 configuration (``http_server``, ``client.token``,
``http_api``, ``health``, ``engine``, ``channel.namespaces``: the shape ``centrifugo defaultconfig`` prints) into its
run directory, starts the server on 127.0.0.1 and a free port, and is ready once ``GET /health`` answers 200. A
restart keeps the port and the configuration; with the memory engine it loses every channel's history and starts a
new epoch, which is what a Centrifugo node loss looks like to a client. With the Redis engine several nodes share
publications, history and epochs; a Redis flush loses the history and starts new epochs.

Namespaces are the caller's (this layer names no system): each gives a channel prefix its history (size, TTL) and
recovery. Subscribing to a namespaced channel needs a subscription token unless the namespace allows clients to
subscribe; a connection token's ``channels`` claim subscribes the connection on the server side.

What the v6.9.1 server did on this machine is listed in docs/native-stack.md and proven by
tests/stack/test_centrifugo.py.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import requests

from stack.common import LOOPBACK, ProcessBacked, ServerProcess, free_port
from stack.gobin import go_install

DEFAULT_VERSION = "v6.9.1"
MODULE = "github.com/centrifugal/centrifugo/v6"
JS_CLIENT_PACKAGE = "centrifuge"  # the official JavaScript client (npm), for pages in a browser
JS_CLIENT_VERSION = "5.7.4"
INSTALL_COMMAND = "sortie stack install"
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 5.0
NAMESPACE_NAME = re.compile(r"[-a-zA-Z0-9_.]{2,}")  # v6's own check ("error validating config" otherwise)


class CentrifugoError(RuntimeError):
    """The server could not be started or reached."""


class CentrifugoAPIError(CentrifugoError):
    """The server API answered with an error (``{"error": {"code", "message"}}``) or a non-2xx status."""

    def __init__(self, message: str, code: int | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def install(version: str = DEFAULT_VERSION) -> Path:
    """Build (once) and return the ``centrifugo`` binary for ``version``."""
    return go_install(MODULE, version, "centrifugo", "centrifugo")


def install_js_client(version: str = JS_CLIENT_VERSION) -> Path:
    """Fetch (once) the official JavaScript client and return its browser bundle, which defines the global
    ``Centrifuge`` (JSON protocol; the package's only file a page needs)."""
    from stack.npm import npm_package

    bundle = npm_package(JS_CLIENT_PACKAGE, version) / "dist" / "centrifuge.js"
    if not bundle.is_file():
        raise CentrifugoError(f"{JS_CLIENT_PACKAGE}@{version} has no dist/centrifuge.js")
    return bundle


@dataclass(frozen=True)
class Namespace:
    """A channel namespace (channels named ``<name>:<rest>``): its history and recovery.

    ``history_ttl_s`` bounds how long a publication is kept, ``history_size`` how many; ``force_recovery`` makes
    every subscription recover its gap on resubscribe (the client need not ask). ``allow_subscribe_for_client``
    lets any authenticated client subscribe without a subscription token: off, a token is the only way in."""

    name: str
    history_size: int
    history_ttl_s: int
    force_recovery: bool = True
    allow_subscribe_for_client: bool = False

    def __post_init__(self) -> None:
        if not NAMESPACE_NAME.fullmatch(self.name):
            raise ValueError(f"a namespace name must match {NAMESPACE_NAME.pattern} (v6 refuses to start): "
                             f"{self.name!r}")
        if self.history_size < 0 or self.history_ttl_s < 0:
            raise ValueError(f"history size and TTL must not be negative: {self}")
        if self.force_recovery and not (self.history_size and self.history_ttl_s):
            raise ValueError(f"recovery needs a history (size and TTL above 0): {self}")

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "history_size": self.history_size, "history_ttl": f"{self.history_ttl_s}s",
                "force_recovery": self.force_recovery,
                "allow_subscribe_for_client": self.allow_subscribe_for_client}


@dataclass(frozen=True)
class CentrifugoConfig:
    """What the generated configuration holds besides the address: secrets, namespaces, the engine."""

    token_hmac_secret: str
    api_key: str
    namespaces: tuple[Namespace, ...] = ()
    allowed_origins: tuple[str, ...] = ()  # browsers only: a WebSocket with another Origin header is refused
    channel_limit: int = 128  # subscriptions per connection, server-side ones included
    engine: str = "memory"  # or "redis": nodes sharing one Redis share publications, history and epochs
    redis_url: str | None = None  # the Redis engine's server (redis://host:port/db)
    redis_prefix: str = "centrifugo"  # key prefix: nodes with the same prefix form one cluster
    expired_close_delay_s: float = 25.0  # how long a connection outlives its token's exp (v6's default)
    log_level: str = "info"
    extra: dict[str, Any] = field(default_factory=dict)  # merged last, for a setting not modelled above

    def __post_init__(self) -> None:
        if len(self.token_hmac_secret) < 32:
            raise ValueError("the HMAC token key needs at least 32 characters (HS256)")
        if not self.api_key:
            raise ValueError("an API key is required: the server API is never left open")
        if self.engine not in ("memory", "redis") or (self.engine == "redis") != (self.redis_url is not None):
            raise ValueError(f"engine is 'memory', or 'redis' with a redis_url: {self.engine!r}, {self.redis_url!r}")
        names = [ns.name for ns in self.namespaces]
        if len(names) != len(set(names)):
            raise ValueError(f"namespace names repeat: {names}")

    def render(self, port: int) -> dict[str, Any]:
        """The v6 configuration document for a server on 127.0.0.1:``port``."""
        doc: dict[str, Any] = {
            "http_server": {"address": LOOPBACK, "port": port},
            "log": {"level": self.log_level},
            "engine": {"type": self.engine},
            "client": {"token": {"hmac_secret_key": self.token_hmac_secret},
                       "allowed_origins": list(self.allowed_origins), "channel_limit": self.channel_limit,
                       "expired_close_delay": f"{self.expired_close_delay_s}s"},
            "http_api": {"key": self.api_key},
            "health": {"enabled": True},
            "channel": {"namespaces": [ns.to_config() for ns in self.namespaces]},
        }
        if self.engine == "redis":
            doc["engine"]["redis"] = {"address": [self.redis_url], "prefix": self.redis_prefix}
        for key, value in self.extra.items():
            if isinstance(value, dict) and isinstance(doc.get(key), dict):
                doc[key] = {**doc[key], **value}
            else:
                doc[key] = value
        return doc


# --- tokens ------------------------------------------------------------------------------------------


def connection_token(secret: str, user: str, *, expires_at: float, channels: Sequence[str] = (),
                     extra: dict[str, Any] | None = None) -> str:
    """An HS256 connection JWT: ``sub`` is the user, ``channels`` are subscribed on the server side at connect."""
    import jwt

    claims: dict[str, Any] = {"sub": user, "exp": int(expires_at), **(extra or {})}
    if channels:
        claims["channels"] = list(channels)
    return jwt.encode(claims, secret, algorithm="HS256")


def subscription_token(secret: str, user: str, channel: str, *, expires_at: float) -> str:
    """An HS256 subscription JWT binding ``sub`` (the connection's user), ``channel`` and ``exp``."""
    import jwt

    return jwt.encode({"sub": user, "channel": channel, "exp": int(expires_at)}, secret, algorithm="HS256")


# --- the server API --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPosition:
    offset: int
    epoch: str


class CentrifugoAPI:
    """The HTTP server API (``POST /api/<method>`` with ``X-API-Key``), strictly: a timeout on every call, an
    exception for every error, whether the server says it in the status or in the body."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._session.headers["X-API-Key"] = api_key

    def close(self) -> None:
        self._session.close()

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/api/{method}"
        try:
            resp = self._session.post(url, json=params, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise CentrifugoAPIError(f"POST {url} failed: {exc}") from exc
        try:
            body = resp.json() if resp.content else {}
        except ValueError:
            body = None
        if not 200 <= resp.status_code < 300 or not isinstance(body, dict):
            raise CentrifugoAPIError(f"POST {url} answered {resp.status_code}: {resp.text[:500]}",
                                     status=resp.status_code)
        error = body.get("error")
        if error:
            raise CentrifugoAPIError(f"{method}: {error.get('message')} (code {error.get('code')})",
                                     code=error.get("code"), status=resp.status_code)
        return dict(body.get("result") or {})

    def publish(self, channel: str, data: Any, *, idempotency_key: str | None = None) -> StreamPosition:
        """Publish ``data``; returns where it landed in the channel's stream (offset 0 and no epoch without a
        history)."""
        params: dict[str, Any] = {"channel": channel, "data": data}
        if idempotency_key is not None:
            params["idempotency_key"] = idempotency_key
        result = self.call("publish", params)
        return StreamPosition(int(result.get("offset", 0)), str(result.get("epoch", "")))

    def history(self, channel: str, *, limit: int = -1) -> tuple[list[dict[str, Any]], StreamPosition]:
        """The channel's retained publications (oldest first; ``limit=-1``: all) and its current position."""
        result = self.call("history", {"channel": channel, "limit": limit})
        position = StreamPosition(int(result.get("offset", 0)), str(result.get("epoch", "")))
        return list(result.get("publications") or []), position

    def disconnect(self, user: str) -> None:
        self.call("disconnect", {"user": user})

    def info(self) -> dict[str, Any]:
        return self.call("info", {})


# --- the server ------------------------------------------------------------------------------------------


class LocalCentrifugo(ProcessBacked):
    """One ``centrifugo`` on 127.0.0.1 under ``run_dir`` (``config.json``, ``centrifugo.log``)."""

    def __init__(self, run_dir: Path, config: CentrifugoConfig, port: int | None = None, *,
                 version: str = DEFAULT_VERSION, binary: Path | None = None,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.config = config
        self.port: int | None = port
        self.version = version
        self._binary = binary
        self.start_timeout_s = start_timeout_s
        self.log_path = self.run_dir / "centrifugo.log"
        self.config_path = self.run_dir / "config.json"
        self._process: ServerProcess | None = None
        self._api: CentrifugoAPI | None = None
        self.start_seconds: float | None = None

    def _require_port(self) -> int:
        if self.port is None:
            raise CentrifugoError("centrifugo is not started")
        return self.port

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` (what a Toxiproxy upstream wants)."""
        return f"{LOOPBACK}:{self._require_port()}"

    @property
    def http_url(self) -> str:
        return f"http://{self.address}"

    @property
    def websocket_url(self) -> str:
        """The bidirectional WebSocket endpoint (JSON protocol) the SDKs connect to."""
        return f"ws://{self.address}/connection/websocket"

    @property
    def api(self) -> CentrifugoAPI:
        if self._api is None:
            self._api = CentrifugoAPI(self.http_url, self.config.api_key)
        return self._api

    def _write_config(self, port: int) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the secrets
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.config.render(port), out, indent=2)

    def start(self) -> Self:
        """Build if needed, write the configuration, start, and return once ``GET /health`` answers 200."""
        if self._process is not None and self._process.alive():
            return self
        began = time.monotonic()
        binary = self._binary or install(self.version)
        fixed = self.port is not None  # requested, or kept from the previous start (clients reconnect to it)
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            port = self.port if fixed else free_port()
            assert port is not None
            self.port = port
            self._write_config(port)
            self._process = ServerProcess("centrifugo", [str(binary), "--config", str(self.config_path)],
                                          self.log_path, cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(self._healthy, began + self.start_timeout_s, "GET /health answers 200",
                                         CentrifugoError, port=port)
                break
            except CentrifugoError as exc:
                self._process.stop()
                # Only a port taken by someone else between free_port() and bind() is worth a retry.
                if attempt + 1 == attempts or "address already in use" not in str(exc):
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def _healthy(self) -> bool:
        return requests.get(f"{self.http_url}/health", timeout=1.0).status_code == 200

    def stop(self) -> None:
        """Stop the server (every connection and, with the memory engine, every history goes). Idempotent."""
        if self._api is not None:
            self._api.close()
            self._api = None
        super().stop()
