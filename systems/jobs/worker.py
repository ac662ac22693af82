"""One instance of the job system's pool as its own OS process, on the real stack:
``python -m systems.jobs.worker INSTANCE --workers N --variant fixed|seed --health-port P``.

As in seed 004 (ADR-015: one process per machine, a pool of goroutines), an instance is one process running N
workers (threads named ``INSTANCE.1`` .. ``INSTANCE.N``, the owners they write) and a reclaimer; a kill takes all of
them at once. Settings from the environment: ``SORTIE_JOBS_DATABASE_URL`` (the application role, through Toxiproxy
on the stack), ``SORTIE_JOBS_SERVICE_URL`` (systems.jobs.service_http), ``SORTIE_JOBS_POOL`` (JSON: PoolConfig
fields), ``SORTIE_FAILPOINTS`` (the crash points file, kernel.failpoints: this instance's role is its name),
``SORTIE_JOBS_BUG`` (one known defect of reference.jobs.bugs switched on, for selfcheck), ``SORTIE_JOBS_HISTORY`` (a
JSON-lines file: each crash point that fires is noted there first, as the nemesis's ``kill`` or ``pause`` operation
of the run's history).

Crash points act on the whole process, for real: ``kill`` is SIGKILL, ``stop`` is SIGSTOP with a helper process that
sends SIGCONT after the point's seconds, by pidfd (a zombie: it resumes and writes what it was about to write). A
transaction's ``before-commit`` point fires after its statements, before its commit: a stop there leaves the rows it
wrote locked on PostgreSQL for as long as the instance is stopped (a stuck transaction: scenario J17). A job
whose work kills its worker (the service answers ``crash``) SIGKILLs the process. SIGTERM stops gracefully: each worker
finishes the job it holds (its outcome is written), then the process exits."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import requests
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from kernel.effects import Sleep, Transact, Tx, crash_name, opens_unit, run_sync
from kernel.failpoints import FilePoints, crash_this_process
from kernel.runtime import LOOP_ENDED, Stopping, loop_ended_value
from kernel.worker import serve_health
from reference.jobs import bugs
from reference.jobs.pool import Execute, PoolConfig, ServiceError, reclaimer_loop, worker_loop

log = logging.getLogger("sortie.jobs.worker")


RESUME_HELPER = ("import contextlib, signal, sys, time; fd = int(sys.argv[1]); time.sleep(float(sys.argv[2]))\n"
                 "with contextlib.suppress(ProcessLookupError): signal.pidfd_send_signal(fd, signal.SIGCONT)")


def pool_config(raw: str | None) -> PoolConfig:
    known = {f.name for f in fields(PoolConfig)}
    given = json.loads(raw) if raw else {}
    unknown = sorted(set(given) - known)
    if unknown:
        raise SystemExit(f"SORTIE_JOBS_POOL: unknown field(s) {', '.join(unknown)}")
    return PoolConfig(**given)


class Instance:
    """The effects of one instance's threads, performed against the real database and service."""

    def __init__(self, name: str, database_url: str, service_url: str, failpoints: str | None,
                 history: str | None = None) -> None:
        self.history = history
        self.name = name
        self.engine = create_engine(database_url, pool_size=8, max_overflow=4, pool_pre_ping=True)
        self.service_url = service_url.rstrip("/")
        self.http = requests.Session()
        self.points = FilePoints(failpoints, name) if failpoints else None
        self.stopping = threading.Event()
        # A transaction that takes work reads the flag and its clock under this lock, and stop() sets both under it:
        # no claim can carry a time after the drain began (the drain's record is exact, not a race).
        self._drain = threading.Lock()

    def perform(self, effect: Any) -> Any:
        self._crash_point(effect, "before")
        result = self._perform(effect)
        self._crash_point(effect, "after")
        return result

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Transact):
            with self._drain:
                if self.stopping.is_set() and opens_unit(effect):
                    raise Stopping  # draining: finish what is held, take nothing new
                now = datetime.now(UTC)
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                result = effect.fn(Tx(session, now, uuid.uuid4))
                # Stopped here, the instance keeps the row locks its statements took (a stuck transaction: J24).
                self._crash_point(effect, "before-commit")
                return result
        if isinstance(effect, Sleep):
            if self.stopping.wait(max(0.0, effect.seconds)):
                raise Stopping
            return None
        if isinstance(effect, Execute):
            return self._execute(effect)
        raise TypeError(f"unknown effect {effect!r}")

    def _execute(self, effect: Execute) -> bool:
        body = {"job_id": effect.job_id, "key": effect.key, "owner": effect.owner, "token": effect.token,
                "payload": effect.payload, "wait_s": effect.wait_s}
        read_timeout = (effect.wait_s if effect.wait_s is not None else 600.0) + 10.0
        try:
            resp = self.http.post(f"{self.service_url}/work", json=body, timeout=(2.0, read_timeout))
        except requests.RequestException as exc:
            raise ServiceError(f"service unreachable: {type(exc).__name__}") from exc
        if resp.status_code != 200:  # with what it said: the pool cuts a long answer to the seed's summary (J19)
            raise ServiceError(f"service answered {resp.status_code}: {_error_of(resp)}")
        answer = resp.json()
        if answer.get("crash"):
            log.error("job %s crashed its worker", effect.job_id)
            self._note("kill", {"process": threading.current_thread().name, "why": "its job crashed it"})
            crash_this_process("kill")
        return bool(answer.get("finished"))

    def _crash_point(self, effect: Any, when: str) -> None:
        if self.points is None:
            return
        name = crash_name(effect)
        point = self.points.take(name, when)
        if point is None or point.action == "hold":
            return
        log.warning("crash point %s %s@%s", point.action, name, when)
        self._note("pause" if point.action == "stop" else "kill",
                   {"process": threading.current_thread().name, "why": f"{when} {name}",
                    **({"seconds": point.seconds} if point.action == "stop" else {})})
        if point.action == "stop":
            # A stopped process cannot wake itself: a detached helper sends SIGCONT when the pause is over, through
            # a pidfd of this process (inherited), never a pid: if this process is killed meanwhile and its pid
            # reused, the SIGCONT must not wake whatever runs under that pid now.
            fd = os.pidfd_open(os.getpid())
            subprocess.Popen([sys.executable, "-c", RESUME_HELPER, str(fd), f"{float(point.seconds):.3f}"],
                             pass_fds=(fd,), start_new_session=True)
            os.close(fd)
            crash_this_process("stop")
            self._note("resume", {"process": threading.current_thread().name, "why": f"{when} {name}"})
        else:
            crash_this_process("kill")

    def stop(self) -> None:
        """SIGTERM: drain. Noted (as ``drain``, with the time after which this instance takes no work)."""
        with self._drain:
            if self.stopping.is_set():
                return
            self.stopping.set()
            at = datetime.now(UTC)
        self._note("drain", {"process": self.name, "at": at.isoformat()})

    def _note(self, f: str, value: dict[str, Any], process: str = "nemesis") -> None:
        if self.history is None:
            return
        line = json.dumps({"time": time.time(), "process": process, "type": "info", "f": f, "value": value})
        with open(self.history, "a") as fh:  # one short line per write: appends do not interleave
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def run(self, work: Any) -> None:
        error: Exception | None = None
        try:
            run_sync(work, self.perform)
        except Stopping:
            return
        except Exception as exc:  # a bug of the pool: this thread stops, the health check says so
            log.exception("a pool thread died")
            error = exc
        if not self.stopping.is_set():  # invariant J11
            process = threading.current_thread().name
            self._note(LOOP_ENDED, loop_ended_value(process, error),
                       process=process)


