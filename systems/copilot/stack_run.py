"""Runs a catalogue scenario against the real stack: users over HTTP, faults through Toxiproxy, the
simulator's fault control and crash points in the workers, invariants checked on the real database,
the simulator's ledger and the S3 server. Same checkers and result shape as the simulation.

Scenario times (workload window, fault start and duration) are scaled by ``time_factor`` so the whole
catalogue fits a CI run; ``time_factor=1`` runs the documented windows."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.orm import sessionmaker

from chaos.native import NativeNemesis
from harness.history import INFO, History
from kernel.logs import defects_in_log
from reference.copilot import api
from reference.copilot.alerts import alerts_in_log
from reference.copilot.api import Principal
from reference.copilot.http.auth import issue_token
from reference.copilot.http.client import headers_for, http_request, reply_of
from reference.copilot.models import Base
from reference.copilot.runtime import Runtime
from reference.copilot.settings import Settings, layered, policy_with
from scenarios.runner import ScenarioResult
from scenarios.scenario import Scenario
from scenarios.timeline import run_realtime
from scenarios.verdicts import HELD, UNCHECKED
from systems.copilot.checkers import IDLE_IN_TRANSACTION, INVARIANTS, CheckContext
from systems.copilot.faults import FAULTS
from systems.copilot.state import FinalState, read_database, unsettled_rows
from systems.copilot.streams import StreamClient
from systems.copilot.users import Fleet, User, no_answer, run_blocking, schedule
from systems.copilot.workload import WorkloadSpec, seed_fleet, stream_users

# Thresholds scaled for the real stack's shortened windows (the simulation keeps the defaults).
STACK_POLICY = {
    "reconcile_interval_s": 2.0,
    # DISPATCHING must outlast a dispatcher's platform call budget (4 tries x 2 s read timeout + 3.5 s of
    # backoff = 11.5 s), or the reconciler may take over a create that is still on its way.
    "stale_after_s": {"CREATED": 30, "QUEUED": 10, "VALIDATING": 10, "DISPATCHING": 20, "DISPATCH_FAILED": 5,
                      "EXECUTING": 60, "CANCEL_PENDING": 8},
    "invisible_s": 10.0,
    "report_retry": {"attempts": 20, "base_s": 1.0, "cap_s": 8.0},
}

@dataclass
class StackClock:
    t0_mono: float
    t0_epoch: float

    def now(self) -> float:
        return time.monotonic() - self.t0_mono


class HttpUsers:
    """The HTTP driver of the user model (systems.copilot.users): each user is a thread; requests go over ``requests``
    to the API; waits are scenario seconds scaled by the time factor; double clicks are concurrent threads."""

    def __init__(self, api_url: str, secret: str, spec: WorkloadSpec, fleet: Fleet, history: History,
                 clock: StackClock, seed: int, time_factor: float) -> None:
        self.api, self.secret, self.spec, self.fleet = api_url, secret, spec, fleet
        self.history, self.clock, self.seed, self.factor = history, clock, seed, time_factor
        self.lock = threading.Lock()
        self.session = requests.Session()
        self.tasks: list[tuple[str, str]] = []
        self.done = threading.Event()
        self._tokens: dict[Principal, str] = {}

    def _op(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        with self.lock:
            self.history.add(self.clock.now(), process, type_, f, value)

    def _token(self, who: Principal) -> str:
        with self.lock:
            if who not in self._tokens:
                self._tokens[who] = issue_token(self.secret, who.user_id, role=who.role, ttl_s=86400)
            return self._tokens[who]

    def run(self) -> None:
        arrivals = schedule(self.spec, self.fleet, self.seed)
        with ThreadPoolExecutor(max_workers=16) as pool:
            for a in arrivals:
                delay = a.at * self.factor - self.clock.now()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(self.drive, a.start(self.tasks))
        self.done.set()

    def drive(self, user: User) -> Any:
        """Perform a user's steps (threads for concurrent clicks); returns what the user returns."""

        def together(users: list[User]) -> list[Any]:
            with ThreadPoolExecutor(max_workers=len(users)) as pool:
                return list(pool.map(self.drive, users))

        return run_blocking(user, self.request, lambda r: self._op(r.process, r.type, r.f, r.value),
                            lambda s: time.sleep(s * self.factor), together)

    def request(self, cmd: api.Command) -> api.Reply:
        req = http_request(cmd)
        caller = getattr(cmd, "caller", None)
        try:
            resp = self.session.request(req.method, self.api + req.path, json=req.body, params=req.query,
                                        headers=headers_for(req, self._token(caller) if caller else None),
                                        timeout=10)
        except requests.RequestException as exc:  # connection reset: an unknown outcome
            return no_answer(detail=type(exc).__name__)
        return reply_of(resp.status_code, resp.headers, resp.text)


