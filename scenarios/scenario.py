"""A scenario is data: a workload of its system, a fault timeline, a recovery bound, the invariants of its system
to check, and what must be seen for the run to prove anything. The catalogues and incident files are YAML
documents loaded into these (scenarios.incident)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from scenarios.systems import DEFAULT_SYSTEM
from scenarios.verdicts import Exercised

Shell = Literal["sim", "native"]
SHELLS: tuple[Shell, ...] = ("sim", "native")


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
    workload: Any  # an instance of its system's workload_type
    faults: tuple[FaultStep, ...]
    recovery_bound_s: float
    exercised: Exercised
    invariants: tuple[str, ...]  # ids of its system's invariants (System.invariants) checked on a run
    shells: tuple[str, ...] = SHELLS
    why_not: dict[str, str] = field(default_factory=dict)  # shell -> why the scenario does not run there
    # Overrides of the system's policy for this scenario (System.check_overrides), in both shells: e.g. retry budgets
    # short enough for rows to go DEAD within the scenario's windows.
    policy: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the file it was loaded from
    system: str = DEFAULT_SYSTEM  # the system under test it runs (scenarios.systems)
    params: dict[str, Any] = field(default_factory=dict)  # the system's own knobs (the job system's variant...)

    def heal_time(self) -> float:
        return max((f.at + (f.duration or 0.0) for f in self.faults), default=0.0)
