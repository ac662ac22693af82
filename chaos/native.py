"""Faults on the real stack: the catalogue's faults (chaos/faults.py), each one's native half applied through
the NativeNemesis: Toxiproxy link cuts and toxics, the simulator's fault control, crash points in the workers
(SIGKILL right after an effect; the stack's supervisor restarts them), SIGSTOP/SIGCONT, and a PostgreSQL
trigger that fails inserts inside the transaction. The helpers the halves share are its methods."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine, text

from chaos.faults import FAULT_TABLES, STALE_CONSUMER, half_for, lost_to_group, stale_consumer
from harness.history import AIRSPACE, FAIL, INFO, INVOKE, NEMESIS, OK, History
from kernel.failpoints import CrashPoint, fired_pids, marker_path


class NativeNemesis:
    def __init__(self, stack: Any, admin: Engine, time_factor: float) -> None:
        self.stack, self.admin, self.factor = stack, admin, time_factor
        self.ep = stack.endpoints
        self.install_fault_triggers()
        self.history: History | None = None
        self.now: Callable[[], float] = time.monotonic
        self._windows: dict[str, list[threading.Event]] = {}  # the stop flags of each fault's open windows

    def attach(self, history: History, now: Callable[[], float]) -> None:
        """Where the nemesis records what it did itself (kills, re-drives, refused tampering)."""
        self.history, self.now = history, now

    def record(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        if self.history is not None:
            self.history.add(self.now(), process, type_, f, value)

    def window(self, fault: str, on: bool, loop: Callable[[threading.Event], None]) -> None:
        """Run ``loop(stop)`` in a thread while the fault's window is open. Closing it stops every loop it started
        (windows of the same fault may overlap: explore draws them independently)."""
        if on:
            stop = threading.Event()
            self._windows.setdefault(fault, []).append(stop)
            threading.Thread(target=loop, args=(stop,), name=fault, daemon=True).start()
        else:
            for stop in self._windows.pop(fault, ()):
                stop.set()

    def kill_workers(self, roles: tuple[str, ...], every_s: float, stop: threading.Event) -> None:
        """SIGKILL, in turn, each worker whose name starts with one of ``roles``, every ``every_s`` seconds,
        until ``stop`` (kill-worker); the stack's supervisor restarts them."""
        n = 0
        while not stop.is_set():
            victims = sorted(name for name, c in self.stack.components.items() if name.startswith(roles) and c.pid)
            if victims:
                name = victims[n % len(victims)]
                self.record(NEMESIS, INFO, "kill", {"process": name, "why": "kill-worker"})
                self.stack.components[name].kill()  # the stack's supervisor restarts it
                n += 1
            stop.wait(every_s)

    def set_airspace(self, sites: int, *, open_: bool) -> None:
        """Close or reopen the airspace over the first ``sites`` areas, and record which, and when, in the
        history (I12). The time brackets the change on the side that keeps the check sound: a closure is
        recorded after it committed (a pre-flight check that started later must see it), a reopening before
        it starts (a check that finished earlier cannot have seen it)."""
        with self.admin.begin() as conn:
            areas = [str(a) for a in conn.execute(text("SELECT id FROM site_area ORDER BY id LIMIT :n"),
                                                  {"n": sites}).scalars()]
        if open_:
            self.record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": True})
        with self.admin.begin() as conn:
            conn.execute(text("UPDATE site_area SET airspace_open = :open WHERE id = ANY(:ids)"),
                         {"open": open_, "ids": areas})
        if not open_:
            self.record(NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": False})

    def republish(self, prob: float, stop: threading.Event) -> None:
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
                self.record(NEMESIS, INFO, "republish", {"event_id": str(event_id)})

    def stale_consumer(self, group: str, stop: threading.Event) -> None:
        """The stale-consumer fault (chaos.faults.stale_consumer): a RocketMQ client of its own in ``group``, with
        the group's subscription, through the application's broker link, until ``stop``. Its deliveries are
        recorded as the simulation records them."""
        from kernel.effects import Ack, Receive, Sleep, run_sync
        from reference.copilot.adapters.broker_rocketmq import RocketMQBroker
        from reference.copilot.effects import BrokerUnavailable
        from reference.copilot.runtime import ACK
        from reference.copilot.services.consumer import HANDLERS
        from reference.copilot.settings import TOPIC

        broker = RocketMQBroker(self.ep.rocketmq_endpoint, TOPIC, {group: set(HANDLERS[group])})

        def perform(effect: Any) -> Any:
            if isinstance(effect, Receive):
                deliveries = broker.receive(effect.group, effect.max_messages, effect.invisible_s)
                for d in deliveries:
                    self.record(STALE_CONSUMER, INFO, "deliver", d.op_value(effect.group))
                return deliveries
            if isinstance(effect, Ack):  # recorded as the simulation records the stale consumer's acks
                acked = effect.delivery.op_value(effect.group)
                try:
                    result = broker.ack(effect.group, effect.delivery)
                except BrokerUnavailable as exc:
                    self.record(STALE_CONSUMER, FAIL, ACK, {**acked, "error": str(exc)[:200]})
                    raise
                self.record(STALE_CONSUMER, OK, ACK, acked)
                return result
            if isinstance(effect, Sleep):
                stop.wait(effect.seconds)
                return None
            raise TypeError(f"the stale consumer performs no {effect!r}")

        try:
            run_sync(stale_consumer(group, stop.is_set, lost_to_group(self.record, group)), perform)
        finally:
            broker.close()

    def tamper_audit(self) -> None:
        """S5: the application role tries to rewrite and erase the audit log; PostgreSQL must refuse."""
        from sqlalchemy import create_engine
        from sqlalchemy.exc import DBAPIError

        app = create_engine(self.ep.database_url)
        try:
            for f, stmt in (("audit-update", "UPDATE task_audit_log SET actor = 'nobody'"),
                            ("audit-delete", "DELETE FROM task_audit_log")):
                self.record("attacker-db", INVOKE, f, {"expect": ["INSUFFICIENT_PRIVILEGE"]})
                try:
                    with app.begin() as conn:
                        n = conn.execute(text(stmt)).rowcount
                except DBAPIError as err:
                    code = type(err.orig).__name__ if err.orig is not None else "DBAPIError"
                    sqlstate = getattr(err.orig, "sqlstate", None)
                    self.record("attacker-db", FAIL, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "sqlstate": sqlstate,
                                                         "code": "INSUFFICIENT_PRIVILEGE" if sqlstate == "42501"
                                                         else _snake(code)})
                else:
                    self.record("attacker-db", OK, f, {"expect": ["INSUFFICIENT_PRIVILEGE"], "rows": n})
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

    def resume_stopped(self, point: CrashPoint, marker: str, before: int) -> None:
        """SIGCONT each process that stops itself at ``point`` (its pid is in the point's marker after the ``before``
        firings that came before this arming), ``point.seconds`` after it stopped. Two stop points armed at once
        (B15) never resume each other's processes."""
        handled = before
        deadline = time.monotonic() + 600
        while handled < before + point.count and time.monotonic() < deadline:
            pids = fired_pids(marker)
            for pid in pids[handled:before + point.count]:
                for _ in range(100):  # it writes its pid, then stops itself
                    if _stopped(pid):
                        break
                    time.sleep(0.01)
                threading.Timer(point.seconds, self._resume, args=(point.role, pid)).start()
            handled = max(handled, min(len(pids), before + point.count))
            time.sleep(0.05)

    def _resume(self, role: str, pid: int) -> None:
        """SIGCONT, recorded as the simulation records it (a point's "pause" names the process as its recorder does:
        role-pid), so a check can tell what the process did after it woke up."""
        _cont(pid)
        name = next((n for n, c in list(self.stack.components.items()) if c.pid == pid), None)
        self.record(NEMESIS, INFO, "resume", {"process": f"{role}-{pid}", "component": name})

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        """Arm crash points in the workers; scenario seconds scale like every other window. A process that
        SIGSTOPs itself gets SIGCONT from here."""
        points = [replace(p, seconds=p.seconds * self.factor) for p in points]
        stops = [(p, marker_path(str(self.stack.failpoint_file), p)) for p in points if p.action == "stop"]
        before = [len(fired_pids(marker)) for _, marker in stops]  # firings of an earlier arming of the same point
        self.stack.arm_crash_points(points)
        for (p, marker), fired in zip(stops, before, strict=True):
            threading.Thread(target=self.resume_stopped, args=(p, marker, fired), name="resume-stopped",
                             daemon=True).start()

    def apply(self, fault: str, params: dict[str, Any], *, on: bool) -> None:
        """Start (on) or stop one fault of the catalogue on the running stack. ValueError for an unknown fault,
        one without a real-stack form, or bad parameters."""
        half_for(fault, "native", params)(self, params, on)


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


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()
