"""`sortie load --system inspection`: the seed's traffic (§3.5, §4.4 G: 60 messages a second per IS node, two IS nodes
at 1x; §5.4: 500 bytes a message) through the pipeline's real stack (systems.inspection.stack: PostgreSQL, RabbitMQ,
Toxiproxy, the web nodes, workers and IS nodes as processes), then V1-V28 on what the load left and the figures
docs/systems/inspection.md's SLOs are judged on.

There is no Locust here: the load's source is the system's own producers, the IS nodes inspecting a fleet sized
for the rate (devices = rate x cycle, one message per device a cycle), exactly as the seed's probes make it. One
run: the stack, the web nodes and workers started and warmed until every slot is ACTIVE under a worker, the IS
nodes started (the load's time 0) and stopped producing at the duration; a sampler reads the queues' depths and
the CPU of each process group every SAMPLE_S; the backlog settles (bounded); every process stops; V1-V28 are
checked on the tables, outboxes, queues and merged history (InspectionScenarioRunner's state, as a catalogue
scenario's), and load.json gets the latencies: ``collected_at`` -> current row (the commit that applied the
message, from its worker's history) and batch commit (the transaction's invoke -> ok), each p50/p99."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.history import History
from loadtests.quantiles import percentile
from loadtests.sampling import PeriodicSampler
from reference.inspection.config import Settings
from reference.inspection.effects import PUBLISH_ACK
from reference.inspection.grants import IS, WEB, WORKER

log = logging.getLogger("sortie.load.inspection")

PER_PROBE_MSGS_PER_S = 60.0  # §3.5 / §4.4 G: "按 60 msg/s" an IS node
PROBES = 2  # 1x: two IS nodes (issue 57)
MESSAGE_BYTES = 500  # §5.4: "按单条 500B"
LOAD_SLOTS = 16  # the seed's 256 slots are 512 quorum queues: too many for the shared 2-core machine (the docs)
LOAD_WORKERS = 3  # §4.4 A's "expected minimum" of workers
WARM_BOUND_S = 240.0  # every slot ACTIVE under a worker within this, or the run notes it
SAMPLE_S = 2.0
# The SLOs proposed in docs/systems/inspection.md ("Load and SLOs"), from §6.3 and §4.4: a device's current row
# shows its inspection before the next one is collected (p99 within one cycle), and §6.3's 10-30 ms batch write with
# room for the tail (p99 under 100 ms)
SLO = {"current_p99_cycles": 1.0, "batch_commit_p99_ms": 100.0}
# Settings of a load: the seed's, except WARMING (a load measures the steady state, not §4.4 A's 60 s warm-up) and
# the message size
LOAD_POLICY = {"warming_s": 5.0, "message_bytes": MESSAGE_BYTES}
NOT_HERE = ("find_max", "baseline", "time_scale", "api_workers", "api_threads", "dispatchers", "pgbench_s",
            "capacity_confirms", "capacity_clients", "arrivals", "connections", "arrival_rate", "workers")
# Faults under load, §4.4's: D (a worker killed -9 and back only after its slots were taken: a restart within 30 s
# re-registers it and the leader takes its slots at once, which is not D), F (the database away 5 minutes), G
# (RabbitMQ away 5 minutes); (params, default window in seconds)
FAULTS: dict[str, tuple[dict[str, Any], float]] = {
    "worker-kill": ({"worker": "worker-1", "restart_after_s": 60.0}, 0.0),
    "db-outage": ({}, 300.0),
    "broker-outage": ({}, 300.0),
}
FAULT_GRACE_S = 60.0  # a message on its way this long after a fault healed is still the fault's (not the SLO's)
# A reshard under load (§3.4, §4.5; `--fault reshard`): TOTAL_SLOTS grown from LOAD_SLOTS to this, the map in force
# after the window (the notice: §3.4's 5 minutes by default, a load's 60 s); not a fault of the registry but the
# operator's act, measured as one (docs/systems/inspection.md)
RESHARD = "reshard"
RESHARD_SLOTS = 24
FAULTS[RESHARD] = ({"total_slots": RESHARD_SLOTS}, 60.0)


@dataclass(frozen=True)
class InspectionProfile:
    """``Nx``: N times the seed's traffic, made by more devices per IS node (the cycle stays the seed's)."""

    name: str
    multiple: float
    cfg: Settings = field(default_factory=lambda: Settings.with_overrides(LOAD_POLICY))

    @property
    def msgs_per_s(self) -> float:
        return PER_PROBE_MSGS_PER_S * PROBES * self.multiple

    @property
    def devices(self) -> int:
        return round(self.msgs_per_s * self.cfg.cycle_s)


def load_profile(name: str) -> InspectionProfile:
    """'1x', '2x', '5x', any 'Nx'; ValueError otherwise."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)x", name.strip())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"no inspection profile {name!r}: Nx (1x, 2x, 5x: N times 60 msg/s per IS node, 2 nodes)")
    return InspectionProfile(name, float(m.group(1)))


