"""The Copilot API served as the native stack serves it, for tests that need the real server: a throwaway PostgreSQL
cluster (migrated to head, the application role, the fleet api_support seeds), gunicorn started with the stack's own
command line (systems.copilot.stack.api_command: the ProblemJsonWorker, its request limits) and the stack's
environment (reference.copilot.settings), and requests over real HTTP. Also the stream tier as its own process
(``python -m reference.copilot.http.stream_asgi``, as the stack starts it), without Redis."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from api_support import SECRET, WEBHOOK_TOKEN, build_api, draft_body
from sqlalchemy import Engine, create_engine, text

from reference.copilot.http.auth import issue_token
from reference.copilot.models import Base
from reference.copilot.settings import Settings
from stack.common import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parents[2]
APP_ROLE = "sortie_app"
APP_PASSWORD = "served-app-pw"
APPROVER, SUPERVISOR = "approver-1", "supervisor-1"


def until(what: str, condition: Callable[[], Any], deadline_s: float = 30.0) -> Any:
    """Polls ``condition`` until it is true (returned) or the deadline passes (AssertionError): a wait on a
    condition, not a timing assertion."""
    end = time.monotonic() + deadline_s
    while not (value := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s:g} s: {what}")
        time.sleep(0.02)
    return value


@dataclass
class Served:
    url: str
    owner: Engine  # the schema owner: reads and arranges rows behind the API's back
    log_path: Path

    def headers(self, user: str, role: str = "operator", **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {issue_token(SECRET, user, role)}", **extra}

    def post(self, path: str, user: str, role: str = "operator", **kw: Any) -> requests.Response:
        headers = {**self.headers(user, role), **kw.pop("headers", {})}
        return requests.post(self.url + path, headers=headers, timeout=kw.pop("timeout", 30), **kw)

    def draft(self, user: str) -> dict[str, Any]:
        resp = self.post("/v1/drafts", user, json=draft_body(), headers={"Idempotency-Key": uuid.uuid4().hex})
        assert resp.status_code == 201, resp.text
        return dict(resp.json())

    def task(self, user: str) -> str:
        """A confirmed task of ``user`` (QUEUED): draft, approval, confirm."""
        d = self.draft(user)
        ok = self.post(f"/v1/drafts/{d['id']}/approvals", APPROVER, "approver",
                       json={"draft_version": d["version"], "decision": "approve"})
        assert ok.status_code == 201, ok.text
        done = self.post(f"/v1/drafts/{d['id']}/confirm", user, json={"draft_version": d["version"]},
                         headers={"Idempotency-Key": uuid.uuid4().hex})
        assert done.status_code == 201, done.text
        return str(done.json()["task_id"])

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.owner.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def waiting_on_locks(self) -> int:
        """The API's database sessions waiting for a row lock."""
        return int(self.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                               "AND application_name LIKE 'sortie-api-%'"))


def _seed(owner_url: str) -> None:
    """The fleet api_support.build_api seeds, copied row by row into PostgreSQL."""
    source = build_api()
    target = create_engine(owner_url)
    try:
        with source.engine.connect() as src, target.begin() as dst:
            for table in Base.metadata.sorted_tables:
                rows = [dict(r._mapping) for r in src.execute(table.select())]
                if rows:
                    dst.execute(table.insert(), rows)
    finally:
        target.dispose()
        source.hub.close()
        source.engine.dispose()