_IDLE_IN_TRANSACTION_SQL = text("""
    SELECT pid, application_name,
           EXTRACT(EPOCH FROM clock_timestamp() - state_change) AS idle_s,
           EXTRACT(EPOCH FROM clock_timestamp() - xact_start) AS xact_s
    FROM pg_stat_activity
    WHERE state IN ('idle in transaction', 'idle in transaction (aborted)') AND usename = :role
      AND pid <> pg_backend_pid()""")


class IdleInTransactionSampler:
    """B10 on the real stack: while a db-latency window is open, a thread samples pg_stat_activity (over the
    harness's direct connection, not the slowed link) every ``interval_s`` and keeps, per application
    connection, the longest time it was seen ``idle in transaction``. At the window's end one history
    operation per such connection records it, as information, not an invariant: over a slow link a
    transaction is legitimately idle between its statements (a statement's answer takes the latency to come
    back, the next statement as long to arrive); a transaction held across a platform call would show idle
    for the whole call (I20 checks that directly)."""

    def __init__(self, admin: Any, role: str, record: Any, interval_s: float = 0.1) -> None:
        self.admin, self.role, self.record, self.interval_s = admin, role, record, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.seen: dict[int, dict[str, Any]] = {}
        self.samples = 0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self.seen, self.samples = {}, 0
        self._thread = threading.Thread(target=self._run, name="idle-in-transaction", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self.admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while not self._stop.is_set():
                    for pid, app, idle_s, xact_s in conn.execute(_IDLE_IN_TRANSACTION_SQL, {"role": self.role}):
                        entry = self.seen.setdefault(int(pid), {"pid": int(pid), "application": app or "",
                                                                "max_idle_s": 0.0, "max_xact_s": 0.0, "seen": 0})
                        entry["max_idle_s"] = max(entry["max_idle_s"], float(idle_s or 0.0))
                        entry["max_xact_s"] = max(entry["max_xact_s"], float(xact_s or 0.0))
                        entry["seen"] += 1
                    self.samples += 1
                    self._stop.wait(self.interval_s)
        except Exception as exc:  # information only: a failed sampler must not fail the run
            self.record(IDLE_IN_TRANSACTION + "-sampler", {"error": type(exc).__name__, "detail": str(exc)[:200]})

    def stop(self) -> None:
        """End the window: stop sampling and record the longest idle time of each connection seen idle."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._thread = None
        for entry in sorted(self.seen.values(), key=lambda e: -e["max_idle_s"]):
            self.record(IDLE_IN_TRANSACTION, {**entry, "max_idle_s": round(entry["max_idle_s"], 3),
                                              "max_xact_s": round(entry["max_xact_s"], 3), "samples": self.samples})


class StackScenarioRunner:
    """One native stack, many scenarios: the state is reset between them."""

    def __init__(self, stack: Any, *, time_factor: float = 0.25) -> None:
        self.stack = stack
        self.ep = stack.endpoints
        self.factor = time_factor
        self.admin = create_engine(self.ep.admin_database_url)
        self.sessions = sessionmaker(self.admin, expire_on_commit=False)
        self.nemesis = NativeNemesis(stack, self.admin, time_factor, FAULTS)
        self.base_policy = dict(stack.options.policy)  # the stack's own overrides; a scenario may add its own

    # ------------------------------------------------------------------ reset and seed

    def reset(self, seed: int, spec: WorkloadSpec) -> Fleet:
        """Empty tables, a fresh platform (its flights and a cancelled one's return home as ``spec`` sets them for
        the real stack, else the stack's own), no toxics, no failpoints, capabilities on; then the fleet."""
        tables = ", ".join(t.name for t in reversed(Base.metadata.sorted_tables))
        with self.admin.begin() as conn:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
            conn.execute(text("DELETE FROM sortie_fault"))
        platform: dict[str, Any] = {"seed": seed}
        for name, wall_s in (("flight_median_s", spec.stack_flight_median_s),
                             ("cancel_delay_s", spec.stack_cancel_delay_s)):
            if wall_s is not None:  # the simulator's model clock runs time_scale times the wall's
                platform[name] = wall_s * float(self.stack.options.time_scale)
        resp = requests.post(f"{self.ep.app['platform_control_url']}/control/reset", json=platform, timeout=10)
        resp.raise_for_status()
        requests.post(f"{self.ep.toxiproxy_api}/reset", timeout=10)
        self.stack.clear_failpoints()
        self.stack.app.set_platform_capabilities(self.stack, True, True)
        self.stack.clear_history()
        runtime = Runtime(self.sessions)
        return runtime.transact(lambda tx: seed_fleet(tx, spec))

    # ------------------------------------------------------------------ faults

    def _nemesis(self, scenario: Scenario, history: History, clock: StackClock,
                 sampler: IdleInTransactionSampler) -> None:
        def apply(fault: str, params: dict[str, Any], on: bool) -> None:
            if fault == "db-latency" and not on:
                sampler.stop()
            self.nemesis.apply(fault, params, on=on)
            if fault == "db-latency" and on:
                sampler.start()

        run_realtime(scenario.faults, apply, history, clock.now, self.factor)

    # ------------------------------------------------------------------ run

    def _unsettled(self) -> int:
        with self.sessions() as s:
            return unsettled_rows(s)

    def run(self, scenario: Scenario, seed: int) -> ScenarioResult:
        wall0 = time.perf_counter()
        spec = scenario.workload
        self.stack.set_policy(layered(self.base_policy, scenario.policy))
        fleet = self.reset(seed, spec)
        logs_at = self.stack.log_sizes()  # the components' logs from here on are this scenario's
        history = History()
        clock = StackClock(time.monotonic(), time.time())
        self.nemesis.attach(history, clock.now)
        users = HttpUsers(self.ep.api_url, self.ep.app["token_secret"], spec, fleet, history, clock, seed, self.factor)
        streams = [StreamClient(i, user, issue_token(self.ep.app["token_secret"], user, ttl_s=86400),
                                # through the clients' link to whichever server holds streams (the tier when on)
                                f"http://{self.ep.proxies.get('stream') or self.ep.proxies['api']}", self.ep.api_url,
                                users._op)
                   for i, user in enumerate(stream_users(fleet, spec))]
        for stream in streams:
            stream.start()
        sampler = IdleInTransactionSampler(self.admin, make_url(self.ep.database_url).username or "",
                                           lambda f, value: users._op("monitor", INFO, f, value))
        workload = threading.Thread(target=users.run, name="workload")
        nemesis = threading.Thread(target=self._nemesis, args=(scenario, history, clock, sampler), name="nemesis")
        workload.start()
        nemesis.start()
        workload.join()
        nemesis.join()
        sampler.stop()
        heal = scenario.heal_time() * self.factor
        bound = scenario.recovery_bound_s * self.factor
        deadline = time.monotonic() + bound + 60.0
        while time.monotonic() < deadline and self._unsettled():
            time.sleep(1.0)
        for stream in streams:
            stream.close()
        history = self._merged(history, clock)
        state = self.final_state(clock, heal, logs_at)
        verdicts = INVARIANTS.check(self.check_context(history, state, bound + 60.0), list(scenario.invariants))
        exercised = scenario.exercised(history, state)
        passed = exercised is None and all(v.status in (HELD, UNCHECKED) for v in verdicts)
        return ScenarioResult(
            id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
            exercised=exercised, history_digest=history.digest(), counts=state.counts(), virtual_s=clock.now(),
            wall_s=time.perf_counter() - wall0, history=history, state=state,
            stats={"shell": "native", "time_factor": self.factor})

    def check_context(self, history: History, state: FinalState, bound_s: float) -> CheckContext:
        """The checkers' context with the limits the stack's workers run with (their Policy overrides)."""
        options = getattr(self.stack, "options", None)
        overrides = getattr(options, "policy", None) or {}
        read_s = getattr(options, "platform_read_timeout_s", Settings.platform_read_timeout_s)
        return CheckContext(history, state, bound_s, policy_with(overrides),
                            platform_call_limit_s=Settings.platform_connect_timeout_s + read_s)

    def _merged(self, clients: History, clock: StackClock) -> History:
        """The clients' and the nemesis's operations plus every component's, ordered by time."""
        ops = [(op.time, op.process, op.type, op.f, op.value) for op in clients.ops]
        ops += [(o["time"] - clock.t0_epoch, o["process"], o["type"], o["f"], o["value"])
                for o in self.stack.read_history()]
        merged = History()
        for t, process, type_, f, value in sorted(ops, key=lambda o: o[0]):
            merged.add(t, process, type_, f, value)
        return merged

    def final_state(self, clock: StackClock, heal: float, logs_at: dict[str, int] | None = None) -> FinalState:
        """The end of a run; with ``logs_at`` (the components' log sizes when it began), also the defects (I27) and the
        operator alerts (I31) they logged since, else ``defects`` and ``alerts`` stay None: not observed."""
        state = FinalState(t0=clock.t0_epoch, heal_time=heal, end_time=clock.now(),
                           platform_time_scale=float(self.stack.options.time_scale))
        if logs_at is not None:
            logs = self.stack.logs_since(logs_at)
            state.defects = [{"t": round(d["at"] - clock.t0_epoch, 3), "logger": name, "error": d["error"],
                              "where": d["where"]} for name, text in logs.items() for d in defects_in_log(text)]
            state.alerts = [{**a, "component": name} for name, text in logs.items() for a in alerts_in_log(text)]
        with self.sessions() as session:
            read_database(session, state)
        state.ledger = requests.get(f"{self.ep.app['platform_control_url']}/control/ledger", timeout=10).json()
        # The simulator's clock runs time_scale times faster than the wall: ledger times are not comparable.
        state.ledger_clock_comparable = self.stack.options.time_scale == 1.0
        state.objects = self.stack.object_digests()
        return state
