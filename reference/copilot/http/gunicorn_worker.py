"""gunicorn's gthread worker, answering the requests gunicorn refuses by itself (a malformed request line or header:
400; a request line over ``--limit-request-line``: 414; headers over the limits: 431) in
``application/problem+json`` like every other answer of the API (I11), and naming the API, not gunicorn, in its
``Server`` header.

gunicorn writes those answers with ``gunicorn.util.write_error`` (``text/html``) before the application sees the
request, and offers no setting for it; this worker swaps that function, and the server name, in its own process
only. tests/api/test_gunicorn_errors.py checks both against a real gunicorn, so a gunicorn that changes how it
writes them fails a test instead of going back to HTML unnoticed. Use it with
``gunicorn --worker-class reference.copilot.http.gunicorn_worker.ProblemJsonWorker`` (the native stack does)."""

from __future__ import annotations

import json
import socket

import gunicorn.http.wsgi
from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from reference.copilot.api import problem

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


class ProblemJsonWorker(ThreadWorker):
    def init_process(self) -> None:
        util.write_error = write_problem
        gunicorn.http.wsgi.SERVER = SERVER_NAME  # read by every Response gunicorn builds for the application
        super().init_process()
