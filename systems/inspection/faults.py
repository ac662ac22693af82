"""The inspection pipeline's faults (chaos.faults.registry("inspection")), with their real-stack halves where the stack
(systems.inspection.stack) has a form for them, acting through an InspectionNemesis. A worker killed (both threads;
its AMQP connection closed, so RabbitMQ requeues what it held) and
restarted after params.restart_after_s; a worker stopped (SIGSTOP: both threads) or its heartbeat thread alone
stuck; the leader stopped; the database or the broker away; an IS node killed around its outbox and publish steps
(the generic crash points); a slot's bindings removed (publishes to it are returned); the queues capped; an IS
node's replayer held until a newer message of its own was processed (an older message's replay lands after it); the
leader's lease notices lost (Redis pub/sub)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

from chaos import faults as chaos
from chaos.faults import Fault, Params, needs
from chaos.native import Nemesis
from harness.history import INFO, NEMESIS
from kernel.failpoints import CrashPoint, write_points
from reference.inspection.models import message_dedup

FAULTS = chaos.registry("inspection")
DB_PROXY = "inspection-db"  # the database's Toxiproxy link: the processes' only way to it
REDIS_PROXY = "inspection-redis"  # Redis's (the leader's lease notices, §4.1)
AMQP_PROXY = "inspection-amqp"  # RabbitMQ's
LIMIT_POLICY = "inspection-queue-limit"  # the queue-limit fault's policy


class InspectionNemesis(Nemesis):
    """The real stack (systems.inspection.stack.InspectionStack) as the faults' native halves act on it: its
    Toxiproxy links, its processes (SIGKILL and a restart later, SIGSTOP/SIGCONT), its broker's bindings."""

    def __init__(self, stack: Any, time_factor: float) -> None:
        super().__init__(FAULTS, time_factor)
        self.stack = stack
        self._restarts: dict[str, threading.Timer] = {}
        # a kill and its restart are one step to the supervisor: without this, a pass between the SIGKILL and the
        # restart's scheduling restarted the worker after 5 s instead of restart_after_s (P4: never DEAD)
        self._guard = threading.RLock()
        self.leader_paused = "web-1"

    @property
    def links(self) -> Any:
        return self.stack.toxiproxy.client

    def kill(self, process: str, why: str, restart_after_s: float) -> None:
        """SIGKILL ``process``; started again after ``restart_after_s`` scenario seconds (its supervisor)."""
        comp = self.stack.processes.get(process)
        with self._guard:
            if comp is None or not comp.running():
                self.record(NEMESIS, INFO, "kill-missed", {"process": process, "why": "not running"})
                return
            self.record(NEMESIS, INFO, "kill", {"process": process, "why": why})
            timer = self._restart_timer(process, comp, restart_after_s)  # known before it is dead
            comp.kill()
            timer.start()

    def wait_until_holding(self, worker: str, bound_s: float) -> None:
        """Until ``worker`` owns a slot and no slot is migrating, for at most ``bound_s`` scenario seconds: a
        condition, not a time. In simulation the worker holds its slots at the kill's time; on a busy machine its
        start lags (30-40 s of wall time at a load of 24-32) and a kill inside its first rebalance takes over
        nothing, which is not the scenario (§4.4 D). Past the bound it is killed anyway, and the wait is noted."""
        from sqlalchemy import func, select

        from reference.inspection.models import ACTIVE, slot_lease

        deadline = time.monotonic() + bound_s * self.factor
        started = time.monotonic()
        while True:
            with self.stack.owner.connect() as conn:
                owned = conn.execute(select(func.count()).select_from(slot_lease).where(
                    slot_lease.c.owner_worker_id == worker)).scalar_one()
                moving = conn.execute(select(func.count()).select_from(slot_lease).where(
                    slot_lease.c.state != ACTIVE)).scalar_one()
            if owned and not moving:
                break
            if time.monotonic() >= deadline:
                self.record(NEMESIS, INFO, "kill-wait-bound", {"process": worker, "owned": owned,
                                                                "not_active": moving})
                break
            time.sleep(0.2)
        if (waited := time.monotonic() - started) >= 0.2:
            self.record(NEMESIS, INFO, "kill-waited", {"process": worker, "wall_s": round(waited, 1)})

    def _restart_timer(self, process: str, comp: Any, after_s: float) -> threading.Timer:
        def restart() -> None:
            self.record(NEMESIS, INFO, "restart", {"process": process})
            comp.start()
            with self._guard:
                if self._restarts.get(process) is timer:
                    del self._restarts[process]

        if (earlier := self._restarts.get(process)) is not None:
            earlier.cancel()
        timer = self._restarts[process] = threading.Timer(after_s * self.factor, restart)
        return timer

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        """Through the file the processes read; scenario seconds scale like every other window."""
        write_points(str(self.stack.failpoints), [dataclasses.replace(p, seconds=p.seconds * self.factor)
                                                  for p in points])

    def supervise(self) -> None:
        """Start again, after the simulation's supervisor's 5 s, a process that died on its own (a crash point)."""
        with self._guard:
            for name, comp in list(self.stack.processes.items()):
                if name not in self._restarts and comp.died():
                    self._restart_timer(name, comp, 5.0).start()

    def pending_restarts(self) -> list[str]:
        with self._guard:
            return sorted(self._restarts)

    def cancel_restarts(self) -> None:
        with self._guard:
            for timer in self._restarts.values():
                timer.cancel()
            self._restarts.clear()

    def pause(self, processes: list[str], process: str, on: bool, why: str) -> None:
        """SIGSTOP (on) or SIGCONT ``process``, noted for each of ``processes`` (its threads, as the simulation
        names them)."""
        comp = self.stack.processes[process]
        if on:
            for p in processes:
                self.record(NEMESIS, INFO, "pause", {"process": p, "why": why})
            comp.pause()
        else:
            comp.resume()
            for p in processes:
                self.record(NEMESIS, INFO, "resume", {"process": p})

    def bind(self, slot: int, on: bool) -> None:
        from reference.inspection.effects import PRIORITIES, queue_name, routing_key
        from systems.inspection.node import EXCHANGE

        conn = self.stack.mq.connect()
        try:
            ch = conn.channel()
            for priority in PRIORITIES:
                (ch.queue_bind if on else ch.queue_unbind)(queue_name(slot, priority), EXCHANGE,
                                                            routing_key(slot, priority))
        finally:
            conn.close()


