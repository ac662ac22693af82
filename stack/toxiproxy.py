"""Toxiproxy on loopback: the server built from the Go module proxy, and a strict typed API client.

``install()`` builds ``toxiproxy-server`` and ``toxiproxy-cli`` (``go install
github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0`` and ``cmd/cli``; go names them ``server`` and
``cli``) into the project cache. :class:`LocalToxiproxy` runs the server on 127.0.0.1 and a free port
and is ready once ``GET /version`` answers 200.

:class:`ToxiproxyClient` speaks the HTTP API with ``requests`` directly. The ``toxiproxy-python``
package (0.1.1) is deliberately not used: it keeps the API host/port as class attributes shared by the
whole process (two servers in one test session would clobber each other), sets no request timeouts,
returns None from ``add_toxic``, raises only on 400/404/409 (a 403 or 500 passes silently) and pulls in
the Python 2 compatibility package ``future``. Here every call has a timeout, every non-2xx answer
raises :class:`ToxiproxyError` carrying the response body, and ``add_toxic`` reads the toxic back and
compares it with what was asked: the server silently ignores misspelled attribute names (``latenc``
becomes ``latency: 0``), which the read-back catches.

Behaviour of the v2.12.0 server checked on this machine: ``listen: "127.0.0.1:0"`` picks a free port
and the answer carries the real address; a disabled proxy closes its listener (connections are
refused) and re-enabling it listens on the same port again; ``POST /reset`` removes all toxics and
re-enables every proxy (same ports); an omitted ``stream`` means downstream and an omitted
``toxicity`` means 1.0; unknown toxic types and bad streams are 400, a duplicate proxy is 409, an
unknown toxic is 404. Toxic types: latency (latency, jitter ms), bandwidth (rate KB/s), timeout
(timeout ms, 0 = hold forever), reset_peer (timeout ms), slicer (average_size, size_variation,
delay µs), limit_data (bytes), slow_close (delay ms), noop.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import requests

from stack.common import LOOPBACK, ProcessBacked, ServerProcess, free_port
from stack.gobin import go_install

DEFAULT_VERSION = "v2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2"
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 5.0
STREAMS = ("upstream", "downstream")


class ToxiproxyError(RuntimeError):
    """The Toxiproxy server could not be started or reached, or its API refused a request."""

    def __init__(self, message: str, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ToxiproxyBinaries:
    """The built executables; ``str()`` / ``os.fspath()`` give the server's path."""

    server: Path
    cli: Path
    version: str

    def __fspath__(self) -> str:
        return str(self.server)

    def __str__(self) -> str:
        return str(self.server)


def install(version: str = DEFAULT_VERSION) -> ToxiproxyBinaries:
    """Build (once) and return ``toxiproxy-server`` and ``toxiproxy-cli`` for ``version``."""
    server = go_install(f"{MODULE}/cmd/server", version, "server", "toxiproxy-server")
    cli = go_install(f"{MODULE}/cmd/cli", version, "cli", "toxiproxy-cli")
    return ToxiproxyBinaries(server=server, cli=cli, version=version)


