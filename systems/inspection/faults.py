"""The inspection pipeline's faults (chaos.faults.registry("inspection")), simulation halves only: the real stack is
not built yet. A worker killed (both threads; its AMQP connection closed, so RabbitMQ requeues what it held) and
restarted after params.restart_after_s; a worker stopped (SIGSTOP: both threads) or its heartbeat thread alone
stuck; the leader stopped; the database or the broker away; an IS node killed around its outbox and publish steps
(the generic crash points); a slot's bindings removed (publishes to it are returned); the queues capped."""

from __future__ import annotations

from typing import Any

from chaos import faults as chaos
from chaos.faults import Fault, Params, needs
from harness.history import INFO, NEMESIS

FAULTS = chaos.registry("inspection")


def _number(process: str) -> str:
    return process.rsplit("-", 1)[1]


def _worker_kill(world: Any, params: Params, on: bool) -> None:
    if not on:
        return
    worker = str(params["worker"])
    s = world.supervised.get(worker)
    if s is None:
        world.history.add(world.env.now, NEMESIS, INFO, "kill-missed", {"process": worker, "why": "not started"})
        return
    s.restart_after_s = float(params.get("restart_after_s", 5.0))
    world.kill(worker, "worker-kill")


def _process_kill(world: Any, params: Params, on: bool) -> None:
    if on and (s := world.supervised.get(str(params["process"]))) is not None:
        s.restart_after_s = float(params.get("restart_after_s", 5.0))
        world.kill(str(params["process"]), "process-kill")


def _worker_pause(world: Any, params: Params, on: bool) -> None:
    """SIGSTOP of the worker's process (both threads): for the window, or (params.at: an effect, params.seconds)
    when it is about to perform that effect next (a stop in the middle of a batch)."""
    worker = str(params["worker"])
    if "at" in params:
        if on:
            world.pause_points.append((worker, str(params["at"]), float(params["seconds"])))
        return
    if on:
        world.stop_worker(worker, None)
    else:
        world.pause([worker, f"heartbeat-{_number(worker)}"], False, "worker-pause")


def _heartbeat_stall(world: Any, params: Params, on: bool) -> None:
    """The worker's heartbeat thread stuck, its consumer thread going on (§4.4 E's zombie)."""
    world.pause([f"heartbeat-{_number(str(params['worker']))}"], on, "heartbeat-stall")


def _leader_pause(world: Any, params: Params, on: bool) -> None:
    """SIGSTOP of the web node leading when the window opens (the last that said it leads)."""
    if on:
        leading = [o.process for o in world.history.ops if o.f == "leader"]
        world.leader_paused = leading[-1] if leading else "web-1"
    world.pause([world.leader_paused], on, "leader-pause")


def _broker_outage(world: Any, params: Params, on: bool) -> None:
    world.mq.set_down(on)


def _queue_unbound(world: Any, params: Params, on: bool) -> None:
    world.mq.unbind(int(params["slot"]), on)


def _queue_limit(world: Any, params: Params, on: bool) -> None:
    world.mq.max_length = int(params.get("max_length", 5)) if on else None


FAULTS.register(
    chaos.any_crash_point(),
    Fault("worker-kill", "SIGKILL params.worker (both threads; RabbitMQ requeues what it held); restarted after "
          "params.restart_after_s (5)", _worker_kill, None, needs("worker")),
    Fault("process-kill", "SIGKILL params.process (a web node or an IS node); restarted after params.restart_after_s "
          "(5)", _process_kill, None, needs("process")),
    Fault("worker-pause", "SIGSTOP params.worker for the window, or for params.seconds when it next performs "
          "params.at (an effect: batch.commit, amqp.ack); past the AMQP heartbeat timeout (90 s) RabbitMQ closes its "
          "connection", _worker_pause, None, needs("worker")),
    Fault("heartbeat-stall", "params.worker's heartbeat thread is stuck for the window; its consumer goes on",
          _heartbeat_stall, None, needs("worker")),
    Fault("leader-pause", "SIGSTOP the web node leading for the window", _leader_pause, None),
    Fault("db-outage", "the database is unreachable for the window", chaos.db_down, None),
    Fault("broker-outage", "RabbitMQ is unreachable for the window: every connection closed, publishes unanswered "
          "(the quorum queues keep their messages)", _broker_outage, None),
    Fault("queue-unbound", "slot params.slot's bindings are removed for the window: mandatory publishes to it are "
          "returned", _queue_unbound, None, needs("slot")),
    Fault("queue-limit", "every queue holds at most params.max_length (5) messages for the window (x-max-length)",
          _queue_limit, None),
)
