"""gunicorn's gthread worker, answering the requests gunicorn refuses by itself (a malformed request line or header:
400; a request line over ``--limit-request-line``: 414; headers over the limits: 431) in
``application/problem+json`` like every other answer of the API (I11), and naming the API, not gunicorn, in its
``Server`` header.

gunicorn writes those answers with ``gunicorn.util.write_error`` (``text/html``) before the application sees the
request, and offers no setting for it; this worker swaps that function, and the server name, in its own process
only. tests/api/test_gunicorn_errors.py checks both against a real gunicorn, so a gunicorn that changes how it
writes them fails a test instead of going back to HTML unnoticed. Use it with
``gunicorn --worker-class reference.copilot.http.gunicorn_worker.ProblemJsonWorker`` (the native stack does).

It also bounds how long a request may take to arrive. gthread reads a request's body (and writes its answer) on a
blocking socket with no timeout: a client that sends the headers and then stalls holds a thread for ever, and a
few such clients hold them all. Each connection's socket gets ``SORTIE_API_READ_TIMEOUT_S`` (Settings) as its
timeout in blocking mode: a body read that waits longer fails and the app answers 408 ``REQUEST_TIMEOUT``; headers or
a leftover body that stall end the connection."""

from __future__ import annotations

import json
import socket
from typing import Any, ClassVar

import gunicorn.http.wsgi
from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from reference.copilot.api import problem
from reference.copilot.settings import Settings

SERVER_NAME = "copilot-api"
_CODES = {400: "BAD_REQUEST", 414: "URI_TOO_LONG", 417: "EXPECTATION_FAILED", 431: "HEADERS_TOO_LARGE",
          501: "NOT_IMPLEMENTED"}


def write_problem(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error``'s replacement: the same status, as a problem document."""
    code = _CODES.get(status_int, "BAD_REQUEST" if status_int < 500 else "INTERNAL_ERROR")
    body = json.dumps(problem(status_int, code, mesg or reason).body).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nServer: {SERVER_NAME}\r\n"
            f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has a timeout. gthread switches a connection's socket to blocking mode
    (``setblocking(True)``: no timeout) each time a thread takes it, to parse the headers, drain an unread body and
    read the new one; here that mode waits at most ``timeout_s`` for each read or write."""

    __slots__ = ()
    timeout_s: ClassVar[float] = Settings.api_read_timeout_s

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.settimeout(self.timeout_s)
        else:
            super().setblocking(False)


class ProblemJsonWorker(ThreadWorker):
    def init_process(self) -> None:
        util.write_error = write_problem
        gunicorn.http.wsgi.SERVER = SERVER_NAME  # read by every Response gunicorn builds for the application
        _TimedSocket.timeout_s = Settings.from_env(database=False).api_read_timeout_s  # this process's
        super().init_process()

    def enqueue_req(self, conn: Any) -> None:
        # every connection passes here before a thread reads it (new, or kept alive and readable again)
        if type(conn.sock) is socket.socket:
            conn.sock.__class__ = _TimedSocket  # same layout (no slots added): only setblocking changes
        super().enqueue_req(conn)
