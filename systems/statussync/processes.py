"""The status sync's background processes on the native stack, each an OS process (systems.statussync.stack starts
them): an outbox relay, the health reconciler, and the producers (a coordinator per task and the step producers it
dispatches). Each runs the reference's sans-IO loops (reference.statussync.relay, reconciler, producer) on
kernel.runtime.Runtime against MariaDB, with this shell performing what the reference leaves to it:

- ``ServerPublish``: Centrifugo's HTTP server API (through its Toxiproxy link); a refused or failed call is
  ``PublishFailed`` with the HTTP status (0 when nothing answered), as the relay expects;
- the producers' ``event.report``, ``task.create`` and ``step.heartbeat`` transactions go to the status API over HTTP
  (its two replicas in turn), as seed 003's producers do; a request that got no answer (the link cut, a 5xx) is a
  ``DBAPIError`` to the producer, which sends the same event again. Their ledger (``ledger.*``) and the coordinator's
  read of a step's outcome stay transactions on the database: the producers' own tables live beside the service's
  here, one MariaDB for the whole stack;
- ``StartProducer``: a thread running the step attempt's producer.

What each process does that a checker reads is appended to the history file (JSON lines: wall time, process, type,
f, value), which the runner merges: the report answers (``event.report``) and the publish tries (``publish``), the
same ops and values as the simulation records.

    python -m systems.statussync.processes relay relay-1 --health-port N
    python -m systems.statussync.processes reconciler health-1 --health-port N
    python -m systems.statussync.processes producers producers --health-port N
    python -m systems.statussync.processes step parser-3          (started by the producers: one step attempt)

Crash points (kernel.failpoints, the file SORTIE_FAILPOINTS names) fire in the process of their role: ``relay``,
``health``, ``coordinator`` (the producers process), and ``preparer``, ``parser``, ``storer`` (group ``producer``):
each step attempt's producer is an OS process of its own, so a point kills or stops that producer only, as in the
simulation. A killed step producer is started again after 2 s (scaled) by the producers process and resumes from
its ledger; a killed relay or reconciler is started again by the stack's supervisor.

Configuration by environment: SORTIE_STATUSSYNC_DATABASE_URL, SORTIE_STATUSSYNC_CONFIG (JSON: relay, health,
coordinator, tasks, factor), SORTIE_STATUSSYNC_HISTORY; the relay's SORTIE_STATUSSYNC_CENTRIFUGO_URL and _KEY; the
producers' SORTIE_STATUSSYNC_API_URLS (comma-separated) and SORTIE_STATUSSYNC_TOKEN_SECRET."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

from harness.history import INFO, INVOKE, OK
from kernel.effects import Transact, crash_name, run_sync
from kernel.failpoints import FilePoints, crash_this_process
from kernel.runtime import Runtime
from reference.statussync.bugs import BUGS
from reference.statussync.bugs import ENV_VAR as BUGS_ENV_VAR
from reference.statussync.http.auth import COORDINATOR_ROLE, issue_token
from reference.statussync.producer import CoordinatorConfig, StartProducer, StepPlan, coordinator_run, step_run
from reference.statussync.reconciler import HealthConfig, reconciler_loop
from reference.statussync.registry import STEPS, TENANT
from reference.statussync.relay import PublishFailed, RelayConfig, ServerPublish, relay_loop
from reference.statussync.service import NewTask, Reported
from stack.centrifugo import CentrifugoAPI, CentrifugoAPIError

log = logging.getLogger("sortie.statussync.processes")

PROBLEM_KEYS = ("type", "title", "status", "detail", "instance")
PERMANENT_API_CODES = {102, 103, 107}  # unknown channel, permission denied, bad request: a 4xx in all but name
REQUEST_TIMEOUT_S = 10.0
PRODUCER_ROLES = {"file-worker": "preparer", "document-parser": "parser", "result-service": "storer"}
RESTART_AFTER_S = 2.0  # a killed step producer starts again after this (scaled), as the simulation's supervisor
RESUME_HELPER = ("import contextlib, signal, sys, time; fd = int(sys.argv[1]); time.sleep(float(sys.argv[2]))\n"
                 "with contextlib.suppress(ProcessLookupError): signal.pidfd_send_signal(fd, signal.SIGCONT)")


def naive_utc() -> datetime:
    """The transaction clock: UTC without a zone, as DATETIME(3) holds it (MariaDB refuses an offset)."""
    return datetime.now(UTC).replace(tzinfo=None)


class HistoryFile:
    """The ops a checker reads, appended as JSON lines (one write per op: processes share the file)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def op(self, process: str, type_: str, f: str, value: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({"time": time.time(), "process": process, "type": type_, "f": f, "value": value},
                          default=str)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def report_value(reported: Reported) -> dict[str, Any]:
    """What the history keeps of a report's answer (the simulation's own shape: systems.statussync.sim)."""
    from systems.statussync.sim import _report_value

    return _report_value(reported)


def no_answer(what: str, why: str) -> OperationalError:
    """A request that got no answer, as the producers' loops expect it (they send the same again)."""
    return OperationalError(what, None, ConnectionError(why))


class StatusApi:
    """The producers' side of the status API: its replicas in turn, a problem's fields as the service's answer."""

    def __init__(self, urls: list[str], token_secret: str) -> None:
        self.urls = itertools.cycle(urls)
        self.session = requests.Session()
        self.coordinator = issue_token(token_secret, "task-coordinator", COORDINATOR_ROLE, ttl_s=86400)

    def post(self, path: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
        url = f"{next(self.urls)}{path}"
        try:
            resp = self.session.post(url, json=body, headers={"Authorization": f"Bearer {token}"},
                                     timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as err:
            raise no_answer(f"POST {path}", str(err)[:200]) from None
        if resp.status_code >= 500:
            raise no_answer(f"POST {path}", f"{resp.status_code} {resp.text[:200]}")
        data = resp.json()
        return resp.status_code, data

    def report(self, event: dict[str, Any], token: str) -> Reported:
        status, body = self.post("/internal/v1/task-events", event, token)
        answer = body if status == 200 else {k: v for k, v in body.items() if k not in PROBLEM_KEYS}
        answer.setdefault("accepted", False)
        answer.setdefault("eventId", event.get("eventId"))
        return Reported(answer, event, [])

    def create(self, new: NewTask) -> dict[str, Any]:
        body = {"taskId": new.task_id, "tenantId": new.tenant_id, "ownerId": new.owner_id, "title": new.title,
                "steps": [{"stepId": s, "operationCode": op} for s, op in new.steps]}
        status, answer = self.post("/internal/v1/tasks", body, self.coordinator)
        if status != 200:
            raise RuntimeError(f"task {new.task_id} refused: {answer}")
        return answer

    def heartbeat(self, task_id: str, step_id: str, attempt: int, producer: str, token: str) -> bool:
        event = {"eventId": f"hb:{task_id}:{step_id}:{attempt}", "taskId": task_id, "taskAttempt": 1,
                 "stepId": step_id, "stepAttempt": attempt, "producerId": producer, "sourceSeq": 0,
                 "eventType": "STEP_HEARTBEAT"}
        status, _ = self.post("/internal/v1/task-events", event, token)
        return status == 200


class Shell:
    """One process's effect interpreter: the Runtime for transactions and sleeps, this shell for the rest."""

    def __init__(self, process: str, runtime: Runtime, history: HistoryFile, api: StatusApi | None = None,
                 centrifugo: CentrifugoAPI | None = None,
                 start_producer: Callable[[dict[str, Any]], None] | None = None,
                 points: FilePoints | None = None) -> None:
        self.process, self.runtime, self.history = process, runtime, history
        self.api, self.centrifugo, self.start_producer = api, centrifugo, start_producer
        self.points = points

    def named(self, process: str) -> Shell:
        return Shell(process, self.runtime, self.history, self.api, self.centrifugo, self.start_producer,
                     self.points)

    def run(self, work: Generator[Any, Any, Any]) -> Any:
        return run_sync(work, self.perform)

    def perform(self, effect: Any) -> Any:
        self._crash_point(effect, "before")
        result = self._perform(effect)
        self._crash_point(effect, "after")
        return result

    def _crash_point(self, effect: Any, when: str) -> None:
        """A point armed for this role at this effect: noted in the history, then SIGKILL, or SIGSTOP with a
        detached helper that sends SIGCONT when the pause is over (through a pidfd, never a pid that may be
        reused)."""
        if self.points is None:
            return
        name = crash_name(effect)
        point = self.points.take(name, when)
        if point is None or point.action == "hold":
            return
        why = {"process": self.process, "why": f"{when} {name}"}
        if point.action == "stop":
            self.history.op("nemesis", INFO, "pause", {**why, "seconds": point.seconds})
            fd = os.pidfd_open(os.getpid())
            subprocess.Popen([sys.executable, "-c", RESUME_HELPER, str(fd), f"{float(point.seconds):.3f}"],
                             pass_fds=(fd,), start_new_session=True)
            os.close(fd)
            crash_this_process("stop")
            self.history.op("nemesis", INFO, "resume", why)
        else:
            self.history.op("nemesis", INFO, "kill", why)
            crash_this_process("kill")

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, ServerPublish):
            return self._publish(effect)
        if isinstance(effect, StartProducer):
            assert self.start_producer is not None, "only the producers start producers"
            self.start_producer(effect.ctx)
            return None
        if isinstance(effect, Transact) and self.api is not None and isinstance(effect.fn, functools.partial):
            over_http = self._over_http(effect.name, effect.fn.keywords)
            if over_http is not None:
                return over_http()
        return self.runtime.perform(effect)

    def _over_http(self, name: str, args: dict[str, Any]) -> Callable[[], Any] | None:
        api = self.api
        assert api is not None
        if name == "event.report":
            return functools.partial(self._report, args["event"], args["token"])
        if name == "task.create":
            return functools.partial(api.create, args["new"])
        if name == "step.heartbeat":
            return functools.partial(api.heartbeat, args["task_id"], args["step_id"], int(args["attempt"]),
                                     args["producer"], args["token"])
        return None

    def _report(self, event: dict[str, Any], token: str) -> Reported:
        assert self.api is not None
        self.history.op(self.process, INVOKE, "event.report", {"eventId": event.get("eventId")})
        try:
            reported = self.api.report(event, token)
        except Exception as err:  # no answer (a 5xx, the API away): a failed op, as the simulation's runtime records
            self.history.op(self.process, "fail", "event.report", {"error": type(err).__name__})
            raise
        self.history.op(self.process, OK, "event.report", report_value(reported))
        return reported

    def _publish(self, effect: ServerPublish) -> int:
        assert self.centrifugo is not None
        value = {"outbox_id": effect.outbox_id, "attempt": effect.attempt, "channel": effect.channel}
        self.history.op(self.process, INVOKE, "publish", value)
        try:
            offset = self.centrifugo.publish(effect.channel, effect.data).offset
        except CentrifugoAPIError as err:
            status = 400 if err.code in PERMANENT_API_CODES else (err.status if err.status and err.status != 200
                                                                   else (500 if err.code else 0))
            self.history.op(self.process, "fail", "publish", {**value, "status": status})
            raise PublishFailed(status, str(err)[:200]) from None
        self.history.op(self.process, OK, "publish", {**value, "offset": offset})
        return offset


# ---------------------------------------------------------------------------------------------- configuration


def scaled_configs(raw: dict[str, Any]) -> tuple[RelayConfig, HealthConfig, CoordinatorConfig, float]:
    """The configurations the runner chose (already in real seconds)."""
    coordinator = raw.get("coordinator", {})
    groups = tuple(tuple(g) for g in coordinator.pop("groups", [[s[0]] for s in STEPS]))
    return (RelayConfig(**raw.get("relay", {})), HealthConfig(**raw.get("health", {})),
            CoordinatorConfig(groups=groups, **coordinator), float(raw.get("factor", 1.0)))


def _runtime(database_url: str) -> Runtime:
    engine = create_engine(database_url, pool_size=8, max_overflow=16, pool_pre_ping=True, pool_recycle=300)
    return Runtime(sessionmaker(engine), clock=naive_utc)


class Producers:
    """The coordinators of the run's tasks (each at its time) and the step producers they dispatch."""

    def __init__(self, shell: Shell, coordinator: CoordinatorConfig, tasks: list[dict[str, Any]], factor: float,
                 work: dict[str, Any]) -> None:
        self.shell, self.coordinator, self.tasks, self.factor, self.work = shell, coordinator, tasks, factor, work
        self.kinds = {t["taskId"]: t.get("kind", "ok") for t in tasks}
        self.started = itertools.count(1)
        self.threads: list[threading.Thread] = []
        self.children: set[subprocess.Popen[bytes]] = set()
        self.lock = threading.Lock()
        self.stopping = False
        self.late_left = int(work.get("late_workers", 0))
        shell.start_producer = self.start_producer

    def run(self, go: str) -> None:
        """Once the runner writes ``go`` (the scenario's time 0, once every process is up), each coordinator at
        its time."""
        while not os.path.exists(go):
            time.sleep(0.05)
        with open(go, encoding="utf-8") as written:
            t0 = float(written.read())
        for i, task in enumerate(self.tasks):
            thread = threading.Thread(target=self._coordinator, args=(i, task, t0), name=f"coordinator-{i}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def _coordinator(self, i: int, task: dict[str, Any], t0: float) -> None:
        time.sleep(max(0.0, t0 + float(task["at"]) - time.time()))
        name = f"coordinator-{i}"
        shell = self.shell.named(name)
        new = NewTask(task["taskId"], TENANT, task["owner"], task["title"], tuple((s[0], s[1]) for s in STEPS))
        shell.history.op(name, INVOKE, "task", {"taskId": new.task_id, "owner": new.owner_id})
        try:
            state = shell.run(coordinator_run(new, self.coordinator))
        except Exception as err:  # recorded: the runner's settle condition sees the task never ended
            log.exception("coordinator %s failed", name)
            shell.history.op(name, "fail", "task", {"taskId": new.task_id, "error": str(err)[:200]})
            return
        with self.lock:
            late = self.kinds[new.task_id] == "failing" and self.late_left > 0
            self.late_left -= late
        if late:  # dispatched before the failure, it reports after the task ended (the simulation's late worker)
            self.start_producer(state.steps["03_store"])
        # After the late worker started: the runner settles only once every coordinator noted its end
        shell.history.op(name, OK, "task", {"taskId": new.task_id})

    def start_producer(self, ctx: dict[str, Any]) -> None:
        """The step attempt's producer as an OS process of its own, started again after a kill (it resumes from
        its ledger) until it ends."""
        task_id, step_id, attempt = ctx["taskId"], ctx["stepId"], int(ctx["stepAttempt"])
        kind = self.kinds.get(task_id, "ok")
        fails = step_id == "02_parse" and (kind == "failing" or (kind == "flaky" and attempt == 1))
        step = {"ctx": ctx, "fails": fails, "reorder_last": kind == "reordered" and step_id == "02_parse",
                **self.work}
        name = f"{PRODUCER_ROLES[ctx['producerId']]}-{next(self.started)}"
        self.shell.history.op(name, INFO, "producer", {"taskId": task_id, "stepId": step_id, "stepAttempt": attempt,
                                                       "producerId": ctx["producerId"]})
        thread = threading.Thread(target=self._supervise, args=(name, step), name=f"supervise-{name}", daemon=True)
        thread.start()

    def _supervise(self, name: str, step: dict[str, Any]) -> None:
        env = {**os.environ, "SORTIE_STATUSSYNC_STEP": json.dumps(step)}
        while True:
            child = subprocess.Popen([sys.executable, "-m", "systems.statussync.processes", "step", name], env=env)
            with self.lock:
                self.children.add(child)
            code = child.wait()
            with self.lock:
                self.children.discard(child)
            if code != -signal.SIGKILL or self.stopping:
                return
            time.sleep(RESTART_AFTER_S * self.factor)
            self.shell.history.op("supervisor", INFO, "restart", {"process": name})

    def stop(self) -> None:
        """SIGTERM: the step producers go with the producers (nothing to drain: their ledgers hold every state)."""
        self.stopping = True
        with self.lock:
            for child in self.children:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()


def run_step(name: str, shell: Shell, raw: dict[str, Any]) -> None:
    """One step attempt's producer: its phases (the simulation's, systems.statussync.sim) from its ledger on."""
    from reference.statussync.producer import step_phases

    ctx = raw["ctx"]
    phases = step_phases(ctx["stepId"], int(raw["progress"]), float(raw["work_s"]), bool(raw["fails"]),
                         int(ctx["statusDefinitionVersion"]))
    plan = StepPlan(phases, heartbeat_s=float(raw["heartbeat_s"]), reorder_last=bool(raw["reorder_last"]))
    shell.named(name).run(step_run(ctx, plan, {}))


# ---------------------------------------------------------------------------------------------- main


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": true}')

    def log_message(self, *_: Any) -> None:
        pass


def _serve_health(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Health)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()


def _points(role: str) -> FilePoints | None:
    path = os.environ.get("SORTIE_FAILPOINTS")
    return FilePoints(path, role) if path else None


def _api() -> StatusApi:
    return StatusApi(os.environ["SORTIE_STATUSSYNC_API_URLS"].split(","), os.environ["SORTIE_STATUSSYNC_TOKEN_SECRET"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.statussync.processes")
    parser.add_argument("role", choices=("relay", "reconciler", "producers", "step"))
    parser.add_argument("name")
    parser.add_argument("--health-port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # nothing to drain: the tables hold every state
    BUGS.activate(os.environ.get(BUGS_ENV_VAR))  # selfcheck on a real stack: an unknown name stops the process here
    raw = json.loads(os.environ.get("SORTIE_STATUSSYNC_CONFIG", "{}"))
    relay_cfg, health_cfg, coordinator_cfg, factor = scaled_configs(raw)
    runtime = _runtime(os.environ["SORTIE_STATUSSYNC_DATABASE_URL"])
    history = HistoryFile(os.environ.get("SORTIE_STATUSSYNC_HISTORY"))
    if args.role == "step":  # no health port: its producers process supervises it
        step = json.loads(os.environ["SORTIE_STATUSSYNC_STEP"])
        role = PRODUCER_ROLES[step["ctx"]["producerId"]]
        run_step(args.name, Shell(args.name, runtime, history, api=_api(), points=_points(role)), step)
        return 0
    _serve_health(args.health_port)
    if args.role == "relay":
        centrifugo = CentrifugoAPI(os.environ["SORTIE_STATUSSYNC_CENTRIFUGO_URL"],
                                   os.environ["SORTIE_STATUSSYNC_CENTRIFUGO_KEY"], timeout_s=5.0)
        Shell(args.name, runtime, history, centrifugo=centrifugo, points=_points("relay")).run(
            relay_loop(relay_cfg, args.name))
    elif args.role == "reconciler":
        Shell(args.name, runtime, history, points=_points("health")).run(reconciler_loop(health_cfg))
    else:
        producers = Producers(Shell(args.name, runtime, history, api=_api(), points=_points("coordinator")),
                              coordinator_cfg, raw.get("tasks", []), factor,
                              {**raw["work"], "late_workers": raw.get("late_workers", 0)})

        def stop(*_: Any) -> None:
            producers.stop()
            os._exit(0)

        signal.signal(signal.SIGTERM, stop)
        producers.run(os.environ["SORTIE_STATUSSYNC_GO"])
        for thread in producers.threads:
            thread.join()
        while True:  # the step producers a late coordinator started may still run; the stack stops this process
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