# How long, in scenario seconds after its window closed, a replay-hold waits for its newer message (then it lets go).
REPLAY_HOLD_BOUND_S = 120.0


def newer_processed(conn: Any, outbox: list[dict[str, Any]], closed_at: float, alert: bool) -> bool:
    """Whether the database processed a message an IS node wrote to its outbox (``outbox``: its rows) after
    ``closed_at`` (an outbox row's clock), one carrying an alert when ``alert``: the replay-hold's condition, read
    from the node's disk and the database, never from a clock."""
    from sqlalchemy import func, select

    newer = [r["message_id"] for r in outbox if r["created_at"] > closed_at
             and (not alert or r["body"]["payload"].get("alert"))]
    if not newer:
        return False
    done = conn.execute(select(func.count()).select_from(message_dedup).where(
        message_dedup.c.message_id.in_(newer[:500]))).scalar_one()
    return bool(done)


def held_nodes(params: Params, processes: Any) -> list[str]:
    """params.process, or every IS node."""
    return [str(params["process"])] if "process" in params else sorted(p for p in processes if p.startswith("probe-"))


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


# How long a worker kill waits, in scenario seconds, for its worker to hold slots with no migration in flight.
KILL_WAITS_FOR_SLOTS_S = 120.0


def _worker_kill_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    if on:
        worker = str(params["worker"])
        nemesis.wait_until_holding(worker, KILL_WAITS_FOR_SLOTS_S)
        nemesis.kill(worker, "worker-kill", float(params.get("restart_after_s", 5.0)))


