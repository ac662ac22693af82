"""`sortie explore` of the Copilot: drawing one explored run from its seed, a workload mix and a fault schedule, as
a Scenario (the form the catalogue's YAML files load into), so a schedule is data and a failing one is written back as
an incident file; its workload made smaller for the shrinker (scenarios.explore.shrink), checked by I1-I37.

Swarm testing (Groce et al., 2012): most runs enable only a few kinds of fault, so a fault that masks another
(a broker outage hides a publisher crash) is often absent. Every simulation fault of the registry
(systems/copilot/faults.py) is drawn here or listed in NOT_DRAWN with the reason (tests/core/test_explore.py)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

from kernel.failpoints import CrashPoint
from reference.copilot import coverage
from reference.copilot.http.notify import STREAMS_PER_USER
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import HANDLERS
from scenarios.explore.shrink import fewer, plainer, shorter_window
from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import ExploreSpec
from scenarios.verdicts import Exercised
from systems.copilot.checkers import INVARIANTS
from systems.copilot.users import BAD_REQUESTS, NEEDS_A_VICTIM
from systems.copilot.workload import WorkloadSpec

# The effects each role performs (kernel.failpoints.effect_name), where a crash point can land.
# tests/core/test_explore.py checks every name against the reference's code.
ROLE_EFFECTS: dict[str, tuple[str, ...]] = {
    "api": ("cancel", "confirm.create", "confirm.lookup", "draft.approve", "draft.create", "events.ingest",
            "task.read"),
    "publisher": ("outbox.claim", "publish", "outbox.mark_sent", "outbox.release"),
    "dispatcher": ("receive", "consume.task_created", "dispatch.read", "get_device", "dispatch.begin",
                   "create_flight", "dispatch.write_back", "consume.cancel_requested", "cancel.read",
                   "cancel_flight", "cancel.answer", "consume.failure", "ack"),
    "report-worker": ("receive", "consume.task_completed", "report.read", "report.build", "putobject",
                      "report.uploaded", "ack"),
    "reconciler": ("reconcile.scan", "reconcile.read", "reconcile.read_attempt", "find_by_request_id",
                   "get_flight", "reconcile.settle", "create_flight", "dispatch.write_back", "reports.scan"),
}
# Effects that are not database transactions: broker, platform and object-store calls.
CALLS = frozenset({"receive", "publish", "ack", "get_device", "create_flight", "cancel_flight", "find_by_request_id",
                   "get_flight", "putobject"})
# Transactions a hold (a transaction waiting between its reads and its first write) can land in, per role.
ROLE_TRANSACTIONS: dict[str, tuple[str, ...]] = {
    role: tuple(e for e in effects if e not in CALLS) for role, effects in ROLE_EFFECTS.items()}

# Transactions that race another process's transaction on the same task: a hold between their reads and their
# write lets the other commit first (the conditional update must then refuse the stale write). Half of the holds
# land on one of these, half anywhere.
RACING_HOLDS: tuple[tuple[str, str], ...] = (
    ("api", "cancel"), ("api", "events.ingest"), ("dispatcher", "dispatch.begin"),
    ("dispatcher", "dispatch.write_back"), ("dispatcher", "cancel.answer"), ("reconciler", "reconcile.settle"),
)

NOT_DRAWN: dict[str, str] = {
    # The named crash faults are fixed points of the generic crash-point fault, which is drawn over every point.
    "kill-publisher-after-publish": "a point of crash-point", "kill-dispatcher-after-create": "a point of crash-point",
    "kill-dispatcher-before-create": "a point of crash-point",
    "kill-consumer-before-ack": "a point of crash-point", "kill-api-after-create-commit": "a point of crash-point",
    "pause-dispatcher-after-create": "a point of crash-point",
    "stop-service": "the same switches as db-outage, broker-outage and object-store-outage",
    "redrive-dead": "nothing goes DEAD in an explored run (outages of at most 120 s against budgets of about an "
                    "hour); its dead-letter half is redrive-dead-letters, which is drawn",
    "revoke-permissions": "S10's story (owners cancel while their permissions are gone); drawn, it would turn an "
                          "explored run's later confirms into refusals, fewer flights to explore. I52 judges every "
                          "explored cancel all the same",
}

Draw = Callable[[random.Random, float], FaultStep]  # (rng, workload window) -> one step


def _at(rng: random.Random, window_s: float) -> float:
    return round(rng.uniform(0.0, window_s + 30.0), 1)


def _span(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 1)


def _outage(fault: str, low: float, high: float) -> Draw:
    return lambda rng, w: FaultStep(_at(rng, w), fault, _span(rng, low, high))


def _platform(rng: random.Random, w: float) -> FaultStep:
    pick = rng.random()
    if pick < 0.25:
        # The platform's webhook stops delivering flight events: tasks wait for the reconciler's query, the recovery
        # seed 000 §7.2 asks for (coverage target reconciler-query-settled; 1 run in 100 reached it without this).
        kinds = ["telemetry", *rng.sample(["completed", "failed", "cancelled"], rng.randint(1, 3))]
        return FaultStep(_at(rng, w), "platform", _span(rng, 60, 300), {"lose_event_kinds": sorted(kinds)})
    if pick < 0.4:
        # Capabilities are how the platform is deployed, not a window: a step of their own, without a duration (a
        # window knob in it would stay on for the rest of the run, past the heal time the checkers count from).
        caps = rng.sample(["idempotency_key", "query_supported"], rng.randint(1, 2))
        return FaultStep(_at(rng, w), "platform", None, {k: False for k in sorted(caps)})
    knobs: dict[str, object] = {}
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("accept_then_timeout", "drop_response", "error_5xx_rate", "error_429_rate", "reject_next",
                           "duplicate_event_prob", "reorder_window_s", "late_completion_s", "cancel_timeout",
                           "refuse_cancel_prob", "lose_event_kinds", "fail_flight_prob", "abort_flight_prob"))
        if kind in ("accept_then_timeout", "drop_response", "reject_next", "cancel_timeout"):
            knobs[kind] = rng.randint(1, 4)
        elif kind in ("error_5xx_rate", "error_429_rate"):
            knobs[kind] = rng.choice((0.2, 0.5, 0.9))
        elif kind in ("duplicate_event_prob", "refuse_cancel_prob", "fail_flight_prob", "abort_flight_prob"):
            knobs[kind] = rng.choice((0.3, 1.0))
        elif kind == "reorder_window_s":
            knobs[kind] = rng.choice((2.0, 10.0))
        elif kind == "late_completion_s":
            knobs[kind] = rng.choice((5.0, 60.0))
        else:  # lose_event_kinds
            knobs[kind] = sorted(rng.sample(["telemetry", "alert", "completed", "failed", "cancelled"],
                                            rng.randint(1, 2)))
    return FaultStep(_at(rng, w), "platform", _span(rng, 10, 120), knobs)


def _stale_consumer(rng: random.Random, w: float) -> FaultStep:
    """A consumer of an old release in one consumer group, acking its share of the group's messages unread: the
    dispatchers' (a lost TaskCreated strands a task in CREATED, a lost cancel one in CANCEL_PENDING) or the report
    workers' (a lost TaskCompleted leaves its report to the reconciler's scan)."""
    return FaultStep(_at(rng, w), "stale-consumer", _span(rng, 10, 120), {"group": rng.choice(sorted(HANDLERS))})


def _db_error(rng: random.Random, w: float) -> FaultStep:
    """Inserts into one or two tables fail for a short window; or, in some draws, the consumers' shapes that short
    windows never reach: a message failing every delivery up to its dead letter (T2's: ``processed_event`` for longer
    than ``max_deliveries`` invisible times), or a delivery whose failure cannot be recorded either (B14's). Without
    them explore found neither a dead letter left unacked nor an ack of an unrecorded failure in 300 runs."""
    pick = rng.random()
    if pick < 0.1:
        return FaultStep(_at(rng, w), "db-error", _span(rng, 130, 240), {"tables": ["processed_event"]})
    if pick < 0.2:
        return FaultStep(_at(rng, w), "db-error", _span(rng, 20, 60), {"tables": ["event_failure", "processed_event"]})
    tables = rng.sample(["task_event_outbox", "processed_event", "drone_task", "task_audit_log", "dispatch_attempt",
                         "task_report"], rng.randint(1, 2))
    return FaultStep(_at(rng, w), "db-error", _span(rng, 1, 20), {"tables": sorted(tables)})


def _window_edges() -> list[list[tuple[str, str]]]:
    """Per declared coverage window (reference.copilot.coverage), the (role, effect) points after which it opens."""
    return [sorted((role, effect) for role in w.roles for effect in w.opens if effect in ROLE_EFFECTS.get(role, ()))
            for w in coverage.WINDOWS]


def _crash_point(rng: random.Random, w: float) -> FaultStep:
    if rng.random() < 0.5:  # at the opening of a dangerous window (reference.copilot.coverage): a crash just inside it
        # The window first, then one of its edges: drawn by edge, ack->mark-sent (one edge of eight) was reached in
        # 23 of 2,000 runs at seed 1.
        role, effect = rng.choice(rng.choice(_window_edges()))
        when = "after"
    else:  # anywhere
        role = rng.choice(sorted(ROLE_EFFECTS))
        effect, when = rng.choice(ROLE_EFFECTS[role]), rng.choice(("before", "after"))
    action = "kill" if rng.random() < 0.7 else "stop"
    params: dict[str, Any] = {"role": role, "effect": effect, "when": when, "action": action,
                              "count": rng.randint(1, 3)}
    if action == "stop":
        params["seconds"] = _span(rng, 2, 90)
    CrashPoint(role, effect, str(params["when"]), action, int(params["count"]),
               float(params.get("seconds", 0.0)))  # fails here, not in the run, if the table drifts
    return FaultStep(_at(rng, w), "crash-point", None, params)


def _hold(rng: random.Random, w: float) -> FaultStep:
    if rng.random() < 0.5:
        role, tx = rng.choice(RACING_HOLDS)
    else:
        role = rng.choice(sorted(r for r, txs in ROLE_TRANSACTIONS.items() if txs))
        tx = rng.choice(ROLE_TRANSACTIONS[role])
    return FaultStep(_at(rng, w), "hold-transaction", None,
                     {"role": role, "tx": tx, "seconds": _span(rng, 0.2, 15), "count": rng.randint(1, 3)})


def _unfit(rng: random.Random, window_s: float, at: float | None = None) -> FaultStep:
    """unfit-for-flight at ``at`` (else a random time in the window): shares of the fleet's devices (those of waiting
    tasks first) offline, drained below the minimum or to exactly it, or forgotten by the platform (they stay so),
    and of the other waiting tasks' approvals revoked. The device shares sum to at most 1."""
    shares = [round(rng.uniform(0.1, 0.3), 2) for _ in range(3)]
    return FaultStep(_at(rng, window_s) if at is None else at, "unfit-for-flight", None, {
        "offline": shares[0], "low_battery": shares[1], "at_min_battery": shares[2],
        "revoke": round(rng.uniform(0.1, 0.6), 2), "unknown": round(rng.uniform(0.0, 0.1), 2)})


