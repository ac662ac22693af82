"""The service the job handlers call, modelled for the simulation (the platform simulator plays it on the stack):
work takes time, may fail, and is started once per idempotency key. Its ledger is the ground truth of what was
done, as the platform's ledger is for flights: every call, and each key's effect (a finished, successful work).

Semantics: a call with a key the service has not seen starts a work of ``work_s`` (the payload's, else a draw)
that succeeds or fails (``fail_rate``, or always for ``failing_keys``: a poison job); a call with the key of a
running work joins it; a call after a failed work starts a new one (a retry); a call after a finished one gets its
result, no second effect. ``dedupe=False`` models a service without idempotency keys: every call starts a work.
A caller that waits returns when its work ends; with ``wait_s`` it returns False when the work still runs then."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from reference.jobs.pool import Execute, ServiceError

# What a broken agent answers for a job whose work always fails: its whole stack, longer than the 256 characters
# seed 004 lets a failure's reason keep ("≤256 字符 ... 禁止塞堆栈全文").
AGENT_STACK = "Traceback (most recent call last):\n" + "".join(
    f'  File "agent/handlers/step_{i}.py", line {10 * i}, in run\n    result = next_step(payload)\n' for i in range(8)
) + "RuntimeError: the inspection model refused the payload"


@dataclass
class _Work:
    key: str
    started_at: float
    ends_at: float
    ok: bool
    done: simpy.Event


@dataclass
class ServiceModel:
    env: simpy.Environment
    rng: random.Random
    work_median_s: float = 5.0
    work_sigma: float = 0.5
    fail_rate: float = 0.0
    failing_keys: frozenset[str] = frozenset()
    hanging_keys: frozenset[str] = frozenset()  # work that never ends (a handler that hangs)
    crashing_keys: frozenset[str] = frozenset()  # work that kills the worker that runs it (a segfault, an OOM)
    fail_first: dict[str, int] = field(default_factory=dict)  # key -> how many of its first works fail
    dedupe: bool = True
    down: bool = False
    latency_s: float = 0.01
    ledger: list[dict[str, Any]] = field(default_factory=list)  # every call
    effects: Counter[str] = field(default_factory=Counter)  # key -> successful works (the effect)
    on_crash: Any = None  # the shell's kill of a process (raises there): a crashing job's worker dies
    _works: dict[str, _Work] = field(default_factory=dict)

    def _start(self, effect: Execute) -> _Work:
        asked = effect.payload.get("work_s") if isinstance(effect.payload, dict) else None
        seconds = float(asked) if isinstance(asked, int | float) and asked > 0 else \
            self.work_median_s * math.exp(self.work_sigma * self.rng.gauss(0.0, 1.0))
        if effect.key in self.hanging_keys:
            seconds = math.inf
        ok = effect.key not in self.failing_keys and self.rng.random() >= self.fail_rate
        if self.fail_first.get(effect.key, 0) > 0:
            self.fail_first[effect.key] -= 1
            ok = False
        work = _Work(effect.key, self.env.now, self.env.now + seconds, ok, self.env.event())
        if math.isfinite(seconds):
            self.env.process(self._finish(work, seconds))
        return work

    def _finish(self, work: _Work, seconds: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(seconds)
        if work.ok:
            self.effects[work.key] += 1
        if self._works.get(work.key) is work and not work.ok:
            del self._works[work.key]  # a failed work: the next call tries again
        work.done.succeed()

    def perform(self, process: str, effect: Execute) -> Generator[Any, Any, bool]:
        """The simulation's performer of Execute (SimWorld.performers)."""
        env = self.env
        call = {"at": env.now, "process": process, "job_id": effect.job_id, "key": effect.key,
                "owner": effect.owner, "token": effect.token}
        yield env.timeout(self.latency_s)
        if self.down:
            self.ledger.append({**call, "outcome": "unavailable"})
            raise ServiceError("service unavailable")
        if effect.key in self.crashing_keys and self.on_crash is not None:
            self.ledger.append({**call, "outcome": "crashed the worker"})
            self.on_crash(process)
        work = self._works.get(effect.key) if self.dedupe else None
        if work is None or (work.done.triggered and not work.ok):
            work = self._start(effect)
            if self.dedupe:
                self._works[effect.key] = work
            self.ledger.append({**call, "outcome": "started", "ends_at": work.ends_at})
        else:
            self.ledger.append({**call, "outcome": "joined"})
        if not work.done.triggered:
            if effect.wait_s is None:
                yield work.done
            else:
                yield work.done | env.timeout(effect.wait_s)
                if not work.done.triggered:
                    return False
        if not work.ok and work.key in self.failing_keys:  # an agent that answers with its whole stack (J19)
            raise ServiceError(f"the work failed: {AGENT_STACK}")
        if not work.ok:
            raise ServiceError("the work failed")
        return True
