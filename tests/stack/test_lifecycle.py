"""After `sortie stack down`, when a run is interrupted (Ctrl-C), and when the harness itself is killed
(SIGKILL: no cleanup of its own runs; stack/guardian.py does it), no process of the stack is left and
every port it listened on is free. The stack is found from the outside, as an operator would: the
processes under the `sortie` command, the PostgreSQL server (pg_ctl daemonises it), and every port those
processes listened on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest

# Starts a whole native stack and is too slow for CI's budget: scripts/nightly.sh runs it (docs/ci.md).
pytestmark = [pytest.mark.stack, pytest.mark.whole_stack, pytest.mark.nightly]
SORTIE = [sys.executable, "-m", "sortie.cli"]


def _wait(what: str, fn, timeout_s: float = 180.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _stack_of(root: psutil.Process, state: dict) -> tuple[set[tuple[int, float]], set[int]]:  # type: ignore[type-arg]
    """(pid, create_time) of every process of the stack, and every TCP port they listen on."""
    procs = {root, *root.children(recursive=True)}
    pg_port = urlparse(state["admin_database_url"]).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == pg_port and conn.pid:
            postmaster = psutil.Process(conn.pid)
            procs |= {postmaster, *postmaster.children(recursive=True)}
    pids = {p.pid for p in procs}
    ports = {c.laddr.port for c in psutil.net_connections(kind="tcp")
             if c.status == psutil.CONN_LISTEN and c.pid in pids}
    return {(p.pid, p.create_time()) for p in procs}, ports


def _alive(pid: int, created: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _held_since_before(port: int, stopped_at: float) -> list[str]:
    """Processes still listening on ``port`` that existed before the stack was told to stop. (This machine
    is shared: a process started afterwards may legitimately pick up a port the stack freed.)"""
    with socket.socket() as s:
        s.settimeout(1.0)
        if s.connect_ex(("127.0.0.1", port)) != 0:
            return []
    holders = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(c.pid)
                if p.create_time() < stopped_at:
                    holders.append(f"{c.pid} {' '.join(p.cmdline())[:80]}")
    return holders


def _assert_gone(procs: set[tuple[int, float]], ports: set[int], stopped_at: float) -> None:
    left = _wait("every process of the stack to exit", lambda: not [p for p in procs if _alive(*p)] or None,
                 timeout_s=60) if procs else True
    assert left
    busy = {p: h for p in sorted(ports) if (h := _held_since_before(p, stopped_at))}
    assert not busy, f"ports still held by processes of the stack: {busy}"


def _up(run_dir: Path) -> tuple[subprocess.Popen, dict]:  # type: ignore[type-arg]
    run_dir.mkdir(parents=True)
    log = (run_dir.parent / "up.log").open("wb")
    proc = subprocess.Popen([*SORTIE, "stack", "up", "--run-dir", str(run_dir)], stdout=log, stderr=log,
                            start_new_session=True)
    state_file = run_dir / "stack.json"
    _wait("the stack to be up", lambda: (run_dir / "up.pid").exists() and state_file.exists())
    return proc, json.loads(state_file.read_text())


def test_stack_down_leaves_no_process_and_frees_every_port(tmp_path: Path) -> None:
    proc, state = _up(tmp_path / "stack")
    procs, ports = _stack_of(psutil.Process(proc.pid), state)
    assert len(procs) >= 8 and len(ports) >= 8, (procs, ports)  # servers, proxies, components
    stopped_at = time.time()
    down = subprocess.run([*SORTIE, "stack", "down", "--run-dir", str(tmp_path / "stack")], capture_output=True,
                          text=True, timeout=180)
    assert down.returncode == 0, down.stderr + (tmp_path / "up.log").read_text(errors="replace")[-3000:]
    proc.wait(timeout=60)
    _assert_gone(procs, ports, stopped_at)


def test_an_interrupted_run_leaves_no_process_and_frees_every_port(tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = tmp_path / "run.log"
    with log.open("w") as fh:
        # Ctrl-C as a user's terminal delivers it: whoever started the tests (a background job of a
        # non-interactive shell) may have left SIGINT ignored, and a child inherits that. coreutils' env resets it,
        # not a preexec_fn: that would fork with gRPC's fork handlers (see stack.common.dying_with_parent).
        proc = subprocess.Popen(["env", "--default-signal=INT", *SORTIE, "run", "--stack", "native",
                                 "--scenario", "B2", "--out", str(out)],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    state = json.loads(_wait("the run's stack to be up", lambda: (out / "stack" / "stack.json").exists()
                             and (out / "stack" / "stack.json").read_text()))
    # The scenario is under way once a component has recorded an operation (a delivery, a platform call).
    _wait("the scenario's first operations", lambda: any(
        p.stat().st_size > 0 for p in (out / "stack" / "history").glob("*.jsonl")))
    procs, ports = _stack_of(psutil.Process(proc.pid), state)
    stopped_at = time.time()
    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C
    code = proc.wait(timeout=180)
    assert code != 0, f"the interrupted run exited {code}:\n{log.read_text()[-3000:]}"
    _assert_gone(procs, ports, stopped_at)


def test_a_killed_harness_leaves_no_process_and_frees_every_port(tmp_path: Path) -> None:
    run_dir = tmp_path / "stack"
    proc, state = _up(run_dir)
    procs, ports = _stack_of(psutil.Process(proc.pid), state)
    assert len(procs) >= 8, procs
    pg_dir = Path((run_dir / "postgres-dir").read_text().strip())
    assert pg_dir.exists()
    stopped_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)  # no atexit, no finally: only the guardian can clean up
    proc.wait(timeout=30)
    _assert_gone(procs, ports, stopped_at)
    log = _wait("the guardian's report", lambda: (run_dir / "guardian.log").read_text())
    assert "died without stopping its stack" in log, log
    assert not pg_dir.exists(), f"the stack's PostgreSQL directory {pg_dir} was left behind"
