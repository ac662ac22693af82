"""loadtests.sampling.PeriodicSampler: a sample per interval with its time, a failed sample a gap, stop ends it."""

from __future__ import annotations

import threading
from typing import Any

from loadtests.sampling import PeriodicSampler


class _Counting(PeriodicSampler):
    def __init__(self) -> None:
        super().__init__("counting", 0.0, t0=0.0)
        self.calls = 0
        self.enough = threading.Event()

    def sample(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("the database blinked")
        if self.calls >= 4:
            self.enough.set()
        return {"n": self.calls}


def test_each_sample_is_a_row_with_its_time_and_a_failed_one_is_a_gap() -> None:
    sampler = _Counting()
    sampler.start()
    assert sampler.enough.wait(timeout=30)
    sampler.stop()
    assert not sampler.is_alive()
    ns = [row["n"] for row in sampler.rows]
    assert ns[:3] == [1, 3, 4] and 2 not in ns
    assert all(row["t"] > 0 for row in sampler.rows)  # seconds since t0 = the epoch
    calls = sampler.calls
    sampler.join()
    assert sampler.calls == calls  # stopped: no sample after stop