@contextmanager
def served_api(logs: Path, *, threads: int, **settings: Any) -> Iterator[Served]:
    """PostgreSQL and one gunicorn worker of ``threads`` threads, started as the stack starts the API;
    ``settings``: Settings fields over the stack's (e.g. ``api_read_timeout_s``)."""
    from stack.postgres import LocalPostgres, find_pg_bin

    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    pytest.importorskip("mirakuru", reason="the stack extra (process supervision) is not installed")
    from reference.copilot.migrations import upgrade
    from reference.copilot.migrations.roles import create_app_role
    from stack.components import Component
    from systems.copilot.stack import api_command, api_max_streams

    with ExitStack() as stack:
        # Not pytest's tmp_path for the cluster: its 0700 root-owned parents are closed to the 'postgres' OS user.
        run_dir = Path(tempfile.mkdtemp(prefix="sortie-pg-served-"))
        stack.callback(shutil.rmtree, run_dir, ignore_errors=True)
        pg = LocalPostgres(run_dir)
        stack.callback(pg.stop)
        pg.start()
        owner_url = pg.url()
        upgrade(owner_url)
        owner = create_engine(owner_url, pool_size=4)
        stack.callback(owner.dispose)
        with owner.begin() as conn:
            create_app_role(conn, APP_ROLE, APP_PASSWORD)
        _seed(owner_url)
        port = free_port()
        env = Settings(database_url=pg.url(APP_ROLE, APP_PASSWORD), token_secret=SECRET, webhook_token=WEBHOOK_TOKEN,
                       **{"api_max_streams": api_max_streams(threads), **settings}).as_env()
        command = api_command(f"{LOOPBACK}:{port}", 1, threads)
        command[-1:-1] = ["--chdir", str(ROOT)]  # this checkout's code, whatever the working directory
        api = Component("api", command,
                        health_url=f"http://{LOOPBACK}:{port}/health", env=env, log_path=logs / "api.log",
                        start_timeout_s=60.0)
        stack.callback(api.stop)
        api.start()
        yield Served(f"http://{LOOPBACK}:{port}", owner, logs / "api.log")


@contextmanager
def stream_tier(logs: Path, **settings: Any) -> Iterator[str]:
    """The stream tier as the stack starts it, without Redis (nothing is published: streams only open, beat and
    end); ``settings``: Settings fields (e.g. ``streams_per_user``). Yields its URL."""
    pytest.importorskip("mirakuru", reason="the stack extra (process supervision) is not installed")
    from stack.components import Component, python_module

    port = free_port()
    env = Settings(database_url="", token_secret=SECRET, **settings).as_env()
    env.pop("SORTIE_DATABASE_URL")
    tier = Component("stream", python_module("reference.copilot.http.stream_asgi", "--host", LOOPBACK, "--port",
                                             str(port)),
                     health_url=f"http://{LOOPBACK}:{port}/health", env=env, log_path=logs / "stream.log")
    tier.start()
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        tier.stop()


class RawStream:
    """An open ``GET /v1/stream`` on a raw socket: the status line and whatever arrives, read with deadlines."""

    def __init__(self, url: str, token: str, extra_headers: bytes = b"") -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buf = b""
        self.reset = False  # the server closed the connection while the request was still being sent
        try:
            self.sock.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
                              + b"\r\n" + extra_headers + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.reset = True

    def read_until(self, marker: bytes, deadline_s: float = 30.0) -> bytes:
        """Everything read so far once ``marker`` is in it; b"" past it when the server closed first."""
        end = time.monotonic() + deadline_s
        while marker not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} within {deadline_s:g} s; got {self.buf[:500]!r}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                self.reset = True
                break
            if not chunk:
                break
            self.buf += chunk
        return self.buf

    def status(self) -> int:
        return int(self.read_until(b"\r\n").split(b" ", 2)[1])

    def closed_by_server(self, deadline_s: float = 30.0) -> bool:
        """Reads until the server closes the connection (True) or the deadline passes (False)."""
        end = time.monotonic() + deadline_s
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                self.reset = True
                return True
            if not chunk:
                return True
            self.buf += chunk
            if self.buf.endswith(b"0\r\n\r\n"):  # the chunked response's last chunk: the stream ended
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def raw_request(url: str, request: bytes, deadline_s: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """Sends ``request`` as is and reads the answer until the server closes (or its Content-Length is in)."""
    host, port = url.removeprefix("http://").split(":")
    end = time.monotonic() + deadline_s
    with socket.create_connection((host, int(port)), timeout=deadline_s) as s:
        s.sendall(request)
        data = b""
        while True:
            s.settimeout(max(0.01, end - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                if "content-length" in headers and len(body) >= int(headers["content-length"]):
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body
