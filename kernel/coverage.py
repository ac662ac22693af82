"""Coverage targets: the dangerous places a test harness must be seen to reach (Antithesis's "sometimes"
assertions). A run that never killed a publisher between the broker's ack and its mark-sent has not tested
the consumers' dedup, however green it is; `sortie explore` counts how often each target is reached and
fails when one never is.

Two kinds, each declared next to the code it marks:
- a **point** (``reached(name)``): the core itself saw the dangerous thing happen (a conditional update that
  lost its race, a reconciler query that settled a task);
- a **window** (``window(...)``): the stretch of a worker's effects between one effect's answer and another's;
  a harness counts the target when a fault lands inside: the process is killed or paused there, or one of its
  effects fails there. The core only declares windows; the shell that performs the effects tracks them.

Each system under test keeps its own ``Coverage`` (reference.copilot.coverage, reference.jobs.coverage), so one
system's explore
reports only its own targets. Counting is a process-wide counter, like the bug registries: a handful of dict
increments, read by nobody outside a harness (the real stack's processes count too, and never report it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Window:
    """``target`` is reached when a fault lands in a process of one of ``roles`` (none named: any process) after
    one of the ``opens`` effects answered and before one of the ``closes`` effects answered (effect names as crash
    points use them: kernel.effects.crash_name)."""

    target: str
    roles: tuple[str, ...]
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    outcomes: tuple[str, ...] = ()  # effects whose failure is the work's own outcome, not a fault (a job's handler)


@dataclass(eq=False)
class Coverage:
    """One system's coverage targets and their counts."""

    targets: dict[str, str] = field(default_factory=dict)  # name -> what reaching it means
    windows: list[Window] = field(default_factory=list)
    _counts: Counter[str] = field(default_factory=Counter)

    def target(self, name: str, doc: str) -> str:
        """Declare a target (at import of the module that marks it); returns its name."""
        assert self.targets.get(name, doc) == doc, f"coverage target {name!r} declared twice"
        self.targets[name] = doc
        return name

    def reached(self, name: str) -> None:
        self._counts[name] += 1

    def window(self, name: str, doc: str, opens: tuple[str, ...], closes: tuple[str, ...],
               roles: tuple[str, ...] = (), outcomes: tuple[str, ...] = ()) -> str:
        self.windows.append(Window(self.target(name, doc), roles, opens, closes, outcomes))
        return name

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        """Count the targets reached inside the block (one simulated run); the counter is filled on exit."""
        before = Counter(self._counts)
        seen: Counter[str] = Counter()
        try:
            yield seen
        finally:
            seen.update({k: v - before[k] for k, v in self._counts.items() if v > before[k]})
