"""Go binaries built from the Go module proxy into the project cache, keyed by name and version.

``go_install("github.com/Shopify/toxiproxy/v2/cmd/server", "v2.12.0", "server", "toxiproxy-server")``
runs ``go install module@version`` once and returns
``<cache_dir()>/go/toxiproxy-server/v2.12.0/bin/toxiproxy-server``; later calls (from this process,
another process, or a fresh clone on the same machine) return that path at once.

Everything Go writes lives inside ``cache_dir()/go``: ``GOPATH``, ``GOMODCACHE`` (downloaded modules,
written with ``-modcacherw`` so the cache can be deleted with ``rm -rf``) and ``GOCACHE`` (compiled
packages, so rebuilding another version is quick). Builds are ``CGO_ENABLED=0`` unless the caller's
environment says otherwise: static binaries, no C toolchain needed. Concurrent callers (pytest-xdist
workers, two sessions) are serialised by a lock file and the binary appears atomically (built into a
staging directory, then renamed), so nobody ever sees a half-written executable.

:class:`ServerProcess` supervises one such server (or any other native server) in the foreground:
log file, readiness polling with a deadline, SIGTERM then SIGKILL, and no orphans.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stack.common import cache_dir, tail

INSTALL_TIMEOUT_S = 1800.0  # a cold build of a large module (versitygw) on 2 cores takes minutes


class GoInstallError(RuntimeError):
    """``go`` is missing or ``go install`` failed; the message carries go's output."""


def go_root() -> Path:
    return cache_dir() / "go"


def go_binary_path(version: str, rename_to: str) -> Path:
    return go_root() / rename_to / version / "bin" / rename_to


def go_available() -> bool:
    return shutil.which("go") is not None


def _ready(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def go_env() -> dict[str, str]:
    """The environment for ``go`` with every Go directory inside the project cache."""
    root = go_root()
    gopath = root / "gopath"
    env = dict(os.environ)
    env.update({
        "GOPATH": str(gopath),
        "GOMODCACHE": str(gopath / "pkg" / "mod"),
        "GOCACHE": str(root / "build-cache"),
        "GOFLAGS": " ".join(f for f in (os.environ.get("GOFLAGS", ""), "-modcacherw") if f).strip(),
    })
    env.setdefault("CGO_ENABLED", "0")
    return env


def go_install(module: str, version: str, binary_name: str, rename_to: str,
               *, timeout_s: float = INSTALL_TIMEOUT_S) -> Path:
    """``GOBIN=<cache>/go/<rename_to>/<version>/bin go install module@version``; returns the binary.

    ``binary_name`` is what ``go install`` names the executable (the last path element of the
    package, e.g. ``server``); it is renamed to ``rename_to``. Idempotent and safe to call
    concurrently; raises :class:`GoInstallError` with go's output on failure.
    """
    target = go_binary_path(version, rename_to)
    if _ready(target):
        return target
    if not go_available():
        raise GoInstallError(f"cannot build {module}@{version}: the 'go' command is not on PATH")
    version_dir = target.parent.parent
    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other installer finishes first; then we find its binary
        if _ready(target):
            return target
        staging = Path(tempfile.mkdtemp(prefix="gobin-", dir=version_dir))
        try:
            env = go_env()
            env["GOBIN"] = str(staging)
            began = time.monotonic()
            try:
                proc = subprocess.run(["go", "install", f"{module}@{version}"], env=env, cwd=staging,
                                      stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired as exc:
                raise GoInstallError(f"go install {module}@{version} did not finish within {timeout_s:.0f}s"
                                     ) from exc
            if proc.returncode != 0:
                raise GoInstallError(f"go install {module}@{version} failed with exit code "
                                     f"{proc.returncode}:\n{(proc.stdout + proc.stderr)[-6000:]}")
            built = staging / binary_name
            if not _ready(built):
                found = ", ".join(p.name for p in staging.iterdir()) or "nothing"
                raise GoInstallError(f"go install {module}@{version} produced {found}, not {binary_name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, target)  # atomic: readers see no binary or the whole binary
            (version_dir / "build-seconds").write_text(f"{time.monotonic() - began:.1f}\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


# --- supervising a native server process ----------------------------------------------------------
# Shared by stack/toxiproxy.py, stack/s3.py and stack/redis.py. It belongs in stack/common.py; it lives
# here only because common.py was being edited by another change when these components were written.

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ServerProcess:
    """One foreground server process: output to a log file, SIGTERM then SIGKILL on stop, no orphans.

    The child gets ``PR_SET_PDEATHSIG=SIGKILL``: if this Python process dies without running its
    cleanup (SIGKILL, OOM), the kernel kills the server too. Linux ties that signal to the *thread*
    that started the child, so start servers from the main thread or from a thread that outlives them.
    """

    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        if self.alive():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {shlex.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                          preexec_fn=_die_with_parent, close_fds=True)
        atexit.register(self.stop)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL and reap. Idempotent."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        else:
            proc.wait()

    def wait_until(self, check: Callable[[], bool], deadline: float, what: str,
                   error: type[Exception] = RuntimeError) -> None:
        """Poll ``check`` (exceptions count as "not yet") until it is true or ``deadline`` passes;
        fail at once if the process exits. Errors carry the last exception and the log tail."""
        last: BaseException | None = None
        delay = 0.02
        while True:
            try:
                if check():
                    return
            except Exception as exc:  # noqa: BLE001 - a probe failure is "not ready yet"
                last = exc
            if not self.alive():
                raise error(f"{self.name} exited with code {self.returncode} before {what}: {last}\n"
                            f"--- log tail ({self.log_path}) ---\n{tail(self.log_path)}")
            if time.monotonic() >= deadline:
                raise error(f"{self.name} (pid {self.pid}) did not reach '{what}' in time: {last}\n"
                            f"--- log tail ({self.log_path}) ---\n{tail(self.log_path)}")
            time.sleep(delay)  # a polling interval on a condition with a deadline
            delay = min(delay * 2, 0.25)
