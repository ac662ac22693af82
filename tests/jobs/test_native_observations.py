"""What the job system's native shell observes besides the tables (systems.jobs.stack.JobsStack.observe): the kills and
stops its runs noted (J16-J18 excuse those workers' stale claims; a crash point acts on a whole instance), the dead-job
alerts (J13) and the defects (J14) in the instances' logs, and the failing agent's whole stack that the native
service answers and the worker passes on to be cut (J19). No database and no stack: files and one in-process HTTP
service."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server

from kernel.logs import DEFECT_MARK
from reference.jobs import pool
from reference.jobs.pool import Execute, PoolConfig, ServiceError, dead_alerts_in_log
from scenarios.verdicts import HELD, VIOLATED
from systems.jobs.checkers import (
    SEED_REASON_CHARS,
    JobsState,
    every_dead_job_alerts_once,
    live_claims_are_not_reclaimed,
    no_defect_raised,
)
from systems.jobs.service import AGENT_STACK
from systems.jobs.service_http import create_app
from systems.jobs.stack import JobsStack, instance_drains, instance_stops
from systems.jobs.worker import Instance

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKER_FORMAT = "%(asctime)s instance-a %(levelname)s %(message)s"  # systems.jobs.worker.main's


def _logged(emit: Any) -> str:
    """What ``emit()`` logs, as an instance's log file holds it (the worker's format)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.setFormatter(logging.Formatter(WORKER_FORMAT))
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    for name in (pool.ALERTS, pool.log.name):
        logging.getLogger(name).addHandler(handler)
    try:
        emit()
    finally:
        for name in (pool.ALERTS, pool.log.name):
            logging.getLogger(name).removeHandler(handler)
    return "\n".join(lines) + "\n"


def _note(t: float, f: str, process: str, who: str = "nemesis") -> dict[str, Any]:
    return {"time": t, "process": who, "type": "info", "f": f, "value": {"process": process}}


def test_a_kill_or_stop_of_one_thread_names_every_process_of_its_instance() -> None:
    notes = [_note(110.0, "kill", "instance-a.2"), _note(120.0, "pause", "instance-b.reclaimer"),
             _note(130.0, "kill", "instance-b"),  # the nemesis's SIGKILL names the instance
             _note(140.0, "drain", "instance-a"), _note(150.0, "loop-ended", "instance-a.1", who="instance-a.1")]
    assert instance_stops(notes, 100.0, workers=2) == [
        (10.0, "instance-a"), (10.0, "instance-a.1"), (10.0, "instance-a.2"),
        (20.0, "instance-b"), (20.0, "instance-b.1"), (20.0, "instance-b.2"),
        (30.0, "instance-b"), (30.0, "instance-b.1"), (30.0, "instance-b.2")]


def test_a_crash_point_another_worker_of_the_instance_fired_excuses_the_reclaim() -> None:
    """Natively a crash point stops the whole process: instance-a.1's claim goes stale when instance-a.2 fires it."""
    log = [{"id": i, "job_id": 1, "from_status": frm, "to_status": to, "actor": actor, "message": "", "detail": {},
            "created_at": T0 + timedelta(seconds=at)}
           for i, (frm, to, actor, at) in enumerate([(None, "pending", "enqueue", 0), ("pending", "running",
                                                     "instance-a.1", 1), ("running", "pending", "reclaimer", 9)])]

    def verdict(kills: list[tuple[float, str]]) -> str:
        s = JobsState([], log, [], {}, [], [], T0, 3, t0=T0.timestamp(), kills=kills)
        return live_claims_are_not_reclaimed(s).status

    fired = [_note(T0.timestamp() + 2.0, "kill", "instance-a.2")]
    assert verdict(instance_stops(fired, T0.timestamp(), workers=2)) == HELD
    assert verdict([(2.0, "instance-a.2")]) == VIOLATED  # one thread's name alone does not excuse its neighbour


def test_an_instance_drain_is_each_of_its_workers_from_its_own_time_to_its_restart() -> None:
    """The instance notes its drain with the exact time it took no more work (``at``: under the lock its claims
    read the clock under), the harness the restart; the drain at the run's end is never followed by one."""
    drained_at = datetime.fromtimestamp(100.0 + 4.25, UTC).isoformat()
    notes = [{**_note(104.5, "drain", "instance-a"), "value": {"process": "instance-a", "at": drained_at}},
             _note(109.0, "restart", "instance-a"),
             {**_note(130.0, "drain", "instance-b"), "value": {"process": "instance-b", "at": drained_at}}]
    assert instance_drains(notes, 100.0, workers=2) == [
        {"process": "instance-a.1", "at": 4.25, "until": 9.0}, {"process": "instance-a.2", "at": 4.25, "until": 9.0},
        {"process": "instance-b.1", "at": 4.25, "until": None}, {"process": "instance-b.2", "at": 4.25, "until": None}]


