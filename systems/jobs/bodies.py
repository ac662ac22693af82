"""The request bodies the harness's clients send the job API (reference.jobs.http.app): the load's missions."""

from __future__ import annotations

from typing import Any


def mission_request(mission_id: str, width: int) -> dict[str, Any]:
    """The body of a load mission: survey -> ``width`` inspects (hard) -> report (hard from each) -> notify (soft)."""
    inspects = [f"inspect-{i}" for i in range(1, width + 1)]
    steps = [{"name": "survey", "type": "survey", "timeout_s": 120},
             *({"name": n, "type": "inspect"} for n in inspects),
             {"name": "report", "type": "report"}, {"name": "notify", "type": "report"}]
    edges = [*([n, "survey", "hard"] for n in inspects), *(["report", n, "hard"] for n in inspects),
             ["notify", "report", "soft"]]
    return {"id": mission_id, "steps": steps, "edges": edges}
