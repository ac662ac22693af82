"""stack.common.ServerProcess: a server counts as ready only when *it* answers on its port. Between free_port() and
the server's bind, a server of another test (pytest runs two workers) can take the port; its answers made a start
look successful while the started process exited, and a test then SIGSTOPped the exited process and talked to the
other server (test_s3_put_to_a_stopped_or_hung_server_fails_in_bounded_time, failing once in a fresh CI)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
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


def _exit_code(server: ServerProcess) -> int:
    deadline = time.monotonic() + 30.0
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    code = server.returncode
    assert code is not None, f"{server.name} still runs after 30 s"
    return code


def test_the_server_dies_with_its_parent(tmp_path: Path) -> None:
    # PR_GET_PDEATHSIG (2) writes the signal the kernel sends this process when its parent thread dies.
    probe = ("import ctypes, sys; sig = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(sig)); "
             "sys.exit(sig.value)")
    server = ServerProcess("probe", [sys.executable, "-c", probe], tmp_path / "probe.log")
    server.start()
    try:
        assert _exit_code(server) == 9  # SIGKILL
    finally:
        server.stop()


def test_a_server_started_by_a_thread_that_ends_lives_on(tmp_path: Path) -> None:
    """A fault's timeline thread restarts a server (Redis after a redis-loss) and ends: the server must live on. The
    parent-death signal is the starting *thread's*, so before stack.common.popen the restarted Redis was SIGKILLed
    as that thread ended, and every later scenario on the stack ran without it."""
    server = ServerProcess("idle", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "idle.log")
    tids: list[int] = []

    def restart() -> None:
        tids.append(threading.get_native_id())
        server.start()
        deadline = time.monotonic() + 30.0  # past setpriv's prctl: armed once setpriv has exec'd the command
        while _cmdline(server.pid)[:1] != [sys.executable]:
            assert time.monotonic() < deadline, "the server never ran its command"
            time.sleep(0.01)

    starter = threading.Thread(target=restart)
    starter.start()
    starter.join()
    deadline = time.monotonic() + 30.0
    while Path(f"/proc/self/task/{tids[0]}").exists():  # the thread is gone from the kernel: any signal was sent
        assert time.monotonic() < deadline, "the starting thread never ended"
        time.sleep(0.01)
    try:
        assert server._proc is not None
        with pytest.raises(subprocess.TimeoutExpired):  # a SIGKILL sent above would have ended it by now
            server._proc.wait(timeout=1.0)
        assert server.alive()
    finally:
        server.stop()


def _cmdline(pid: int | None) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def test_starts_survive_a_busy_grpc_client_in_this_process(tmp_path: Path) -> None:
    """The RocketMQ client loads gRPC into the harness. A fork() that runs gRPC's fork handlers restarts a poller
    thread in the child, Popen's close_fds closes its epoll descriptor, and the child aborts before exec
    (grpc/grpc#43055): versitygw exited with -6 at start in a CI run. With a preexec_fn this loop lost ~2% of its
    children (6 of 300 in one try, grpcio 1.85), so 200 starts catch a return of that path ~98% of the time."""
    grpc = pytest.importorskip("grpc", reason="grpcio comes with the stack extra (the RocketMQ client)")
    channel = grpc.insecure_channel(f"{LOOPBACK}:{free_port()}")  # nobody listens: calls fail fast and often
    stop = threading.Event()

    def call_forever() -> None:
        call = channel.unary_unary("/sortie.Probe/Call")
        while not stop.is_set():
            with contextlib.suppress(grpc.RpcError):
                call(b"", timeout=0.05)

    callers = [threading.Thread(target=call_forever, daemon=True) for _ in range(2)]
    for t in callers:
        t.start()
    codes: list[int] = []
    try:
        for i in range(200):
            server = ServerProcess(f"true-{i}", ["true"], tmp_path / "true.log")
            server.start()
            try:
                codes.append(_exit_code(server))
            finally:
                server.stop()
    finally:
        stop.set()
        for t in callers:
            t.join(timeout=5)
        channel.close()
    failed = [c for c in codes if c != 0]
    assert not failed, f"{len(failed)} of {len(codes)} children died before exec (codes {failed}):\n" \
                       f"{(tmp_path / 'true.log').read_text()[-2000:]}"


def test_free_ports_lie_outside_the_ephemeral_range_and_two_harnesses_never_share_one() -> None:
    """An outgoing connection takes its port from the ephemeral range, so a port chosen there can be gone before the
    child binds it; and two harnesses choosing at once (pytest's two workers) must not be handed the same port."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    take = "from stack.common import free_port; print(*[free_port() for _ in range(150)])"
    harnesses = [subprocess.Popen([sys.executable, "-c", take], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    ports = [int(p) for h in harnesses for p in h.communicate(timeout=120)[0].split()]
    assert all(h.returncode == 0 for h in harnesses)
    assert len(ports) == 300 and len(set(ports)) == 300
    assert not [p for p in ports if low <= p <= high]
