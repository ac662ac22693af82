"""Sortie's exit codes, one table for every verb (README, "Exit codes"): CI and users branch on them.

    0  all held: every invariant (and, where the verb has them, every expectation and SLO)
    1  an invariant was violated (or a scenario failed: its fault did not fire, its expectation was not met;
       selfcheck: a bug no scenario caught; explore --bug: the bug was not found)
    2  a usage or input error: an unknown option value, a malformed incident file, a refused operator request
    3  an SLO missed or a --baseline regression (load)
    4  the environment is missing something: a server binary, Docker, a running stack, an extra's package
    5  a harness error: a bug of Sortie's own (the traceback is printed), or a measurement that failed
  130  stopped by Ctrl-C (what finished is kept where the verb says so)"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import click

OK, VIOLATED, USAGE, REGRESSION, ENVIRONMENT, HARNESS, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

TABLE = {
    OK: "all held",
    VIOLATED: "an invariant was violated",
    USAGE: "a usage or input error",
    REGRESSION: "an SLO missed or a baseline regression",
    ENVIRONMENT: "the environment is missing something",
    HARNESS: "a harness error",
    INTERRUPTED: "stopped by Ctrl-C",
}


class InputError(click.ClickException):
    """A file or value the verb cannot use (a malformed incident file, a run directory without its files, a
    request the API refused): exit 2, one line."""

    exit_code = USAGE


class EnvironmentMissing(click.ClickException):
    """Something the verb needs is not here (a binary, a Docker engine, a running stack, a package): exit 4."""

    exit_code = ENVIRONMENT


class HarnessFailure(click.ClickException):
    """Sortie itself failed (a bug of the harness, not of the system under test): exit 5."""

    exit_code = HARNESS


class SortieGroup(click.Group):
    """The CLI's group: an exception that escapes a verb is a harness error (exit 5, with its traceback), never
    the 1 that means a violated invariant; a missing tool or binary (stack.common.MissingDependency) or a stack a
    system's verb needs (scenarios.systems.StackUnavailable) is exit 4; a request a system refused is exit 2 (the
    verb printed the answer)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            from scenarios.systems import RequestRefused, StackUnavailable
            from stack.common import MissingDependency

            if isinstance(exc, MissingDependency | StackUnavailable):  # a binary not installed, a stack not up
                raise EnvironmentMissing(str(exc)) from None
            if isinstance(exc, ModuleNotFoundError) and (command := install_command(exc.name or "")):
                raise EnvironmentMissing(f"the Python package {exc.name!r} is not installed here: {command}") from None
            if isinstance(exc, RequestRefused):
                raise click.exceptions.Exit(USAGE) from None
            import traceback

            traceback.print_exc()
            raise HarnessFailure(f"harness error: {type(exc).__name__}: {exc} (a bug of Sortie's: the traceback "
                                 "is above)") from None


def install_command(module: str) -> str | None:
    """The command that installs the package of (top-level) ``module`` into this virtualenv, read from Sortie's own
    requirements: the base install for a base requirement, else the extra that brings it (the largest, when
    several do: the stack's over the postgres one). None when no requirement of Sortie's provides it."""
    top = module.split(".")[0].lower()
    if not top:
        return None
    extras: dict[str | None, int] = {}
    providers: list[str | None] = []
    for req in metadata.requires("sortie") or []:
        name = re.match(r"[A-Za-z0-9._-]+", req)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        which = extra.group(1) if extra else None
        extras[which] = extras.get(which, 0) + 1
        if name and re.sub(r"[-.]", "_", name.group(0).lower()).startswith(top):
            providers.append(which)
    if not providers:
        return None
    root = Path(__file__).resolve().parents[1]  # the checkout (an editable install, as scripts/env.sh makes)
    best = None if None in providers else max(providers, key=lambda e: extras[e])
    target = f"{root}[{best}]" if best else str(root)
    return f"{sys.executable} -m pip install -e '{target}'"
