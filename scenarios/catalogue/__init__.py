"""The scenario catalogues: the Copilot's (DESIGN.md §5) is one YAML incident file per scenario in this directory,
loaded in catalogue order (C, R, T, B, S; then by number); another system's lives in its package
(``System.catalogue_dir``) and loads the same way (``load_catalogue``)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from scenarios.incident import load_incident
from scenarios.scenario import ALL_INVARIANTS, FaultStep, Scenario
from scenarios.systems import DEFAULT_SYSTEM, load_system

__all__ = ["ALL_INVARIANTS", "CATALOGUE", "CATALOGUE_DIR", "FaultStep", "Scenario", "load_catalogue", "resolve"]

CATALOGUE_DIR = Path(__file__).resolve().parent


@cache
def load_catalogue(system: str = DEFAULT_SYSTEM) -> dict[str, Scenario]:
    """A system's catalogue by id, in its catalogue order (id prefixes, then numbers). A file that names another
    system, or an id given twice, is refused."""
    sys_ = load_system(system)
    groups = sys_.catalogue_order

    def order(s: Scenario) -> tuple[int, int, str]:
        m = re.fullmatch(r"([A-Z])(\d+)", s.id)
        return (groups.index(m[1]) if m and m[1] in groups else 99, int(m[2]) if m else 0, s.id)

    scenarios = [load_incident(p) for p in sorted(sys_.catalogue_dir.glob("*.yaml"))]
    by_id: dict[str, Scenario] = {}
    for s in sorted(scenarios, key=order):
        if s.system != system:
            raise ValueError(f"{s.source} is a scenario of system {s.system!r}, in the catalogue of {system!r}")
        if s.id in by_id:
            raise ValueError(f"scenario id {s.id} is in both {by_id[s.id].source} and {s.source}")
        by_id[s.id] = s
    return by_id


CATALOGUE: dict[str, Scenario] = load_catalogue(DEFAULT_SYSTEM)


def resolve(ref: str) -> Scenario:
    """A catalogue id (``R1``) or a path to an incident file."""
    if ref in CATALOGUE:
        return CATALOGUE[ref]
    if ref.endswith((".yaml", ".yml")) or Path(ref).exists():
        return load_incident(ref)
    raise KeyError(ref)