def _refuse_other_options(opts: Any) -> None:
    from loadtests.run import refuse_options

    refuse_options(opts, NOT_HERE, "the inspection load", FAULTS)
    if (opts.extra or {}).get("variant") not in (None, "fixed"):
        raise ValueError("the inspection load runs the fixed variant")


# ---------------------------------------------------------------------------------------------- sampling


class _Sampler(PeriodicSampler):
    """Every SAMPLE_S: ready messages in the queues (the newest map's: a reshard's too), unconfirmed outbox rows, and
    each process group's CPU seconds so far (a process and its descendants, with their reaped children: PostgreSQL's
    backends)."""

    def __init__(self, stack: Any, groups: dict[str, list[int]], outboxes: dict[str, Path], t0: float) -> None:
        super().__init__("inspection-sampler", SAMPLE_S, t0)
        self.stack, self.groups, self.outboxes = stack, groups, outboxes

    def sample(self) -> dict[str, Any]:
        return {"ready": sum(self.stack.queue_depths(self.stack.total_slots()).values()),
                "unconfirmed": self._unconfirmed(),
                "cpu_s": {g: round(cpu_seconds(pids), 3) for g, pids in self.groups.items()},
                "load_avg": [round(x, 2) for x in os.getloadavg()]}

    def _unconfirmed(self) -> int:
        import sqlite3

        n = 0
        for path in self.outboxes.values():
            if path.exists():
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
                    n += db.execute("SELECT count(*) FROM outbox WHERE confirmed = 0").fetchone()[0]
        return n


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes, their live descendants and their reaped children."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in (root, *root.children(recursive=True)):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


# ---------------------------------------------------------------------------------------------- figures


def latencies(history: History, t0: float) -> dict[str, list[float]]:
    """From the merged history (seconds from ``t0``, an epoch), per applied message: ``current_s``, its commit's end
    minus its ``collected_at`` (``collected_at``: that time, beside it), split into ``published_s`` (collected_at
    -> its confirm, the IS node's share: a cycle's messages are collected at once and published one confirm at a
    time) and ``consumed_s`` (confirm -> commit: queue, mailbox, batch); per batch, ``commit_s``, its
    transaction's invoke -> ok."""
    collected: dict[str, float] = {}
    confirmed: dict[str, float] = {}
    opened: dict[str, float] = {}
    out: dict[str, list[float]] = {"current_s": [], "collected_at": [], "published_s": [], "consumed_s": [],
                                   "commit_s": []}
    for o in history.ops:
        if o.f == "outbox":
            for m in o.value["messages"]:
                collected[str(m["message_id"])] = datetime.fromisoformat(m["collected_at"]).timestamp() - t0
        elif o.f == "publish" and o.type == "ok" and o.value.get("outcome") == PUBLISH_ACK:
            confirmed.setdefault(str(o.value["message_id"]), o.time)
        elif o.f == "batch.commit" and o.type == "invoke":
            opened[o.process] = o.time
        elif o.f == "batch.commit" and o.type == "ok":
            if o.process in opened:
                out["commit_s"].append(o.time - opened.pop(o.process))
            for i in o.value["applied"]:
                if i in collected:
                    out["current_s"].append(o.time - collected[i])
                    out["collected_at"].append(collected[i])
                if i in collected and i in confirmed:
                    out["published_s"].append(confirmed[i] - collected[i])
                    out["consumed_s"].append(o.time - confirmed[i])
    return out


