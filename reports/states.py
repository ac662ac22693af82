"""Task-state transitions of a run, stored beside its history (``DIR/states/ID.json``) so the HTML report's
task timeline can be rebuilt later from the run directory alone.

Times are seconds on the history's clock: the audit log stores epoch seconds and ``FinalState.t0`` is the
epoch time of history time 0, so ``at = audit.at - t0``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def task_states(result: Any) -> dict[str, Any]:
    """The audited status changes of every task in ``result.state`` (a ``ScenarioResult``), as plain data."""
    state = result.state
    t0 = float(state.t0)
    transitions = [
        {"task_id": a["task_id"], "from": a["from"], "to": a["to"],
         "at": None if a["at"] is None else round(float(a["at"]) - t0, 6), "actor": a["actor"],
         "action": a["action"]}
        for a in state.audit
        if a.get("task_id") and a.get("to")
    ]
    tasks = [
        {"id": t["id"], "status": t["status"],
         "created_at": None if t["created_at"] is None else round(float(t["created_at"]) - t0, 6)}
        for t in state.tasks
    ]
    return {"id": result.id, "t0": t0, "end_time": round(float(state.end_time), 6),
            "heal_time": round(float(state.heal_time), 6), "tasks": tasks, "transitions": transitions}


def write_task_states(out: Path, result: Any) -> Path:
    """Write ``out/states/<id>.json`` for one scenario result; returns the path."""
    folder = out / "states"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.id}.json"
    path.write_text(json.dumps(task_states(result), separators=(",", ":"), default=str) + "\n")
    return path


def read_task_states(out: Path, scenario_id: str) -> dict[str, Any] | None:
    path = out / "states" / f"{scenario_id}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())