def _process_kill_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    if on:
        nemesis.kill(str(params["process"]), "process-kill", float(params.get("restart_after_s", 5.0)))


def _worker_pause_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    worker = str(params["worker"])
    if "at" in params:  # the worker stops itself when it next performs that effect (systems.inspection.node)
        if on:
            nemesis.stack.pause_at(worker, str(params["at"]), float(params["seconds"]) * nemesis.factor)
        return
    nemesis.pause([worker, f"heartbeat-{_number(worker)}"], worker, on, "worker-pause")


def _leader_pause_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    if on:
        history = nemesis.history
        leading = [o.process for o in history.ops if o.f == "leader"] if history is not None else []
        nemesis.leader_paused = nemesis.stack.leading() or (leading[-1] if leading else "web-1")
    nemesis.pause([nemesis.leader_paused], nemesis.leader_paused, on, "leader-pause")


def _heartbeat_stall_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    """The worker's heartbeat thread stuck before its next effect while the file exists (systems.inspection.node)."""
    worker = str(params["worker"])
    stall = nemesis.stack.stall_file(worker)
    process = f"heartbeat-{_number(worker)}"
    if on:
        nemesis.record(NEMESIS, INFO, "pause", {"process": process, "why": "heartbeat-stall"})
        stall.touch()
    else:
        stall.unlink(missing_ok=True)
        nemesis.record(NEMESIS, INFO, "resume", {"process": process})


def _queue_limit_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    """A max-length policy on the pipeline's queues, with the run's overflow (reject-publish; the seed's
    reject-publish-dlx under bug drop-head-overflow): RabbitMQ applies the lower of a queue's argument and its
    policy's."""
    mq = nemesis.stack.mq
    if on:
        limit = {"max-length": int(params.get("max_length", 5)), "overflow": nemesis.stack.overflow}
        mq.ctl("rabbitmqctl", "set_policy", "-p", mq.vhost, "--apply-to", "queues", LIMIT_POLICY,
               r"^inspection\.status\.", json.dumps(limit))
    else:
        mq.ctl("rabbitmqctl", "clear_policy", "-p", mq.vhost, LIMIT_POLICY)


def _queue_unbound_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    nemesis.bind(int(params["slot"]), not on)


def _broker_outage(world: Any, params: Params, on: bool) -> None:
    world.mq.set_down(on)


def _broker_outage_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    """Every RabbitMQ node's link cut (one link, or one per node of a cluster)."""
    for link in nemesis.stack.amqp_links:
        nemesis.links.set_enabled(link, not on)


def _replay_hold(world: Any, params: Params, on: bool) -> None:
    """The held IS nodes' replayers find nothing to replay; after the window each is let go once the database
    processed a message it wrote after the window (params.until: alert, one carrying an alert), or past the bound."""
    nodes = held_nodes(params, world.supervised)
    if on:
        world.hold_replays(nodes, True, "replay-hold")
        return
    closed, alert = world.env.now, params.get("until") == "alert"
    bound = float(params.get("bound_s", REPLAY_HOLD_BOUND_S))

    def release() -> Any:
        waiting = list(nodes)
        while waiting:
            with world.sessions() as s:
                done = [n for n in waiting if newer_processed(s, world.outboxes[n].rows if n in world.outboxes
                                                              else [], closed, alert)]
            if world.env.now >= closed + bound:
                done, why = waiting, "bound"
            else:
                why = "newer message processed"
            world.hold_replays(done, False, why)
            waiting = [n for n in waiting if n not in done]
            if waiting:
                yield world.env.timeout(0.5)

    world.env.process(release())