def distribution(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    def q(p: float) -> float | None:
        v = percentile(values, p)
        return None if v is None else round(v * scale, digits)

    return {"n": len(values), "p50": q(50), "p99": q(99), "max": q(100)}


def cpu_shares(rows: list[dict[str, Any]], since: float, until: float) -> dict[str, float]:
    """Each process group's CPU over [since, until] in cores (1.0: one core busy all the time)."""
    inside = [r for r in rows if since <= r["t"] <= until]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    span = b["t"] - a["t"]
    return {g: round((b["cpu_s"][g] - a["cpu_s"].get(g, 0.0)) / span, 3) for g in b["cpu_s"]} if span > 0 else {}


def bottleneck(cpu: dict[str, float], ready: list[int], unconfirmed: list[int], db_share: float, cores: int,
               published_p99_s: float | None, cycle_s: float, load_avg: float | None = None) -> str:
    """The resource that set the pace, named from what was measured (docs/systems/inspection.md says how): the
    machine when its cores were busy (by the stack, or by others: a load average of twice the cores); else the stage
    that fell behind: publishing (the IS nodes' unconfirmed outbox rows grew, or a cycle's messages took more than a
    cycle to be confirmed), consuming (the queues' ready messages grew; the database when the workers spent half
    their time or more in commits); else none."""
    busy = sum(cpu.values())
    top = max(cpu, key=lambda g: cpu[g]) if cpu else "none"
    behind = []
    if _grew(unconfirmed) or (published_p99_s or 0.0) >= cycle_s:
        behind.append("publishing (the IS nodes' confirms, one at a time, took a cycle or more)")
    if _grew(ready):
        behind.append("consuming (the queues' ready messages grew)" + (
            f": the database, workers in commits {db_share:.0%} of the time" if db_share >= 0.5 else ""))
    where = f"; behind: {', '.join(behind)}" if behind else ""
    if busy >= 0.9 * cores or (load_avg or 0.0) >= 2 * cores:
        return (f"CPU: the machine's {cores} cores busy (load average {load_avg}; the stack used {busy:.2f} cores, "
                f"most by {top}){where}")
    if behind:
        return f"{where[len('; behind: '):]}; most CPU: {top} ({cpu.get(top, 0):.2f} cores)"
    return f"none reached (most CPU: {top}, {cpu.get(top, 0):.2f} cores)"


def _grew(series: list[int]) -> bool:
    """The backlog's last third stands above its first third and above a cycle's share of noise."""
    if len(series) < 6:
        return False
    third = len(series) // 3
    first, last = series[:third], series[-third:]
    return min(last) > max(first) and min(last) > 0


def slo_rows(current: dict[str, Any], commit: dict[str, Any], invariants: dict[str, str],
             cycle_s: float) -> list[dict[str, Any]]:
    violated = sorted(k for k, v in invariants.items() if v == "violated")

    def row(name: str, measured: float | None, limit: float, unit: str, n: int) -> dict[str, Any]:
        return {"name": name, "target": f"< {limit:g} {unit}", "measured": measured,
                "held": measured is not None and measured < limit, "n": n}

    return [row("current_p99_s", current["p99"], SLO["current_p99_cycles"] * cycle_s,
                "s (collected_at -> current row: one cycle)", current["n"]),
            row("batch_commit_p99_ms", commit["p99"], SLO["batch_commit_p99_ms"], "ms", commit["n"]),
            {"name": "invariants", "target": "no violation", "measured": ", ".join(violated) or "none violated",
             "held": not violated, "n": None}]


# ---------------------------------------------------------------------------------------------- faults


def _hold(nemesis: Any, fault: str) -> Any:
    """One fault of §4.4 under load through the system's nemesis (its native half), for loadtests.run.FaultWindow."""

    def hold(window: Any) -> None:
        params, history = FAULTS[fault][0], nemesis.history
        try:
            # in the history as a scenario's timeline puts it: the checkers excuse what the window explains (V25: no
            # worker is declared DEAD while the database is away)
            history.fault_start(nemesis.now(), fault, **params)
            nemesis.apply(fault, params, on=True)
            window.until(window.end_s)
        finally:
            nemesis.apply(fault, params, on=False)
            history.fault_stop(nemesis.now(), fault)

    return hold


def recovery(rows: list[dict[str, Any]], window: dict[str, Any], state: Any, t_shift: float) -> dict[str, Any]:
    """What §4.4 bounds, measured: the backlog's peak in the queues and the outboxes from the fault on; from its
    end, the time until no message is ready in the queues (F's drain) and until every outbox row is confirmed (G's
    replay); for a killed worker, the time from its kill until the last of its slots was loaded again under a new
    epoch (D's RTO). ``t_shift``: the load's time 0 on the state's clock."""
    start, end = window["start"], window["end"]
    after = [r for r in rows if r["t"] >= start]
    healed = [r for r in after if r["t"] >= end]
    drained = next((r["t"] for r in healed if r["ready"] == 0), None)
    replayed = next((r["t"] for r in healed if r["unconfirmed"] == 0), None)
    return {"peak_ready": max((r["ready"] for r in after), default=None),
            "peak_unconfirmed": max((r["unconfirmed"] for r in after), default=None),
            "drain_s": None if drained is None else round(drained - end, 2),
            "replay_s": None if replayed is None else round(replayed - end, 2),
            "rto_s": rto_s(state)}


def migration(tables: dict[str, list[dict[str, Any]]], history: History, reshard_op: dict[str, Any],
              at: float) -> dict[str, Any]:
    """A reshard under load, measured (times on the state's clock; ``at``: when the operator resharded,
    ``reshard_op``: its record): the notice; until every new slot was loaded by a worker (slot_audit); how many
    devices the new map moved, how long after ``effective_at`` each was first applied from its new slot (the
    handover: its first new-route message's commit, the workers' batch.commit records), and what of their old
    route was committed after that (superseded when older, applied when newer: V21 and V28 judge each)."""
    from reference.inspection.reshard import slot_of

    total, effective = int(reshard_op["total_slots"]), float(reshard_op["effective_at"])
    maps = {int(r["version"]): int(r["total_slots"]) for r in tables["slot_map_version"]}
    old_total = maps[min(maps)]
    loaded = [min((r["at"] for r in tables["slot_audit"] if r["kind"] == "lease" and r["slot_id"] == slot
                   and r["why"] == "loaded" and r["at"] >= at), default=None) for slot in range(old_total, total)]
    done = [t for t in loaded if t is not None]
    moving = {d: (slot_of(d, old_total), slot_of(d, total)) for d in
              (r["device_id"] for r in tables["device_status_current"]) if slot_of(d, old_total) != slot_of(d, total)}
    first_new: dict[str, float] = {}
    late_old = {"applied": 0, "superseded": 0}
    for o in history.ops:
        if o.f != "batch.commit" or o.type != "ok":
            continue
        for kind in ("applied", "superseded"):
            for mid in o.value.get(kind, ()):
                device = str(mid).split(":")[2]
                route = moving.get(device)
                if route is None:
                    continue
                if o.value["slot"] == route[1] and kind == "applied":
                    first_new.setdefault(device, o.time)
                elif o.value["slot"] == route[0] and device in first_new:
                    late_old[kind] += 1
    return {"total_slots": [old_total, total], "notice_s": round(effective - at, 2),
            "new_slots_loaded_s": round(max(done) - at, 2) if loaded and len(done) == len(loaded) else None,
            "devices_moved": len(moving), "devices_not_moved": sorted(set(moving) - set(first_new))[:10],
            "handover_s": distribution([t - effective for t in first_new.values()]),
            "old_route_after_handover": late_old}


def rto_s(state: Any) -> float | None:
    """From the first kill of a worker (the nemesis's) until the last of the slots it held then was loaded again
    under a newer epoch (slot_audit, as V27 reads it); None without a kill or when a slot never came back."""
    kills = [o for o in state.history.ops if o.f == "kill" and str(o.value.get("process", "")).startswith("worker-")]
    if not kills:
        return None
    victim, t = str(kills[0].value["process"]), kills[0].time
    audit = [r for r in state.tables["slot_audit"] if r["kind"] == "lease"]
    held: dict[int, tuple[int, str | None]] = {}
    for r in audit:
        if r["at"] <= t:
            held[r["slot_id"]] = (r["lease_epoch"], r["owner_worker_id"])
    back = []
    for slot, (epoch, owner) in held.items():
        if owner != victim:
            continue
        loaded = [r["at"] for r in audit if r["slot_id"] == slot and r["why"] == "loaded" and r["lease_epoch"] > epoch
                  and r["at"] > t]
        if not loaded:
            return None
        back.append(min(loaded))
    return round(max(back) - t, 2) if back else None


# ---------------------------------------------------------------------------------------------- one run


def run_load(opts: Any, console: Any = None) -> int:
    """System.load of the inspection pipeline: one run of the profile through the load pipeline (loadtests.run);
    its exit code (loadtests.run.exit_code). ValueError for an option it does not take."""
    from loadtests.run import exit_code, run_once

    _refuse_other_options(opts)
    profile = load_profile(opts.profile)
    load = run_once(InspectionLoad(), dataclasses.replace(opts, report=None), profile, profile.multiple,
                    Path(opts.out), console)
    if console is not None:
        print_summary(load, console)
    return exit_code(load)


class InspectionLoad:
    """The pipeline's hooks for one run (loadtests.run.LoadHooks): no Locust, the IS nodes are the load."""

    locustfile: Path | None = None

    def __init__(self) -> None:
        self.stack_: Any = None
        self.runner: Any = None
        self.spec: Any = None
        self.env: dict[str, str] = {}
        self.outboxes: dict[str, Path] = {}
        self.sampler: _Sampler | None = None
        self.started = 0.0  # epoch when the web nodes and workers started: the state's time 0
        self.warm_s = 0.0
        self.settle_s = 0.0
        self.state: Any = None
        self.verdicts: list[Any] = []
        self.nemesis: Any = None
        self.nemesis_history = History()  # what the fault did, on the state's clock (from self.started)

    @contextmanager
    def stack(self, run: Any) -> Iterator[Any]:
        from systems.inspection.faults import InspectionNemesis
        from systems.inspection.stack import InspectionScenarioRunner, InspectionStack

        cfg = run.profile.cfg
        with InspectionStack((run.out / "stack").resolve(), consumer_timeout_s=cfg.cycle_s * 180) as stack:
            self.stack_, self.runner = stack, InspectionScenarioRunner(stack, 1.0)
            self.nemesis = InspectionNemesis(stack, 1.0)
            self.nemesis.attach(self.nemesis_history, lambda: time.time() - self.started)
            try:
                yield stack
            finally:
                self.nemesis.cancel_restarts()
                if self.sampler is not None:
                    self.sampler.stop()
                stack.stop_processes()

    def warm(self, run: Any) -> dict[str, Any]:
        from systems.inspection.sim import WEB_NODES, InspectionSpec, fleet, worker_names
        from systems.inspection.stack import AMQP_HEARTBEAT_S

        profile, stack = run.profile, self.stack_
        self.spec = InspectionSpec(devices=profile.devices, total_slots=LOAD_SLOTS, workers=LOAD_WORKERS,
                                   probes=PROBES, window_s=run.duration_s,
                                   reshard_to=RESHARD_SLOTS if run.opts.fault == RESHARD else 0)
        devices = fleet(self.spec, run.opts.seed)
        stack.reset(self.spec, devices)
        run.say(f"[bold]inspection {profile.name}[/]: {profile.msgs_per_s:g} msg/s offered ({PROBES} IS nodes, "
                f"{profile.devices} devices every {profile.cfg.cycle_s:g} s, {MESSAGE_BYTES} B), {LOAD_SLOTS} "
                f"slots, {LOAD_WORKERS} workers")
        self.env = {"SORTIE_INSPECTION_AMQP": stack.amqp_env(AMQP_HEARTBEAT_S),
                    "SORTIE_INSPECTION_REDIS": stack.redis_env(),
                    "SORTIE_INSPECTION_SETTINGS": json.dumps(asdict(profile.cfg)),
                    "SORTIE_INSPECTION_HISTORY": str(stack.run_dir / "history"), "SORTIE_INSPECTION_BUG": ""}
        self.started = time.time()
        for node in WEB_NODES:
            stack.add_process("web", node, {**self.env, "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(WEB)}).start()
        for name in worker_names(self.spec):
            stack.add_process("worker", name, {**self.env, "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(WORKER)
                                               }).start()
        self._await_slots_owned(run)
        run.t0 = time.time()
        until = datetime.fromtimestamp(run.t0 + run.duration_s, UTC)
        for p in range(1, PROBES + 1):
            name = f"probe-{p}"
            share = [asdict(d) for i, d in enumerate(devices) if i % PROBES == p - 1]
            self.outboxes[name] = stack.run_dir / "outbox" / f"{name}.db"
            fleet_file = stack.run_dir / "outbox" / f"{name}-devices.json"
            fleet_file.write_text(json.dumps(share))
            stack.add_process("probe", name, {**self.env, "SORTIE_INSPECTION_DEVICES_FILE": str(fleet_file),
                                              "SORTIE_INSPECTION_UNTIL": until.isoformat(),
                                              "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(IS),
                                              "SORTIE_INSPECTION_OUTBOX": str(self.outboxes[name])}).start()
        return {}

    def _await_slots_owned(self, run: Any) -> None:
        from sqlalchemy import func, select

        from reference.inspection.models import ACTIVE, slot_lease

        deadline = time.time() + WARM_BOUND_S
        while time.time() < deadline:
            with self.stack_.owner.connect() as conn:
                left = conn.execute(select(func.count()).select_from(slot_lease).where(
                    (slot_lease.c.state != ACTIVE) | slot_lease.c.owner_worker_id.is_(None))).scalar_one()
            if not left:
                break
            time.sleep(0.5)
        else:
            run.notes.append(f"not every slot ACTIVE under a worker {WARM_BOUND_S:g} s after the start")
        self.warm_s = round(time.time() - self.started, 2)

    def sample(self, run: Any) -> None:
        stack = self.stack_
        groups = {"probes": [c.pid for n, c in stack.processes.items() if n.startswith("probe") and c.pid],
                  "workers": [c.pid for n, c in stack.processes.items() if n.startswith("worker") and c.pid],
                  "web": [c.pid for n, c in stack.processes.items() if n.startswith("web") and c.pid],
                  "rabbitmq": [p for p in (stack.mq._process.pid if stack.mq._process else None,) if p],
                  "postgres": [p for p in (stack.pg._postmaster_pid(),) if p]}
        self.sampler = _Sampler(stack, groups, self.outboxes, run.t0)
        self.sampler.start()

    def fault(self, run: Any) -> Any:
        from loadtests.run import start_fault, window_s

        opts = run.opts
        if not opts.fault:
            return None
        window = window_s(FAULTS[opts.fault][1], opts.fault_window)
        hold = self._reshard(run) if opts.fault == RESHARD else _hold(self.nemesis, opts.fault)
        return start_fault(run, window, hold)

    def _reshard(self, run: Any) -> Any:
        """The operator's reshard at the window's start, the new map in force at its end (the window is the
        notice): the runner's, as a scenario's operator does it (the new queues declared and bound first)."""

        def hold(window: Any) -> None:
            cfg = dataclasses.replace(run.profile.cfg, reshard_notice_s=window.window_s)
            self.runner._reshard(self.spec, cfg, self.nemesis_history, self.nemesis.now, self.started, 1.0)
            window.until(window.end_s)

        return hold

    def after_load(self, run: Any) -> None:
        pass

    def drain(self, run: Any) -> None:
        """Until the pipeline settled twice in a row (InspectionScenarioRunner's condition: every outbox row
        confirmed and processed, the queues empty, every slot ACTIVE under a live worker), bounded."""
        bound = run.opts.drain_s if run.opts.drain_s is not None else max(60.0, run.duration_s / 2.0)
        began = time.time()
        cfg: Settings = run.profile.cfg
        quiet, why = 0, None
        while time.time() - began < bound and quiet < 2:
            why = self.runner._unsettled(self.spec, cfg, self.outboxes, self.nemesis)
            quiet = quiet + 1 if why is None else 0
            time.sleep(1.0)
        if quiet < 2:
            run.notes.append(f"not settled {bound:g} s after the load: {why}")
        self.settle_s = round(time.time() - began, 2)
        assert self.sampler is not None
        self.sampler.stop()

    def check(self, run: Any) -> None:
        """V1-V28 on what the load left (every process stopped first: the tables and outboxes are final)."""
        from systems.inspection.checkers import INVARIANTS

        end = time.time() - self.started
        self.stack_.stop_processes()
        self.state = self.runner._state(self.spec, run.profile.cfg, self.nemesis_history, self.outboxes, self.started,
                                        0.0, end)
        self.verdicts = INVARIANTS.check(self.state)

    def _migration(self, state: Any) -> dict[str, Any] | None:
        ops = [o for o in state.history.ops if o.process == "operator" and o.f == "reshard"]
        return migration(state.tables, state.history, ops[0].value, ops[0].time) if ops else None

    def figures(self, run: Any) -> dict[str, Any]:
        assert self.sampler is not None
        profile, rows, state = run.profile, self.sampler.rows, self.state
        lat = latencies(state.history, self.started)
        shift = run.t0 - self.started  # the load's time 0 on the state's clock
        # a message whose way from its collection to its current row met the window (or the grace after it)
        outside = [v for v, at in zip(lat["current_s"], lat["collected_at"], strict=True)
                   if not any(at <= w["end"] + shift + FAULT_GRACE_S and at + v >= w["start"] + shift
                              for w in run.windows)]
        current, commit = distribution(lat["current_s"]), distribution(lat["commit_s"], 1000.0, 1)
        judged = distribution(outside) if run.windows else current
        invariants = {v.invariant: v.status for v in self.verdicts}
        steady = (run.ramp_s, run.load_end)
        cpu = cpu_shares(rows, *steady)
        in_load = [r for r in rows if steady[0] <= r["t"] <= steady[1]]
        db_share = sum(lat["commit_s"]) / max(1e-9, LOAD_WORKERS * (run.load_end + self.settle_s))
        outbox_rows = sum(len(r) for r in state.outboxes.values())
        processed = len(state.tables["message_dedup"]) if "message_dedup" in state.tables else None
        cores = os.cpu_count() or 1
        return {
            "system": "inspection", "profile": profile.name, "multiple": profile.multiple, "variant": "fixed",
            "duration_s": run.duration_s, "seed": run.opts.seed, "stack": "native",
            "offered_msgs_per_s": profile.msgs_per_s, "devices": profile.devices, "probes": PROBES,
            "message_bytes": MESSAGE_BYTES, "slots": LOAD_SLOTS, "workers": LOAD_WORKERS,
            "cycle_s": profile.cfg.cycle_s, "warm_s": self.warm_s, "settle_s": self.settle_s,
            "wall_s": round(time.perf_counter() - run.wall0, 1),
            "messages": {"outboxed": outbox_rows, "processed": processed, "applied": current["n"],
                         "outboxed_per_s": round(outbox_rows / run.load_end, 2) if run.load_end else None},
            # an IS node publishes a cycle before it collects the next: behind, it skips cycles (fewer messages)
            "cycles": {"due_at_least": PROBES * math.ceil(run.duration_s / profile.cfg.cycle_s),
                       "collected": round(outbox_rows * PROBES / profile.devices) if profile.devices else 0},
            "current_s": current, "published_s": distribution(lat["published_s"]),
            "consumed_s": distribution(lat["consumed_s"]), "batch_commit_ms": commit,
            "db_time_share": round(db_share, 3),
            "cpu_cores": cpu, "machine": {"cores": cores, "load_avg": [
                percentile([r["load_avg"][0] for r in in_load], p) for p in (50, 100)]},
            "ready_peak": max((r["ready"] for r in rows), default=None),
            "unconfirmed_peak": max((r["unconfirmed"] for r in rows), default=None),
            "bottleneck": bottleneck(cpu, [r["ready"] for r in in_load], [r["unconfirmed"] for r in in_load],
                                     db_share, cores, percentile(lat["published_s"], 99), profile.cfg.cycle_s,
                                     percentile([r["load_avg"][0] for r in in_load], 50)),
            "invariants": invariants,
            "violations": {v.invariant: [x.message for x in v.violations[:5]] for v in self.verdicts
                           if v.status == "violated"},
            "series": rows, "notes": run.notes,
            "slo": slo_rows(judged, commit, invariants, profile.cfg.cycle_s),
            "faults": run.windows, "current_s_outside_faults": judged if run.windows else None,
            "recovery": recovery(rows, run.windows[0], state, shift) if run.windows else None,
            "reshard": self._migration(state),
            "missing": [name for name, value in (("current_s", current["n"]), ("batch_commit_ms", commit["n"]),
                                                 ("series", rows)) if not value],
        }


def print_summary(load: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    console.print(f"inspection load {load['profile']}: {load['offered_msgs_per_s']:g} msg/s offered, "
                  f"{load['messages']}, IS cycles {load['cycles']}, machine {load['machine']}, CPU (cores) "
                  f"{load['cpu_cores']}")
    console.print(f"bottleneck: {load['bottleneck']}")
    v = Table(title="SLOs and invariants")
    for col in ("name", "target", "measured", "held"):
        v.add_column(col)
    for r in load["slo"]:
        v.add_row(r["name"], r["target"], str(r["measured"]), "[green]yes[/]" if r["held"] else "[red]no[/]")
    console.print(v)
    for inv, msgs in load["violations"].items():
        console.print(f"[red]{inv} violated[/]: " + "; ".join(msgs))
    if load["missing"]:
        console.print(f"[red]missing figures: {', '.join(load['missing'])}[/]")