def test_the_dead_alerts_are_read_from_the_log_as_the_pool_says_them() -> None:
    text = _logged(lambda: (pool.alert_dead(7, "service answered 422: the work failed"),
                            pool.alert_dead(12, "reclaimed: stale claim, attempts spent")))
    assert dead_alerts_in_log(text) == [{"code": "JOB_DEAD", "job_id": 7}, {"code": "JOB_DEAD", "job_id": 12}]
    assert dead_alerts_in_log("2026-12-07 10:00:00,000 instance-a WARNING job 7 left as it was\n") == []


@pytest.fixture
def stack(tmp_path: Path) -> JobsStack:
    """A stack object over ``tmp_path`` with nothing started (observe reads only its files)."""
    return JobsStack(tmp_path, postgres=SimpleNamespace())  # type: ignore[arg-type]


def _defect() -> None:
    try:
        {}["claim"]
    except KeyError as exc:
        pool.log.error("instance-a.1: job 3 left as it was %s%s", DEFECT_MARK, "KeyError: 'claim'", exc_info=exc)


def test_observe_reads_what_the_run_logged_and_noted_since_it_began(stack: JobsStack) -> None:
    before = _logged(lambda: pool.alert_dead(1, "from an earlier run"))
    (stack.run_dir / "instance-a.log").write_text(before)
    sizes = stack.log_sizes()
    with (stack.run_dir / "instance-a.log").open("a") as fh:
        fh.write(_logged(lambda: (pool.alert_dead(5, "boom"), _defect())))
    stack.note("kill", {"process": "instance-b", "why": "worker-kill"})
    state = JobsState([{"id": 5, "status": "dead"}], [{"id": 1, "job_id": 5, "from_status": None,
                                                       "to_status": "dead", "actor": "instance-a.1", "message": "x",
                                                       "detail": {}, "created_at": T0}],
                      [], {}, [], [], T0, 3, t0=json.loads(stack.history_file().read_text())["time"] - 1.0, loops=6)
    stack.observe(state, sizes, workers=2, cfg=PoolConfig(handler_timeout_s=9.0, heartbeat_s=1.5))
    assert state.alerts == [{"code": "JOB_DEAD", "job_id": 5}]  # not job 1's, logged before the run
    assert [(round(t, 3), who) for t, who in state.kills or ()] == [
        (1.0, "instance-b"), (1.0, "instance-b.1"), (1.0, "instance-b.2")]
    assert (state.handler_timeout_s, state.heartbeat_s) == (9.0, 1.5)
    assert every_dead_job_alerts_once(state).status == HELD
    verdict = no_defect_raised(state)
    assert verdict.status == VIOLATED and [d["error"] for d in state.defects or ()] == ["KeyError: 'claim'"]
    assert "test_native_observations.py" in (state.defects or [{}])[0]["where"]


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    """The native service (systems.jobs.service_http) in this process, on a free port."""
    server = make_server("127.0.0.1", 0, create_app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


def _failure(service_url: str, key: str) -> str:
    instance = Instance.__new__(Instance)  # no database: _execute needs only the service
    instance.http, instance.service_url = requests.Session(), service_url
    with pytest.raises(ServiceError) as failed:
        instance._execute(Execute(1, "survey", key, {}, "instance-a.1", 1, wait_s=1.0))
    return str(failed.value)


def test_the_native_service_answers_a_failing_job_with_the_agents_whole_stack(service_url: str) -> None:
    """As the simulation's model does (systems.jobs.service.ServiceModel): the worker's reason must be cut (J19)."""
    assert requests.post(f"{service_url}/reset", json={"work_s": 0.0, "failing_keys": ["k:failing"],
                                                       "fail_first": {"k:flaky": 1}}, timeout=5).ok
    long = _failure(service_url, "k:failing")
    assert long.startswith("service answered 422: the work failed: Traceback") and AGENT_STACK in long
    assert len(long) > SEED_REASON_CHARS
    assert _failure(service_url, "k:flaky") == "service answered 422: the work failed"