DRAWS: dict[str, Draw] = {
    "db-outage": _outage("db-outage", 1, 30),
    "broker-outage": _outage("broker-outage", 2, 90),
    "platform-partition": _outage("platform-partition", 2, 90),
    "object-store-outage": _outage("object-store-outage", 2, 120),
    "redis-loss": _outage("redis-loss", 2, 60),
    "db-latency": lambda rng, w: FaultStep(_at(rng, w), "db-latency", _span(rng, 5, 60),
                                           {"ms": rng.choice((20, 100, 400))}),
    "db-error": _db_error,
    "stale-consumer": _stale_consumer,
    "duplicate-delivery": lambda rng, w: FaultStep(_at(rng, w), "duplicate-delivery", _span(rng, 10, 120),
                                                   {"prob": rng.choice((0.3, 1.0)),
                                                    "spread_s": rng.choice((0.0, 0.4, 3.0))}),
    "platform": _platform,
    "kill-worker": lambda rng, w: FaultStep(_at(rng, w), "kill-worker", _span(rng, 10, 90), {
        "roles": sorted(rng.sample(["dispatcher", "publisher", "report-worker", "reconciler"], rng.randint(1, 2))),
        "every_s": rng.choice((3.0, 10.0, 25.0))}),
    "restart-process": lambda rng, w: FaultStep(_at(rng, w), "restart-process", None, {
        "process": rng.choice(("dispatcher", "publisher", "report-worker", "reconciler"))}),
    "close-airspace": lambda rng, w: FaultStep(_at(rng, w), "close-airspace", _span(rng, 5, 90), {"sites": 1}),
    "unfit-for-flight": _unfit,
    "redrive-dead-letters": lambda rng, w: FaultStep(_at(rng, w) + 60.0, "redrive-dead-letters"),
    "resolve-reviews": lambda rng, w: FaultStep(_at(rng, w) + 60.0, "resolve-reviews"),
    "crash-point": _crash_point,
    "hold-transaction": _hold,
}