def _replay_hold_native(nemesis: InspectionNemesis, params: Params, on: bool) -> None:
    """The same through a file each held IS node reads before it replays (systems.inspection.node); the wait after
    the window in a thread of its own, so the timeline goes on."""
    nodes = held_nodes(params, nemesis.stack.processes)
    if on:
        for node in nodes:
            nemesis.stack.replay_hold_file(node).touch()
            nemesis.record(NEMESIS, INFO, "replay-hold", {"process": node})
        return
    closed, alert = time.time(), params.get("until") == "alert"
    deadline = time.monotonic() + float(params.get("bound_s", REPLAY_HOLD_BOUND_S)) * nemesis.factor

    def release() -> None:
        from systems.inspection.node import SqliteOutbox

        waiting = list(nodes)
        while waiting:
            outboxes = {n: nemesis.stack.run_dir / "outbox" / f"{n}.db" for n in waiting}
            with nemesis.stack.owner.connect() as conn:
                done = [n for n, path in outboxes.items() if path.exists() and newer_processed(
                    conn, SqliteOutbox(str(path)).rows("WHERE created_at > ?", (closed,)), closed, alert)]
            why = "newer message processed"
            if time.monotonic() >= deadline:
                done, why = waiting, "bound"
            for node in done:
                nemesis.stack.replay_hold_file(node).unlink(missing_ok=True)
                nemesis.record(NEMESIS, INFO, "replay-released", {"process": node, "why": why})
            waiting = [n for n in waiting if n not in done]
            time.sleep(0.2)

    threading.Thread(target=release, name="replay-hold", daemon=True).start()


def _notice_loss(world: Any, params: Params, on: bool) -> None:
    world.notices.lost = on


def _queue_unbound(world: Any, params: Params, on: bool) -> None:
    world.mq.unbind(int(params["slot"]), on)


def _queue_limit(world: Any, params: Params, on: bool) -> None:
    world.mq.max_length = int(params.get("max_length", 5)) if on else None


FAULTS.register(
    chaos.any_crash_point(),
    Fault("worker-kill", "SIGKILL params.worker (both threads; RabbitMQ requeues what it held); restarted after "
          "params.restart_after_s (5)", _worker_kill, _worker_kill_native, needs("worker")),
    Fault("process-kill", "SIGKILL params.process (a web node or an IS node); restarted after params.restart_after_s "
          "(5)", _process_kill, _process_kill_native, needs("process")),
    Fault("worker-pause", "SIGSTOP params.worker for the window, or for params.seconds when it next performs "
          "params.at (an effect: batch.commit, amqp.ack); past the AMQP heartbeat timeout (90 s) RabbitMQ closes its "
          "connection", _worker_pause, _worker_pause_native, needs("worker")),
    Fault("heartbeat-stall", "params.worker's heartbeat thread is stuck for the window; its consumer goes on",
          _heartbeat_stall, _heartbeat_stall_native, needs("worker")),
    Fault("leader-pause", "SIGSTOP the web node leading for the window", _leader_pause, _leader_pause_native),
    Fault("db-outage", "the database is unreachable for the window", chaos.db_down, chaos.cut_links(DB_PROXY)),
    Fault("broker-outage", "RabbitMQ is unreachable for the window: every connection closed, publishes unanswered "
          "(the quorum queues keep their messages)", _broker_outage, _broker_outage_native),
    Fault("queue-unbound", "slot params.slot's bindings are removed for the window: mandatory publishes to it are "
          "returned", _queue_unbound, _queue_unbound_native, needs("slot")),
    Fault("queue-limit", "every queue holds at most params.max_length (5) messages for the window (x-max-length)",
          _queue_limit, _queue_limit_native),
    Fault("replay-hold", "the replayer of params.process (every IS node by default) finds nothing to replay for the "
          "window and after it until the database processed a message the node wrote after the window (params.until: "
          "alert, one carrying an alert; at most params.bound_s, 120): an older message's replay lands after it",
          _replay_hold, _replay_hold_native),
    Fault("notice-loss", "Redis loses the leader's lease notices for the window (natively its link is cut): the "
          "workers learn of a lease change at their next heartbeat's read only", _notice_loss,
          chaos.cut_links(REDIS_PROXY)),
)