def _error_of(resp: requests.Response) -> str:
    """The service's error text (its JSON body's ``error``), else the body as it came."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    return str(body.get("error") or body) if isinstance(body, dict) else str(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.jobs.worker")
    parser.add_argument("instance")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variant", choices=("fixed", "seed"), default="fixed")
    parser.add_argument("--health-port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.instance} %(levelname)s %(message)s")
    cfg = pool_config(os.environ.get("SORTIE_JOBS_POOL"))
    instance = Instance(args.instance, os.environ["SORTIE_JOBS_DATABASE_URL"], os.environ["SORTIE_JOBS_SERVICE_URL"],
                        os.environ.get("SORTIE_FAILPOINTS"), os.environ.get("SORTIE_JOBS_HISTORY"))
    bug = os.environ.get("SORTIE_JOBS_BUG") or None
    bugs.BUGS.activate(bug)  # for the process's life; an unknown name stops it here
    state: dict[str, Any] = {"ready": False, "instance": args.instance, "variant": args.variant, "bug": bug}
    health = serve_health(args.health_port, args.instance, state) if args.health_port else None
    signal.signal(signal.SIGTERM, lambda *_: instance.stop())
    signal.signal(signal.SIGINT, lambda *_: instance.stop())
    threads = [threading.Thread(target=instance.run, name=f"{args.instance}.{i}", daemon=True,
                                args=(worker_loop(args.variant, cfg, f"{args.instance}.{i}"),))
               for i in range(1, args.workers + 1)]
    threads.append(threading.Thread(target=instance.run, name=f"{args.instance}.reclaimer", daemon=True,
                                    args=(reclaimer_loop(args.variant, cfg, args.instance),)))
    for t in threads:
        t.start()
    state["ready"] = True
    while not instance.stopping.wait(1.0):
        state["alive_threads"] = sum(t.is_alive() for t in threads)
    drain_until = time.monotonic() + cfg.handler_timeout_s + 30.0
    for t in threads:  # graceful: each thread finishes the job it holds, then meets a sleep and stops
        t.join(max(0.0, drain_until - time.monotonic()))
    if health is not None:
        health.shutdown()
    instance.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
