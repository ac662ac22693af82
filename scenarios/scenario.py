"""A scenario (DESIGN.md §5) is data: a workload, a fault timeline, a recovery bound, the invariants to
check, and what must be seen for the run to prove anything. The catalogue and incident files are YAML
documents loaded into these (scenarios.incident)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scenarios.expectations import Exercised
from scenarios.workload import WorkloadSpec

ALL_INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9", "I10", "I11", "I12", "I13", "I14", "I15",
                  "I16", "I17", "I18", "I19", "I20", "I21", "I22", "I23", "I24", "I25", "I26",
                  "I27", "I28", "I29", "I30", "I31", "I32", "I33", "I34", "I35", "I36", "I37")
SHELLS = ("sim", "native")


@dataclass(frozen=True)
class FaultStep:
    """At ``at`` seconds, start ``fault`` (with params); stop it ``duration`` seconds later (None: a
    one-shot that arms a trigger or sets a knob)."""

    at: float
    fault: str
    duration: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    id: str
    slug: str
    title: str
    workload: WorkloadSpec | Any  # the system's workload dataclass (the Copilot's WorkloadSpec by default)
    faults: tuple[FaultStep, ...]
    recovery_bound_s: float
    exercised: Exercised
    shells: tuple[str, ...] = SHELLS
    invariants: tuple[str, ...] = ALL_INVARIANTS
    flight_median_s: float = 120.0
    stack_flight_median_s: float | None = None  # wall seconds on the real stack; None: the stack's own flights
    stack_cancel_delay_s: float | None = None  # a cancelled flight's return home there, wall seconds; None: the stack's
    why_not: dict[str, str] = field(default_factory=dict)  # shell -> why the scenario does not run there
    # Overrides of the reference's Policy for this scenario (reference.copilot.settings.policy_with), in both shells:
    # e.g.
    # retry budgets short enough for rows to go DEAD within the scenario's windows.
    policy: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the file it was loaded from
    system: str = "copilot"  # the system under test it runs (scenarios.systems)
    params: dict[str, Any] = field(default_factory=dict)  # the system's own knobs (the job system's variant...)

    def heal_time(self) -> float:
        return max((f.at + (f.duration or 0.0) for f in self.faults), default=0.0)
