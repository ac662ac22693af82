"""The scenario catalogues: a system's is one YAML incident file per scenario in its ``System.catalogue_dir`` (the
package's catalogue/ directory, systems/NAME/catalogue/), loaded in its catalogue order (id prefixes, then numbers)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from scenarios.incident import IncidentError, Problem, load_incident, load_incidents
from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import DEFAULT_SYSTEM, load_system

__all__ = ["FaultStep", "Scenario", "load_catalogue", "resolve"]


@cache
def load_catalogue(system: str = DEFAULT_SYSTEM) -> dict[str, Scenario]:
    """A system's catalogue by id, in its catalogue order (id prefixes, then numbers). A malformed file, one that
    names another system, or an id given twice is refused: one IncidentError names every such mistake."""
    sys_ = load_system(system)
    groups = sys_.catalogue_order

    def order(s: Scenario) -> tuple[int, int, str]:
        m = re.fullmatch(r"([A-Z])(\d+)", s.id)
        return (groups.index(m[1]) if m and m[1] in groups else 99, int(m[2]) if m else 0, s.id)

    scenarios = load_incidents(sorted(sys_.catalogue_dir.glob("*.yaml")))  # every broken file's mistakes at once
    by_id: dict[str, Scenario] = {}
    problems = []
    for s in sorted(scenarios, key=order):
        if s.system != system:
            problems.append(Problem(s.source, None, "system", f"a scenario of system {s.system!r}, in the catalogue "
                                                              f"of {system!r}"))
        elif s.id in by_id:
            problems.append(Problem(s.source, None, "id", f"scenario id {s.id} is also {by_id[s.id].source}'s"))
        else:
            by_id[s.id] = s
    if problems:
        raise IncidentError(problems)
    return by_id


def resolve(ref: str, system: str = DEFAULT_SYSTEM) -> Scenario:
    """A catalogue id of ``system`` (``R1``) or a path to an incident file."""
    catalogue = load_catalogue(system)
    if ref in catalogue:
        return catalogue[ref]
    if ref.endswith((".yaml", ".yml")) or Path(ref).exists():
        return load_incident(ref)
    raise KeyError(ref)