class ToxiproxyClient:
    """The Toxiproxy HTTP API, strictly: timeouts on every call, an exception for every failure."""

    def __init__(self, api_url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        # A connection per call: the server closes a keep-alive connection idle for 60 s (its IdleTimeout), and a
        # call that reuses it at that moment fails (RemoteDisconnected): a fault healed a minute after it was applied
        self._session.headers["Connection"] = "close"

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, path: str, json: Any = None, expect_body: bool = True) -> Any:
        url = self.api_url + path
        try:
            resp = self._session.request(method, url, json=json, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise ToxiproxyError(f"{method} {url} failed: {exc}") from exc
        if not 200 <= resp.status_code < 300:
            raise ToxiproxyError(f"{method} {url} answered {resp.status_code}: {resp.text.strip()}",
                                 status=resp.status_code, body=resp.text)
        if not expect_body or resp.status_code == 204:
            return None
        try:
            return resp.json()
        except ValueError as exc:
            raise ToxiproxyError(f"{method} {url} answered {resp.status_code} with a body that is not JSON: "
                                 f"{resp.text[:500]!r}", status=resp.status_code, body=resp.text) from exc

    @staticmethod
    def _p(name: str) -> str:
        return quote(name, safe="")

    # --- server --------------------------------------------------------------------------------

    def version(self) -> str:
        return str(self._request("GET", "/version")["version"])

    def reset(self) -> None:
        """Remove every toxic and re-enable every proxy (proxies and their ports stay)."""
        self._request("POST", "/reset", expect_body=False)

    # --- proxies -------------------------------------------------------------------------------

    def proxies(self) -> dict[str, dict[str, Any]]:
        return dict(self._request("GET", "/proxies"))

    def proxy(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/proxies/{self._p(name)}"))

    def create_proxy(self, name: str, upstream: str, listen: str = f"{LOOPBACK}:0",
                     enabled: bool = True) -> tuple[str, int]:
        """Create a proxy to ``upstream`` ("host:port"); returns the real (host, port) it listens on."""
        created = self._request("POST", "/proxies",
                                json={"name": name, "listen": listen, "upstream": upstream, "enabled": enabled})
        host, sep, port = str(created.get("listen", "")).rpartition(":")
        if not sep or not port.isdigit() or int(port) == 0:
            raise ToxiproxyError(f"proxy {name!r} was created but reports no listen address: {created}")
        return host, int(port)

    def delete_proxy(self, name: str) -> None:
        self._request("DELETE", f"/proxies/{self._p(name)}", expect_body=False)

    def set_enabled(self, name: str, enabled: bool) -> None:
        """Enable or disable a proxy; disabled, its listener is closed and connections are refused."""
        answer = self._request("PATCH", f"/proxies/{self._p(name)}", json={"enabled": enabled})
        if answer.get("enabled") is not enabled:
            raise ToxiproxyError(f"proxy {name!r} still reports enabled={answer.get('enabled')!r}: {answer}")

    def set_upstream(self, name: str, upstream: str) -> None:
        """Point a proxy at another ``host:port`` (what a balancer does when a backend fails its health check): the
        server restarts the proxy on the same listen address, closing the connections it carried."""
        answer = self._request("PATCH", f"/proxies/{self._p(name)}", json={"upstream": upstream})
        if answer.get("upstream") != upstream:
            raise ToxiproxyError(f"proxy {name!r} still reports upstream={answer.get('upstream')!r}: {answer}")

    # --- toxics --------------------------------------------------------------------------------

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return list(self._request("GET", f"/proxies/{self._p(proxy)}/toxics"))

    def toxic(self, proxy: str, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/proxies/{self._p(proxy)}/toxics/{self._p(name)}"))

    def add_toxic(self, proxy: str, name: str, type: str, stream: str = "downstream",
                  attributes: dict[str, Any] | None = None, toxicity: float = 1.0) -> dict[str, Any]:
        """Add a toxic and confirm it is active by reading it back; returns the server's view of it.

        Raises :class:`ToxiproxyError` on any non-2xx answer or when the server's copy differs from
        the request (an attribute the toxic type does not know is silently dropped by the server).
        """
        if stream not in STREAMS:
            raise ToxiproxyError(f"stream must be one of {STREAMS}, not {stream!r}")
        if not 0.0 <= toxicity <= 1.0:
            raise ToxiproxyError(f"toxicity must be within [0, 1], not {toxicity!r}")
        attributes = dict(attributes or {})
        self._request("POST", f"/proxies/{self._p(proxy)}/toxics",
                      json={"name": name, "type": type, "stream": stream, "toxicity": toxicity,
                            "attributes": attributes})
        active = self.toxic(proxy, name)
        problems = self._differences(active, type, stream, toxicity, attributes)
        if problems:
            with contextlib.suppress(ToxiproxyError):
                self.remove_toxic(proxy, name)  # never leave a toxic we did not ask for in place
            raise ToxiproxyError(f"toxic {name!r} on {proxy!r} is not what was asked ({'; '.join(problems)}); "
                                 f"server has {active}")
        return active

    def update_toxic(self, proxy: str, name: str, attributes: dict[str, Any]) -> dict[str, Any]:
        """Change a toxic's attributes in place and confirm them by reading the toxic back."""
        current = self.toxic(proxy, name)
        self._request("PATCH", f"/proxies/{self._p(proxy)}/toxics/{self._p(name)}",
                      json={"attributes": attributes})
        active = self.toxic(proxy, name)
        problems = self._differences(active, current["type"], current["stream"], float(current["toxicity"]),
                                     attributes)
        if problems:
            raise ToxiproxyError(f"toxic {name!r} on {proxy!r} was not updated ({'; '.join(problems)}): {active}")
        return active

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._request("DELETE", f"/proxies/{self._p(proxy)}/toxics/{self._p(name)}", expect_body=False)

    @staticmethod
    def _differences(active: dict[str, Any], type_: str, stream: str, toxicity: float,
                     attributes: dict[str, Any]) -> list[str]:
        problems = []
        if active.get("type") != type_:
            problems.append(f"type {active.get('type')!r} != {type_!r}")
        if active.get("stream") != stream:
            problems.append(f"stream {active.get('stream')!r} != {stream!r}")
        if not math.isclose(float(active.get("toxicity", -1)), toxicity, abs_tol=1e-6):  # float32 on the server
            problems.append(f"toxicity {active.get('toxicity')!r} != {toxicity!r}")
        have = active.get("attributes") or {}
        for key, want in attributes.items():
            if key not in have:
                problems.append(f"attribute {key!r} unknown to a {type_} toxic")
            elif have[key] != want:
                problems.append(f"attribute {key!r} is {have[key]!r}, not {want!r}")
        return problems


class LocalToxiproxy(ProcessBacked):
    """One ``toxiproxy-server`` on 127.0.0.1 under ``run_dir`` (``toxiproxy.log``)."""

    def __init__(self, run_dir: Path, port: int | None = None, *, version: str = DEFAULT_VERSION,
                 binary: Path | None = None, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.requested_port = port
        self.port: int | None = port
        self.version = version
        self._binary = binary
        self.start_timeout_s = start_timeout_s
        self.log_path = self.run_dir / "toxiproxy.log"
        self._process: ServerProcess | None = None
        self._client: ToxiproxyClient | None = None
        self.start_seconds: float | None = None

    @property
    def api_url(self) -> str:
        if self.port is None:
            raise ToxiproxyError("toxiproxy is not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def client(self) -> ToxiproxyClient:
        if self._client is None:
            self._client = ToxiproxyClient(self.api_url)
        return self._client

    def start(self) -> Self:
        """Build if needed, start, and return once ``GET /version`` answers 200."""
        if self._process is not None and self._process.alive():
            return self
        began = time.monotonic()
        binary = self._binary or install(self.version).server
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None  # requested, or kept from the previous start (stable api_url)
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            self.port = self.port if fixed else free_port()
            self._process = ServerProcess(
                "toxiproxy-server", [str(binary), "-host", LOOPBACK, "-port", str(self.port)],
                self.log_path, cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(self._answers_version, began + self.start_timeout_s,
                                         "GET /version answers 200", ToxiproxyError, port=self.port)
                break
            except ToxiproxyError as exc:
                self._process.stop()
                # Only a port taken by someone else between free_port() and bind() is worth a retry.
                if attempt + 1 == attempts or "address already in use" not in str(exc):
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def _answers_version(self) -> bool:
        resp = requests.get(f"{self.api_url}/version", timeout=1.0)
        return resp.status_code == 200 and "version" in resp.json()

    def stop(self) -> None:
        """Stop the server (all its proxies go with it). Idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None:
            self._process.stop()
            self._process = None
