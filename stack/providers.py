"""Stack providers: one interface, four kinds, chosen by ``--stack`` or ``SORTIE_STACK``.

A provider starts its parts, waits until each is really ready (a query, a produce/receive round trip, a
bucket round trip, each component's health endpoint), hands out :class:`~stack.native.Endpoints`, and
tears down what it started, also when start fails half-way or the run is interrupted.

============ ==========================================================================================
kind         what it is
============ ==========================================================================================
embedded     the deterministic simulation (``sortie simulate``): SQLite, the broker model, the platform
             model, in one process and simpy virtual time. It has no endpoints and no processes, so it is
             not a ``Stack`` here: :func:`provider` refuses it and points to ``sortie simulate``.
native       :class:`stack.native.NativeStack`: PostgreSQL, Redis, RocketMQ, versitygw and Toxiproxy
             installed and started by the project on loopback.
containers   :class:`stack.containers.ContainersStack`: the same dependencies as Docker containers
             (testcontainers); needs a reachable Docker engine.
external     :class:`stack.external.ExternalStack`: dependencies the user already runs, from a YAML/JSON
             file or ``SORTIE_EXTERNAL_*`` variables; Sortie starts only the components.
============ ==========================================================================================

Every kind runs the system's components (its :class:`~stack.native.Application`) as host processes and
puts a Toxiproxy link in front of each dependency. That wiring lives once, in :class:`NativeStack`
(components, supervision, fault hooks) and in stack.app_database (the application's schema and role on a
database); the containers and external providers subclass ``NativeStack`` and replace only
``_start_dependencies``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from kernel.failpoints import CrashPoint
from stack.common import ProviderUnavailable
from stack.native import Application, Endpoints

KINDS = ("native", "containers", "external")
EMBEDDED = "embedded"
ENV_VAR = "SORTIE_STACK"


class Stack(Protocol):
    """What the CLI and the scenario runner use of a provider (NativeStack and its subclasses)."""

    endpoints: Endpoints
    app: Application
    components: dict[str, Any]
    services: dict[str, Any]
    toxiproxy_client: Any

    @property
    def options(self) -> Any: ...  # read only (NativeStack's is its application's)

    def start(self) -> Endpoints: ...
    def stop(self) -> None: ...
    def status(self) -> dict[str, Any]: ...
    def arm_crash_points(self, points: list[CrashPoint]) -> None: ...
    def clear_failpoints(self) -> None: ...
    def read_history(self) -> list[dict[str, Any]]: ...
    def clear_history(self) -> None: ...
    def log_sizes(self) -> dict[str, int]: ...
    def logs_since(self, sizes: dict[str, int]) -> dict[str, str]: ...
    def object_digests(self) -> dict[str, str]: ...


def default_kind() -> str:
    return os.environ.get(ENV_VAR) or "native"


def provider(kind: str | None, run_dir: Path, app: Application, *,
             external_config: str | Path | None = None, allow_foreign_database: bool = False) -> Stack:
    """The stack of ``kind`` (default: ``$SORTIE_STACK`` or native) for the application ``app``, not started yet. Raises
    :class:`ProviderUnavailable` with a one-line reason when the kind cannot run here; nothing is
    started by this call."""
    kind = kind or default_kind()
    if kind == EMBEDDED:
        raise ProviderUnavailable("the embedded provider is the in-process simulation: use `sortie simulate`")
    if kind == "native":
        from stack.native import NativeStack

        return NativeStack(run_dir, app)
    if kind == "containers":
        from stack.containers import ContainersStack, docker_available

        ok, reason = docker_available()
        if not ok:
            raise ProviderUnavailable(f"the containers provider needs a Docker engine: {reason}")
        return ContainersStack(run_dir, app)
    if kind == "external":
        from stack.external import ExternalConfig, ExternalStack

        config = ExternalConfig.load(external_config)
        return ExternalStack(run_dir, app, config, allow_foreign_database=allow_foreign_database)
    raise ProviderUnavailable(f"unknown stack provider {kind!r} (choose from {', '.join(KINDS)})")
