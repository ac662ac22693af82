"""Faults on the real stack, by the catalogue's names: Toxiproxy link cuts, the simulator's fault
control, crash points in the workers (SIGKILL right after an effect; the stack's supervisor restarts
them), SIGSTOP/SIGCONT, and a PostgreSQL trigger that fails inserts inside the transaction."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import requests
from sqlalchemy import Engine, text

from chaos.crashpoints import CRASH_FAULTS, GENERIC, crash_points, is_crash_fault
from harness.history import AIRSPACE, FAIL, INFO, INVOKE, NEMESIS, OK, History
from simulator.model import platform_defaults

# Scenario fault name -> Toxiproxy links disabled for the window.
LINK_CUTS = {
    "broker-outage": ("rocketmq",),
    "db-outage": ("postgres",),
    "platform-partition": ("platform", "webhook"),
    "object-store-outage": ("s3",),
    "stream-disconnect": ("api",),  # the clients' link to the API: open SSE streams drop, reconnects fail
}
NATIVE_FAULTS = frozenset({*CRASH_FAULTS, *GENERIC, *LINK_CUTS, "platform", "db-error", "redis-loss",
                           "duplicate-delivery", "kill-worker", "db-latency", "close-airspace",
                           "redrive-dead-letters", "audit-tamper", "toxic", "stop-service", "restart-process",
                           "pause-process"})
FAULT_TABLES = ("task_event_outbox", "processed_event")  # tables whose inserts a db-error fault can fail


class NativeNemesis:
    def __init__(self, stack: Any, admin: Engine, time_factor: float) -> None:
        self.stack, self.admin, self.factor = stack, admin, time_factor
        self.ep = stack.endpoints
        self.install_fault_triggers()
        self.history: History | None = None
        self.now: Callable[[], float] = time.monotonic
        self._windows: dict[str, threading.Event] = {}

    def attach(self, history: History, now: Callable[[], float]) -> None:
        """Where the nemesis records what it did itself (kills, re-drives, refused tampering)."""
        self.history, self.now = history, now

    def _record(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        if self.history is not None:
            self.history.add(self.now(), process, type_, f, value)

    def _window(self, fault: str, on: bool, loop: Callable[[threading.Event], None]) -> None:
        """Run ``loop(stop)`` in a thread while the fault's window is open."""
        if on:
            stop = self._windows[fault] = threading.Event()
            threading.Thread(target=loop, args=(stop,), name=fault, daemon=True).start()
        elif fault in self._windows:
            self._windows.pop(fault).set()

    def _kill_workers(self, roles: tuple[str, ...], every_s: float, stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            victims = sorted(name for name, c in self.stack.components.items() if name.startswith(roles) and c.pid)
            if victims:
                name = victims[n % len(victims)]
                self._record(NEMESIS, INFO, "kill", {"process": name, "why": "kill-worker"})
                self.stack.components[name].kill()  # the stack's supervisor restarts it
                n += 1
            stop.wait(every_s)

    def _airspace(self, sites: int, *, open_: bool) -> None:
        """Close or reopen the airspace over the first ``sites`` areas, and record which, and when, in the
        history (I12). The time brackets the change on the side that keeps the check sound: a closure is
        recorded after it committed (a pre-flight check that started later must see it), a reopening before
        it starts (a check that finished earlier cannot have seen it)."""
        with self.admin.begin() as conn:
            areas = [str(a) for a in conn.execute(text("SELECT id FROM site_area ORDER BY id LIMIT :n"),
                                                  {"n": sites}).scalars()]
        if open_:
            self._record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": True})
        with self.admin.begin() as conn:
            conn.execute(text("UPDATE site_area SET airspace_open = :open WHERE id = ANY(:ids)"),
                         {"open": open_, "ids": areas})
        if not open_:
            self._record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": False})

    def _republish(self, prob: float, stop: threading.Event) -> None:
        """Duplicate delivery on the real broker: a share of freshly published events is put back in the
        outbox, so the publisher sends them again (same event id) and both dispatchers may race on them."""
        import random

        rng, seen = random.Random(7), set()
        while not stop.wait(0.2):
            with self.admin.begin() as conn:
                rows = conn.execute(text("SELECT id FROM task_event_outbox WHERE status = 'SENT' AND "
                                         "sent_at > now() - interval '5 seconds'")).scalars().all()
                again = [r for r in rows if r not in seen and rng.random() < prob]
                seen.update(rows)
                if again:
                    conn.execute(text("UPDATE task_event_outbox SET status = 'PENDING', available_at = now() "
                                      "WHERE id = ANY(:ids)"), {"ids": again})
            for event_id in again:
                self._record(NEMESIS, INFO, "republish", {"event_id": str(event_id)})

    def _tamper_audit(self) -> None:
        """S5: the application role tries to rewrite and erase the audit log; PostgreSQL must refuse."""
        from sqlalchemy import create_engine
        from sqlalchemy.exc import DBAPIError

        app = create_engine(self.ep.database_url)
        try:
            for f, stmt in (("audit-update", "UPDATE task_audit_log SET actor = 'nobody'"),
                            ("audit-delete", "DELETE FROM task_audit_log")):
                self._record("attacker-db", INVOKE, f, {"expect": ["INSUFFICIENT_PRIVILEGE"]})
                try:
                    with app.begin() as conn:
                        n = conn.execute(text(stmt)).rowcount
                except DBAPIError as err:
                    code = type(err.orig).__name__ if err.orig is not None else "DBAPIError"
                    sqlstate = getattr(err.orig, "sqlstate", None)
                    self._record("attacker-db", FAIL, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "sqlstate": sqlstate,
                                                          "code": "INSUFFICIENT_PRIVILEGE" if sqlstate == "42501"
                                                          else _snake(code)})
                else:
                    self._record("attacker-db", OK, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "rows": n})
        finally:
            app.dispose()

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
            for table in FAULT_TABLES:
                conn.execute(text(f"DROP TRIGGER IF EXISTS sortie_fault_{table} ON {table}"))
                conn.execute(text(f"CREATE TRIGGER sortie_fault_{table} BEFORE INSERT ON {table} "
                                  "FOR EACH ROW EXECUTE FUNCTION sortie_fault_check()"))

    def _resume_paused(self, role: str, after_s: float, count: int) -> None:
        """Watch the processes of ``role``; each one found stopped gets SIGCONT ``after_s`` seconds later."""

        seen: set[int] = set()
        deadline = time.monotonic() + 600
        while len(seen) < count and time.monotonic() < deadline:
            for name, comp in list(self.stack.components.items()):
                pid = comp.pid
                if name.startswith(role) and pid and pid not in seen and _stopped(pid):
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
            else:  # the end of a window: the knobs it set go back to their defaults (capabilities stay)
                knobs = platform_defaults({k: v for k, v in params.items()
                                           if k not in ("idempotency_key", "query_supported")})
                if knobs:
                    requests.put(f"{self.ep.platform_control_url}/control/faults", json=knobs,
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
            self._window(fault, on, lambda stop: self._republish(float(params.get("prob", 0.5)), stop))
        elif fault == "kill-worker":
            roles = tuple(params.get("roles", ("dispatcher",)))
            every = float(params.get("every_s", 20.0)) * self.factor
            self._window(fault, on, lambda stop: self._kill_workers(roles, every, stop))
        elif fault == "db-latency":
            if on:
                self.stack.toxiproxy_client.add_toxic("postgres", "sortie-db-latency", "latency",
                                                      attributes={"latency": int(params.get("ms", 200))})
            else:
                self.stack.toxiproxy_client.remove_toxic("postgres", "sortie-db-latency")
        elif fault == "close-airspace":
            self._airspace(int(params.get("sites", 1)), open_=not on)
        elif fault == "redrive-dead-letters":
            if on:
                from sqlalchemy.orm import sessionmaker

                from chaos.simulated import redrive_all
                from reference.runtime import Runtime

                runtime = Runtime(sessionmaker(self.admin, expire_on_commit=False))
                redrive_all(runtime.transact, _NowHistory(self), 0.0)
        elif fault == "audit-tamper":
            if on:
                self._tamper_audit()
        # Generic faults for incident files: any Toxiproxy toxic, a dependency stopped, a process restarted/paused.
        elif fault == "toxic":
            link, kind = params["link"], params["type"]
            if on:
                self.stack.toxiproxy_client.add_toxic(link, f"sortie-{kind}", kind,
                                                      stream=params.get("stream", "downstream"),
                                                      attributes=params.get("attributes", {}))
            else:
                self.stack.toxiproxy_client.remove_toxic(link, f"sortie-{kind}")
        elif fault == "stop-service":
            service = self.stack.services[params["service"]]
            if on:
                service.stop()
            else:
                service.start()
        elif fault in ("restart-process", "pause-process"):
            for name, comp in list(self.stack.components.items()):
                if not name.startswith(params["process"]):
                    continue
                self._record(NEMESIS, INFO, fault.split("-")[0] if on else "resume", {"process": name})
                if fault == "restart-process":
                    if on:
                        comp.restart()
                elif on:
                    comp.pause()
                else:
                    comp.resume()
        elif is_crash_fault(fault):
            if on:  # scenario seconds scale like every other window
                points = [replace(p, seconds=p.seconds * self.factor) for p in crash_points(fault, params)]
                self.stack.arm_crash_points(points)
                for p in points:
                    if p.action == "stop":  # the process SIGSTOPs itself; SIGCONT comes from here
                        threading.Thread(target=self._resume_paused, args=(p.role, p.seconds, p.count),
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


class _NowHistory:
    """A history view that stamps operations with the nemesis's clock (shared helpers pass sim time)."""

    def __init__(self, nemesis: NativeNemesis) -> None:
        self.nemesis = nemesis

    def add(self, _time: float, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        self.nemesis._record(process, type_, f, value)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()
