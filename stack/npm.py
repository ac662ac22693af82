"""Packages from the npm registry, fetched with the machine's ``npm`` into the project cache, keyed by name and
version: for browser code a test page loads (the official Centrifugo JavaScript client's bundle).

``npm_package("centrifuge", "5.7.4")`` runs ``npm pack centrifuge@5.7.4`` once (npm checks the tarball's integrity
against the registry's), unpacks it and returns ``<cache_dir()>/npm/centrifuge/5.7.4/package``; later calls return
that path at once. Only the package itself: a browser bundle (``dist/...``) carries its dependencies. Concurrent
callers are serialised by a lock file and the directory appears atomically (unpacked into a staging directory, then
renamed).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from stack.common import MissingDependency, cache_dir

PACK_TIMEOUT_S = 300.0


class NpmError(RuntimeError):
    """``npm`` is missing or ``npm pack`` failed; the message carries npm's output."""


class NpmMissing(NpmError, MissingDependency):
    """No npm to fetch with."""


def npm_package_path(name: str, version: str) -> Path:
    return cache_dir() / "npm" / name / version / "package"


def npm_package(name: str, version: str, *, timeout_s: float = PACK_TIMEOUT_S) -> Path:
    """The unpacked package directory of ``name@version`` (its package.json at the top)."""
    if not name or name.startswith((".", "-")) or ".." in name or not version or "/" in version:
        raise NpmError(f"not an npm package and version: {name!r} {version!r}")
    target = npm_package_path(name, version)
    if (target / "package.json").is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NpmMissing(f"cannot fetch {name}@{version}: the 'npm' command is not on PATH (Node.js with npm)")
    version_dir = target.parent
    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / ".pack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other fetcher finishes first; then we find its directory
        if (target / "package.json").is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix="npm-", dir=version_dir))
        try:
            _pack_into(npm, f"{name}@{version}", staging, timeout_s)
            unpacked = staging / "package"
            manifest = json.loads((unpacked / "package.json").read_text(encoding="utf-8"))
            if (manifest.get("name"), manifest.get("version")) != (name, version):
                raise NpmError(f"npm pack {name}@{version} gave {manifest.get('name')}@{manifest.get('version')}")
            os.replace(unpacked, target)  # atomic: readers see no package or the whole package
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _pack_into(npm: str, spec: str, staging: Path, timeout_s: float) -> None:
    try:
        proc = subprocess.run([npm, "pack", spec, "--json", "--pack-destination", str(staging)], cwd=staging,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise NpmError(f"npm pack {spec} did not finish within {timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        raise NpmError(f"npm pack {spec} failed with exit code {proc.returncode}:\n"
                       f"{(proc.stdout + proc.stderr)[-4000:]}")
    tarballs = list(staging.glob("*.tgz"))
    if len(tarballs) != 1:
        raise NpmError(f"npm pack {spec} left {[t.name for t in tarballs]}, not one tarball")
    with tarfile.open(tarballs[0]) as archive:
        archive.extractall(staging, filter="data")  # refuses absolute paths, '..' and links out of staging
