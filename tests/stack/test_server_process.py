"""stack.common.ServerProcess: a server counts as ready only when *it* answers on its port. Between free_port() and
the server's bind, a server of another test (pytest runs two workers) can take the port; its answers made a start
look successful while the started process exited, and a test then SIGSTOPped the exited process and talked to the
other server (test_s3_put_to_a_stopped_or_hung_server_fails_in_bounded_time, failing once in a fresh CI)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from stack.common import LOOPBACK, ServerProcess, free_port


def _answers(port: int) -> bool:
    socket.create_connection((LOOPBACK, port), timeout=1).close()
    return True


def test_a_check_answered_on_the_port_by_another_process_does_not_make_this_one_ready(tmp_path: Path) -> None:
    foreign = socket.socket()
    foreign.bind((LOOPBACK, 0))
    foreign.listen()
    port = foreign.getsockname()[1]
    idle = ServerProcess("idle", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "idle.log")
    idle.start()
    try:
        with pytest.raises(RuntimeError, match="did not reach"):
            # The check succeeds (someone listens on the port), but not this process: not ready.
            idle.wait_until(lambda: _answers(port), time.monotonic() + 1.0, "the port answers", port=port)
        assert not idle.listens_on(port)
    finally:
        idle.stop()
        foreign.close()


def test_a_process_listening_on_its_port_is_ready(tmp_path: Path) -> None:
    for _ in range(3):  # as the servers' own starts: another process may take the port first
        port = free_port()
        server = ServerProcess("http", [sys.executable, "-m", "http.server", str(port), "--bind", LOOPBACK],
                               tmp_path / "http.log")
        server.start()
        try:
            server.wait_until(lambda p=port: _answers(p), time.monotonic() + 30.0, "the port answers", port=port)
        except RuntimeError as exc:
            server.stop()
            if "exited" not in str(exc):
                raise
            continue
        try:
            assert server.listens_on(port)
        finally:
            server.stop()
        assert not server.listens_on(port)
        return
    pytest.fail("three ports taken by other processes")
