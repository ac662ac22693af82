"""`sortie load --system statussync`: seed 003's load cases (§15) on the real stack, scaled to this machine.

The stack is the native one (systems.statussync.stack.SyncStack: MariaDB, Centrifugo v6 on its memory engine, the
API as two gunicorn replicas, two outbox relays with the reference's RelayConfig; no reconciler or producers
processes: this module is the producers). A run:

1. connects every client, each a raw WebSocket speaking Centrifugo's JSON protocol (connect with a token whose
   ``channels`` claim subscribes the user's summary channel on the server side, answer pings, read publications);
   tokens are signed here with the stack's HMAC key, as the API's ``/api/realtime/session`` signs them;
2. creates the profile's tasks through the API (the coordinator) and, for each, reports its first step's
   STEP_STARTED then a STEP_PROGRESS every ``period_s`` (a random phase per task), each at its intended time
   whatever the answers before it (an open model: a slow API makes requests late, and the corrected latency counts
   the wait, as loadtests.latency does);
3. after the duration, waits until every outbox row settled and every client shows its tasks' last version (the
   drain), then reads the commits (task_event_log.committed_at) and publications (task_outbox.published_at).

Figures (HDR histograms, loadtests.latency): the event entry's latency (raw, from the send; corrected, from the
intended time), commit-to-publish (§14.1 state_commit_to_publish_seconds), commit-to-visible (§14.1
state_commit_to_visible_seconds: from the commit to the client's receipt; and corrected, from the event's intended
time), the oldest unpublished outbox row, each client's regressions (a version lower than one it saw) and the
clients not converged after the drain; for the idle profile, connections dropped. The ``db-restart`` profile
restarts MariaDB in the middle of the load (stopped, started again on its port: every connection of the API and the
relays lost), its producers sending each event again, as seed 003 §11.3 asks ("调用方按同一个 eventId 重试"), until
it is answered (``RESTART_PATIENCE_S``): every event must then be accepted, none lost (and none applied twice: the
versions are the service's). Exit 0, 1 (an invariant violated or figures missing), 3 (an SLO missed: reported, as
loadtests.run.exit_code does)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadtests.latency import QUANTILES, new_histogram
from loadtests.sampling import PeriodicSampler
from reference.statussync.client import LIVE, ClientStore
from reference.statussync.registry import OPERATIONS, STEPS, TENANT
from reference.statussync.service import user_channel

SCALE = 0.1  # this machine (2 cores shared by several people): a tenth of the seed's and the issue's figures
SAMPLE_S = 5.0
CONNECT_TIMEOUT_S = 60.0
HANDSHAKES = 50  # WebSocket handshakes in flight at once
TOKEN_TTL_S = 24 * 3600
HTTP_CONNECTIONS = 32  # the producers' HTTP connections in all (loadtests' --connections default)
HTTP_TIMEOUT_S = 30.0
CREATE_CONCURRENCY = 16
SEND_TRIES = 4  # a request without an answer, or answered 503, is sent again
RESTART_PATIENCE_S = 120.0  # db-restart: how long a producer keeps sending an unanswered event again
OK, SLO_MISSED, FAILED = 0, 3, 1
FILES_BESIDES_SOCKETS = 512  # this process's other descriptors: HTTP connections, the database's, logs, the loop's
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@dataclass(frozen=True)
class SyncProfile:
    """A load case: tasks changing every ``period_s``, live clients (one per user; a task's owner is user i mod
    clients), idle connections, and a hot channel (one user's, ``hot_members`` connections, ``hot_tasks`` tasks)."""

    name: str
    documented: str  # the case as the seed or the issue states it
    tasks: int = 0
    clients: int = 0
    idle: int = 0
    hot_members: int = 0
    hot_tasks: int = 0
    period_s: float = 30.0
    scale: float = SCALE
    db_restart: bool = False  # MariaDB restarted half-way through the load; every event must still be accepted

    @property
    def events_per_s(self) -> float:
        return (self.tasks + self.hot_tasks) / self.period_s


PROFILES = {
    "1x": SyncProfile("1x", "2,000 active tasks changing every 30 s, 1,000 live clients (issue 56's 1x)",
                      tasks=200, clients=100),
    "5x": SyncProfile("5x", "five times 1x: 10,000 active tasks, 5,000 live clients", tasks=1000, clients=500),
    # The full figure (measured 2026-12-08: 10,010 connections up in about 10 s, held 2 minutes, Centrifugo 0.5-0.6 GB)
    "idle": SyncProfile("idle", "10,000 idle connections held for 2 minutes (§15: many idle connections)",
                        tasks=20, clients=10, idle=10000, scale=1.0),
    "hot": SyncProfile("hot", "a hot channel with 500 members (§15: one popular project's fan-out)",
                       hot_members=500, hot_tasks=20, scale=1.0),
    "db-restart": SyncProfile("db-restart", "a database restart under 1x load (issue 56, nightly): 2,000 active "
                              "tasks changing every 30 s, 1,000 live clients", tasks=200, clients=100, db_restart=True),
}

# SLOs proposed from §14.1's metrics (docs/systems/statussync.md has the reasoning): the event entry is one
# transaction; a relay polls every 2 s when idle (RelayConfig.poll_s), so a commit waits up to a poll before it is
# claimed; a client is one hop further.
SLO = {"event_p99_ms": 250.0, "commit_to_publish_p99_s": 3.0, "commit_to_visible_p99_s": 3.5,
       "oldest_outbox_s": 10.0}


# ---------------------------------------------------------------------------------------------- the core


@dataclass
class Send:
    task: str
    intended: float
    sent: float = 0.0
    answered: float = 0.0
    status: int = 0
    version: int | None = None


@dataclass
class Records:
    """What a run saw: every report, every delivery (connection, task, version, receipt), the samples."""

    sends: list[Send] = field(default_factory=list)
    deliveries: list[tuple[int, str, int, float]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    db_down_s: float | None = None  # db-restart: how long MariaDB was away (its stop and start)
    dropped: int = 0  # connected, then closed before the run's end
    failed: int = 0  # never connected
    reordered: int = 0  # a publication older than the version its client showed (dropped by the version gate)
    samples: list[dict[str, float]] = field(default_factory=list)


def quantiles(values_ms: list[float]) -> dict[str, float] | None:
    if not values_ms:
        return None
    h = new_histogram()
    for v in values_ms:
        h.record_value(max(1, int(round(v * 1000.0))))
    return {**{f"p{q}": h.get_value_at_percentile(q) / 1000.0 for q in QUANTILES},
            "max": h.get_max_value() / 1000.0, "count": float(h.get_total_count())}


def figures(rec: Records, commits: dict[tuple[str, int], float], published: dict[tuple[str, int], float]
            ) -> dict[str, Any]:
    """The run's figures (milliseconds) from its records and the tables' commit and publish times (epoch s)."""
    answered = [s for s in rec.sends if s.status == 200 and s.version is not None]
    intended = {(s.task, s.version): s.intended for s in answered}
    # The profile's steady changes only: the tasks' creation before the load is a burst of its own
    delivered = [(task, version, at) for _, task, version, at in rec.deliveries
                 if (task, version) in commits and (task, version) in intended]
    return {
        "events": len(rec.sends), "accepted": len(answered),
        "errors": sum(1 for s in rec.sends if s.status != 200),
        # by status after the tries (-1: no answer at the last): a 409 is a refusal (none is expected)
        "error_statuses": dict(Counter(str(s.status) for s in rec.sends if s.status != 200)),
        "event_ms": {"raw": quantiles([(s.answered - s.sent) * 1e3 for s in answered]),
                     "corrected": quantiles([(s.answered - s.intended) * 1e3 for s in answered])},
        "commit_to_publish_ms": quantiles([(published[k] - commits[k]) * 1e3 for k in intended
                                           if k in published and k in commits]),
        "commit_to_visible_ms": {
            "from_commit": quantiles([(at - commits[(t, v)]) * 1e3 for t, v, at in delivered]),
            "corrected": quantiles([(at - intended[(t, v)]) * 1e3 for t, v, at in delivered])},
        "deliveries": len(rec.deliveries),
        "oldest_outbox_s": max((s["oldest_outbox_s"] for s in rec.samples), default=0.0),
        "load_average": [s["load1"] for s in rec.samples],
        "regressions": rec.regressions, "reordered": rec.reordered, "dropped_connections": rec.dropped,
        "failed_connections": rec.failed, "db_down_s": rec.db_down_s,
    }


def slo_verdicts(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    def p99(q: dict[str, float] | None) -> float | None:
        return None if q is None else q["p99"]

    measured = {"event_p99_ms": p99(fig["event_ms"]["corrected"]),
                "commit_to_publish_p99_s": _s(p99(fig["commit_to_publish_ms"])),
                "commit_to_visible_p99_s": _s(p99(fig["commit_to_visible_ms"]["from_commit"])),
                "oldest_outbox_s": fig["oldest_outbox_s"]}
    return {k: {"target": SLO[k], "measured": v, "met": v is not None and v <= SLO[k]} for k, v in measured.items()}


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def exit_code(fig: dict[str, Any], slos: dict[str, dict[str, Any]], unconverged: list[str],
              every_event_answered: bool = False) -> int:
    """``every_event_answered`` (db-restart): an event never accepted is a lost report, an invariant broken."""
    if fig["regressions"] or unconverged or fig["dropped_connections"] or fig["failed_connections"] \
            or not fig["accepted"] or (every_event_answered and fig["errors"]):
        return FAILED
    return OK if all(v["met"] for v in slos.values()) else SLO_MISSED


# ---------------------------------------------------------------------------------------------- the clients


class Connection:
    """One raw WebSocket to Centrifugo: connect, answer pings, record each summary publication's version."""

    def __init__(self, n: int, user: str, url: str, token: str, rec: Records, live: bool) -> None:
        self.n, self.user, self.url, self.token, self.rec, self.live = n, user, url, token, rec, live
        self.settled = asyncio.Event()  # connected, or failed to
        self.connected = False
        self.store = ClientStore(state=LIVE)

    async def run(self, stop: asyncio.Event, handshakes: asyncio.Semaphore) -> None:
        import websockets

        try:
            async with handshakes:  # a ramp: a thousand handshakes at once would time each other out
                ws = await websockets.connect(self.url, max_queue=None, open_timeout=CONNECT_TIMEOUT_S)
            async with ws:
                await ws.send(json.dumps({"id": 1, "connect": {"token": self.token, "name": "sortie-load"}}))
                reader = asyncio.ensure_future(self._read(ws))
                await asyncio.wait([reader, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
                reader.cancel()
        except Exception:  # refused, timed out or dropped: counted below
            pass
        if not self.connected:
            self.rec.failed += 1
        elif not stop.is_set():
            self.rec.dropped += 1
        self.settled.set()

    async def _read(self, ws: Any) -> None:
        async for frame in ws:
            for line in str(frame).splitlines():
                msg = json.loads(line) if line.strip() else {}
                if not msg:  # a ping: the pong
                    await ws.send("{}")
                elif "connect" in msg:
                    self.connected = True
                    self.settled.set()
                elif "push" in msg and self.live:
                    self._publication(msg["push"])

    def _publication(self, push: dict[str, Any]) -> None:
        """Through the reference's merge rule (ClientStore: the summary's version gate), as a real client applies
        it: two relays publish concurrently, so an older version may arrive after a newer one (``reordered``);
        the view must never go back (a regression)."""
        data = (push.get("pub") or {}).get("data") or {}
        task = data.get("task") or {}
        if "id" not in task:
            return
        version, shown = int(task["version"]), self._shown(task["id"])
        self.rec.reordered += version < shown
        self.store.receive("summary", data)
        now = self._shown(task["id"])
        if now < shown:
            self.rec.regressions.append(f"connection {self.n} ({self.user}): {task['id']} shown v{now} after "
                                        f"v{shown}")
        self.rec.deliveries.append((self.n, task["id"], version, time.time()))

    def _shown(self, task_id: str) -> int:
        return int(self.store.summary.get(task_id, {}).get("version", 0))

    @property
    def seen(self) -> dict[str, int]:
        """The version of the view the client shows, by task."""
        return {task_id: int(view["version"]) for task_id, view in self.store.summary.items()}


# ---------------------------------------------------------------------------------------------- the producers


def _progress(step: dict[str, Any], seq: int) -> dict[str, Any]:
    kind = "STEP_STARTED" if seq == 1 else "STEP_PROGRESS"
    running = next(s[2] for s in STEPS if s[0] == step["stepId"])
    event = {"eventId": f"{step['producerId']}:{step['taskId']}:{step['stepId']}:{seq}", "taskId": step["taskId"],
             "taskAttempt": 1, "stepId": step["stepId"], "stepAttempt": step["stepAttempt"],
             "operationCode": step["operationCode"], "producerId": step["producerId"], "sourceSeq": seq,
             "eventType": kind, "businessStatus": running}
    if kind == "STEP_PROGRESS":
        event["data"] = {"schema": OPERATIONS[step["operationCode"]][2]["STEP_PROGRESS"][0],
                         "value": {"current": seq - 1}}
    return event


async def _post(http: Any, url: str, body: dict[str, Any], token: str, patience_s: float = 0.0) -> Any:
    """A POST sent again, as the system's producers do, when it got no answer (gunicorn closes an idle keep-alive
    connection after 2 s, and a request may leave on one it is closing) or a 503: the same body, so the same
    eventId or task id; the service answers a repeat with its first answer. SEND_TRIES tries, and more until
    ``patience_s`` passed (backoff capped at 2 s). None: no answer at the last try."""
    import httpx

    resp, attempt, give_up = None, 0, time.monotonic() + patience_s
    while attempt < SEND_TRIES or time.monotonic() < give_up:
        try:
            resp = await http.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
        except httpx.TransportError:
            resp = None
        if resp is not None and resp.status_code != 503:
            return resp
        await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
        attempt += 1
    return resp


async def _report(http: Any, url: str, step: dict[str, Any], seq: int, send: Send, in_flight: asyncio.Semaphore,
                  patience_s: float = 0.0) -> None:
    await asyncio.sleep(max(0.0, send.intended - time.time()))
    # Late requests wait here, not in httpx's pool: its queue costs CPU per waiting request on every release, and a
    # backlog of thousands (5x on a loaded machine) starved the event loop (the clients' pongs, then everything)
    async with in_flight:
        send.sent = time.time()
        resp = await _post(http, f"{url}/internal/v1/task-events", _progress(step, seq), step["executionToken"],
                           patience_s)
    send.status = -1 if resp is None else resp.status_code
    if send.status == 200:
        send.version = int(resp.json()["taskVersion"])
    send.answered = time.time()


async def _create(http: Any, urls: list[str], coordinator: str, tasks: list[tuple[str, str]]
                  ) -> dict[str, dict[str, Any]]:
    """Every task through the API, CREATE_CONCURRENCY at a time."""
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)
    first: dict[str, dict[str, Any]] = {}

    async def one(i: int, task_id: str, owner: str) -> None:
        body = {"taskId": task_id, "tenantId": TENANT, "ownerId": owner, "title": f"load {task_id}",
                "steps": [{"stepId": s[0], "operationCode": s[1]} for s in STEPS]}
        async with gate:
            resp = await _post(http, f"{urls[i % len(urls)]}/internal/v1/tasks", body, coordinator)
        if resp is None or resp.status_code != 200:
            raise RuntimeError(f"creating {task_id}: {'no answer' if resp is None else resp.text[:300]}")
        first[task_id] = resp.json()["steps"][0]

    await asyncio.gather(*(one(i, t, o) for i, (t, o) in enumerate(tasks)))
    return first


# ---------------------------------------------------------------------------------------------- the run


@dataclass
class Plan:
    """Who owns which task and which connections there are: (task id, owner), (user, live)."""

    tasks: list[tuple[str, str]]
    connections: list[tuple[str, bool]]

    @classmethod
    def of(cls, p: SyncProfile) -> Plan:
        users = max(1, p.clients)
        tasks = [(f"load-{i:05d}", f"u{i % users}") for i in range(p.tasks)]
        tasks += [(f"hot-{i:04d}", "hot") for i in range(p.hot_tasks)]
        conns = [(f"u{i}", True) for i in range(p.clients)] + [("hot", True)] * p.hot_members
        conns += [(f"idle-{i}", False) for i in range(p.idle)]
        return cls(tasks, conns)


async def drive(profile: SyncProfile, duration_s: float, seed: int, urls: list[str], ws_url: str, hmac_key: str,
                coordinator: str, sample: Any, drain_s: float, say: Any, restart_db: Any = None
                ) -> tuple[Records, list[Connection], float]:
    """Connect, create, report for ``duration_s`` (``restart_db`` called half-way through: db-restart), drain; the
    records, the connections and the load's end."""
    import httpx
    import jwt

    rec = Records()
    plan = Plan.of(profile)
    stop = asyncio.Event()

    def token(user: str) -> str:
        return jwt.encode({"sub": f"{TENANT}/{user}", "channels": [user_channel(TENANT, user)],
                           "exp": int(time.time() + TOKEN_TTL_S)}, hmac_key, algorithm="HS256")

    conns = [Connection(n, user, ws_url, token(user), rec, live) for n, (user, live) in enumerate(plan.connections)]
    handshakes = asyncio.Semaphore(HANDSHAKES)
    runners = [asyncio.ensure_future(c.run(stop, handshakes)) for c in conns]
    await asyncio.gather(*(c.settled.wait() for c in conns))
    say(f"{sum(c.connected for c in conns)} of {len(conns)} connections up; creating {len(plan.tasks)} tasks")
    limits = httpx.Limits(max_connections=HTTP_CONNECTIONS, max_keepalive_connections=HTTP_CONNECTIONS)
    async with httpx.AsyncClient(limits=limits, timeout=HTTP_TIMEOUT_S) as http:
        steps = await _create(http, urls, coordinator, plan.tasks)
        rng = random.Random(f"{seed}:statussync:load")
        t0 = time.time()
        sampler = BacklogSampler(sample, t0)
        sampler.start()
        reports = []
        in_flight = asyncio.Semaphore(HTTP_CONNECTIONS)
        patience_s = RESTART_PATIENCE_S if profile.db_restart else 0.0
        for i, (task_id, _) in enumerate(plan.tasks):
            at, seq = t0 + rng.uniform(0.0, profile.period_s), 1
            while at < t0 + duration_s:
                send = Send(task_id, at)
                rec.sends.append(send)
                reports.append(_report(http, urls[i % len(urls)], steps[task_id], seq, send, in_flight, patience_s))
                at, seq = at + profile.period_s, seq + 1
        say(f"{len(reports)} reports over {duration_s:.0f} s ({profile.events_per_s:.1f}/s)")
        if profile.db_restart and restart_db is not None:
            reports.append(_restart_db_at(t0 + duration_s / 2, restart_db, rec, say))
        await asyncio.gather(*reports)
        end = time.time()
    await _drain(conns, sample, drain_s)
    sampler.stop()
    rec.samples = sampler.rows
    stop.set()
    await asyncio.gather(*runners, return_exceptions=True)
    return rec, conns, end


async def _restart_db_at(at: float, restart_db: Any, rec: Records, say: Any) -> None:
    await asyncio.sleep(max(0.0, at - time.time()))
    began = time.monotonic()
    await asyncio.to_thread(restart_db)
    rec.db_down_s = time.monotonic() - began
    say(f"MariaDB restarted: away {rec.db_down_s:.1f} s")


class BacklogSampler(PeriodicSampler):
    """Every SAMPLE_S: the oldest unpublished outbox row's age, the rows not yet settled, the load average."""

    def __init__(self, backlog: Any, t0: float) -> None:
        super().__init__("statussync-backlog", SAMPLE_S, t0)
        self.backlog = backlog

    def sample(self) -> dict[str, Any]:
        oldest, pending = self.backlog()
        return {"oldest_outbox_s": oldest, "pending": pending, "load1": os.getloadavg()[0]}


async def _drain(conns: list[Connection], sample: Any, drain_s: float) -> None:
    """Until no outbox row is pending and deliveries stopped arriving (a condition, with ``drain_s`` as deadline)."""
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline:
        _, pending = await asyncio.to_thread(sample)
        if pending == 0:
            seen = sum(len(c.seen) for c in conns)
            await asyncio.sleep(1.0)
            if sum(len(c.seen) for c in conns) == seen:
                return
        await asyncio.sleep(0.5)


def unconverged(conns: list[Connection], versions: dict[str, int], owners: dict[str, str]) -> list[str]:
    """Live connections whose last seen version of a task of their user is not the database's."""
    mine: dict[str, list[str]] = defaultdict(list)
    for task, owner in owners.items():
        mine[owner].append(task)
    return [f"connection {c.n} ({c.user}): {t} v{c.seen.get(t)} of v{versions.get(t)}"
            for c in conns if c.live for t in mine[c.user] if c.seen.get(t) != versions.get(t)]


def open_files_limit(connections: int, soft: int, hard: int, unlimited: int = -1) -> int | None:
    """The soft limit of open files this process needs for ``connections`` WebSockets (None: it has enough); a
    ValueError naming the command when the hard limit is too low (``unlimited``: RLIM_INFINITY)."""
    need = connections + FILES_BESIDES_SOCKETS
    if soft == unlimited or soft >= need:
        return None
    if hard != unlimited and hard < need:
        raise ValueError(f"{connections} WebSockets need {need} open files, and this process may open {hard}: "
                         f"raise the hard limit (ulimit -Hn {need}) and run again")
    return need


def ports_short(connections: int, port_range: str) -> str | None:
    """Why the ephemeral ports (``ip_local_port_range``: "low high") cannot hold ``connections`` to one server port,
    or None: each connection from this host to Centrifugo's one address takes a local port."""
    low, high = (int(x) for x in port_range.split())
    if high - low + 1 >= connections:
        return None
    return (f"{connections} WebSockets to one address need as many local ports, and {PORT_RANGE} offers "
            f"{high - low + 1} ({low}-{high}): widen it (sysctl net.ipv4.ip_local_port_range)")


def _room_for(connections: int) -> None:
    """Before any stack starts: raise this process's soft limit of open files (Centrifugo, a Go program, raises its
    own to the hard limit), or refuse when the machine cannot hold the profile's connections."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = open_files_limit(connections, soft, hard, resource.RLIM_INFINITY)
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    short = ports_short(connections, PORT_RANGE.read_text()) if PORT_RANGE.exists() else None
    if short:
        raise ValueError(short)


# ---------------------------------------------------------------------------------------------- the shell

# The Copilot's and the job system's options this load does not take (loadtests.run.LoadOptions).
NOT_HERE = ("workers", "fault", "fault_window", "fault_at_s", "arrival_rate", "find_max", "baseline", "api_threads",
            "idle_streams", "arrivals", "connections")


def _refuse_other_options(opts: Any) -> SyncProfile:
    from loadtests.run import refuse_options

    refuse_options(opts, NOT_HERE, "the status sync's load")
    if opts.profile not in PROFILES:
        raise ValueError(f"no status-sync profile {opts.profile!r}: one of {', '.join(PROFILES)}")
    return PROFILES[opts.profile]


def _epoch(value: Any) -> float:
    from datetime import UTC

    return float(value.replace(tzinfo=UTC).timestamp())


class _Tables:
    """The stack owner's reads: the outbox backlog while the load runs, commits and publications after."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backlog(self) -> tuple[float, int]:
        from sqlalchemy import func, select

        from reference.statussync.models import OUTBOX_DEAD, OUTBOX_PUBLISHED, TaskOutbox

        with self.engine.connect() as conn:
            oldest, pending = conn.execute(select(func.min(TaskOutbox.created_at), func.count()).where(
                TaskOutbox.status.not_in((OUTBOX_PUBLISHED, OUTBOX_DEAD)))).one()
        return (max(0.0, time.time() - _epoch(oldest)) if oldest is not None else 0.0), int(pending)

    def read(self) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float], dict[str, int],
                            dict[str, str]]:
        from sqlalchemy import select

        from reference.statussync.models import Task, TaskEventLog, TaskOutbox

        with self.engine.connect() as conn:
            commits = {(r.task_id, int(r.task_version)): _epoch(r.committed_at) for r in conn.execute(
                select(TaskEventLog.task_id, TaskEventLog.task_version, TaskEventLog.committed_at))}
            published = {(r.aggregate_id, int(r.aggregate_version)): _epoch(r.published_at) for r in conn.execute(
                select(TaskOutbox.aggregate_id, TaskOutbox.aggregate_version, TaskOutbox.published_at).where(
                    TaskOutbox.projection == "USER_SUMMARY", TaskOutbox.published_at.is_not(None)))}
            tasks = list(conn.execute(select(Task.id, Task.version, Task.owner_id)))
        return commits, published, {t.id: int(t.version) for t in tasks}, {t.id: t.owner_id for t in tasks}


def load(opts: Any, console: Any) -> int:
    """`sortie load --system statussync --profile NAME` (System.load): one run on the native stack; its exit code."""
    from reference.statussync.http.auth import COORDINATOR_ROLE, issue_token
    from reference.statussync.relay import RelayConfig
    from systems.statussync.sim import SyncSpec
    from systems.statussync.stack import RELAYS, SyncStack

    profile = _refuse_other_options(opts)
    _room_for(len(Plan.of(profile).connections))
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        if console is not None:
            console.print(text)

    drain_s = opts.drain_s if opts.drain_s is not None else 120.0
    with SyncStack(out / "stack") as stack:
        stack.reset()
        stack.start_centrifugo(SyncSpec())
        urls = stack.start_api()
        # The relays only (no reconciler: no heartbeats here; no producers: this module is them); their publish
        # ops go to a history file nothing reads (``go`` is the producers' start file: unused)
        stack.start_background([("relay", f"relay-{r}") for r in range(1, RELAYS + 1)],
                               {"relay": RelayConfig().__dict__}, stack.run_dir / "relays-history.jsonl",
                               stack.run_dir / "go", urls)
        assert stack.owner is not None and stack.centrifugo is not None
        tables = _Tables(stack.owner)
        coordinator = issue_token(stack.token_secret, "task-coordinator", COORDINATOR_ROLE, ttl_s=TOKEN_TTL_S)
        say(f"statussync load {profile.name} (x{profile.scale} of: {profile.documented}) for {opts.duration_s:.0f} s")
        started = time.time()
        rec, conns, end = asyncio.run(drive(profile, opts.duration_s, opts.seed, urls,
                                            stack.centrifugo.websocket_url, stack.hmac_key, coordinator,
                                            tables.backlog, drain_s, say, stack.mariadb.restart))
        commits, published, versions, owners = tables.read()
    fig = figures(rec, commits, published)
    slos = slo_verdicts(fig)
    behind = unconverged(conns, versions, owners)
    code = exit_code(fig, slos, behind, every_event_answered=profile.db_restart)
    result = {"system": "statussync", "profile": asdict(profile), "events_per_s": profile.events_per_s,
              "duration_s": opts.duration_s, "seed": opts.seed, "wall_s": time.time() - started,
              "load_s": end - started, "connections": len(conns), "figures": fig, "slo": slos,
              "unconverged": behind[:50], "unconverged_count": len(behind), "exit_code": code}
    (out / "load.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "load.md").write_text(markdown(result))
    say(markdown(result))
    return code


def _q(q: dict[str, float] | None) -> str:
    return "-" if q is None else f"{q['p50']:.0f} / {q['p95']:.0f} / {q['p99']:.0f} / {q['max']:.0f} ({q['count']:.0f})"


def markdown(r: dict[str, Any]) -> str:
    f, p = r["figures"], r["profile"]
    loads = f["load_average"]
    lines = [
        f"# sortie load: statussync {p['name']} (exit {r['exit_code']})", "",
        f"x{p['scale']} of {p['documented']}: {p['tasks'] + p['hot_tasks']} tasks changing every {p['period_s']:.0f} s "
        f"({r['events_per_s']:.1f} events/s), {r['connections']} WebSocket connections ({p['clients']} users' clients, "
        f"{p['hot_members']} on the hot channel, {p['idle']} idle); {r['duration_s']:.0f} s of load, seed {r['seed']}.",
        f"Load average (1 min) during the run: {min(loads, default=0):.1f}-{max(loads, default=0):.1f}.", "",
        "| figure (ms) | p50 / p95 / p99 / max (count) |", "|---|---|",
        f"| event entry, corrected (from the intended send) | {_q(f['event_ms']['corrected'])} |",
        f"| event entry, raw (from the send) | {_q(f['event_ms']['raw'])} |",
        f"| commit to publish | {_q(f['commit_to_publish_ms'])} |",
        f"| commit to visible in a client | {_q(f['commit_to_visible_ms']['from_commit'])} |",
        f"| intended send to visible (corrected) | {_q(f['commit_to_visible_ms']['corrected'])} |", "",
        f"Events {f['events']} ({f['accepted']} accepted, {f['errors']} errors {f['error_statuses']}), "
        f"deliveries {f['deliveries']}, "
        f"oldest outbox row {f['oldest_outbox_s']:.1f} s, reordered deliveries {f['reordered']} (dropped by the "
        f"version gate), regressions {len(f['regressions'])}, clients not converged "
        f"{r['unconverged_count']}, connections dropped {f['dropped_connections']} (never connected "
        f"{f['failed_connections']})." + ("" if f.get("db_down_s") is None else
                                           f" MariaDB restarted half-way: away {f['db_down_s']:.1f} s."), "",
        "| SLO | target | measured | met |", "|---|---:|---:|---|"]
    lines += [f"| {k} | {v['target']} | {'-' if v['measured'] is None else round(v['measured'], 3)} | "
              f"{'yes' if v['met'] else 'NO'} |" for k, v in r["slo"].items()]
    return "\n".join(lines) + "\n"
