"""Coverage targets: the dangerous places a test harness must be seen to reach (Antithesis's "sometimes"
assertions). A run that never killed a publisher between the broker's ack and its mark-sent has not tested
the consumers' dedup, however green it is; `sortie explore` counts how often each target is reached and
fails when one never is.

Two kinds, each declared next to the code it marks:
- a **point** (``reached(name)``): the core itself saw the dangerous thing happen (a conditional update that
  lost its race, a reconciler query that settled a task);
- a **window** (``Window``): the stretch of a worker's effects between one effect's answer and another's; a
  harness counts the target when a fault lands inside: the process is killed or paused there, or one of its
  effects fails there. The core only declares windows; the shell that performs the effects tracks them.

Counting is a process-wide counter, like ``reference.bugs``: a handful of dict increments, read by nobody
outside a harness (the real stack's processes count too, and never report it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

TARGETS: dict[str, str] = {}  # name -> what reaching it means
WINDOWS: list[Window] = []
_counts: Counter[str] = Counter()


def target(name: str, doc: str) -> str:
    """Declare a target (at import of the module that marks it); returns its name."""
    assert TARGETS.get(name, doc) == doc, f"coverage target {name!r} declared twice"
    TARGETS[name] = doc
    return name


def reached(name: str) -> None:
    _counts[name] += 1


@dataclass(frozen=True)
class Window:
    """``target`` is reached when a fault lands in a process of one of ``roles`` after one of the ``opens``
    effects answered and before one of the ``closes`` effects answered (effect names as crash points use
    them: reference.failpoints.effect_name)."""

    target: str
    roles: tuple[str, ...]
    opens: tuple[str, ...]
    closes: tuple[str, ...]


def window(name: str, doc: str, roles: tuple[str, ...], opens: tuple[str, ...], closes: tuple[str, ...]) -> str:
    WINDOWS.append(Window(target(name, doc), roles, opens, closes))
    return name


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Count the targets reached inside the block (one simulated run); the counter is filled on exit."""
    before = Counter(_counts)
    seen: Counter[str] = Counter()
    try:
        yield seen
    finally:
        seen.update({k: v - before[k] for k, v in _counts.items() if v > before[k]})
