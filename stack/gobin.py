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

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from stack.common import MissingDependency, cache_dir

INSTALL_TIMEOUT_S = 1800.0  # a cold build of a large module (versitygw) on 2 cores takes minutes


class GoInstallError(RuntimeError):
    """``go`` is missing or ``go install`` failed; the message carries go's output."""


class GoMissing(GoInstallError, MissingDependency):
    """No Go toolchain to build with."""


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
        raise GoMissing(f"cannot build {module}@{version}: the 'go' command is not on PATH (install Go "
                        "from https://go.dev/doc/install, /usr/local/go/bin on PATH)")
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
