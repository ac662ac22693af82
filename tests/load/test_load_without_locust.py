"""The load pipeline (loadtests.run.run_once) for a system whose own producers make the load (hooks with no
locustfile): no Locust is started, time 0 is the one warm() set, the load lasts its duration, every hook runs once
in order and load.json is written."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loadtests.run import LoadOptions, run_once


class _OwnProducers:
    locustfile: Path | None = None

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.t0 = 0.0

    @contextmanager
    def stack(self, run: Any) -> Iterator[None]:
        self.calls.append("stack")
        yield
        self.calls.append("stack-stopped")

    def warm(self, run: Any) -> dict[str, Any]:
        self.calls.append("warm")
        run.t0 = self.t0 = time.time()  # the producers start now
        return {}

    def sample(self, run: Any) -> None:
        self.calls.append("sample")

    def fault(self, run: Any) -> None:
        self.calls.append("fault")

    def after_load(self, run: Any) -> None:
        self.calls.append("after_load")

    def drain(self, run: Any) -> None:
        self.calls.append("drain")

    def check(self, run: Any) -> None:
        self.calls.append("check")

    def figures(self, run: Any) -> dict[str, Any]:
        self.calls.append("figures")
        return {"load_end": run.load_end, "t0": run.t0, "invariants": {}, "missing": [], "slo": []}


def test_a_load_with_no_locustfile_runs_the_systems_own_producers(tmp_path: Path) -> None:
    hooks = _OwnProducers()
    load = run_once(hooks, LoadOptions(out=tmp_path, duration_s=0.3), None, 1.0, tmp_path)
    assert hooks.calls == ["stack", "warm", "sample", "fault", "after_load", "drain", "check", "figures",
                           "stack-stopped"]
    assert 0.3 <= load["load_end"] < 2.0  # waited the duration from warm's time 0, not Locust's grace
    assert not list(tmp_path.glob("locust*"))
    assert load["t0"] == hooks.t0  # time 0 is the producers' start, as warm() set it
    assert json.loads((tmp_path / "load.json").read_text())["t0"] == hooks.t0
