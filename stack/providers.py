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

Every kind runs the reference components and the platform simulator as host processes and puts a
Toxiproxy link in front of each dependency. That wiring lives once, in :class:`NativeStack` (components,
supervision, fault hooks) and in the functions below (database migration and application role, broker
provisioning); the containers and external providers subclass ``NativeStack`` and replace only
``_start_dependencies``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Protocol

from kernel.failpoints import CrashPoint
from stack.native import APP_ROLE, Endpoints, NativeOptions

KINDS = ("native", "containers", "external")
EMBEDDED = "embedded"
ENV_VAR = "SORTIE_STACK"


class ProviderUnavailable(RuntimeError):
    """The chosen provider cannot run here (no Docker engine, no external configuration, ...). The
    message is one line meant for the user."""


class Stack(Protocol):
    """What the CLI and the scenario runner use of a provider (NativeStack and its subclasses)."""

    endpoints: Endpoints
    options: NativeOptions
    components: dict[str, Any]
    services: dict[str, Any]
    toxiproxy_client: Any

    def start(self) -> Endpoints: ...
    def stop(self) -> None: ...
    def status(self) -> dict[str, Any]: ...
    def arm_crash_points(self, points: list[CrashPoint]) -> None: ...
    def clear_failpoints(self) -> None: ...
    def set_platform_capabilities(self, idempotency_key: bool, query: bool) -> None: ...
    def read_history(self) -> list[dict[str, Any]]: ...
    def clear_history(self) -> None: ...
    def log_sizes(self) -> dict[str, int]: ...
    def logs_since(self, sizes: dict[str, int]) -> dict[str, str]: ...
    def object_digests(self) -> dict[str, str]: ...


def default_kind() -> str:
    return os.environ.get(ENV_VAR) or "native"


def provider(kind: str | None, run_dir: Path, options: NativeOptions | None = None, *,
             external_config: str | Path | None = None, allow_foreign_database: bool = False) -> Stack:
    """The stack of ``kind`` (default: ``$SORTIE_STACK`` or native), not started yet. Raises
    :class:`ProviderUnavailable` with a one-line reason when the kind cannot run here; nothing is
    started by this call."""
    kind = kind or default_kind()
    if kind == EMBEDDED:
        raise ProviderUnavailable("the embedded provider is the in-process simulation: use `sortie simulate`")
    if kind == "native":
        from stack.native import NativeStack

        return NativeStack(run_dir, options)
    if kind == "containers":
        from stack.containers import ContainersStack, docker_available

        ok, reason = docker_available()
        if not ok:
            raise ProviderUnavailable(f"the containers provider needs a Docker engine: {reason}")
        return ContainersStack(run_dir, options)
    if kind == "external":
        from stack.external import ExternalConfig, ExternalStack

        config = ExternalConfig.load(external_config)
        return ExternalStack(run_dir, options, config, allow_foreign_database=allow_foreign_database)
    raise ProviderUnavailable(f"unknown stack provider {kind!r} (choose from {', '.join(KINDS)})")


# ---------------------------------------------------------------------- wiring shared by every provider


class ForeignDatabase(ProviderUnavailable):
    """The database holds tables but is not a Sortie database: migrating it could damage someone's data."""


def check_database_is_ours(admin_url: str) -> None:
    """Refuse a non-empty database without Sortie's Alembic history (tables of someone else)."""
    from sqlalchemy import create_engine, inspect, text

    from reference.copilot.migrations import current_heads

    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if not tables:
                return
            if "alembic_version" in tables:
                rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
                ours = _our_revisions()
                if rev and all(r in ours for r in rev):
                    return
                raise ForeignDatabase(f"the database has an Alembic history that is not Sortie's ({rev}; Sortie "
                                      f"knows {sorted(ours)}, heads {list(current_heads())})")
            sample = ", ".join(sorted(tables)[:5])
            raise ForeignDatabase(f"the database is not empty and not a Sortie database ({len(tables)} tables: "
                                  f"{sample}...); pass --allow-foreign-database to migrate it anyway")
    finally:
        engine.dispose()


def _our_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from reference.copilot.migrations import alembic_config

    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def prepare_database(admin_url: str, app_password: str | None = None, role: str = APP_ROLE) -> str:
    """Alembic ``upgrade head`` as the schema owner, then the application role (SELECT/INSERT only on the
    audit log). Returns the role's password (generated unless given)."""
    from sqlalchemy import create_engine

    from reference.copilot.migrations import upgrade
    from reference.copilot.migrations.roles import create_app_role

    upgrade(admin_url)
    password = app_password or secrets.token_hex(12)
    admin = create_engine(admin_url)
    try:
        with admin.begin() as conn:
            create_app_role(conn, role, password)
    finally:
        admin.dispose()
    return password


def app_database_url(host_port: str, password: str, database: str, role: str = APP_ROLE) -> str:
    from urllib.parse import quote

    return f"postgresql+psycopg://{quote(role, safe='')}:{quote(password, safe='')}@{host_port}/{database}"


def provision_broker(admin: Any) -> None:
    """The reference's topic, consumer groups, their dead-letter topics and readers (stack.rocketmq.provision)."""
    from reference.copilot.services.consumer import HANDLERS
    from reference.copilot.settings import TOPIC
    from stack.rocketmq import provision

    provision(admin, TOPIC, list(HANDLERS))
