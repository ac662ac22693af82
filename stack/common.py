"""What every native component shares: the install cache, free loopback ports, log tails."""

from __future__ import annotations

import os
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"


def cache_dir() -> Path:
    """Binaries and jars, keyed by component and version: ``$SORTIE_CACHE`` or ``~/.cache/sortie``.
    It lives outside the clone so a fresh checkout on the same machine reuses it."""
    root = Path(os.environ.get("SORTIE_CACHE") or Path.home() / ".cache" / "sortie")
    root.mkdir(parents=True, exist_ok=True)
    return root


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free a moment ago (the caller retries if another process takes it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])
