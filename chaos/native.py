"""Faults on the real stack, by the catalogue's names: Toxiproxy link cuts, the simulator's fault
control, crash points in the workers (SIGKILL right after an effect; the stack's supervisor restarts
them), SIGSTOP/SIGCONT, and a PostgreSQL trigger that fails inserts inside the transaction."""

from __future__ import annotations

import threading
from typing import Any

import requests
from sqlalchemy import Engine, text

# Scenario fault name -> crash point in a worker (reference.runtime.Failpoints) and the worker it goes to.
FAILPOINTS = {
    "kill-publisher-after-publish": ("publisher", "publish"),
    "kill-dispatcher-after-create": ("dispatcher", "create_flight"),
    "kill-consumer-before-ack": ("dispatcher", "consume.task_created"),
    "kill-api-after-create-commit": ("api", "confirm.create"),
}
# Scenario fault name -> Toxiproxy links disabled for the window.
LINK_CUTS = {
    "broker-outage": ("rocketmq",),
    "db-outage": ("postgres",),
    "platform-partition": ("platform", "webhook"),
    "object-store-outage": ("s3",),
}


class NativeNemesis:
    def __init__(self, stack: Any, admin: Engine, time_factor: float) -> None:
        self.stack, self.admin, self.factor = stack, admin, time_factor
        self.ep = stack.endpoints
        self.install_fault_triggers()

    def install_fault_triggers(self) -> None:
        """Harness objects, not the application's schema: a row in sortie_fault makes every INSERT into
        that table fail with a database error (and roll its transaction back)."""
        with self.admin.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS sortie_fault (target text PRIMARY KEY)"))
            conn.execute(text("GRANT SELECT ON sortie_fault TO PUBLIC"))
            conn.execute(text("""
                CREATE OR REPLACE FUNCTION sortie_fault_check() RETURNS trigger AS $$
                BEGIN
                  IF EXISTS (SELECT 1 FROM sortie_fault WHERE target = TG_TABLE_NAME) THEN
                    RAISE EXCEPTION 'injected fault: insert into % refused', TG_TABLE_NAME
                      USING ERRCODE = '53000';  -- insufficient_resources: an OperationalError
                  END IF;
                  RETURN NEW;
                END $$ LANGUAGE plpgsql"""))
            for table in ("task_event_outbox",):
                conn.execute(text(f"DROP TRIGGER IF EXISTS sortie_fault_{table} ON {table}"))
                conn.execute(text(f"CREATE TRIGGER sortie_fault_{table} BEFORE INSERT ON {table} "
                                  "FOR EACH ROW EXECUTE FUNCTION sortie_fault_check()"))

    def _resume_paused(self, after_s: float, count: int) -> None:
        """Watch the dispatchers; each one found stopped gets SIGCONT ``after_s`` seconds later."""
        import time

        seen: set[int] = set()
        deadline = time.monotonic() + 600
        while len(seen) < count and time.monotonic() < deadline:
            for name, comp in list(self.stack.components.items()):
                pid = comp.pid
                if name.startswith("dispatcher") and pid and pid not in seen and _stopped(pid):
                    seen.add(pid)
                    threading.Timer(after_s, lambda p=pid: _cont(p)).start()
            time.sleep(0.1)

    def apply(self, fault: str, params: dict[str, Any], *, on: bool) -> None:
        """Start (on) or stop one fault of the catalogue on the running stack."""
        if fault == "platform":
            if on:
                if "idempotency_key" in params or "query_supported" in params:
                    # A platform without them is deployed knowing so: the reference is configured to match,
                    # before the platform changes (a dispatcher still assuming a key would resend).
                    self.stack.set_platform_capabilities(bool(params.get("idempotency_key", True)),
                                                         bool(params.get("query_supported", True)))
                requests.put(f"{self.ep.platform_control_url}/control/faults", json=params,
                             timeout=10).raise_for_status()
        elif fault in LINK_CUTS:
            for link in LINK_CUTS[fault]:
                self.stack.toxiproxy_client.set_enabled(link, not on)
        elif fault == "db-error":
            # A real error raised by PostgreSQL inside the transaction (a harness trigger), as in C1.
            with self.admin.begin() as conn:
                for table in params.get("tables", []):
                    if on:
                        conn.execute(text("INSERT INTO sortie_fault (target) VALUES (:t) ON CONFLICT DO NOTHING"),
                                     {"t": table})
                    else:
                        conn.execute(text("DELETE FROM sortie_fault WHERE target = :t"), {"t": table})
        elif fault == "redis-loss":
            redis = self.stack.services["redis"]
            if on:
                redis.flushall()
                redis.stop()
            else:
                redis.start()
        elif fault == "duplicate-delivery":
            pass  # the broker's redelivery is driven by the kill-consumer-before-ack crash point
        elif fault in FAILPOINTS:
            if on:
                role, point = FAILPOINTS[fault]
                self.stack.set_failpoint(role, point, int(params.get("count", 1)))
        elif fault == "pause-dispatcher-after-create":
            if on:  # the dispatcher SIGSTOPs itself after the platform accepted; SIGCONT comes later
                count = int(params.get("count", 1))
                self.stack.set_failpoint("dispatcher", "create_flight", count, action="stop")
                threading.Thread(target=self._resume_paused, args=(float(params["seconds"]) * self.factor, count),
                                 name="resume-paused", daemon=True).start()
        else:
            raise ValueError(f"fault {fault!r} has no real-stack form")


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _cont(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
