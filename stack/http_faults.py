"""An HTTP fault proxy: forwards every request to one upstream server and, while a fault is set, answers the requests
whose path starts with the fault's prefix with the fault's status instead (a server answering 503, 429 or 400: what
a TCP proxy such as Toxiproxy cannot say). It runs as an OS process the stack supervises:

    python -m stack.http_faults --port N --upstream HOST:PORT

and is controlled over its own paths under ``/__faults`` (never forwarded):

    PUT    /__faults         {"status": 503, "prefix": "/api/"}   set the fault (prefix "/" by default)
    DELETE /__faults                                              clear it
    GET    /__faults                                              the fault and how many requests it answered
    GET    /__faults/health                                       200 once it serves

A bad control request is answered 400 with a problem+json body and changes nothing. :class:`HttpFaultProxy` starts
the process (a free loopback port) and sets and clears its fault."""

from __future__ import annotations

import argparse
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import urllib3
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module

CONTROL = "/__faults"
REQUEST_TIMEOUT_S = 10.0
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
              "proxy-authorization", "content-length", "host"}


class HttpFaultError(RuntimeError):
    """The proxy could not be reached, or refused a control request."""


@dataclass(frozen=True)
class HttpFault:
    status: int
    prefix: str = "/"

    @classmethod
    def parse(cls, body: Any) -> HttpFault:
        """From a control request's body; ValueError naming what is wrong."""
        if not isinstance(body, dict) or set(body) - {"status", "prefix"}:
            raise ValueError('the body is {"status": 400-599, "prefix": "/..."} and nothing else')
        status, prefix = body.get("status"), body.get("prefix", "/")
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 600:
            raise ValueError(f"status must be an HTTP error status (400-599): {status!r}")
        if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.startswith(CONTROL):
            raise ValueError(f"prefix must be a path starting with / outside {CONTROL}: {prefix!r}")
        return cls(status, prefix)


def _problem(status: int, code: str, detail: str) -> Response:
    return Response(json.dumps({"type": "about:blank", "title": code, "status": status, "code": code,
                                "detail": detail}), status, content_type="application/problem+json")


class FaultProxyApp:
    """The WSGI application: the control paths, the fault's answer, or the upstream's."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault: HttpFault | None = None
        self.answered = 0  # requests the fault answered since it was set
        self._lock = threading.Lock()
        self._pool = urllib3.PoolManager(maxsize=16, retries=False, timeout=REQUEST_TIMEOUT_S)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        if request.path == CONTROL or request.path.startswith(CONTROL + "/"):
            response = self._control(request)
        else:
            response = self._faulted(request) or self._forward(request)
        return response(environ, start_response)

    def _control(self, request: Request) -> Response:
        if request.path == CONTROL + "/health" and request.method == "GET":
            return Response("ok")
        if request.path != CONTROL:
            return _problem(404, "NOT_FOUND", f"no control path {request.path}")
        if request.method == "PUT":
            try:
                fault = HttpFault.parse(json.loads(request.get_data() or b"null"))
            except ValueError as err:  # json.JSONDecodeError is one
                return _problem(400, "BAD_FAULT", str(err))
            with self._lock:
                self.fault, self.answered = fault, 0
        elif request.method == "DELETE":
            with self._lock:
                self.fault = None
        elif request.method != "GET":
            return _problem(405, "METHOD_NOT_ALLOWED", f"{request.method} {CONTROL}")
        with self._lock:
            state = {"fault": None if self.fault is None else self.fault.__dict__, "answered": self.answered}
        return Response(json.dumps(state), content_type="application/json")

    def _faulted(self, request: Request) -> Response | None:
        with self._lock:
            fault = self.fault
            if fault is None or not request.path.startswith(fault.prefix):
                return None
            self.answered += 1
        return _problem(fault.status, "INJECTED_FAULT", f"sortie: {request.method} {request.path} answered "
                                                        f"{fault.status} by the fault proxy")

    def _forward(self, request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = f"{self.upstream}{request.full_path if request.query_string else request.path}"
        try:
            upstream = self._pool.request(request.method, url, body=request.get_data(), headers=headers,
                                          redirect=False)
        except urllib3.exceptions.HTTPError as err:  # the upstream away: what a gateway answers
            return _problem(502, "UPSTREAM_UNREACHABLE", str(err)[:300])
        kept = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP]
        return Response(upstream.data, upstream.status, headers=kept)


class HttpFaultProxy:
    """The proxy as a supervised process on a free loopback port in front of ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str, log_path: Path | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.component = Component("http-faults", python_module(
            "stack.http_faults", "--port", str(self.port), "--upstream", upstream),
            f"http://{self.address}{CONTROL}/health", log_path=log_path)
        self._session = requests.Session()

    def start(self) -> HttpFaultProxy:
        self.component.start()
        return self

    def stop(self) -> None:
        self.component.stop()
        self._session.close()

    def _call(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            resp = self._session.request(method, f"http://{self.address}{CONTROL}", json=body,
                                         timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as err:
            raise HttpFaultError(f"{method} {CONTROL}: {err}") from err
        if resp.status_code != 200:
            raise HttpFaultError(f"{method} {CONTROL} answered {resp.status_code}: {resp.text[:300]}")
        return dict(resp.json())

    def set(self, status: int, prefix: str = "/") -> None:
        self._call("PUT", {"status": status, "prefix": prefix})

    def clear(self) -> None:
        self._call("DELETE")

    def state(self) -> dict[str, Any]:
        return self._call("GET")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stack.http_faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="host:port of the server to forward to")
    args = parser.parse_args(argv)
    server = make_server(LOOPBACK, args.port, FaultProxyApp(f"http://{args.upstream}"), threaded=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
