"""Known defects of a reference that can be switched on to show that the harness catches them (`sortie selfcheck`):
each is a small guarded branch where its rule lives (``if BUGS.active(name)``), skipped when none is on. One
registry per system under test (the job system's: reference.jobs.bugs; the Copilot keeps its own,
reference.copilot.bugs)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    name: str
    title: str
    rule: str  # the rule the defect breaks, where it is written
    where: str  # the guarded branch(es)
    description: str  # what the defective code does
    invariants: tuple[str, ...]  # the invariant(s) expected to catch it
    # catalogue scenarios expected to catch it: in simulation, and on the real stack (`sortie selfcheck --stack native
    # --named`) those that run there only
    scenarios: tuple[str, ...]


class BugRegistry:
    """A process-wide switch over one system's known defects."""

    def __init__(self, bugs: Iterable[Bug]) -> None:
        self.bugs: dict[str, Bug] = {b.name: b for b in bugs}
        self._active: frozenset[str] = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.bugs)

    def active(self, name: str) -> bool:
        return name in self._active

    def parse(self, value: str | Iterable[str] | None) -> frozenset[str]:
        """Names from a comma-separated string or an iterable; KeyError for one the registry does not have."""
        if value is None:
            return frozenset()
        raw = value.split(",") if isinstance(value, str) else list(value)
        names = frozenset(n.strip() for n in raw if n and n.strip())
        if unknown := sorted(names - set(self.bugs)):
            raise KeyError(f"unknown bug(s) {', '.join(unknown)}; known: {', '.join(self.bugs)}")
        return names

    def activate(self, value: str | Iterable[str] | None) -> frozenset[str]:
        """Switch these defects on for the rest of the process (a worker started with one); KeyError if unknown."""
        self._active = self.parse(value)
        return self._active

    @contextmanager
    def injected(self, value: str | Iterable[str] | None) -> Iterator[frozenset[str]]:
        """Run a block with exactly these defects on, restoring the previous switch after."""
        previous, self._active = self._active, self.parse(value)
        try:
            yield self._active
        finally:
            self._active = previous
