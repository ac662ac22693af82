"""Tears a native stack down when the process that started it dies without doing so (SIGKILL, OOM kill).

Ctrl-C and SIGTERM run the harness's own teardown. A SIGKILL runs nothing, and only some children can be
tied to the harness by the kernel (``PR_SET_PDEATHSIG`` follows the *thread* that forked the child and is
cleared when the child changes user, as PostgreSQL's postmaster does), so without this the postmaster and
the reference components outlived a killed harness.

Every process of a stack carries ``SORTIE_STACK_ID=<id>`` in its environment: the harness sets it before it
starts anything, and every part inherits it (PostgreSQL through pg_ctl, the JVMs, the components, Locust).
The guardian is a separate session that waits on a pidfd for the harness to exit. When the harness stops
the stack itself it terminates the guardian first; when the harness dies instead, the guardian SIGKILLs
every process that carries the id and removes the stack's PostgreSQL directory.

    python -m stack.guardian HARNESS_PID STACK_ID RUN_DIR
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARKER = "SORTIE_STACK_ID"


def marked(stack_id: str) -> list[int]:
    """Pids whose environment carries this stack's id (never this process)."""
    needle = f"{MARKER}={stack_id}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(entry.name))
        except OSError:
            continue  # gone, or a kernel thread
    return out


def reap(stack_id: str, run_dir: Path) -> int:
    """SIGKILL every marked process until none is left (a dying parent may still fork); returns how many."""
    killed: set[int] = set()
    for _ in range(20):
        pids = marked(stack_id)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.2)
    pg_dir = run_dir / "postgres-dir"
    if pg_dir.exists():
        shutil.rmtree(pg_dir.read_text().strip(), ignore_errors=True)
    return len(killed)


def wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd (kernel < 5.3): poll instead
        while Path(f"/proc/{pid}").exists():
            time.sleep(1.0)
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll()  # readable when the process has exited
    os.close(fd)


def main(argv: list[str]) -> int:
    harness, stack_id, run_dir = int(argv[0]), argv[1], Path(argv[2])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the harness stopped its stack itself
    wait_for_exit(harness)
    n = reap(stack_id, run_dir)
    print(f"guardian: harness {harness} died without stopping its stack; killed {n} processes of stack {stack_id}",
          flush=True)
    return 0


class Guardian:
    """Started by the harness before any part of the stack; ``stop()`` when the stack has been stopped."""

    def __init__(self, run_dir: Path) -> None:
        self.stack_id = uuid.uuid4().hex
        self.run_dir = run_dir
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        os.environ[MARKER] = self.stack_id  # inherited by everything the harness starts from now on
        env = {k: v for k, v in os.environ.items() if k != MARKER}  # the guardian must not reap itself
        with open(self.run_dir / "guardian.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stack.guardian", str(os.getpid()), self.stack_id, str(self.run_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=Path(__file__).resolve().parent.parent, start_new_session=True)

    def stop(self) -> None:
        if os.environ.get(MARKER) == self.stack_id:
            del os.environ[MARKER]
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
