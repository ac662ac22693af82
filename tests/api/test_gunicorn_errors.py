"""The answers gunicorn gives by itself, before the application sees a request, are problem+json like the API's
own, and no answer names gunicorn (issue 11, item 8): a real gunicorn with the API's worker class
(reference.copilot.http.gunicorn_worker), as the native stack runs it."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from stack.common import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("mirakuru", reason="the stack extra (process supervision) is not installed")
    from stack.components import Component

    port, tmp = free_port(), tmp_path_factory.mktemp("gunicorn")
    api = Component("api", [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                            "--worker-class", "reference.copilot.http.gunicorn_worker.ProblemJsonWorker",
                            "--threads", "2",
                            "--chdir", str(ROOT), "reference.copilot.http.wsgi:app"],
                    health_url=f"http://127.0.0.1:{port}/health", log_path=tmp / "api.log",
                    env={"SORTIE_DATABASE_URL": f"sqlite:///{tmp / 'api.db'}",
                         "SORTIE_TOKEN_SECRET": "test-secret-of-at-least-32-bytes-long",
                         "SORTIE_WEBHOOK_TOKEN": "test-webhook-token"})
    api.url = f"http://127.0.0.1:{port}"
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def api_url(api: Any) -> str:
    return str(api.url)


def _raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"NOT A REQUEST LINE\r\n\r\n", 400),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n", 431),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n", 400),
], ids=["malformed-request-line", "uri-too-long", "too-many-headers", "invalid-header-name"])
def test_gunicorns_own_refusals_are_problem_json(api_url: str, request_bytes: bytes, status: int) -> None:
    got, headers, body = _raw(api_url, request_bytes)
    assert got == status
    assert headers["content-type"] == "application/problem+json"
    doc = json.loads(body)
    assert doc["status"] == status and doc["code"] and doc["type"].startswith("http")
    assert "gunicorn" not in headers.get("server", "").lower()


def test_no_answer_names_gunicorn(api_url: str) -> None:
    for resp in (requests.get(f"{api_url}/health", timeout=10), requests.get(f"{api_url}/v1/tasks/x", timeout=10)):
        assert "gunicorn" not in resp.headers.get("Server", "").lower()


def _until(condition: Any, what: str, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s:g} s: {what}")
        time.sleep(0.05)


def test_pause_stops_the_master_and_its_workers_and_resume_starts_them(api: Any) -> None:
    """Component.pause is the pause-process fault's and the load's api-stall: SIGSTOP of gunicorn's master alone
    left its workers answering."""
    import psutil  # the stack extra depends on it (stack.components pauses process trees with it)
    master = psutil.Process(api.pid)
    tree = {master.pid, *(c.pid for c in master.children(recursive=True))}
    assert len(tree) >= 2, "gunicorn runs a master and a worker"
    stopped = api.pause()
    try:
        assert set(stopped) == tree
        _until(lambda: all(psutil.Process(pid).status() == psutil.STATUS_STOPPED for pid in tree),
               "every process of the tree stopped")
        with pytest.raises(requests.exceptions.Timeout):  # nobody left to answer
            requests.get(f"{api.url}/health", timeout=1)
    finally:
        api.resume()
    _until(lambda: all(psutil.Process(pid).status() != psutil.STATUS_STOPPED for pid in tree), "the tree resumed")
    assert requests.get(f"{api.url}/health", timeout=10).status_code == 200


def test_stop_of_a_component_sigkilled_in_the_meantime_is_a_stop(tmp_path: Path) -> None:
    """A job that kills its worker, or a crash point, can SIGKILL a component between stop()'s check that it runs and
    its SIGTERM: the component is stopped all the same (the native job-system test tripped on this race)."""
    import os
    import signal

    from stack.common import free_port
    from stack.components import Component

    port = free_port()
    comp = Component("http", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              "--directory", str(tmp_path)],
                     health_url=f"http://127.0.0.1:{port}/", log_path=tmp_path / "http.log").start()
    pid = comp.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # dead, not yet reaped: the race's state once stop() has decided to stop it
    executor = comp._executor
    assert executor is not None
    really_running = executor.running
    answers = iter([True])  # stop()'s check saw it running, before the kill; then the truth
    executor.running = lambda: next(answers, None) or really_running()  # type: ignore[method-assign]
    comp.stop()
    assert not comp.wanted
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
