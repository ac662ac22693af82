"""The scenario catalogue (DESIGN.md §5): one YAML incident file per scenario in this directory, loaded
in catalogue order (C, R, T, B, S; then by number)."""

from __future__ import annotations

import re
from pathlib import Path

from scenarios.incident import load_incident
from scenarios.scenario import ALL_INVARIANTS, FaultStep, Scenario

__all__ = ["ALL_INVARIANTS", "CATALOGUE", "CATALOGUE_DIR", "FaultStep", "Scenario", "resolve"]

CATALOGUE_DIR = Path(__file__).resolve().parent
_GROUPS = "CRTBS"


def _order(s: Scenario) -> tuple[int, int, str]:
    m = re.fullmatch(r"([A-Z])(\d+)", s.id)
    return (_GROUPS.index(m[1]) if m and m[1] in _GROUPS else 99, int(m[2]) if m else 0, s.id)


def _load() -> dict[str, Scenario]:
    scenarios = [load_incident(p) for p in sorted(CATALOGUE_DIR.glob("*.yaml"))]
    by_id: dict[str, Scenario] = {}
    for s in sorted(scenarios, key=_order):
        if s.id in by_id:
            raise ValueError(f"scenario id {s.id} is in both {by_id[s.id].source} and {s.source}")
        by_id[s.id] = s
    return by_id


CATALOGUE: dict[str, Scenario] = _load()


def resolve(ref: str) -> Scenario:
    """A catalogue id (``R1``) or a path to an incident file."""
    if ref in CATALOGUE:
        return CATALOGUE[ref]
    if ref.endswith((".yaml", ".yml")) or Path(ref).exists():
        return load_incident(ref)
    raise KeyError(ref)