# How many kinds of fault one run enables (swarm testing): mostly one to three.
KINDS_WEIGHTS = {0: 3, 1: 35, 2: 32, 3: 20, 4: 10}


def explored(history: object, state: object) -> str | None:
    """An explored run has no expectation of its own: its invariants are the check, and the coverage targets
    (reference.copilot.coverage), counted over all runs, say whether the dangerous places were reached."""
    return None


_EXPLORED: Exercised = explored


def draw_workload(rng: random.Random) -> WorkloadSpec:
    """A small workload mix (explored runs are many and short), its flights' median duration drawn last."""
    sites = rng.randint(1, 3)
    # Attackers' bad requests (S1-S7); some kinds aim at another site than the attacker's, so two sites at least.
    bad = tuple(sorted(rng.sample(sorted(BAD_REQUESTS), rng.randint(1, 2)))) if rng.random() < 0.1 else ()
    sites = max(sites, 2) if bad else sites
    spec = WorkloadSpec(
        confirms=rng.randint(2, 14), window_s=round(rng.uniform(5.0, 90.0), 1),
        drafts_per_confirm=rng.choice((1.0, 1.0, 1.3)), double_click_ratio=rng.choice((0.0, 0.1, 0.5)),
        same_key_burst=1 if rng.random() < 0.85 else rng.randint(2, 4),
        cancel_ratio=rng.choice((0.0, 0.0, 0.2, 0.5)), cancel_clicks=1 if rng.random() < 0.8 else 2,
        reads_per_s=rng.choice((0.0, 0.0, 0.5, 2.0)), devices=rng.randint(sites, 4 * sites), sites=sites,
        # a foreign-task's or cache-neighbour's victim is another operator than the attacker: two at least
        operators=max(rng.randint(1, 2 * sites), 2 if set(NEEDS_A_VICTIM) & set(bad) else 1), bad_requests=bad,
        bad_each=1,
        polls_after_confirm=rng.randint(0, 3), flight_median_s=round(rng.uniform(20.0, 120.0), 1))
    return spec


