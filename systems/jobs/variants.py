"""Which pool runs a job scenario: the pool's settings (seed 004 TaskCfg with a scenario's ``policy`` overrides) and
the repository variant, the fixed one unless an injected ``seed`` forces the seed-faithful one. Below both shells'
wiring (systems.jobs, systems.jobs.stack), which import it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reference.jobs import bugs
from reference.jobs.pool import PoolConfig

SEED = "seed"  # the whole seed-faithful variant, injectable like one bug

_forced: list[str] = []  # the variant an injected "bug" forces (the seed-faithful one)


def pool_config(overrides: dict[str, Any]) -> PoolConfig:
    """The pool's settings (seed 004 TaskCfg) with a scenario's ``policy`` overrides; ValueError for an unknown or
    malformed one."""
    known = {f.name for f in dataclasses.fields(PoolConfig)}
    if unknown := sorted(set(overrides) - known):
        raise ValueError(f"unknown pool setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return dataclasses.replace(PoolConfig(), **{k: type(getattr(PoolConfig(), k))(v) for k, v in overrides.items()})
    except (TypeError, ValueError) as err:
        raise ValueError(f"policy: {err}") from None


def forced_variant() -> str | None:
    """The variant an injected ``seed`` forces on every scenario, or None."""
    return _forced[-1] if _forced else None


@contextmanager
def injected(name: str) -> Iterator[None]:
    """``seed``: the seed-faithful variant; any other name: one defect of reference.jobs.bugs in the fixed variant."""
    if name != SEED:
        with bugs.BUGS.injected(name):
            yield
        return
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()
