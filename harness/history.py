"""A Jepsen-style history: operations (invoke / ok / fail / info) by process, plus fault windows."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
NEMESIS = "nemesis"
LOST_MESSAGE = "lose-message"  # a consumer group lost a message: a stale consumer acked it unread (stale-consumer)
# The nemesis op that says the airspace over some areas closed or reopened, written by both shells right when
# their change is visible to the reference: {"areas": [...], "open": bool}. I12 reads when each area was closed.
AIRSPACE = "airspace"
# The nemesis op that says which devices of queued tasks it made unfit to fly (unfit-for-flight, S8), written once
# the platform answers so: {"offline": [...], "low_battery": [...], "at_min_battery": [...], "battery": {...}}.
DEVICES = "devices"
# An approver's revocation of an approval (a refusal of a version it had approved), recorded invoke/ok/fail: I14
# reads when each one had committed (its ok).
REVOKE_APPROVAL = "revoke-approval"


@dataclass(frozen=True, slots=True)
class Op:
    index: int
    time: float
    process: str
    type: str
    f: str
    value: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "time": round(float(self.time), 6), "process": self.process, "type": self.type,
                "f": self.f, "value": self.value}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Op:
        return cls(int(d["index"]), float(d["time"]), str(d["process"]), str(d["type"]), str(d["f"]),
                   dict(d.get("value") or {}))


@dataclass
class FaultWindow:
    fault: str
    start: float
    end: float | None
    detail: dict[str, Any] = field(default_factory=dict)


class History:
    """Append-only; ``index`` is the position. Time is whatever clock the shell runs on (seconds)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, time: float, process: str, type_: str, f: str, value: dict[str, Any] | None = None) -> Op:
        op = Op(len(self.ops), time, process, type_, f, value or {})
        self.ops.append(op)
        return op

    def fault_start(self, time: float, fault: str, **detail: Any) -> Op:
        return self.add(time, NEMESIS, INFO, "start-fault", {"fault": fault, **detail})

    def fault_stop(self, time: float, fault: str, **detail: Any) -> Op:
        return self.add(time, NEMESIS, INFO, "stop-fault", {"fault": fault, **detail})

    def fault_windows(self) -> list[FaultWindow]:
        open_: dict[str, FaultWindow] = {}
        out: list[FaultWindow] = []
        for op in self.ops:
            if op.process != NEMESIS:
                continue
            name = op.value.get("fault", "")
            if op.f == "start-fault":
                w = FaultWindow(name, op.time, None, {k: v for k, v in op.value.items() if k != "fault"})
                open_[name] = w
                out.append(w)
            elif op.f == "stop-fault" and name in open_:
                open_.pop(name).end = op.time
        return out

    def digest(self) -> str:
        h = hashlib.sha256()
        for op in self.ops:
            h.update(_line(op).encode())
        return h.hexdigest()

    def write_jsonl(self, path: Path) -> None:
        with path.open("w") as fh:
            for op in self.ops:
                fh.write(_line(op))

    @classmethod
    def read_jsonl(cls, path: Path) -> History:
        h = cls()
        with path.open() as fh:
            h.ops = [Op.from_json(json.loads(line)) for line in fh if line.strip()]
        return h

    @classmethod
    def of(cls, ops: Iterable[Op]) -> History:
        h = cls()
        h.ops = list(ops)
        return h


def _line(op: Op) -> str:
    return json.dumps(op.as_json(), sort_keys=True, separators=(",", ":"), default=str) + "\n"
