"""A load run's time series: a thread that takes one sample every ``interval_s`` (queue depths, rows by status, CPU
per process group...) until stopped. A sample that fails is a gap in the series, not a failed run."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("sortie.load.sampling")


class PeriodicSampler(threading.Thread):
    """Subclasses say what one sample is (``sample``: a dict of figures); ``rows`` holds each with its ``t``, the
    seconds since ``t0`` (time.time()) it was taken at."""

    def __init__(self, name: str, interval_s: float, t0: float) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s, self.t0 = interval_s, t0
        self.rows: list[dict[str, Any]] = []
        self._done = threading.Event()

    def sample(self) -> dict[str, Any]:
        raise NotImplementedError

    def run(self) -> None:
        while not self._done.is_set():
            started = time.time()
            try:
                self.rows.append({"t": round(started - self.t0, 3), **self.sample()})
            except Exception:  # a missed sample is a gap in the series, not a failed run
                log.debug("sample failed", exc_info=True)
            self._done.wait(max(0.0, self.interval_s - (time.time() - started)))

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)
