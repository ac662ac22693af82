"""The Copilot's real stack for `sortie run` and `sortie selfcheck --stack native` (System.stack_runner): a provider's
stack (stack.providers: native processes, Docker containers or external services) with the reference's components,
and the catalogue's scenarios run on it by scenarios.stack_run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scenarios.systems import StackRequest, StackUnavailable

DEFAULT_TIME_FACTOR = 0.25  # the catalogue's fault windows, quartered: the native catalogue fits a CI run


class _Runner:
    def __init__(self, stack: Any, time_factor: float) -> None:
        from scenarios.stack_run import StackScenarioRunner

        self.stack, self.time_factor = stack, time_factor
        self._runner = StackScenarioRunner(stack, time_factor=time_factor)

    def run(self, scenario: Any, seed: int) -> Any:
        return self._runner.run(scenario, seed)

    def outside_pids(self) -> list[int]:
        """PostgreSQL's postmaster, if this stack started one (pg_ctl daemonises it: not sortie's child)."""
        pg = getattr(self.stack, "services", {}).get("postgres")
        pid = pg._postmaster_pid() if pg is not None and hasattr(pg, "_postmaster_pid") else None
        return [pid] if pid else []


@contextmanager
def stack_runner(req: StackRequest) -> Iterator[_Runner]:
    from scenarios.stack_run import STACK_POLICY
    from stack.native import NativeOptions
    from stack.providers import ProviderUnavailable, provider

    options = NativeOptions(seed=req.seed, policy=dict(STACK_POLICY), inject_bug=req.inject_bug or "")
    try:
        stack = provider(req.kind, req.run_dir, options, external_config=req.external_config,
                         allow_foreign_database=req.allow_foreign_database)
    except ProviderUnavailable as exc:  # nothing was started
        raise StackUnavailable(str(exc)) from None
    try:
        try:
            stack.start()
        except ProviderUnavailable as exc:  # e.g. an external database that is not Sortie's
            raise StackUnavailable(str(exc)) from None
        yield _Runner(stack, req.time_factor or DEFAULT_TIME_FACTOR)
    finally:
        stack.stop()
