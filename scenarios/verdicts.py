"""What every system's checks say, and the one shape of a system's invariants.

An invariant's checker is a function of what a run left, its *record* (the history and the final state, with what
the system needs to judge them: the Copilot's ``CheckContext``, the job system's ``JobsState``), to a
:class:`Verdict`. A system lists its invariants once, in an :class:`Invariants` table: id -> checker and one-line
title (its doc is the checker's docstring). The ids a scenario may name, the verdicts' ids and titles, and
`sortie invariants` come from that table. A scenario's expectation (:data:`Exercised`) says whether the run proved
anything at all."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from harness.history import History

HELD, VIOLATED, UNCHECKED = "held", "violated", "unchecked"

R = TypeVar("R")  # a system's record of one run, what its checkers read


@dataclass
class Violation:
    task_id: str | None  # what the violation is about: the task, the job, the process
    message: str
    ops: list[int] = field(default_factory=list)  # the history's operations to read

    def as_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "message": self.message, "ops": self.ops}


@dataclass
class Verdict:
    invariant: str
    title: str
    status: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "title": self.title, "status": self.status, "checked": self.checked,
                "violations": [v.as_json() for v in self.violations[:50]],
                "violation_count": len(self.violations), "note": self.note}


def judged(checked: int, violations: list[Violation], note: str = "") -> Verdict:
    """A checker's answer: held unless something was violated (its id and title come from the system's table)."""
    return Verdict("", "", VIOLATED if violations else HELD, checked, violations, note)


def unchecked(note: str) -> Verdict:
    """A checker's answer when this run cannot judge it (``note``: why)."""
    return Verdict("", "", UNCHECKED, note=note)


Checker = Callable[[R], Verdict]  # the verdict's id and title are the table's (judged, unchecked leave them blank)


@dataclass(frozen=True)
class Invariant(Generic[R]):
    id: str
    title: str  # one line, what must hold
    checker: Checker[R]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.checker.__doc__ or "")

    def __call__(self, record: R) -> Verdict:
        return dataclasses.replace(self.checker(record), invariant=self.id, title=self.title)


class Invariants(Mapping[str, Invariant[R]]):
    """A system's invariants by id, in the order they are checked and listed."""

    def __init__(self, table: Mapping[str, tuple[Checker[R], str]]) -> None:
        self._by_id = {i: Invariant(i, title, checker) for i, (checker, title) in table.items()}

    def __getitem__(self, invariant: str) -> Invariant[R]:
        return self._by_id[invariant]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._by_id)

    def check(self, record: R, invariants: Iterable[str] | None = None) -> list[Verdict]:
        """The verdicts of ``invariants`` (every one when None) on one run's record, in this table's order."""
        wanted = self.ids if invariants is None else set(invariants)
        return [inv(record) for i, inv in self._by_id.items() if i in wanted]


# A scenario's expectation: None when the run proves something, else why not (a NotFired when its fault never fired).
Exercised = Callable[[History, Any], str | None]


class NotFired(str):
    """A reason a run proves nothing because its fault never touched the system (the fault did not fire), as
    opposed to a plain reason: the fault fired but what the scenario expects of the recovery was not seen."""


FAULT_DID_NOT_FIRE, EXPECTATION_NOT_MET = "fault did not fire", "expectation not met"


def unexercised_kind(reason: str | None) -> str | None:
    """How a scenario's run failed to prove anything: FAULT_DID_NOT_FIRE, EXPECTATION_NOT_MET, or None."""
    if reason is None:
        return None
    return FAULT_DID_NOT_FIRE if isinstance(reason, NotFired) else EXPECTATION_NOT_MET