# Motifs: what one dangerous path needs, drawn together. Independent draws almost never line up the three or four
# things such a path needs (found by `sortie explore`: a status-only predicate and a reconciler that re-dispatches
# without asking both went unfound in 300 runs), so a share of the runs draws one motif on top of its swarm draw.
Motif = Callable[[random.Random, WorkloadSpec], tuple[WorkloadSpec, list[FaultStep]]]
MOTIF_SHARE = 0.3

# The state machine's cycles (reference/copilot/states.py): a status that comes back round one is where only the version
# predicate tells a stale writer from a current one (ABA). Per cycle: the platform knob that drives the machine round
# it, the transactions that read its first status and then write, and what the workload does to enter it.
CYCLES: dict[str, tuple[dict[str, object], tuple[tuple[str, str], ...], dict[str, float]]] = {
    "EXECUTING→CANCEL_PENDING→EXECUTING (cancel refused)": (
        {"refuse_cancel_prob": 1.0}, (("api", "cancel"), ("dispatcher", "cancel.answer")),
        {"cancel_ratio": 0.5, "cancel_clicks": 2}),
    "QUEUED→DISPATCHING→DISPATCH_FAILED→QUEUED (dispatch rejected, retried)": (
        {"reject_next": 3}, (("dispatcher", "dispatch.begin"),), {}),
}


