"""Wall time and peak resident memory of a command: this process, its child processes (the simulation's
worker pool, the stack's servers and components) and any extra processes named by the caller (PostgreSQL,
which pg_ctl daemonises). Sampled every ``interval_s`` by psutil in a thread, and this process's own peak from
getrusage."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any


class Footprint:
    def __init__(self, scope: str, extra_pids: Callable[[], Iterable[int]] = tuple, interval_s: float = 1.0) -> None:
        self.scope, self.extra_pids, self.interval_s = scope, extra_pids, interval_s
        self.peak_rss_mb = 0.0
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self.wall_s = 0.0

    def __enter__(self) -> Footprint:
        self._t0 = time.perf_counter()
        threading.Thread(target=self._sample, name="footprint", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.wall_s = time.perf_counter() - self._t0
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        self.peak_rss_mb = max(self.peak_rss_mb, own)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            procs: dict[int, Any] = {p.pid: p for p in [me, *me.children(recursive=True)]}
            for pid in self.extra_pids():
                try:
                    root = psutil.Process(pid)
                    procs.update({p.pid: p for p in [root, *root.children(recursive=True)]})
                except psutil.Error:
                    pass
            total = 0
            for p in procs.values():
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_rss_mb = max(self.peak_rss_mb, total / 2**20)
            self._stop.wait(self.interval_s)

    def as_json(self) -> dict[str, Any]:
        return {"wall_seconds": round(self.wall_s, 1), "peak_rss_mb": round(self.peak_rss_mb, 1),
                "peak_rss_scope": self.scope}

    def line(self) -> str:
        return f"wall {self.wall_s:.1f} s, peak resident memory {self.peak_rss_mb:.0f} MB " \
               f"({self.as_json()['peak_rss_scope']})"
