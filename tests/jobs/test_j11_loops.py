"""J11: a pool loop runs until its instance drains or dies; the native instance notes a loop that ends on its own."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernel.runtime import Stopping
from scenarios.verdicts import HELD, VIOLATED
from systems.jobs.checkers import JobsState, worker_loops_run_until_stopped
from systems.jobs.worker import Instance


def _state(loop_ends: list[dict[str, Any]]) -> JobsState:
    return JobsState([], [], [], {}, [], [], datetime.now(UTC), 3, loops=6, loop_ends=loop_ends)


def test_a_loop_that_ended_on_its_own_violates_j11() -> None:
    assert worker_loops_run_until_stopped(_state([])).status == HELD
    verdict = worker_loops_run_until_stopped(_state([{"process": "instance-a.1", "error": "OperationalError: gone"}]))
    assert verdict.status == VIOLATED and verdict.checked == 6
    assert [v.message for v in verdict.violations] == [
        "its loop ended while its instance ran: OperationalError: gone"]


def _instance(tmp_path: Path) -> Instance:
    instance = Instance.__new__(Instance)  # no database, no service: run() touches only its history and stopping
    instance.history = str(tmp_path / "history.jsonl")
    instance.stopping = threading.Event()
    instance.perform = lambda effect: None  # type: ignore[method-assign]
    return instance


def _loop(error: BaseException | None) -> Any:
    if error is not None:
        raise error
    yield from ()


def _notes(instance: Instance) -> list[dict[str, Any]]:
    path = Path(str(instance.history))
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_native_instance_notes_a_loop_that_ends_unless_it_is_stopping(tmp_path: Path) -> None:
    instance = _instance(tmp_path)
    threading.current_thread().name, name = "instance-a.1", threading.current_thread().name
    try:
        instance.run(_loop(RuntimeError("database unavailable")))
        instance.run(_loop(None))  # returned: ended all the same
        instance.run(_loop(Stopping()))  # drained from an idle sleep
        instance.stopping.set()
        instance.run(_loop(RuntimeError("late")))  # failing while it drains: not the loop's doing
    finally:
        threading.current_thread().name = name
    assert [(n["process"], n["f"], n["value"]["error"]) for n in _notes(instance)] == [
        ("instance-a.1", "loop-ended", "RuntimeError: database unavailable"),
        ("instance-a.1", "loop-ended", None),
    ]