def _enter(spec: WorkloadSpec, enter: dict[str, float]) -> WorkloadSpec:
    return dataclasses.replace(spec, **{k: max(getattr(spec, k), v) for k, v in enter.items()})


def _cycle(name: str) -> Motif:
    def draw(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
        knobs, readers, enter = CYCLES[name]
        spec = _enter(spec, enter)
        end = spec.window_s + 180.0
        steps = [FaultStep(0.0, "platform", end, dict(knobs))]
        for _ in range(rng.randint(1, 4)):
            role, tx = rng.choice(readers)
            # Armed while the users act: a hold takes the next such transaction, so one armed after the last holds none.
            steps.append(FaultStep(_at(rng, spec.window_s), "hold-transaction", None,
                                   {"role": role, "tx": tx, "seconds": _span(rng, 2, 20),
                                    "count": rng.randint(1, 2)}))
        return spec, steps
    return draw


# Statuses the reconciler owns (Policy.stale_after_s): a task stranded in one, with no platform event to move it,
# is settled by the reconciler's query alone (seed 000 §7.2). Per status: the flight events lost, the crash that
# strands it, and what the workload does to enter it.
STRANDINGS: dict[str, tuple[list[str], tuple[str, str] | None, dict[str, float]]] = {
    "DISPATCHING (killed after the platform accepted)": (
        ["telemetry", "alert", "completed", "failed", "cancelled"], ("dispatcher", "create_flight"), {}),
    "EXECUTING (completion lost)": (["completed", "failed"], None, {}),
    "CANCEL_PENDING (cancellation lost)": (["cancelled"], None, {"cancel_ratio": 0.5}),
}


def _stranding(name: str) -> Motif:
    def draw(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
        lost, crash, enter = STRANDINGS[name]
        spec = _enter(spec, enter)
        steps = [FaultStep(0.0, "platform", round(spec.window_s + 200.0, 1), {"lose_event_kinds": sorted(lost)})]
        if crash:
            steps.append(FaultStep(_at(rng, spec.window_s), "crash-point", None, {
                "role": crash[0], "effect": crash[1], "when": "after", "action": "kill",
                "count": rng.randint(1, 4)}))
        return spec, steps
    return draw


def _revoked_while_queued(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """Seed 000 checks airspace at confirm and again before dispatch: tasks wait in the queue (a broker outage),
    the airspace over some sites closes meanwhile and stays closed after the queue drains."""
    outage = round(spec.window_s + rng.uniform(10.0, 60.0), 1)
    close_at = round(rng.uniform(0.5, 1.0) * outage, 1)
    return spec, [FaultStep(0.0, "broker-outage", outage),
                  FaultStep(close_at, "close-airspace", round(outage - close_at + rng.uniform(60.0, 250.0), 1),
                            {"sites": rng.randint(1, spec.sites)})]


def _unfit_while_queued(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """Seed 000 re-checks device state and approval before dispatch too: tasks wait in the queue (a broker outage),
    and meanwhile some of their devices go offline or drain and some approvals are revoked (S8)."""
    outage = round(spec.window_s + rng.uniform(10.0, 60.0), 1)
    return spec, [FaultStep(0.0, "broker-outage", outage),
                  _unfit(rng, spec.window_s, round(rng.uniform(0.5, 1.0) * outage, 1))]


def _stranded_created(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """A stale consumer in the dispatchers' group takes a share of the TaskCreated messages: their tasks wait in
    CREATED for the reconciler (R12)."""
    return spec, [FaultStep(0.0, "stale-consumer", round(spec.window_s + rng.uniform(10.0, 60.0), 1),
                            {"group": "dispatcher"})]


def _never_sent(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """Dispatchers killed between their DISPATCHING commit and their create call, on a platform without idempotency
    keys: only the reconciler's query (no flight) moves the task on (R13)."""
    return spec, [FaultStep(0.0, "platform", None, {"idempotency_key": False}),
                  FaultStep(_at(rng, spec.window_s), "crash-point", None, {
                      "role": "dispatcher", "effect": "create_flight", "when": "before", "action": "kill",
                      "count": rng.randint(1, 4)})]


def _refused_mid_batch(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """B15's shape: both publishers stopped at their next claim while the users confirm, so the first to wake claims
    a batch of several rows; it is stopped again after its first publish, and the broker goes away while it sleeps, so
    its next publish is refused inside the batch (without it, 300 runs never refused a publish after an accepted one
    of the same round). A publisher claims at least every outbox_wait_s (5 s): both are stopped 5 s after the first
    step, and the first wakes no earlier than ``backlog`` after it."""
    backlog, nap = _span(rng, 20, 60), _span(rng, 10, 30)
    spec = dataclasses.replace(spec, confirms=max(spec.confirms, 8), window_s=min(spec.window_s, backlog))
    return spec, [
        FaultStep(0.0, "crash-point", None, {"role": "publisher", "effect": "outbox.claim", "when": "before",
                                             "action": "stop", "seconds": backlog, "count": 2}),
        FaultStep(round(backlog - 1.0, 1), "crash-point", None, {"role": "publisher", "effect": "publish",
                                                                 "when": "after", "action": "stop", "seconds": nap,
                                                                 "count": 1}),
        FaultStep(round(backlog + 6.0, 1), "broker-outage", round(nap + rng.uniform(5.0, 60.0), 1))]


MOTIFS: dict[str, Motif] = {**{f"cycle {n}": _cycle(n) for n in CYCLES},
                            **{f"stranded in {n}": _stranding(n) for n in STRANDINGS},
                            "stranded in CREATED (a stale consumer took its TaskCreated)": _stranded_created,
                            "stranded in DISPATCHING (killed before its create, no key)": _never_sent,
                            "airspace revoked while queued": _revoked_while_queued,
                            "devices and approvals unfit while queued": _unfit_while_queued,
                            "a publish refused inside a batch": _refused_mid_batch}


# The stream tier (reference/copilot/http/notify.py, systems.copilot.sim_streams; judged by I38): a share of the runs
# holds operators' task streams open, and each of the faults that test a stream is drawn with STREAM_FAULT_SHARE. Drawn
# from a random stream of its own, after the rest: the runs without streams are the runs drawn before streams were.
STREAM_SHARE = 0.25
STREAM_FAULT_SHARE = 0.5
STREAM_DRAWS: dict[str, Draw] = {
    "stream-disconnect": _outage("stream-disconnect", 2, 60),
    "redis-loss": _outage("redis-loss", 2, 60),  # the relay loses its feed: the streams that stay open must resync
    "stream-stall": lambda rng, w: FaultStep(_at(rng, w), "stream-stall", _span(rng, 5, 90),
                                             {"depth": rng.randint(1, 8)}),
}


def draw_streams(rng: random.Random, spec: WorkloadSpec) -> tuple[WorkloadSpec, list[FaultStep]]:
    """Streams held by the operators in turn, several per operator in most runs (each must hear every change of its
    user's tasks), at most the hub's STREAMS_PER_USER each; and the stream faults, each drawn or not."""
    streams = spec.operators * rng.choice((1, 2, 2, 3)) + rng.randint(0, spec.operators - 1)
    spec = dataclasses.replace(spec, sse_streams=min(streams, STREAMS_PER_USER * spec.operators))
    steps = [draw(rng, spec.window_s) for _, draw in sorted(STREAM_DRAWS.items()) if rng.random() < STREAM_FAULT_SHARE]
    return spec, steps


def draw_case(run_seed: int) -> Scenario:
    """The run drawn from ``run_seed`` (the simulation then runs with the same seed)."""
    rng = random.Random(f"explore:{run_seed}")
    spec = draw_workload(rng)
    n = rng.choices(list(KINDS_WEIGHTS), weights=list(KINDS_WEIGHTS.values()))[0]
    kinds = rng.sample(sorted(DRAWS), n)
    steps = [DRAWS[k](rng, spec.window_s) for k in kinds for _ in range(1 if rng.random() < 0.75 else 2)]
    if rng.random() < MOTIF_SHARE:
        spec, more = MOTIFS[rng.choice(sorted(MOTIFS))](rng, spec)
        steps += more
    streams = random.Random(f"explore-streams:{run_seed}")
    if streams.random() < STREAM_SHARE:
        spec, more = draw_streams(streams, spec)
        steps += more
    steps.sort(key=lambda s: (s.at, s.fault))
    return case(f"X{run_seed}", spec, tuple(steps))


# A lost completion leaves its task to the reconciler's EXECUTING threshold (found by `sortie explore`: a 600 s bound
# called the reference stuck while it waited as its policy says); the catalogue's R7 uses 1500 s for the same reason.
RECOVERY_BOUND_S = max(600.0, Policy().reconcile_bound_s + 60.0)


def rebuild(s: Scenario, **changes: Any) -> Scenario:
    """``s`` with another workload or faults (what shrinking changes)."""
    return case(s.id, changes.get("workload", s.workload), changes.get("faults", s.faults))


def case(case_id: str, spec: WorkloadSpec, faults: tuple[FaultStep, ...]) -> Scenario:
    kinds = sorted({f.fault for f in faults})
    return Scenario(id=case_id, slug="explored", title=f"explored: {', '.join(kinds) or 'no faults'}",
                    workload=spec, faults=faults, recovery_bound_s=RECOVERY_BOUND_S, exercised=_EXPLORED,
                    shells=("sim",), invariants=INVARIANTS.ids)


def workload_steps(w: WorkloadSpec) -> Iterator[tuple[str, Any]]:
    """The Copilot's workload, smaller: fewer confirms, a shorter window, plainer users, shorter flights."""
    yield from fewer(w, "confirms")
    yield from shorter_window(w)
    yield from plainer(w, (("bad_requests", ()), ("reads_per_s", 0.0), ("double_click_ratio", 0.0),
                           ("cancel_ratio", 0.0), ("same_key_burst", 1), ("cancel_clicks", 1),
                           ("drafts_per_confirm", 1.0), ("polls_after_confirm", 0)))
    yield from plainer(w, (("sse_streams", 0),))
    yield from fewer(w, "sse_streams")
    fewest = 2 if set(NEEDS_A_VICTIM) & set(w.bad_requests) else 1  # its victim is another operator
    fewest = max(fewest, -(-w.sse_streams // STREAMS_PER_USER))  # the streams' holders, each under the hub's limit
    if w.operators > fewest:
        yield "operators", max(fewest, w.operators // 2)
    if w.sites > 1 and not w.bad_requests:  # some bad requests aim at a second site
        yield "sites", 1
    if w.devices > w.sites:
        yield "devices", max(w.sites, w.devices // 2)
    if w.flight_median_s > 10.0:
        yield "flight_median_s", max(10.0, round(w.flight_median_s / 2, 1))


EXPLORE = ExploreSpec(draw=draw_case, workload_steps=workload_steps, rebuild=rebuild,
                      users=lambda w: w.confirms, targets=coverage.TARGETS, counting=coverage.counting)
