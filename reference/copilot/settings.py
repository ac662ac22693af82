"""Settings of the reference's processes, from the environment (one place, shared by every process),
and the factory that turns them into a Runtime with real adapters."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from reference.copilot.http.notify import STREAMS_PER_USER
from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.runtime import Runtime
from reference.copilot.states import TaskStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

TOPIC = "drone-task-events"


@dataclass(frozen=True)
class Settings:
    database_url: str
    rocketmq_endpoint: str = ""
    topic: str = TOPIC
    platform_url: str = ""
    platform_idempotency_key: bool = True
    platform_query: bool = True
    platform_connect_timeout_s: float = 1.0
    platform_read_timeout_s: float = 2.0
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_bucket: str = "sortie-reports"
    redis_url: str = ""
    token_secret: str = ""
    webhook_token: str = ""
    failpoint_file: str = ""  # crash points for fault injection (kernel.failpoints)
    history_dir: str = ""  # where each process records its operations for the harness (OpRecorder)
    policy: dict[str, Any] = field(default_factory=dict)  # overrides of Policy fields
    inject_bug: str = ""  # SORTIE_INJECT_BUG: a known defect switched on (reference.copilot.bugs), for selfcheck
    # A pooled connection idle this long is pinged before use (reference.copilot.db.ping_when_idle); 0: at every
    # checkout.
    db_ping_after_idle_s: float = 1.0
    server_timing: bool = False  # the API's answers carry Server-Timing (handler wall and CPU ms): load runs
    # Streams (GET /v1/stream) one user may hold at one server process, the API's and the stream tier's alike.
    streams_per_user: int = STREAMS_PER_USER
    # Streams one API process holds at most: each holds a gthread thread, so the rest must stay for requests
    # (the native stack sets half its threads; beyond it 503, and clients use the stream tier).
    api_max_streams: int = 4
    # A request whose headers or body stop arriving for this long is answered 408 and its thread freed (gunicorn
    # otherwise reads a stalled body for ever: reference.copilot.http.gunicorn_worker).
    api_read_timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, database: bool = True) -> Settings:
        """The settings the SORTIE_* environment gives; ``database=False`` for a process without one (the stream
        tier)."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"SORTIE_{f.name.upper()}")
            if raw is None:
                continue
            if f.name == "policy":
                values[f.name] = json.loads(raw)
            elif f.type in ("bool", bool):
                values[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif f.type in ("float", float):
                values[f.name] = float(raw)
            elif f.type in ("int", int):
                values[f.name] = int(raw)
            else:
                values[f.name] = raw
        if "database_url" not in values:
            if database:
                raise SystemExit("SORTIE_DATABASE_URL is required")
            values["database_url"] = ""
        return cls(**values)

    def as_env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "policy":
                out["SORTIE_POLICY"] = json.dumps(value)
            elif isinstance(value, bool):
                out[f"SORTIE_{f.name.upper()}"] = "true" if value else "false"
            else:
                out[f"SORTIE_{f.name.upper()}"] = str(value)
        return out

    def make_policy(self) -> Policy:
        return policy_with(self.policy)


# Policy fields whose overrides are merged key by key over a lower layer's, not replaced whole.
_MERGED_FIELDS = ("stale_after_s",)


def layered(*layers: dict[str, Any]) -> dict[str, Any]:
    """Policy overrides, later layers over earlier ones (the stack's, then a scenario's): a later layer's
    ``stale_after_s`` changes only the statuses it names, and a retry policy only the fields it names."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict) and (
                    key in _MERGED_FIELDS or key.endswith("_retry")):
                out[key] = {**out[key], **value}
            else:
                out[key] = value
    return out


def policy_with(overrides: dict[str, Any], base: Policy | None = None) -> Policy:
    """``base`` (the defaults) with overrides; retry policies and thresholds may be given as plain JSON. An unknown
    field or a malformed value raises ValueError."""
    values: dict[str, Any] = {}
    for key, value in overrides.items():
        try:
            if key.endswith("_retry") and isinstance(value, dict):  # the fields named change, as for thresholds
                base_retry = getattr(base or Policy(), key, None)
                values[key] = replace(base_retry, **value) if isinstance(base_retry, RetryPolicy) else \
                    RetryPolicy(**value)
            elif key == "stale_after_s":  # the statuses named change; the others keep the base's threshold
                values[key] = {**(base or Policy()).stale_after_s,
                               **{TaskStatus(k): float(v) for k, v in value.items()}}
            else:
                values[key] = value
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"policy.{key}: {err}") from None
    known = {f.name for f in fields(Policy)}
    if unknown := sorted(set(values) - known):
        raise ValueError(f"unknown policy field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return replace(base or Policy(), **values)


# Seed 000 §5.5: database access has its own timeouts, so an outage surfaces as an error, not a hang: connecting
# (libpq's connect_timeout, s), one statement, waiting for a lock, a transaction left idle (PostgreSQL, ms).
DB_CONNECT_TIMEOUT_S = 3
DB_SESSION_TIMEOUTS_MS = {"statement_timeout": 5000, "lock_timeout": 3000, "idle_in_transaction_session_timeout": 10000}


def database_engine(settings: Settings, role: str = "") -> Engine:
    """The process's engine: short transactions, a bounded pool, and the database's timeouts (PostgreSQL). Connections
    idle for a while are pinged before use (reference.copilot.db.ping_when_idle), not at every checkout."""
    from sqlalchemy import create_engine

    from reference.copilot.db import ping_when_idle

    kwargs: dict[str, Any] = {"pool_size": 5, "max_overflow": 5, "pool_timeout": 5}
    if settings.database_url.startswith("postgresql"):
        options = " ".join(f"-c {name}={ms}" for name, ms in DB_SESSION_TIMEOUTS_MS.items())
        kwargs["connect_args"] = {"connect_timeout": DB_CONNECT_TIMEOUT_S, "options": options}
        if role:  # names the process in pg_stat_activity (the harness's idle-in-transaction sampler, B10)
            kwargs["connect_args"]["application_name"] = f"sortie-{role}-{os.getpid()}"
    return ping_when_idle(create_engine(settings.database_url, **kwargs), settings.db_ping_after_idle_s)


def build_runtime(settings: Settings, *, role: str = "", platform: bool = False, broker: bool = False,
                  store: bool = False, notifier: bool = False, listen: bool = False) -> Runtime:
    """A Runtime over PostgreSQL (or SQLite) with the adapters a process asks for."""
    from sqlalchemy.orm import sessionmaker

    from reference.copilot import bugs

    bugs.activate(settings.inject_bug)  # validated: an unknown name stops the process here
    if role == "api" and bugs.active(bugs.PUBLISH_BEFORE_COMMIT):
        broker = True  # the defective confirm publishes by itself
    engine = database_engine(settings, role)
    runtime = Runtime(sessionmaker(engine, expire_on_commit=False))
    if settings.database_url.startswith("postgresql"):
        from kernel.runtime import autocommit_sessions

        runtime.autocommit_sessions = autocommit_sessions(engine)
    if settings.failpoint_file and role:
        from kernel.failpoints import FilePoints

        runtime.failpoints = FilePoints(settings.failpoint_file, role)
        runtime.install_holds(engine)
    if settings.history_dir and role:
        from reference.copilot.runtime import OpRecorder

        process = f"{role}-{os.getpid()}"
        runtime.recorder = OpRecorder(os.path.join(settings.history_dir, f"{process}.jsonl"), process)
    if platform:
        from reference.copilot.adapters.platform_http import HttpPlatformClient

        runtime.platform = HttpPlatformClient(
            settings.platform_url, connect_timeout=settings.platform_connect_timeout_s,
            read_timeout=settings.platform_read_timeout_s, idempotency_key=settings.platform_idempotency_key,
            query_by_request_id=settings.platform_query)
    if broker:
        from reference.copilot.adapters.broker_rocketmq import RocketMQBroker
        from reference.copilot.services.consumer import HANDLERS

        runtime.broker = RocketMQBroker(settings.rocketmq_endpoint, settings.topic,
                                        {g: set(h) for g, h in HANDLERS.items()})
    if store:
        from reference.copilot.adapters.objectstore_s3 import S3ObjectStore

        runtime.store = S3ObjectStore(settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key,
                                      settings.s3_bucket, timeout_s=5.0)
    if listen and settings.database_url.startswith("postgresql"):
        from reference.copilot.adapters.outbox_listen_pg import PgOutboxListener
        from reference.copilot.services.outbox import OUTBOX_CHANNEL

        runtime.outbox_listener = PgOutboxListener(settings.database_url, OUTBOX_CHANNEL,
                                                   application_name=f"sortie-{role or 'worker'}-listen-{os.getpid()}")
    if notifier and settings.redis_url:
        from reference.copilot.adapters.cache_redis import RedisNotifier

        runtime.notifier = RedisNotifier(settings.redis_url)
    return runtime
