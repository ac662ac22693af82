"""The real shell records a platform call made while a transaction is open (invariant I20's evidence): a
transaction function that drives work itself (seen by Runtime.perform) or calls an HTTP platform client
directly (seen by the client), once per call; calls made between transactions record nothing. A real
SQLite database, a real HttpPlatformClient (against a port where nothing listens), the real OpRecorder."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from harness.history import History, Op
from kernel.runtime import open_transaction
from reference.copilot import platform as p
from reference.copilot.adapters.platform_http import HttpPlatformClient, PlatformUnreachable
from reference.copilot.db import sqlite_engine
from reference.copilot.effects import CallPlatform, Tx
from reference.copilot.runtime import PLATFORM_CALL_IN_TRANSACTION, OpRecorder, Runtime
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import INVARIANTS, CheckContext
from systems.copilot.state import FinalState


class ScriptedPlatform:
    """Answers every device check: online, full battery."""

    def __init__(self) -> None:
        self.calls = 0

    def get_device(self, device_id: str) -> p.DeviceState:
        self.calls += 1
        return p.DeviceState(device_id, True, 100.0)


def _device_check() -> Generator[Any, Any, p.DeviceState]:
    return (yield CallPlatform("get_device", ("DRONE-0001",), "task-1"))


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    engine = sqlite_engine()
    rt = Runtime(sessionmaker(engine, expire_on_commit=False), platform=ScriptedPlatform())  # type: ignore[arg-type]
    rt.recorder = OpRecorder(str(tmp_path / "dispatcher-1.jsonl"), "dispatcher-1")
    yield rt
    engine.dispose()


def _ops(rt: Runtime) -> list[dict[str, Any]]:
    assert rt.recorder is not None
    return [json.loads(line) for line in Path(rt.recorder.path).read_text().splitlines()]


def _i18(ops: list[dict[str, Any]]) -> Any:
    history = History.of(Op(i, o["time"], o["process"], o["type"], o["f"], o["value"]) for i, o in enumerate(ops))
    return INVARIANTS["I20"](CheckContext(history, FinalState()))


def test_calls_between_transactions_record_nothing(runtime: Runtime) -> None:
    runtime.transact(lambda tx: None, "dispatch.read")
    assert runtime.run(_device_check()).online
    ops = _ops(runtime)
    assert [o["f"] for o in ops] == ["get_device", "get_device"]  # invoke, ok
    assert open_transaction() is None
    verdict = _i18(ops)
    assert verdict.status == HELD and verdict.checked == 1


def test_work_driven_from_inside_a_transaction_is_recorded(runtime: Runtime) -> None:
    def defective(tx: Tx) -> p.DeviceState:
        return runtime.run(_device_check())  # the platform call happens while this transaction is open

    assert runtime.transact(defective, "dispatch.begin").online
    flagged = [o for o in _ops(runtime) if o["f"] == PLATFORM_CALL_IN_TRANSACTION]
    assert [o["value"] for o in flagged] == [{"method": "get_device", "task_id": "task-1",
                                              "transaction": "dispatch.begin", "via": "runtime"}]
    assert _i18(_ops(runtime)).status == VIOLATED


def test_a_client_called_directly_inside_a_transaction_is_recorded(runtime: Runtime) -> None:
    client = HttpPlatformClient("http://127.0.0.1:1", connect_timeout=0.5, read_timeout=0.5)

    def defective(tx: Tx) -> None:
        client.get_device("DRONE-0001")

    with pytest.raises(PlatformUnreachable):
        runtime.transact(defective, "cancel")
    flagged = [o for o in _ops(runtime) if o["f"] == PLATFORM_CALL_IN_TRANSACTION]
    assert [o["value"] for o in flagged] == [{"method": "get_device", "task_id": None, "transaction": "cancel",
                                              "via": "client"}]


def test_one_call_through_the_runtime_and_the_client_is_recorded_once(runtime: Runtime) -> None:
    runtime.platform = HttpPlatformClient("http://127.0.0.1:1", connect_timeout=0.5, read_timeout=0.5)

    def defective(tx: Tx) -> None:
        runtime.run(_device_check())

    with pytest.raises(p.PlatformError):
        runtime.transact(defective, "dispatch.begin")
    flagged = [o for o in _ops(runtime) if o["f"] == PLATFORM_CALL_IN_TRANSACTION]
    assert [o["value"]["via"] for o in flagged] == ["runtime"]
