"""A simpy queueing model of the reference backend, calibrated from a measured load run (issue 5).

What is modelled (one task's path to EXECUTING, as the reference code runs it):

    client --> API (gunicorn: threads hold the request, a worker's GIL serves its CPU part)
           --> DB write transaction (task + audit + outbox, one connection of the pool)
           --> outbox publisher (when idle, waits for the commit's notification, at most ``publisher_wait_s``;
               claim tx, per-message publish, mark-sent tx; one publisher per outbox partition)
           --> broker hop (a delay)
           --> dispatcher (one of ``dispatchers``): QUEUED write tx, read tx, 1 platform call (get_device;
               capabilities are the deployment's configuration, no call), DISPATCHING write tx, then create_flight
               and the EXECUTING write-back as the dispatch attempt measures them together
           --> flight (lognormal) --> completion webhook through the API (a write tx) = COMPLETED

Every other endpoint (drafts, approvals, snapshot reads, cancels) is an open Poisson stream into the API with its
own handler time and transaction count; SSE streams are connections. The platform's telemetry webhooks, when the
calibration run logged them, come from a model of the simulator's sender: events arrive as a Poisson stream and one
POST at a time carries every event that arrived while the previous one was out, so the POSTs grow more slowly than
the events (``_Run._webhook_sender``).
Following seed 003 §15 the model counts **connections**, **state changes** and **database writes**
separately (``counts_per_s``): a read does not write, a write transaction may carry several state
changes (the dispatcher's begin moves VALIDATING and DISPATCHING in one commit), and a stream is a
connection that neither writes nor changes state.

SSE fan-out (``CapacityModel.sse_fanout``): the stream tier (reference/copilot/http/stream_asgi.py, one asyncio process)
hears each task state change once (Redis) and writes it to every open stream of the task's owner; each stream also
gets a heartbeat every ``sse_heartbeat_s``. The model charges one CPU cost, ``sse_frame_ms``, per frame: per change
heard, per change x stream of its owner (streams spread evenly over the operators), per heartbeat. That CPU is a host
demand like any process's (it replaces the tier's measured CPU, which would otherwise grow with the multiple
alone, not with the streams), and the tier's own utilisation is its cores over one core: a single event loop.
Idle streams cost memory and heartbeats, not API threads (``predict(extra_streams=N)``).

The host's CPU is not a queue in the model: processes share cores, so it is a processor-sharing stretch. Each
process's measured CPU (load.json ``timeseries.cpu_pct``), and the machine's CPU that none of them accounts for
(``UNATTRIBUTED``: the kernel's loopback networking, softirqs), is fixed plus linear in the multiple (``fit_cpu``,
over runs at several multiples), except where it follows the API's requests (``CPU_WORK``: the API, PostgreSQL, its
Toxiproxy link, the simulator): those are charged per request (or webhook POST) per second that the
run itself does, re-read every few virtual seconds (``_Run._cpu_governor``), since the webhook POSTs batch more
events as the host slows and the requests grow slower than the multiple. Each CPU-bound service time draws its own
stretch: 1, plus with the Erlang C probability an exponential wait for a core (``erlang_wait``; its mean is
``ps_slowdown``, the M/M/c response time over the service time, c the host's cores: a job uses at most one core), at
``rho``, the host's CPU utilisation at the predicted multiple; divided by the calibration run's median draw, since
the service times are fitted to its medians. So the tail widens with utilisation faster than the median, as measured
(1x -> 5x: confirm p50 +57%, p95 +98%); one mean factor for every draw (``cpu_stretch`` in a prediction, the model
before 2026-12-02) kept them in step. What stretches: everything that is some process's work on this host: the
handlers' CPU and waits (their round trips through Toxiproxy, PostgreSQL and Redis), the transactions, the
publisher's and the dispatchers' CPU, the platform calls (the simulator and its Toxiproxy link), and the client
overhead (Locust, the loopback, gunicorn's parsing before the handler). Not the broker hop: a fitted residual that
is mostly the consumers' polling phase.

Virtual time: ``predict`` simulates ``duration_s`` seconds of traffic in well under a few wall
seconds, deterministically for a given seed (each stream and each task draws from its own generator,
so adding a server does not reshuffle anyone's service times).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import random
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypedDict

import simpy

from loadtests.quantiles import percentile
from loadtests.record import LoadRecord

# ---------------------------------------------------------------------------------------------- constants

# Utilisation at which a resource counts as saturated (queues grow fast past it).
SATURATION_UTIL = 0.85
# SLOs of docs/capacity.md (a load.json's own `slo` list overrides the targets when it names them).
DEFAULT_SLO = {"confirm_p99_ms": 300.0, "confirm_to_executing_p99_s": 3.0}
# Endpoint kinds and what one request does to the database: (read transactions, write transactions,
# state changes). From the reference's handlers (reference/copilot/http/app.py, reference/copilot/services/*).
KIND_TX: dict[str, tuple[int, int, int]] = {
    "confirm": (0, 1, 1),  # task + audit + outbox in one commit; CREATED
    "draft": (0, 1, 0),
    "approval": (0, 1, 0),
    "read": (1, 0, 0),
    "cancel": (0, 1, 1),  # CANCEL_PENDING
    "platform": (0, 1, 0),  # telemetry/alerts webhook batch; state changes counted by the pipeline
    "stream": (0, 0, 0),  # SSE: a connection
    "other": (1, 0, 0),
}
# The dispatcher's work per task (reference/copilot/services/dispatch.py, consumer.py).
DISPATCH_WRITE_TX = 3  # consume.task_created (QUEUED), dispatch.begin (VALIDATING+DISPATCHING), write_back
DISPATCH_READ_TX = 1  # dispatch.read
DISPATCH_STATE_CHANGES = 4  # QUEUED, VALIDATING, DISPATCHING, EXECUTING
# get_device only: HttpPlatformClient.capabilities() answers from the deployment's settings without a request
# (reference/copilot/adapters/platform_http.py), so charging it a platform round trip overstated DISPATCHING by one
# call.
DISPATCH_PLATFORM_CALLS_BEFORE = 1
# SSE fan-out: changes each task makes on its owner's streams (the happy path; a cancel adds two, not counted).
TASK_STATE_CHANGES = 6  # CREATED, QUEUED, VALIDATING, DISPATCHING, EXECUTING, COMPLETED
STREAM_PROCESS = "stream"  # the stream tier's process group in load.json timeseries.cpu_pct
# The processes whose CPU follows the API's requests, not the multiple: the API itself, PostgreSQL and its Toxiproxy
# link (statements per request), and the platform simulator (its webhook POSTs, one per batch of events). Requests grow
# slower than the multiple, because the simulator's POSTs carry more events each at higher rates: measured
# 2026-12-03, 31-33 requests/s at 1x, 55-62 at 2x, 107 at 5x, while the API's CPU held at 3.7-4.2 ms per request and
# the simulator's at 2.0-2.2 ms per POST. Charged per multiple, their CPU put 1.75 cores on the two-core host at 5x
# against 1.36 measured, and the model's queues exploded where the host's did not.
CPU_WORK = {"api": "requests", "postgres": "requests", "toxiproxy": "requests", "simulator": "webhook_posts"}
# A run re-reads the work it did over this many virtual seconds, every CPU_WINDOW_S / 2, to set the host's CPU.
CPU_WINDOW_S = 10.0
# A run calibrates sse_frame_ms only when the tier wrote at least this many frames per second (below it the
# event loop's fixed cost, not the frames, is what its CPU measures).
SSE_FIT_MIN_FRAMES_PER_S = 100.0
# Defaults when a load.json does not measure a figure; each use is listed as an assumption.
DEFAULTS: dict[str, tuple[float, str]] = {
    "api_workers": (2, "systems/copilot/stack.py CopilotOptions.api_workers"),
    "api_threads": (8, "gunicorn --threads 8 in systems/copilot/stack.py"),
    "dispatchers": (2, "systems/copilot/stack.py CopilotOptions.topology"),
    "db_capacity": (2, "concurrent transactions the database serves: one per core of a 2-core host"),
    "partitions": (1, "one outbox publisher (the reference runs one)"),
    "publisher_poll_s": (0.5, "reference/copilot/policy.py Policy.poll_idle_s"),
    "publisher_wait_s": (5.0, "reference/copilot/policy.py Policy.outbox_wait_s"),
    "outbox_batch": (50, "reference/copilot/policy.py Policy.outbox_batch"),
    "double_click_ratio": (0.10, "docs/capacity.md: 10% of confirms repeat a key"),
    "read_cache_hit": (0.0, "no snapshot cache hits assumed (conservative)"),
    "api_handler_ms": (5.0, "guess: a small Flask handler"),
    "db_write_ms": (4.0, "guess: one small PostgreSQL commit on local disk"),
    "db_read_ms": (1.5, "guess: one indexed PostgreSQL read"),
    "publisher_per_message_ms": (3.0, "guess: one RocketMQ send with ack over loopback"),
    "dispatcher_cpu_ms": (5.0, "guess: Python work of one dispatch besides its transactions and calls"),
    "platform_call_ms": (10.0, "guess: one simulator HTTP call over loopback"),
    "broker_hop_ms": (20.0, "guess: RocketMQ proxy hop plus the consumer's receive"),
    "flight_s": (10.0, "simulator: 10-minute median flight at time-scale 60"),
    "sigma": (0.5, "lognormal shape of service times when only one percentile is known"),
    "sse_frame_ms": (0.075, "measured: the stream tier's extra CPU per extra frame, 5x with and without 5,000 "
                            "idle streams (1.0% -> 4.1% of a core for ~430 more frames/s; docs/capacity.md, "
                            "The stream tier)"),
    "operators_1x": (50, "docs/capacity.md: active operators at 1x (streams spread evenly over them)"),
    "sse_streams_1x": (50, "systems/copilot/profiles/1x.yaml sse_streams"),
    # The reference's own constants, which a run records in load.json's model_inputs (older runs did not)
    "consumer_long_poll_s": (1.0, "reference/copilot/adapters/broker_rocketmq.py LONG_POLL_S"),
    "sse_heartbeat_s": (15.0, "reference/copilot/http/sse.py HEARTBEAT_S"),
    "webhook_max_batch": (500, "simulator/app.py MAX_BATCH: the platform's most events in one webhook POST"),
}
# The processor-sharing stretch stops growing here (a host that busy is saturated anyway).
RHO_CAP = 0.98


def erlang_wait(rho: float, cores: float) -> tuple[float, float]:
    """The M/M/c waiting time at utilisation ``rho`` on ``cores`` cores, in units of the mean service time: the
    probability of waiting at all (Erlang C) and the mean of the exponential wait when it does."""
    rho = min(max(rho, 0.0), RHO_CAP)
    c = max(1, round(cores))
    a = c * rho
    term, total = 1.0, 1.0  # sum of a^k / k! for k < c
    for k in range(1, c):
        term *= a / k
        total += term
    top = term * a / c / (1.0 - rho)  # a^c / c! / (1 - rho)
    return top / (total + top), 1.0 / (c * (1.0 - rho))


def ps_slowdown(rho: float, cores: float) -> float:
    """Mean response time over service time of a processor-sharing host of ``cores`` cores at utilisation ``rho``,
    each job using at most one core: the M/M/c number-in-system chain, so 1 + ErlangC(c, c rho) / (c (1 - rho)).
    A job runs at full speed while fewer jobs than cores are runnable; 1 / (1 - rho), the one-core formula the model
    used before, made a 2-core host at 58% stretch 1.65x against 31%, where this gives 1.37x."""
    p_wait, mean_wait = erlang_wait(rho, cores)
    return 1.0 + p_wait * mean_wait
# A run whose queues pass this length stops its arrivals early: it is saturated, its figures say so.
OVERFLOW_QUEUE = 1500
Z95 = 1.6449
Z99 = 2.3263


# --------------------------------------------------------------------------------------------- helpers

def _stream(seed: int, name: str) -> random.Random:
    return random.Random(zlib.crc32(f"{seed}:{name}".encode()))


@dataclass(frozen=True)
class Dist:
    """A lognormal service time in milliseconds: median and shape (sigma of the log)."""

    median_ms: float
    sigma: float = 0.5

    @classmethod
    def fit(cls, median: float | None = None, mean: float | None = None, p95: float | None = None,
            p99: float | None = None, sigma: float = 0.5) -> Dist:
        """From what was measured: median (or a mean), and p95 or p99 for the shape."""
        if median is None and mean is None:
            raise ValueError("need a median or a mean")
        tail, z = (p95, Z95) if p95 else (p99, Z99) if p99 else (None, None)
        if median is not None and median > 0 and tail and tail > median:
            sigma = math.log(tail / median) / z  # type: ignore[operator]
        elif median is None and mean and tail and tail > mean:
            # mean = median * exp(s^2/2), tail = median * exp(z s): solve s^2/2 - z s + ln(tail/mean) = 0
            z_ = z or Z95
            disc = z_ * z_ - 2 * math.log(tail / mean)
            sigma = z_ - math.sqrt(disc) if disc > 0 else sigma
        sigma = min(max(sigma, 0.0), 2.0)
        if median is None:
            median = mean / math.exp(sigma * sigma / 2)  # type: ignore[operator]
        return cls(max(float(median), 0.0), sigma)

    @property
    def mean_ms(self) -> float:
        return self.median_ms * math.exp(self.sigma * self.sigma / 2)

    def sample_s(self, rng: random.Random, stretch: float = 1.0) -> float:
        if self.median_ms <= 0:
            return 0.0
        x = self.median_ms if self.sigma <= 0 else rng.lognormvariate(math.log(self.median_ms), self.sigma)
        return x * stretch / 1000.0

    def as_json(self) -> dict[str, float]:
        return {"median_ms": round(self.median_ms, 3), "sigma": round(self.sigma, 3),
                "mean_ms": round(self.mean_ms, 3)}


@dataclass(frozen=True)
class Source:
    """Where one parameter's value came from."""

    parameter: str
    value: Any
    source: str
    assumed: bool  # True: a stated default, not a measurement

    def as_json(self) -> dict[str, Any]:
        v = self.value.as_json() if isinstance(self.value, Dist) else self.value
        return {"parameter": self.parameter, "value": v, "source": self.source, "assumed": self.assumed}


def endpoint_kind(name: str) -> str:
    """Classify a Locust endpoint name (e.g. ``POST /drafts/[id]/confirm``) by what it does."""
    n = name.lower()
    if n in ("aggregated", "total", "all"):
        return "aggregate"
    if "confirm" in n:
        return "confirm"
    if "approv" in n:
        return "approval"
    if "cancel" in n:
        return "cancel"
    if "stream" in n or "sse" in n:
        return "stream"
    if "platform" in n or "webhook" in n or "telemetry" in n or "/events" in n and n.startswith("post"):
        return "platform"
    if "draft" in n and not n.startswith("get"):
        return "draft"
    if n.startswith("get") or "snapshot" in n or "read" in n:
        return "read"
    return "other"


# ------------------------------------------------------------------------------------------------ model

@dataclass
class EndpointSpec:
    name: str
    kind: str
    rate_1x: float  # requests per second at 1x
    handler: Dist  # API time besides the database (CPU part of the handler)
    server_side: bool = False  # handler measured in the server: the client overhead is added to it
    # What the handler waits for besides the GIL and the modelled transactions: its round trips through the
    # database's Toxiproxy link and to Redis (Server-Timing wall - CPU - transactions). Those are processes on the same
    # host, so it stretches with the host's CPU; the client overhead (fitted) is then only what lies outside the API.
    wait: Dist | None = None
    # Platform webhooks: events per POST in the calibration run (the delivery log). Set, the simulator's sender is
    # modelled (one POST at a time, carrying every event that arrived meanwhile), so batches grow with the rate
    # (measured 1.02 / 1.09 / 1.50 events per POST at 1x / 2x / 5x); None, POSTs arrive at rate_1x x multiple.
    events_per_request: float | None = None


@dataclass
class CapacityModel:
    endpoints: dict[str, EndpointSpec]
    db_write: Dist
    db_read: Dist
    publisher_per_message: Dist
    dispatcher_cpu: Dist
    platform_call: Dist
    broker_hop_ms: float
    flight: Dist  # seconds, stored in the "ms" field as seconds * 1000
    client_overhead: Dist | None = None  # network/Locust time around server-measured handlers (calibrated)
    device_call: Dist | None = None  # the dispatcher's get_device call alone (else platform_call)
    api_workers: int = 2
    api_threads: int = 8
    dispatchers: int = 2
    db_capacity: int = 2
    partitions: int = 1
    publisher_poll_s: float = 0.5  # an idle consumer's sleep between long polls
    publisher_wait_s: float = 5.0  # an idle publisher's longest wait for an outbox notification
    consumer_long_poll_s: float = 1.0  # the consumer's receive (a RocketMQ long poll) before its idle sleep
    sse_heartbeat_s: float = 15.0  # a stream's heartbeat: one frame this often on every open stream
    webhook_max_batch: float = 500  # the platform's webhook sender puts at most this many events in one POST
    outbox_batch: int = 50
    double_click_ratio: float = 0.10
    read_cache_hit: float = 0.0
    sse_streams_1x: float = 0.0
    sse_frame_ms: float = 0.075  # stream tier CPU per frame written (change heard, change delivered, heartbeat)
    operators_1x: float = 50.0  # streams are spread over the operators: a change reaches its owner's streams
    calibrated_extra_streams: float = 0.0  # idle streams held beside the profile's in the calibration run
    host_cores: float | None = None
    cpu_cores_per_1x: dict[str, float] = field(default_factory=dict)  # process -> cores at 1x
    # process -> cores it uses whatever the load (a JVM's idle work, pollers): fitted by fit_cpu over runs at
    # several multiples; empty when one run calibrated the model (then CPU is assumed linear in the multiple)
    cpu_cores_fixed: dict[str, float] = field(default_factory=dict)
    # process (CPU_WORK) -> cores per unit of its work rate (a line through 0, ``_per_work``): these processes are
    # charged for the work a prediction's run actually does (requests/s, webhook POSTs/s), not per multiple;
    # ``cpu_cores_per_1x`` keeps their measured CPU for reference only
    cpu_per_work: dict[str, float] = field(default_factory=dict)
    calibrated_work: dict[str, float] = field(default_factory=dict)  # the calibration run's measured work rates
    calibrated_multiple: float = 1.0
    slo: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SLO))
    sources: list[Source] = field(default_factory=list)
    profile: str = ""

    # ---------------------------------------------------------------- derived figures

    def sse_fanout(self, multiple: float, extra_streams: float = 0.0) -> dict[str, float]:
        """The stream tier's work at ``multiple`` with ``extra_streams`` idle streams beside the profile's:
        changes heard, frames written per second, and the CPU cores that takes."""
        streams = self.sse_streams_1x * multiple + max(0.0, extra_streams)
        confirms = sum(e.rate_1x for e in self.endpoints.values() if e.kind == "confirm") * multiple
        changes = confirms * (1.0 - self.double_click_ratio) * TASK_STATE_CHANGES
        per_owner = streams / max(1.0, self.operators_1x * multiple)
        deliveries = changes * per_owner
        heartbeats = streams / self.sse_heartbeat_s
        frames = changes + deliveries + heartbeats
        return {"streams": streams, "changes_per_s": changes, "deliveries_per_s": deliveries,
                "heartbeats_per_s": heartbeats, "frames_per_s": frames, "cores": frames * self.sse_frame_ms / 1000.0}

    def work_rates(self, multiple: float) -> dict[str, float]:
        """The work rates (CPU_WORK) at ``multiple`` before a run has done any: every endpoint's calibrated rate times
        the multiple. An upper bound at higher multiples (the webhook's POSTs batch more events as the rate grows):
        a run replaces it with the work it does (``_Run._cpu_governor``)."""
        requests = sum(e.rate_1x for e in self.endpoints.values() if e.kind not in ("stream", "aggregate"))
        posts = sum(e.rate_1x for e in self.endpoints.values() if e.kind == "platform")
        return {"requests": requests * multiple, "webhook_posts": posts * multiple}

    def cpu_utilisation(self, multiple: float, cores: float | None = None, exclude: Iterable[str] = (),
                        extra_streams: float = 0.0, work: dict[str, float] | None = None) -> float | None:
        """The host's CPU utilisation at ``multiple``: each process's fixed cores plus its cores per 1x times the
        multiple, or, for the processes in ``cpu_per_work``, per unit of ``work`` (default ``work_rates``)."""
        cores = cores if cores is not None else self.host_cores
        if not cores or not self.cpu_cores_per_1x:
            return None
        drop = tuple(exclude)
        rates = work if work is not None else self.work_rates(multiple)
        demand = 0.0
        for proc in self.cpu_cores_per_1x.keys() | self.cpu_cores_fixed.keys() | self.cpu_per_work.keys():
            # the stream tier's CPU is the fan-out term below, not its measured share scaled by the multiple
            if proc == STREAM_PROCESS or (drop and proc.startswith(drop)):
                continue
            per_work = self.cpu_per_work.get(proc)
            if per_work is not None and CPU_WORK[proc] in rates:
                demand += per_work * rates[CPU_WORK[proc]]
            else:
                demand += self.cpu_cores_fixed.get(proc, 0.0) + self.cpu_cores_per_1x.get(proc, 0.0) * multiple
        sse = 0.0 if drop and STREAM_PROCESS.startswith(drop) else self.sse_fanout(multiple, extra_streams)["cores"]
        return (demand + sse) / cores

    def calibrated_utilisation(self) -> float | None:
        """The host's CPU utilisation in the calibration run, as the model accounts it."""
        return self.cpu_utilisation(self.calibrated_multiple, extra_streams=self.calibrated_extra_streams,
                                    work=self.calibrated_work or None)

    def stretch(self, multiple: float, cores: float | None = None, exclude: Iterable[str] = (),
                extra_streams: float = 0.0, work: dict[str, float] | None = None) -> float:
        """Processor-sharing inflation of CPU-bound service times relative to the calibration run, on a host of
        ``cores`` cores (``ps_slowdown``)."""
        rho = self.cpu_utilisation(multiple, cores, exclude, extra_streams, work)
        rho_cal = self.calibrated_utilisation()
        if rho is None or rho_cal is None:
            return 1.0
        c_now = cores if cores is not None else self.host_cores
        return ps_slowdown(rho, c_now or 1.0) / ps_slowdown(rho_cal, self.host_cores or 1.0)

    def assumptions(self) -> list[Source]:
        return [s for s in self.sources if s.assumed]

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "calibrated_multiple": self.calibrated_multiple,
            "api_workers": self.api_workers, "api_threads": self.api_threads, "dispatchers": self.dispatchers,
            "db_capacity": self.db_capacity, "partitions": self.partitions, "host_cores": self.host_cores,
            "endpoints": {n: {"kind": e.kind, "rate_1x": round(e.rate_1x, 4), "handler": e.handler.as_json(),
                              **({"wait": e.wait.as_json()} if e.wait is not None else {}),
                              **({"events_per_request": e.events_per_request}
                                 if e.events_per_request is not None else {})}
                          for n, e in self.endpoints.items()},
            "db_write": self.db_write.as_json(), "db_read": self.db_read.as_json(),
            "publisher_per_message": self.publisher_per_message.as_json(),
            "dispatcher_cpu": self.dispatcher_cpu.as_json(), "platform_call": self.platform_call.as_json(),
            "device_call": self.device_call.as_json() if self.device_call else None,
            "broker_hop_ms": round(self.broker_hop_ms, 3),
            "client_overhead": self.client_overhead.as_json() if self.client_overhead else None,
            "publisher_poll_s": self.publisher_poll_s, "publisher_wait_s": self.publisher_wait_s,
            "sse_frame_ms": self.sse_frame_ms, "operators_1x": self.operators_1x,
            "slo": dict(self.slo),
            "cpu_cores_per_1x": {k: round(v, 4) for k, v in self.cpu_cores_per_1x.items()},
            "cpu_cores_fixed": {k: round(v, 4) for k, v in self.cpu_cores_fixed.items()},
            "cpu_per_work": {k: {"work": CPU_WORK[k], "cores_per_unit": round(u, 6)}
                             for k, u in self.cpu_per_work.items()},
            "calibrated_work": {k: round(v, 3) for k, v in self.calibrated_work.items()},
            "sources": [s.as_json() for s in self.sources],
        }

    # ---------------------------------------------------------------- prediction

    def predict(self, multiple: float, *, api_workers: int | None = None, dispatchers: int | None = None,
                db_capacity: int | None = None, partitions: int | None = None, cores: float | None = None,
                exclude_cpu: Iterable[str] = (), seed: int = 1, duration_s: float = 120.0,
                warmup_s: float = 10.0, extra_streams: float = 0.0) -> dict[str, Any]:
        """Run the model at ``multiple`` x the 1x profile in virtual time; load.json-shaped figures.
        ``extra_streams``: idle SSE streams held beside the profile's (their fan-out and heartbeats)."""
        if multiple <= 0:
            raise ValueError("multiple must be positive")
        if duration_s <= warmup_s:
            raise ValueError("duration_s must exceed warmup_s")
        run = _Run(self, multiple, api_workers=api_workers or self.api_workers,
                   dispatchers=dispatchers or self.dispatchers, db_capacity=db_capacity or self.db_capacity,
                   partitions=partitions or self.partitions, cores=cores, exclude_cpu=tuple(exclude_cpu),
                   seed=seed, duration_s=duration_s, warmup_s=warmup_s, extra_streams=extra_streams)
        return run.execute()


class _Busy:
    """A simpy resource that also measures its busy time inside the measurement window."""

    def __init__(self, env: simpy.Environment, name: str, capacity: int, window: tuple[float, float]) -> None:
        self.env, self.name, self.capacity = env, name, max(1, int(capacity))
        self.res = simpy.Resource(env, capacity=self.capacity)
        self.window = window
        self.busy = 0.0
        self.peak_queue = 0

    def account(self, start: float, end: float) -> None:
        lo, hi = max(start, self.window[0]), min(end, self.window[1])
        if hi > lo:
            self.busy += hi - lo

    def hold(self, seconds: float):  # a simpy sub-process: acquire, hold, release
        with self.res.request() as req:
            self.peak_queue = max(self.peak_queue, len(self.res.queue))
            yield req
            t0 = self.env.now
            yield self.env.timeout(seconds)
            self.account(t0, self.env.now)

    def utilisation(self) -> float:
        span = self.window[1] - self.window[0]
        return self.busy / (self.capacity * span) if span > 0 else 0.0


@dataclass
class _Task:
    confirmed: float
    rng: random.Random
    dispatching: float | None = None
    executing: float | None = None
    completed: float | None = None
    queued_outbox: float = 0.0


class _Run:
    def __init__(self, m: CapacityModel, multiple: float, *, api_workers: int, dispatchers: int, db_capacity: int,
                 partitions: int, cores: float | None, exclude_cpu: tuple[str, ...], seed: int, duration_s: float,
                 warmup_s: float, extra_streams: float = 0.0) -> None:
        self.m, self.multiple, self.seed = m, multiple, seed
        self.duration, self.warmup = duration_s, warmup_s
        self.env = simpy.Environment()
        # Run on after the arrivals stop so in-flight tasks can finish (bounded: a saturated pipeline won't).
        self.grace = max(30.0, 3 * m.flight.median_ms / 1000.0)
        window = (warmup_s, duration_s)
        self.api_threads = _Busy(self.env, "api_threads", api_workers * m.api_threads, window)
        self.api = _Busy(self.env, "api_workers", api_workers, window)
        self.db = _Busy(self.env, "db", db_capacity, window)
        self.dispatcher = _Busy(self.env, "dispatchers", dispatchers, window)
        self.publishers = [_Busy(self.env, f"publisher-{i}", 1, window) for i in range(max(1, partitions))]
        self.partitions = max(1, partitions)
        self.n_dispatchers = max(1, dispatchers)
        self.cores = cores if cores is not None else m.host_cores
        self.exclude_cpu, self.extra_streams = exclude_cpu, extra_streams
        # Each CPU-bound service time is stretched by its own draw, not by the mean k: it waits for a core with the
        # Erlang C probability, for an exponential time, so the tail widens with the host's utilisation faster than
        # the mean does (measured: 1x -> 5x confirm p50 +57%, p95 +98%). Relative to the calibration run's median
        # draw (1 while fewer than half wait): the service times are fitted to that run's medians.
        self.rho_cal = m.calibrated_utilisation()
        self._norm = 1.0
        if self.rho_cal is not None:
            p_cal, mean_cal = erlang_wait(self.rho_cal, m.host_cores or 1.0)
            self._norm = 1.0 / (1.0 + mean_cal * math.log(2.0 * p_cal) if p_cal > 0.5 else 1.0)
        # The work the run did (CPU_WORK), counted as it starts; the host's CPU follows it (_cpu_governor).
        self.work_done = {"requests": 0, "webhook_posts": 0}
        self._rho_area = 0.0  # integral of the host's utilisation over the window, for its mean
        self._rho_since = warmup_s
        self.cpu_rho: float | None = None
        self._set_cpu(m.work_rates(multiple))
        self.sse = m.sse_fanout(multiple, extra_streams)
        self.outboxes: list[list[_Task]] = [[] for _ in range(self.partitions)]
        self.notified: list[simpy.Event | None] = [None] * self.partitions  # an idle publisher's wake-up
        self.broker = simpy.Store(self.env)
        self.latency: dict[str, list[float]] = {n: [] for n in m.endpoints}
        self.events_sent: dict[str, int] = dict.fromkeys(m.endpoints, 0)  # platform events in the window's POSTs
        self.done: dict[str, int] = dict.fromkeys(m.endpoints, 0)
        self.offered: dict[str, int] = dict.fromkeys(m.endpoints, 0)
        self.pending: dict[int, tuple[str, float]] = {}  # in-window requests not answered yet
        self.tasks: list[_Task] = []
        self.writes = 0
        self.reads = 0
        self.state_changes = 0
        self.outbox_peak = 0
        self.broker_peak = 0
        self.in_flight_peak = 0
        self.in_flight = 0
        self.next_partition = 0
        self.overflow_at: float | None = None
        self.overhead_rng = _stream(seed, "client-overhead")
        self.ids = itertools.count()

    # ---------------------------------------------------------------- pieces

    def _in_window(self, t: float) -> bool:
        return self.warmup <= t < self.duration

    def _set_cpu(self, work: dict[str, float]) -> None:
        """The host's CPU utilisation for the work rates ``work``, and the stretch that follows from it."""
        self._account_rho(self.env.now)
        self.cpu_rho = self.m.cpu_utilisation(self.multiple, self.cores, self.exclude_cpu, self.extra_streams, work)
        self.k = self.m.stretch(self.multiple, self.cores, self.exclude_cpu, self.extra_streams, work)
        if self.cpu_rho is None or self.rho_cal is None:
            self._p_wait, self._mean_wait = 0.0, 0.0
            self._norm = self.k
        else:
            self._p_wait, self._mean_wait = erlang_wait(self.cpu_rho, self.cores or 1.0)

    def _account_rho(self, until: float) -> None:
        """Adds the utilisation in force since the last change, up to ``until``, to the window's integral."""
        until = min(until, self.duration)
        if self.cpu_rho is not None and until > self._rho_since:
            self._rho_area += self.cpu_rho * (until - self._rho_since)
            self._rho_since = until

    def _cpu_governor(self):
        """The host's CPU follows the work the run does, not the multiple alone: every CPU_WINDOW_S / 2 the
        utilisation is re-set from the requests and webhook POSTs started over the last CPU_WINDOW_S (the run starts
        from ``work_rates``, an upper bound). Closes the loop the real host has: a busier host stretches the webhook
        round trips, so the simulator's POSTs carry more events each and the requests grow slower than the load."""
        step = CPU_WINDOW_S / 2
        snapshots = deque([dict(self.work_done)], maxlen=3)  # two steps: one window
        while self.env.now < self.duration:
            yield self.env.timeout(step)
            snapshots.append(dict(self.work_done))
            first, last, span = snapshots[0], snapshots[-1], step * (len(snapshots) - 1)
            self._set_cpu({k: (last[k] - first[k]) / span for k in last})

    def _stretch(self, rng: random.Random) -> float:
        """One service time's stretch by the host's CPU: its mean is ``ps_slowdown(cpu_rho)`` over the calibration
        run's median draw (``k``, the ratio of mean slowdowns, is only reported as ``cpu_stretch``)."""
        x = 1.0
        if self._p_wait > 0 and rng.random() < self._p_wait:
            x += rng.expovariate(1.0 / self._mean_wait)
        return x * self._norm

    def _tx(self, rng: random.Random, write: bool):
        dist = self.m.db_write if write else self.m.db_read
        if self._in_window(self.env.now):
            if write:
                self.writes += 1
            else:
                self.reads += 1
        yield from self.db.hold(dist.sample_s(rng, self._stretch(rng)))

    def _api(self, name: str, kind: str, rng: random.Random, t0: float, task: _Task | None = None,
             record: bool = True):
        spec = self.m.endpoints.get(name)
        handler = spec.handler if spec else Dist(DEFAULTS["api_handler_ms"][0])
        reads, writes, changes = KIND_TX.get(kind, KIND_TX["other"])
        if kind == "read" and rng.random() < self.m.read_cache_hit:
            reads = 0
        cpu = handler.sample_s(rng, self._stretch(rng))
        record = record and spec is not None and self._in_window(t0)
        key = next(self.ids)
        if record:
            self.pending[key] = (name, t0)
        with self.api_threads.res.request() as thread:
            self.api_threads.peak_queue = max(self.api_threads.peak_queue, len(self.api_threads.res.queue))
            yield thread
            t_thread = self.env.now
            self.in_flight += 1
            self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
            yield from self.api.hold(cpu)
            for _ in range(reads):
                yield from self._tx(rng, write=False)
            for _ in range(writes):
                yield from self._tx(rng, write=True)
            if spec is not None and spec.wait is not None:
                yield self.env.timeout(spec.wait.sample_s(rng, self._stretch(rng)))
            self.api_threads.account(t_thread, self.env.now)
            self.in_flight -= 1
        if changes and self._in_window(t0):
            self.state_changes += changes
        if task is not None:
            self._enqueue(task)
        client_ms = self._client_ms(spec, self.env.now - t0) if spec is not None else 1000.0 * (self.env.now - t0)
        if record:
            del self.pending[key]
            self.latency[name].append(client_ms)
            self.done[name] += 1
        return client_ms

    def _client_ms(self, spec: EndpointSpec, server_s: float) -> float:
        ms = server_s * 1000.0
        if spec.server_side and self.m.client_overhead is not None:
            ms += self.m.client_overhead.sample_s(self.overhead_rng, self._stretch(self.overhead_rng)) * 1000.0
        return ms

    def _enqueue(self, task: _Task) -> None:
        task.queued_outbox = self.env.now
        i = self.next_partition
        box = self.outboxes[i]
        self.next_partition = (i + 1) % self.partitions
        box.append(task)
        wake, self.notified[i] = self.notified[i], None  # the commit notifies the partition's publisher
        if wake is not None:
            wake.succeed()
        self.outbox_peak = max(self.outbox_peak, sum(len(b) for b in self.outboxes))

    def _confirm(self, name: str, rng: random.Random, t0: float):
        new = rng.random() >= self.m.double_click_ratio
        task = _Task(t0, random.Random(rng.getrandbits(64))) if new else None
        if task is not None and self._in_window(t0):
            self.tasks.append(task)
        yield from self._api(name, "confirm", rng, t0, task)

    def _arrivals(self, spec: EndpointSpec):
        rate = spec.rate_1x * self.multiple
        if rate <= 0 or spec.kind in ("stream", "aggregate"):
            return
        gaps = _stream(self.seed, f"arrivals:{spec.name}")
        svc = _stream(self.seed, f"service:{spec.name}")
        while True:
            yield self.env.timeout(gaps.expovariate(rate))
            if self.env.now >= self.duration or self.overflow_at is not None:
                return
            t0 = self.env.now
            self.work_done["requests"] += 1
            if self._in_window(t0):
                self.offered[spec.name] += 1
            rng = random.Random(svc.getrandbits(64))
            if spec.kind == "confirm":
                self.env.process(self._confirm(spec.name, rng, t0))
            else:
                self.env.process(self._api(spec.name, spec.kind, rng, t0))

    def _webhook_sender(self, spec: EndpointSpec):
        """The platform simulator's sender (simulator/app.py ``_send_loop``): one POST at a time, each carrying every
        event that arrived while the previous one was out (up to its batch cap), so at a higher rate the POSTs carry
        more events and grow less than the events do. Events arrive as a Poisson stream at the calibration run's
        events per second times the multiple; the sender waits out the whole round trip, client side included."""
        rate = spec.rate_1x * (spec.events_per_request or 1.0) * self.multiple
        if rate <= 0:
            return
        gaps = _stream(self.seed, f"arrivals:{spec.name}")
        svc = _stream(self.seed, f"service:{spec.name}")
        next_at = gaps.expovariate(rate)
        pending = 0
        while True:
            if pending == 0:
                yield self.env.timeout(max(0.0, next_at - self.env.now))
            while next_at <= self.env.now:
                pending += 1
                next_at += gaps.expovariate(rate)
            if self.env.now >= self.duration or self.overflow_at is not None:
                return
            t0 = self.env.now
            batch = min(pending, int(self.m.webhook_max_batch))
            pending -= batch
            self.work_done["requests"] += 1
            self.work_done["webhook_posts"] += 1
            if self._in_window(t0):
                self.offered[spec.name] += 1
                self.events_sent[spec.name] += batch
            round_trip_ms = yield from self._api(spec.name, spec.kind, random.Random(svc.getrandbits(64)), t0)
            yield self.env.timeout(max(0.0, t0 + round_trip_ms / 1000.0 - self.env.now))

    def _watchdog(self):
        """Stops the arrivals once a queue is hopelessly long: the run is saturated, and simulating
        every request of an unbounded queue would only cost wall time."""
        while self.env.now < self.duration:
            yield self.env.timeout(1.0)
            if self.env.now < self.warmup + 5.0:
                continue  # let some requests into the measurement window first
            longest = max(len(self.api_threads.res.queue), len(self.db.res.queue), len(self.broker.items),
                          sum(len(b) for b in self.outboxes))
            if longest > OVERFLOW_QUEUE:
                self.overflow_at = self.env.now
                return

    def _publisher(self, i: int):
        pub = self.publishers[i]
        rng = _stream(self.seed, f"publisher:{i}")
        box = self.outboxes[i]
        while True:
            t_loop = self.env.now
            yield from self._tx(rng, write=True)  # claim (SELECT ... FOR UPDATE SKIP LOCKED + UPDATE)
            batch, box[:] = box[: self.m.outbox_batch], box[self.m.outbox_batch:]
            if not batch:
                pub.account(t_loop, self.env.now)
                if not box:  # a row that came during the claim was notified already: claim again at once
                    self.notified[i] = wake = self.env.event()
                    yield wake | self.env.timeout(self.m.publisher_wait_s)
                continue
            for task in batch:
                yield self.env.timeout(self.m.publisher_per_message.sample_s(rng, self._stretch(rng)))
                self.env.process(self._hop(task))
            yield from self._tx(rng, write=True)  # mark sent
            pub.account(t_loop, self.env.now)

    def _hop(self, task: _Task):
        yield self.env.timeout(self.m.broker_hop_ms / 1000.0)
        yield self.broker.put(task)
        self.broker_peak = max(self.broker_peak, len(self.broker.items))

    def _dispatcher(self, j: int):
        """The consumer loop: a long-poll receive; when it comes back empty, an idle sleep
        (reference/copilot/services/consumer.py consumer_loop)."""
        while True:
            get = self.broker.get()
            got = yield get | self.env.timeout(self.m.consumer_long_poll_s)
            if get not in got:
                get.cancel()
                yield self.env.timeout(self.m.publisher_poll_s)
                continue
            yield from self._dispatch(got[get])

    def _dispatch(self, task: _Task):
        t0 = self.env.now
        rng = task.rng
        cpu = self.m.dispatcher_cpu.sample_s(rng, self._stretch(rng))
        yield self.env.timeout(cpu / 3)
        yield from self._tx(rng, write=True)  # QUEUED + processed_event
        yield from self._tx(rng, write=False)  # dispatch.read
        for _ in range(DISPATCH_PLATFORM_CALLS_BEFORE):
            yield self.env.timeout((self.m.device_call or self.m.platform_call).sample_s(rng, self._stretch(rng)))
        yield self.env.timeout(cpu / 3)
        yield from self._tx(rng, write=True)  # VALIDATING + DISPATCHING + attempt
        task.dispatching = self.env.now
        # create_flight and the write-back transaction (EXECUTING + external id) as dispatch_attempt measures them
        # together (platform_call: started_at to finished_at, its statements through the database's proxy, its CPU):
        # charging the call, a third of the CPU and a pgbench-sized transaction after it counted the write-back twice
        # and its real cost once (a 0.8 ms pgbench transaction against ~25 ms measured, 2026-12-02)
        yield self.env.timeout(self.m.platform_call.sample_s(rng, self._stretch(rng)))
        if self._in_window(self.env.now):
            self.writes += 1
        task.executing = self.env.now
        if self._in_window(task.confirmed):
            self.state_changes += DISPATCH_STATE_CHANGES
        self.dispatcher.account(t0, self.env.now)
        self.env.process(self._flight(task))

    def _flight(self, task: _Task):
        yield self.env.timeout(self.m.flight.sample_s(task.rng))
        name = next((n for n, e in self.m.endpoints.items() if e.kind == "platform"), "")
        yield from self._api(name, "platform", task.rng, self.env.now, record=False)  # the completion webhook
        task.completed = self.env.now
        if self._in_window(task.confirmed):
            self.state_changes += 1

    # ---------------------------------------------------------------- run and figures

    def execute(self) -> dict[str, Any]:
        env = self.env
        for spec in self.m.endpoints.values():
            sender = spec.kind == "platform" and spec.events_per_request is not None
            env.process(self._webhook_sender(spec) if sender else self._arrivals(spec))
        for i in range(self.partitions):
            env.process(self._publisher(i))
        for j in range(self.n_dispatchers):
            env.process(self._dispatcher(j))
        env.process(self._watchdog())
        if self.m.cpu_per_work:
            env.process(self._cpu_governor())
        env.run(until=self.duration + self.grace)
        return self._figures()

    def _figures(self) -> dict[str, Any]:
        span = self.duration - self.warmup
        end = self.duration + self.grace
        # A request or task not finished by the end counts with its age then (a lower bound): saturation
        # shows in the percentiles instead of vanishing from them.
        unanswered: dict[str, list[float]] = {}
        for name, t0 in self.pending.values():
            spec = self.m.endpoints[name]
            unanswered.setdefault(name, []).append(self._client_ms(spec, end - t0))
        endpoints: dict[str, Any] = {}
        for name, spec in self.m.endpoints.items():
            if spec.kind in ("stream", "aggregate"):
                continue
            lat = self.latency[name] + unanswered.get(name, [])
            endpoints[name] = {"kind": spec.kind, "requests": self.done[name], "failures": 0,
                               "unanswered": len(unanswered.get(name, [])),
                               "offered_rps": round(self.offered[name] / span, 4),
                               "rps": round(self.done[name] / span, 4),
                               **{f"p{q}_ms": _r(percentile(lat, q)) for q in (50, 95, 99)}}
            if self.events_sent[name]:
                endpoints[name]["events_per_request"] = round(self.events_sent[name] / max(1, self.offered[name]), 3)
        lifecycle: dict[str, Any] = {}
        unsettled = 0
        for stage in ("dispatching", "executing", "completed"):
            xs = [((getattr(t, stage) if getattr(t, stage) is not None else end) - t.confirmed) * 1000.0
                  for t in self.tasks]
            missing = sum(1 for t in self.tasks if getattr(t, stage) is None)
            if stage == "executing":
                unsettled = missing
            lifecycle[stage] = {"n": len(xs) - missing, "unfinished": missing,
                                **{f"p{q}": _r(percentile(xs, q)) for q in (50, 95, 99)}}
        pub_busy = sum(p.busy for p in self.publishers) / (len(self.publishers) * span)
        util = {
            "api_workers": self.api.utilisation(),
            "api_threads": self.api_threads.utilisation(),
            "db": self.db.utilisation(),
            "publisher": pub_busy,
            "dispatchers": self.dispatcher.utilisation(),
            "stream_tier": self.sse["cores"],  # one event loop: saturated at one core
        }
        if self.cpu_rho is not None:
            self._account_rho(self.duration)
            util["host_cpu"] = self._rho_area / span if span > 0 else self.cpu_rho  # mean over the window
        util = {k: round(v, 4) for k, v in util.items()}
        bottleneck = max(util, key=lambda k: util[k])
        saturated = [k for k, v in sorted(util.items(), key=lambda kv: -kv[1]) if v >= SATURATION_UTIL]
        if self.overflow_at is not None and not saturated:
            saturated = [bottleneck]
        confirm = next((e for e in endpoints.values() if e["kind"] == "confirm"), None)
        slo = []
        if confirm is not None:
            v = confirm["p99_ms"]
            slo.append({"name": "confirm_p99_ms", "target": self.m.slo["confirm_p99_ms"], "measured": v,
                        "held": v is not None and v < self.m.slo["confirm_p99_ms"] and not confirm["unanswered"]})
        ex = lifecycle["executing"]["p99"]
        target_s = self.m.slo["confirm_to_executing_p99_s"]
        slo.append({"name": "confirm_to_executing_p99_s", "target": target_s,
                    "measured": None if ex is None else round(ex / 1000.0, 4),
                    "held": ex is not None and ex / 1000.0 < target_s and unsettled == 0})
        streams = self.sse["streams"]
        return {
            "source": "model",
            "profile": self.m.profile,
            "multiple": self.multiple,
            "duration_s": self.duration,
            "seed": self.seed,
            "config": {"api_workers": self.api.capacity, "api_threads": self.api_threads.capacity,
                       "dispatchers": self.n_dispatchers, "db_capacity": self.db.capacity,
                       "partitions": self.partitions, "host_cores": self.cores},
            "cpu_stretch": round(self.k, 4),
            "overflow_at_s": self.overflow_at,
            "endpoints": endpoints,
            "lifecycle_ms": lifecycle,
            "utilisation": util,
            "bottleneck": bottleneck,
            "first_saturated": saturated[0] if saturated else None,
            "saturated": saturated,
            # Seed 003 §15: connections, state changes and writes are separate dimensions.
            "counts_per_s": {
                "connections": round(streams + min(self.in_flight_peak, self.api_threads.capacity), 2),
                "sse_streams": round(streams, 2),
                "sse_frames": round(self.sse["frames_per_s"], 3),  # changes heard + deliveries + heartbeats
                "state_changes": round(self.state_changes / span, 3),
                "db_write_tx": round(self.writes / span, 3),
                "db_read_tx": round(self.reads / span, 3),
            },
            "backlog": {"outbox_peak": self.outbox_peak, "broker_peak": self.broker_peak,
                        "unsettled": unsettled},
            "slo": slo,
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# ---------------------------------------------------------------------------------------- calibration

_ALIASES: dict[str, tuple[str, ...]] = {
    "confirm_handler": ("api_confirm_handler", "confirm_handler"),  # server-side only (api_confirm is client)
    "api_cpu": ("api_cpu_per_request",),
    "db_write": ("db_write_tx", "db_tx", "db_transaction", "db_commit", "db_write", "db.tx", "db",
                 "postgres_cpu_per_commit"),
    "db_read": ("db_read_tx", "db_read", "db.read"),
    "publisher_per_message": ("publisher_cpu_per_message", "publisher_per_message", "publish_per_message"),
    "dispatcher_per_task": ("dispatcher_cpu_per_event", "dispatcher_per_task", "dispatch_per_task"),
    "platform_call": ("platform_call", "platform_call_latency", "platform_latency", "platform"),
    "broker_hop": ("broker_hop", "broker", "broker_latency", "broker_delivery"),
    "device_call": ("platform_get_device",),
}


def _is_cpu(st: dict[str, Any], where: str | None) -> bool:
    """A figure that is a CPU demand (process CPU / units of work), not a latency."""
    if not where:
        return False
    v = st.get(where.split(".", 1)[1])
    return isinstance(v, dict) and ("cpu_s" in v or "cpu" in str(v.get("source", "")).lower()[:40])


SERVER_CPU_MIN_N = 20  # requests with a Server-Timing CPU figure before it replaces the handler's estimate


def _server_cpu(endpoint: dict[str, Any]) -> Dist | None:
    """The handler's CPU as the API measured it per request (load.json endpoints_steady ``server_cpu_*``, from the
    Server-Timing header), when enough requests carried it: what a request holds the GIL for, without the network,
    Toxiproxy, gunicorn's queue or the database's time, which the latency-based estimates cannot separate."""
    if (endpoint.get("server_cpu_n") or 0) < SERVER_CPU_MIN_N or not endpoint.get("server_cpu_p50_ms"):
        return None
    return Dist.fit(median=float(endpoint["server_cpu_p50_ms"]), p95=endpoint.get("server_cpu_p95_ms"))


def _server_wait(endpoint: dict[str, Any], db_ms: float) -> Dist | None:
    """The handler's time that is neither its CPU nor its modelled transactions (``server`` wall minus
    ``server_cpu``, p50 and p95, minus ``db_ms``), or None when the run has no wall figures or nothing is left."""
    wall50, cpu50 = endpoint.get("server_p50_ms"), endpoint.get("server_cpu_p50_ms")
    if not wall50 or not cpu50 or (endpoint.get("server_n") or 0) < SERVER_CPU_MIN_N:
        return None
    median = float(wall50) - float(cpu50) - db_ms
    if median <= 0:
        return None
    wall95, cpu95 = endpoint.get("server_p95_ms"), endpoint.get("server_cpu_p95_ms")
    p95 = float(wall95) - float(cpu95) - db_ms if wall95 and cpu95 else None
    return Dist.fit(median=median, p95=p95 if p95 and p95 > median else None)


class _Measured(NamedTuple):
    """A service time from load.json and where in it the figure was found."""

    dist: Dist
    where: str


def _figure(st: dict[str, Any], key: str) -> _Measured | None:
    """A measured service time under any of its accepted names: a number (ms) or {p50|mean, p95, p99}."""
    for alias in _ALIASES.get(key, (key,)):
        for k in (alias, alias + "_ms"):
            if k in st and st[k] is not None:
                v = st[k]
                if isinstance(v, int | float):
                    return _Measured(Dist(float(v)), f"service_times_ms.{k}")
                if isinstance(v, dict):
                    med = v.get("p50", v.get("median"))
                    mean = v.get("mean", v.get("avg"))
                    if med is None and mean is None:
                        continue
                    return _Measured(Dist.fit(median=med, mean=mean if med is None else None, p95=v.get("p95"),
                                              p99=v.get("p99")), f"service_times_ms.{k}")
    return None


def _number(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str):
        import re

        m = re.search(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?", x)
        return float(m.group()) if m else None
    return None


def _slo_targets(load: dict[str, Any]) -> dict[str, float]:
    out = dict(DEFAULT_SLO)
    for s in load.get("slo") or []:
        name, target = str(s.get("name", "")), _number(s.get("target"))
        if target is None:
            continue
        if "confirm" in name and "p99" in name and "exec" not in name:
            out["confirm_p99_ms"] = float(target) * (1000.0 if name.endswith("_s") else 1.0)
        elif "exec" in name and "p99" in name:
            out["confirm_to_executing_p99_s"] = float(target) / (1000.0 if name.endswith("_ms") else 1.0)
    return out


PROFILE_FLIGHT_MEDIAN_S = 600.0  # flight_duration.median_s of systems/copilot/profiles/1x.yaml
WEBHOOK_BATCH = 10  # platform events per webhook call (loadtests/analysis.py counts them the same way)


def _profile_rates(rates: dict[str, Any] | None = None) -> dict[str, tuple[str, float]]:
    """1x rates from a load.json's ``rates`` when a figure is missing; a rate it lacks is the Copilot's 1x profile's
    (systems/copilot/profiles/1x.yaml), an assumption the caller lists."""
    p = {k: v for k, v in (rates or {}).items() if isinstance(v, int | float)}
    confirms = float(p.get("confirms_per_s", 0.2))
    # p holds numbers only, so the profile's flight_duration mapping never reaches it: the 1x profile's median
    flying = confirms * PROFILE_FLIGHT_MEDIAN_S
    return {
        "POST /drafts": ("draft", float(p.get("drafts_per_s", 0.5))),
        "POST /drafts/[id]/approval": ("approval", confirms),
        "POST /drafts/[id]/confirm": ("confirm", confirms * (1 + float(p.get("double_click_ratio", 0.1)))),
        "GET /tasks/[id]": ("read", float(p.get("snapshot_reads_per_s", 5))),
        "POST /platform/events": ("platform", flying / float(p.get("telemetry_interval_s", 5)) / WEBHOOK_BATCH),
    }


# The machine's CPU that no sampled process accounts for (the kernel's loopback networking and softirqs, short-lived
# processes): it takes cores from the stack like any process, and grows with the load (0.01 / 0.11 / 0.20 cores at
# 1x / 2x / 5x, measured), so the host's utilisation counts it as one more process.
UNATTRIBUTED = "unattributed"


def _cpu_per_1x(load: dict[str, Any], multiple: float) -> dict[str, float]:
    """Cores per 1x of each sampled process (timeseries.cpu_pct, mean outside fault windows), and of the machine's
    CPU no process accounts for (``UNATTRIBUTED``: machine_cpu_pct over the cores minus the processes' sum, over
    the samples where every process has a value)."""
    ts = load.get("timeseries") or {}
    cpu = ts.get("cpu_pct") or {}
    t = ts.get("t") or []
    out: dict[str, float] = {}
    windows = load.get("fault_windows") or []

    def outside_faults(i: int) -> bool:
        return not (i < len(t) and any(w.get("start", 0) <= t[i] <= w.get("end", 0) for w in windows))

    for proc, series in cpu.items():
        vals = [v for i, v in enumerate(series) if isinstance(v, int | float) and outside_faults(i)]
        if vals:
            out[proc] = (sum(vals) / len(vals)) / 100.0 / multiple
    machine = ts.get("machine_cpu_pct") or []
    cores = (load.get("machine") or {}).get("cpus")
    if cpu and machine and isinstance(cores, int | float) and cores > 0:
        rest = []
        for i, m in enumerate(machine):
            procs = [series[i] for series in cpu.values() if i < len(series) and isinstance(series[i], int | float)]
            if isinstance(m, int | float) and outside_faults(i) and len(procs) == len(cpu):
                rest.append(max(0.0, m / 100.0 * cores - sum(procs) / 100.0))
        if rest:
            out[UNATTRIBUTED] = sum(rest) / len(rest) / multiple
    return out


def measured_work(load: dict[str, Any]) -> dict[str, float]:
    """The run's work rates (CPU_WORK) from its endpoint table (``steady_endpoints``): the API's requests per second
    (every endpoint but the streams, which the stream tier serves) and the simulator's webhook POSTs per second. {}
    when the table has no requests."""
    requests = posts = 0.0
    for name, e in steady_endpoints(load).items():
        rps = _number((e or {}).get("rps"))
        kind = endpoint_kind(name)
        if rps is None or kind in ("stream", "aggregate"):
            continue
        requests += rps
        if kind == "platform":
            posts += rps
    return {"requests": requests, "webhook_posts": posts} if requests > 0 else {}


def _per_work(cores_by_run: Sequence[tuple[float, float]]) -> float:
    """Cores per unit of work over (work rate, cores) points: a line through 0, the ratio of the sums.
    These processes idle at ~0 (the fitted intercepts over two runs were 0.000-0.003 cores in two campaigns), and over
    two close points (1x, 2x) a free intercept soaks up one run's noise: a cheap 2x run (3.3 ms per request against
    3.7-4.1 in the other runs) gave 0.05 cores fixed and 2.4 ms per request, and the 5x confirm p95 came out -31.5%."""
    work = sum(x for x, _ in cores_by_run)
    return sum(y for _, y in cores_by_run) / work if work > 0 else 0.0


# A per-sample CPU fit needs this many samples with work in them (below it the ratio CPU / work is kept).
CPU_SLOPE_MIN_BUSY_SAMPLES = 20


def _cpu_slope(load: dict[str, Any], group: str, work_key: str, unit: str) -> tuple[Dist, str] | None:
    """CPU seconds per unit of work of a process group as the least-squares slope of its CPU (cores) against its work
    rate, sample by sample (timeseries.cpu_pct and a cumulative count, each pair of samples a point), not CPU / work
    over the run: a consumer's long poll and a publisher's wait cost CPU with no work, and at 1x that idle CPU,
    charged per unit, tripled the dispatcher's measured 'CPU per task' (issue 13). Two samples per point so a unit
    of work that straddles a sample boundary lands in one point. None when the series are missing, too few samples
    had work, or the slope is not positive."""
    ts = load.get("timeseries") or {}
    t, work = ts.get("t") or [], ts.get(work_key) or []
    procs = [v for k, v in (ts.get("cpu_pct") or {}).items() if k == group or k.startswith(group + "-")]
    windows = load.get("fault_windows") or []
    if not procs or len(work) != len(t) or len(t) < 3:
        return None
    xs, ys = [], []
    for i in range(1, len(t) - 1):
        cpu = [p[j] for p in procs for j in (i, i + 1) if j < len(p)]
        w0, w1 = work[i - 1], work[i + 1]
        if (not isinstance(w0, int | float) or not isinstance(w1, int | float) or len(cpu) != 2 * len(procs)
                or any(not isinstance(c, int | float) for c in cpu) or t[i + 1] <= t[i - 1]
                or any(w.get("start", 0) <= t[i] <= (w.get("end") or math.inf) for w in windows)):
            continue
        xs.append((w1 - w0) / (t[i + 1] - t[i - 1]))
        ys.append(sum(cpu) / 2 / 100.0)
    if sum(1 for x in xs if x > 0) < CPU_SLOPE_MIN_BUSY_SAMPLES:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    if slope <= 0:
        return None
    idle = my - slope * mx
    return Dist.fit(mean=slope * 1000.0), (f"timeseries: slope of {group} CPU against {unit}s per sample "
                                          f"({len(xs)} points; {max(idle, 0.0):.4f} cores idle, not charged per "
                                          f"{unit})")


def fit_cpu(model: CapacityModel, loads: Sequence[dict[str, Any]]) -> CapacityModel:
    """CPU per process as ``fixed + per_1x x multiple``, least squares over fault-free runs at two or more
    multiples (each run's mean CPU outside fault windows). A single run cannot separate the two, so the model
    then keeps CPU linear in the multiple; measured on the native stack, a large share is load-independent (the
    RocketMQ JVM uses ~0.2 core at 1x and at 13x), and the linear assumption saturated the host at ~3x. The processes
    of ``CPU_WORK`` are also charged per unit of their work rate over the same runs (``cpu_per_work``, ``_per_work``),
    which is what a prediction uses for them."""
    points: dict[str, list[tuple[float, float]]] = {}
    work_points: dict[str, list[tuple[dict[str, float], float]]] = {}
    multiples = set()
    for load in loads:
        k = float(load.get("multiple") or 0)
        if k <= 0 or load.get("fault_windows"):
            continue
        multiples.add(k)
        work = measured_work(load)
        for proc, cores_per_1x in _cpu_per_1x(load, k).items():
            points.setdefault(proc, []).append((k, cores_per_1x * k))
            work_points.setdefault(proc, []).append((work, cores_per_1x * k))
    if len(multiples) < 2:
        return model
    fixed: dict[str, float] = {}
    per_1x: dict[str, float] = {}
    for proc, pts in points.items():
        if len({x for x, _ in pts}) < 2:
            continue
        n = len(pts)
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        den = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0
        slope = max(slope, 0.0)
        fixed[proc] = max(my - slope * mx, 0.0)
        per_1x[proc] = slope if fixed[proc] > 0.0 else my / mx  # a negative intercept: a line through 0
    if not per_1x:
        return model
    per_work: dict[str, float] = {}
    for proc, unit in CPU_WORK.items():
        pts = [(work[unit], cores) for work, cores in work_points.get(proc, []) if work.get(unit)]
        if len({x for x, _ in pts}) >= 2:
            per_work[proc] = _per_work(pts)
    src = [s for s in model.sources if s.parameter not in ("cpu_cores_per_1x", "cpu_cores_fixed", "cpu_per_work")]
    where = (f"least squares of each process's mean CPU against the multiple over {len(loads)} fault-free runs "
             f"(multiples {', '.join(f'{k:g}' for k in sorted(multiples))}; in sample for these parameters)")
    src.append(Source("cpu_cores_per_1x", round(sum(per_1x.values()), 4), where, False))
    src.append(Source("cpu_cores_fixed", round(sum(fixed.values()), 4), where, False))
    if per_work:
        src.append(Source("cpu_per_work", {p: round(u, 6) for p, u in per_work.items()},
                          "each process's mean CPU over its work rate, a line through 0 (CPU_WORK: the run's "
                          "requests or webhook POSTs per second, endpoints_steady) over the same runs", False))
    # Replaces the calibration run's single-run lines through 0, like per_1x: a process these runs cannot fit against
    # its work (no endpoint tables) is charged by its fit against the multiple, which has its load-independent part.
    return replace(model, cpu_cores_per_1x=per_1x, cpu_cores_fixed=fixed, cpu_per_work=per_work, sources=src)


def steady_endpoints(load: dict[str, Any]) -> dict[str, Any]:
    """The steady-window endpoint table when the run has one (no ramp-up), else the whole run's."""
    steady = load.get("endpoints_steady")
    if isinstance(steady, dict) and any((e or {}).get("requests") for e in steady.values()):
        return steady
    return load.get("endpoints") or {}


# Calibrations done in this process, newest last (calibrate is deterministic in its arguments).
_CALIBRATED: OrderedDict[tuple[str, bool, int], CapacityModel] = OrderedDict()
_CALIBRATED_KEPT = 8


def calibrate(load: LoadRecord | dict[str, Any], *, refine: bool = True, seed: int = 1) -> CapacityModel:
    """A model whose parameters come from one measured load.json (``_calibrate``). The refining probe runs are most of
    a report's time and are the same for the same run and seed, so a process calibrates each (load, refine, seed) once
    (a report's comparisons, a parity check and the tests calibrate the same runs again) and hands out copies."""
    key = (hashlib.sha256(json.dumps(LoadRecord.parse(load).raw(), sort_keys=True, default=str).encode()).hexdigest(),
           refine, seed)
    if key not in _CALIBRATED:
        _CALIBRATED[key] = _calibrate(load, refine=refine, seed=seed)
        while len(_CALIBRATED) > _CALIBRATED_KEPT:
            _CALIBRATED.popitem(last=False)
    _CALIBRATED.move_to_end(key)
    return copy.deepcopy(_CALIBRATED[key])


def _calibrate(load: LoadRecord | dict[str, Any], *, refine: bool, seed: int) -> CapacityModel:
    """A model whose parameters come from one measured load.json (defaults, flagged, where it is silent).

    Which figure feeds which parameter (docs/capacity.md describes the figures):

    ====================================  ===========================================================
    load.json figure                      model parameter
    ====================================  ===========================================================
    endpoints_steady (else endpoints)     per endpoint: offered rate at 1x = rps / multiple
    [name].rps
    endpoints[name].server_cpu_p50/p95    the handler's CPU as the API measured it per request (Server-Timing,
                                          >= SERVER_CPU_MIN_N requests): used before any estimate below
    service_times_ms.api_cpu_per_request  API CPU per request (GIL-held part); spread over endpoints
                                          in proportion to their client p50 (assumed), so the
                                          rate-weighted mean equals the measured demand
    endpoints[name].p50/p95               handler time when no API CPU figure exists (an upper
                                          bound: it includes the client and the network)
    service_times_ms.db_tx (pgbench)      write-transaction time; else postgres_cpu_per_commit (a
                                          lower bound); else db_capacity / pgbench.tps
    service_times_ms.db_read_tx           read-transaction time (else half a write, assumed)
    service_times_ms.publisher_cpu_*      publisher time per message
    service_times_ms.dispatcher_cpu_*     dispatcher CPU per task (a CPU demand is used as is; a
                                          latency loses its 4 transactions and 2 platform calls);
                                          a CPU demand is the slope of the processes' CPU against
                                          their work per sample (timeseries) when the run has the
                                          series, so their idle CPU is not charged per unit
    service_times_ms.platform_call        create_flight with the attempt's write-back (DISPATCHING to EXECUTING)
    service_times_ms.platform_get_device  the get_device call alone (history; else platform_call)
    service_times_ms.broker_hop           broker delay; else the residual of lifecycle_ms.dispatching
                                          p50 the model does not explain (refine=True)
    lifecycle_ms.completed - executing    flight duration (median)
    endpoints[confirm].p50 and p95        client overhead (network, Locust, waiting for the GIL)
                                          fitted as a lognormal (refine=True)
    rates.sse_streams                     SSE connections at 1x (else the stream endpoint's count)
    sse.resources.stream.cpu_pct_mean     stream tier CPU per frame (sse_frame_ms), when the run wrote
                                          >= 100 frames/s; sse.idle_streams.peak_open: idle streams
    rates.operators                       operators at 1x (a change reaches its owner's streams)
    workers.api_workers/api_threads/      gunicorn workers and threads, dispatcher processes,
    dispatchers/publisher                 outbox publishers
    machine.cpus (or stack.cores)         host cores; timeseries.cpu_pct per process -> CPU per 1x
    slo[].target                          SLO targets
    ====================================  ===========================================================
    """
    rec = LoadRecord.parse(load)
    load = rec.raw()
    multiple = rec.multiple
    notes = _Notes()
    st = load.get("service_times_ms") or {}
    size = _deployment(rec, notes)
    cores, cpu, work, per_work = _host(rec, load, multiple, notes)
    db_write, db_read = _database(rec, st, size["db_capacity"], notes)
    eps, streams, confirm_measured, api_cpu = _endpoints(load, st, multiple, db_write, db_read, notes)
    _platform_webhooks(eps, rec, multiple, api_cpu, notes)
    sse_streams = _sse_streams_1x(rec, streams, multiple, notes)
    pub, plat, device, disp_cpu, broker_hop_ms = _pipeline(load, st, db_write, db_read, notes)
    flight_s = _flight_s(load, notes)
    dc = (float(notes.note("double_click_ratio", rec.rates.double_click_ratio, "rates.double_click_ratio", False))
          if rec.rates.double_click_ratio is not None else float(notes.default("double_click_ratio")))
    model = CapacityModel(
        endpoints=eps, db_write=db_write, db_read=db_read, publisher_per_message=pub, dispatcher_cpu=disp_cpu,
        platform_call=plat, broker_hop_ms=broker_hop_ms if broker_hop_ms is not None else 0.0,
        flight=Dist(flight_s * 1000.0, 0.5), device_call=device, **size,
        publisher_poll_s=float(notes.default("publisher_poll_s")),
        publisher_wait_s=float(notes.default("publisher_wait_s")), outbox_batch=int(notes.default("outbox_batch")),
        double_click_ratio=dc, read_cache_hit=float(notes.default("read_cache_hit")), sse_streams_1x=sse_streams,
        host_cores=cores, cpu_cores_per_1x=cpu, cpu_per_work=per_work, calibrated_work=work,
        calibrated_multiple=multiple, slo=_slo_targets(load), sources=notes.sources, profile=rec.profile,
    )
    _calibrate_sse(model, rec, multiple, notes.note, notes.default)
    _reference_constants(model, rec, notes.note, notes.default)

    if refine:
        _refine(model, load, broker_measured=broker_hop_ms is not None, confirm=confirm_measured, seed=seed)
    return model


class _Notes:
    """Where each calibrated parameter came from, in the order calibrate decided them (CapacityModel.sources)."""

    def __init__(self) -> None:
        self.sources: list[Source] = []

    def note(self, param: str, value: Any, source: str, assumed: bool) -> Any:
        self.sources.append(Source(param, value, source, assumed))
        return value

    def default(self, param: str) -> float:
        value, why = DEFAULTS[param]
        return self.note(param, value, why, True)


class _Deployment(TypedDict):
    """The stack's sizes: CapacityModel's fields of the same names."""

    api_workers: int
    api_threads: int
    dispatchers: int
    db_capacity: int
    partitions: int


def _deployment(rec: LoadRecord, notes: _Notes) -> _Deployment:
    """The stack's sizes the run had (load.json workers), else the defaults."""

    def size(param: str) -> int:
        if getattr(rec.workers, param) is None:
            return int(notes.default(param))
        key, value = rec.workers.given(param)
        return int(notes.note(param, int(value), f"workers.{key}", False))

    # keyword arguments run in order: the sources keep the order api_workers .. partitions
    return _Deployment(api_workers=size("api_workers"), api_threads=size("api_threads"),
                       dispatchers=size("dispatchers"), db_capacity=size("db_capacity"),
                       partitions=size("partitions"))


def _host(rec: LoadRecord, load: dict[str, Any], multiple: float,
          notes: _Notes) -> tuple[float | None, dict[str, float], dict[str, float], dict[str, float]]:
    """The host's cores, the CPU per 1x of every process, the run's work rates and the CPU per unit of work."""
    host, cores = rec.host, None
    if host.cores is not None:
        key, value = host.given("cores")
        cores = float(notes.note("host_cores", value, f"{'machine' if host is rec.machine else 'stack'}.{key}", False))
    cpu = _cpu_per_1x(load, multiple)
    if cpu and cores is None:
        import os
        cores = float(notes.note("host_cores", os.cpu_count() or 1, "os.cpu_count() of the machine building the "
                                 "report (load.json names no core count)", True))
    work = measured_work(load)
    per_work = {p: _per_work([(work[unit], cpu[p] * multiple)]) for p, unit in CPU_WORK.items()
                if p in cpu and work.get(unit)}
    if cpu:
        notes.note("cpu_cores_per_1x", round(sum(cpu.values()), 4), "timeseries.cpu_pct of the run's processes and "
                   "the machine CPU none of them accounts for (mean outside fault windows) / multiple, assumed "
                   "linear in the multiple", False)
    if per_work:
        notes.note("cpu_per_work", {p: round(u, 6) for p, u in per_work.items()},
                   "the same CPU over the run's work rate (CPU_WORK: requests or webhook POSTs per second, "
                   "endpoints_steady), a line through 0", False)
    else:
        notes.note("host_cpu", None, "no timeseries.cpu_pct: the host's CPU is not modelled", True)
    return cores, cpu, work, per_work


def _database(rec: LoadRecord, st: dict[str, Any], db_capacity: int, notes: _Notes) -> tuple[Dist, Dist]:
    """A write and a read transaction: measured, else a write from pgbench's tps, a read half a write."""
    measured = _figure(st, "db_write")
    if measured is not None:
        db_write, where = measured
        notes.note("db_write", db_write, f"{where}{' (CPU per commit: a lower bound)' if 'cpu' in where else ''}",
                   False)
    elif rec.pgbench.tps is not None:
        db_write = notes.note("db_write", Dist(1000.0 * db_capacity / float(rec.pgbench.tps), DEFAULTS["sigma"][0]),
                              "pgbench.tps (confirm-shaped transaction): db_capacity / tps", False)
    else:
        db_write = Dist(notes.default("db_write_ms"), DEFAULTS["sigma"][0])
    measured = _figure(st, "db_read")
    if measured is not None:
        db_read, where = measured
        notes.note("db_read", db_read, where, False)
    else:
        db_read = notes.note("db_read", Dist(db_write.median_ms / 2, db_write.sigma),
                             "assumed: half a write transaction", True)
    return db_write, db_read


@dataclass(frozen=True)
class _ApiFigures:
    """What the API's handlers are calibrated from besides each endpoint's own figures."""

    table: str  # endpoints_steady or endpoints
    db_read: Dist
    db_write: Dist
    handler_confirm: Dist | None
    where_confirm: str | None
    api_cpu: Dist | None
    where_cpu: str | None
    weight_sum: float  # sum of rps x client p50 over the live endpoints
    rate_sum: float


def _endpoints(load: dict[str, Any], st: dict[str, Any], multiple: float, db_write: Dist, db_read: Dist,
               notes: _Notes) -> tuple[dict[str, EndpointSpec], float, dict[str, Any] | None, Dist | None]:
    """Every endpoint with its 1x rate and its handler's CPU; the streams opened per 1x; the confirm's figures; the
    API's CPU per request."""
    eps: dict[str, EndpointSpec] = {}
    raw = steady_endpoints(load)
    handler_confirm, where_c = _figure(st, "confirm_handler") or (None, None)
    api_cpu, where_cpu = _figure(st, "api_cpu") or (None, None)
    live = {n: e for n, e in raw.items() if endpoint_kind(n) not in ("aggregate", "stream")}
    # API CPU spread over endpoints in proportion to their client p50 (rate-weighted mean = measured).
    api = _ApiFigures("endpoints_steady" if raw is load.get("endpoints_steady") else "endpoints", db_read, db_write,
                      handler_confirm, where_c, api_cpu, where_cpu,
                      sum(float(e.get("rps") or 0) * float(e.get("p50_ms") or 0) for e in live.values()),
                      sum(float(e.get("rps") or 0) for e in live.values()))
    streams = 0.0
    confirm_measured: dict[str, Any] | None = None
    for name, e in raw.items():
        kind = endpoint_kind(name)
        if kind == "aggregate":
            continue
        if kind == "stream":
            streams += float(e.get("requests") or 0.0) / multiple
            continue
        if kind == "confirm":
            confirm_measured = e
        eps[name] = _endpoint(name, kind, e, multiple, api, notes)
    if not eps:
        for name, (kind, rate) in _profile_rates().items():
            if kind == "platform":
                continue
            eps[name] = EndpointSpec(name, kind, rate, Dist(DEFAULTS["api_handler_ms"][0]))
            notes.note(f"rate_1x[{name}]", rate, "the 1x profile (load.json has no endpoints)", True)
    return eps, streams, confirm_measured, api_cpu


def _endpoint(name: str, kind: str, e: dict[str, Any], multiple: float, api: _ApiFigures,
              notes: _Notes) -> EndpointSpec:
    rate = float(e.get("rps") or 0.0) / multiple
    reads, writes, _ = KIND_TX.get(kind, KIND_TX["other"])
    db_ms = reads * api.db_read.mean_ms + writes * api.db_write.mean_ms
    cpu_part, hsrc, server_side, assumed, wait = _handler(name, kind, e, db_ms, api, notes)
    events_per_post = _number(e.get("events_per_request")) if kind == "platform" else None
    spec = EndpointSpec(name, kind, rate, cpu_part, server_side=server_side, wait=wait,
                        events_per_request=events_per_post)
    notes.note(f"rate_1x[{name}]", round(rate, 4), f"{api.table}[{name}].rps / multiple {multiple:g}", False)
    if events_per_post is not None:
        notes.note(f"events_per_request[{name}]", events_per_post, f"{api.table}[{name}].events_per_request: the "
                   "simulator's sender is modelled, its batches grow with the rate", False)
    notes.note(f"handler[{name}]", cpu_part, hsrc, assumed)
    return spec


def _handler(name: str, kind: str, e: dict[str, Any], db_ms: float, api: _ApiFigures,
             notes: _Notes) -> tuple[Dist, str, bool, bool, Dist | None]:
    """An endpoint's handler CPU, where it came from, whether it is server-side and assumed, and its wait: from
    Server-Timing when the run has it, else the confirm handler's time, the API's CPU split over the endpoints, the
    client's latency, or the default (in that order)."""
    measured_cpu = _server_cpu(e)
    if measured_cpu is not None:
        hsrc = (f"{api.table}[{name}].server_cpu p50/p95: the CPU time of the API thread that ran each request "
                "(Server-Timing); the rest of the request's time is the calibrated client overhead")
        wait = _server_wait(e, db_ms)
        if wait is not None:
            notes.note(f"wait[{name}]", wait, f"{api.table}[{name}].server p50/p95 - server_cpu p50/p95 - its "
                       "modelled transactions: the handler's round trips through Toxiproxy and to Redis "
                       "(percentiles subtracted, an approximation)", False)
        return measured_cpu, hsrc, True, False, wait
    if kind == "confirm" and api.handler_confirm is not None:
        h = api.handler_confirm
        return (Dist(max(h.median_ms - db_ms, 0.1 * h.median_ms), h.sigma),
                f"{api.where_confirm}, minus its transactions", True, False, None)
    if api.api_cpu is not None and api.weight_sum > 0 and e.get("p50_ms"):
        return (*_api_cpu_share(name, e, db_ms, api), True, False, None)
    if e.get("p50_ms"):
        h = Dist.fit(median=e.get("p50_ms"), p95=e.get("p95_ms"), p99=e.get("p99_ms"))
        return (Dist(max(h.median_ms - db_ms, 0.1 * h.median_ms), h.sigma),
                f"{api.table}[{name}].p50/p95 minus its transactions (includes client and network)", False, True,
                None)
    return Dist(DEFAULTS["api_handler_ms"][0]), DEFAULTS["api_handler_ms"][1], False, True, None


def _api_cpu_share(name: str, e: dict[str, Any], db_ms: float, api: _ApiFigures) -> tuple[Dist, str]:
    """The API's CPU per request split over the endpoints by their client p50, bounded by the endpoint's own
    latency minus its transactions."""
    assert api.api_cpu is not None
    share = float(e["p50_ms"]) * api.rate_sum / api.weight_sum
    cpu_part = Dist(api.api_cpu.mean_ms * share / math.exp(0.5 * 0.5 / 2), 0.5)
    hsrc = f"{api.where_cpu} x this endpoint's client p50 / the rate-weighted mean p50 (split assumed)"
    # The API's CPU also pays for SSE fan-out and idle work no request owns, so the split can exceed
    # what a request takes end to end. Its own latency (minus its transactions) bounds its CPU.
    lat = Dist.fit(median=e.get("p50_ms"), p95=e.get("p95_ms"), p99=e.get("p99_ms"))
    lat_part = max(lat.median_ms - db_ms, 0.1 * lat.median_ms)
    if lat_part < cpu_part.median_ms:
        cpu_part = Dist(lat_part, lat.sigma)
        hsrc = (f"{api.table}[{name}].p50/p95 minus its transactions: the split of {api.where_cpu} exceeded "
                "the request's own latency (the API's CPU includes SSE fan-out and idle work)")
    return cpu_part, hsrc


def _platform_webhooks(eps: dict[str, EndpointSpec], rec: LoadRecord, multiple: float, api_cpu: Dist | None,
                       notes: _Notes) -> None:
    """The platform's webhooks come from the simulator, not from Locust: from the profile when the run's endpoint
    table has none."""
    if any(e.kind == "platform" for e in eps.values()):
        return
    per_1x = {k: v / multiple for k, v in rec.rates.per_s().items()}
    _, per_s = _profile_rates(per_1x)["POST /platform/events"]
    h = api_cpu if api_cpu is not None else Dist(DEFAULTS["api_handler_ms"][0])
    eps["platform webhooks"] = EndpointSpec("platform webhooks", "platform", per_s, h, server_side=True)
    notes.note("rate_1x[platform webhooks]", round(per_s, 4), "profile: confirms/s x flight median / telemetry "
               f"interval / {WEBHOOK_BATCH} events per webhook call (batch size assumed)", True)


def _sse_streams_1x(rec: LoadRecord, streams: float, multiple: float, notes: _Notes) -> float:
    if rec.rates.sse_streams is not None:
        return float(notes.note("sse_streams_1x", float(rec.rates.sse_streams) / multiple,
                                f"rates.sse_streams / multiple {multiple:g}", False))
    if streams:
        return float(notes.note("sse_streams_1x", streams, "stream endpoint requests / multiple", False))
    return float(notes.default("sse_streams_1x"))


def _pipeline(load: dict[str, Any], st: dict[str, Any], db_write: Dist, db_read: Dist,
              notes: _Notes) -> tuple[Dist, Dist, Dist | None, Dist, float | None]:
    """The outbox publisher per message, a platform call, the device call, the dispatcher's CPU per task and the
    broker's hop."""
    measured = _figure(st, "publisher_per_message")
    if measured is not None:
        pub, where = measured
        if _is_cpu(st, where):
            pub, where = _cpu_slope(load, "publisher", "outbox_sent", "outbox row sent") or (pub, where)
        pub = notes.note("publisher_per_message", pub, where, False)
    else:
        pub = Dist(notes.default("publisher_per_message_ms"))
    measured = _figure(st, "platform_call")
    plat = notes.note("platform_call", measured.dist, f"{measured.where} (used for each of the "
                      f"{DISPATCH_PLATFORM_CALLS_BEFORE + 1} calls)", False) if measured is not None else \
        Dist(notes.default("platform_call_ms"))
    # platform_call (dispatch_attempt started_at to finished_at) holds create_flight and the write-back transaction:
    # the get_device call before DISPATCHING is the history's own (8 ms p50 at 1x, 2026-12-02, against 32)
    device, where_d = _figure(st, "device_call") or (None, None)
    if device is not None:
        notes.note("device_call", device, f"{where_d} (the call before DISPATCHING)", False)
    disp_cpu = _dispatcher_cpu(load, st, db_write, db_read, device or plat, plat, notes)
    hop = _figure(st, "broker_hop")
    broker_hop_ms = notes.note("broker_hop_ms", hop.dist.median_ms, hop.where, False) if hop is not None else None
    return pub, plat, device, disp_cpu, broker_hop_ms


def _dispatcher_cpu(load: dict[str, Any], st: dict[str, Any], db_write: Dist, db_read: Dist, before: Dist,
                    plat: Dist, notes: _Notes) -> Dist:
    disp_total, where = _figure(st, "dispatcher_per_task") or (None, None)
    inner = (DISPATCH_WRITE_TX * db_write.mean_ms + DISPATCH_READ_TX * db_read.mean_ms
             + DISPATCH_PLATFORM_CALLS_BEFORE * before.mean_ms + plat.mean_ms)
    if disp_total is not None and _is_cpu(st, where):
        disp_total, where = _cpu_slope(load, "dispatcher", "tasks", "task created") or (disp_total, where)
        return notes.note("dispatcher_cpu", disp_total, f"{where} (CPU demand)", False)
    if disp_total is not None:
        cpu_ms = max(disp_total.mean_ms - inner, 0.05 * disp_total.mean_ms)
        return notes.note("dispatcher_cpu", Dist(cpu_ms, disp_total.sigma),
                          f"{where} minus 4 transactions and {DISPATCH_PLATFORM_CALLS_BEFORE + 1} platform calls",
                          False)
    return Dist(notes.default("dispatcher_cpu_ms"))


def _flight_s(load: dict[str, Any], notes: _Notes) -> float:
    """A flight's wall time: completed p50 - executing p50 of the lifecycle, else the default."""
    life = load.get("lifecycle_ms") or {}
    if (life.get("completed") or {}).get("p50") and (life.get("executing") or {}).get("p50"):
        flight_s = (float(life["completed"]["p50"]) - float(life["executing"]["p50"])) / 1000.0
        if flight_s > 0:
            return float(notes.note("flight_s", round(flight_s, 3), "lifecycle_ms.completed.p50 - executing.p50",
                                    False))
    return float(notes.default("flight_s"))


def _reference_constants(model: CapacityModel, rec: LoadRecord, note: Callable[..., Any],
                         default: Callable[[str], float]) -> None:
    """The reference's constants the model runs with, as the run recorded them (load.json model_inputs)."""
    for param in ("consumer_long_poll_s", "sse_heartbeat_s", "webhook_max_batch"):
        value = getattr(rec.model_inputs, param)
        setattr(model, param, float(note(param, value, f"model_inputs.{param}", False)) if value is not None
                else float(default(param)))


def _calibrate_sse(model: CapacityModel, rec: LoadRecord, multiple: float, note: Callable[..., Any],
                   default: Callable[[str], float]) -> None:
    """The fan-out's parameters: operators from the rates, idle streams held during the run, and the CPU per
    frame from the stream tier's measured CPU when it wrote enough frames for that to be its frames' cost."""
    if rec.rates.operators is not None:
        model.operators_1x = float(note("operators_1x", float(rec.rates.operators) / multiple,
                                        f"rates.operators / multiple {multiple:g}", False))
    else:
        model.operators_1x = float(default("operators_1x"))
    idle = rec.sse.idle_streams
    if idle is not None and idle.peak_open is not None:
        model.calibrated_extra_streams = float(note("calibrated_extra_streams", idle.given("peak_open")[1],
                                                    "sse.idle_streams.peak_open", False))
    cpu_pct = rec.sse.resources.get(STREAM_PROCESS, {}).get("cpu_pct_mean")
    frames = model.sse_fanout(multiple, model.calibrated_extra_streams)["frames_per_s"]
    if cpu_pct is not None and frames >= SSE_FIT_MIN_FRAMES_PER_S:
        model.sse_frame_ms = float(note("sse_frame_ms", round(cpu_pct / 100.0 * 1000.0 / frames, 4),
                                        f"sse.resources.stream.cpu_pct_mean / {frames:.0f} frames/s (modelled)",
                                        False))
    else:
        model.sse_frame_ms = float(default("sse_frame_ms"))


# Virtual seconds of each calibration probe. The fits match p95s: at 1x a 300 s probe has ~65 confirms, so its p95 is
# the 4th slowest and the fitted shapes followed that noise (in-sample confirm p95 +29% at 1,800 s).
PROBE_DURATION_S = 1800.0


def _refine(model: CapacityModel, load: dict[str, Any], *, broker_measured: bool,
            confirm: dict[str, Any] | None, seed: int) -> None:
    """What the measured service times cannot explain, from one model run at the calibration multiple:
    the broker hop (measured lifecycle p50 - modelled) and the client overhead around server-measured
    handlers (a lognormal fitted so that confirm's modelled p50 and p95 match the measured ones)."""
    life = load.get("lifecycle_ms") or {}
    stage = "dispatching" if (life.get("dispatching") or {}).get("p50") else "executing"
    measured_life = (life.get(stage) or {}).get("p50")
    need_hop = not broker_measured and measured_life is not None
    confirm_name = next((n for n, e in model.endpoints.items() if e.kind == "confirm" and e.server_side), None)
    need_client = confirm_name is not None and confirm is not None and confirm.get("p50_ms") is not None
    if not broker_measured and not need_hop:
        model.broker_hop_ms = DEFAULTS["broker_hop_ms"][0]
        model.sources.append(Source("broker_hop_ms", model.broker_hop_ms, DEFAULTS["broker_hop_ms"][1], True))
    if not (need_hop or need_client):
        return
    duration = PROBE_DURATION_S

    def probe_run() -> tuple[_Run, dict[str, Any]]:
        run = _Run(model, model.calibrated_multiple, api_workers=model.api_workers, dispatchers=model.dispatchers,
                   db_capacity=model.db_capacity, partitions=model.partitions, cores=None, exclude_cpu=(),
                   seed=seed, duration_s=duration, warmup_s=10.0)
        return run, run.execute()

    # Each server-measured handler's wait, fitted like the client overhead: so that the modelled server time (CPU,
    # GIL queue, transactions, wait) has the measured Server-Timing wall p50 and p95. Subtracting percentiles (the
    # unrefined value) overstates the wait's spread, and the fitted client overhead cannot take it back.
    measured_eps = steady_endpoints(load)
    waited = {n: e for n, e in model.endpoints.items() if e.wait is not None and n in measured_eps}
    for spec in waited.values():
        spec.wait = None
    run, probe = probe_run()
    if waited:
        for name, spec in waited.items():
            m = measured_eps[name]
            fit = _fit_overhead(run.latency.get(name) or [], float(m["server_p50_ms"]), m.get("server_p95_ms"), seed)
            if fit is not None and fit.median_ms > 0:
                spec.wait = fit
                model.sources = [x for x in model.sources if x.parameter != f"wait[{name}]"]
                model.sources.append(Source(f"wait[{name}]", fit, f"fitted: endpoints_steady[{name}].server p50/p95 "
                                            "(Server-Timing wall) vs the modelled CPU, GIL queue and transactions: "
                                            "the handler's round trips through Toxiproxy and to Redis", False))
        run, probe = probe_run()
    if need_hop and measured_life is not None:  # need_hop implies the measurement; mypy needs the check here
        # Two fixed-point steps: the hop shifts the phase against the pollers, so one step overshoots.
        for _ in range(2):
            got = probe["lifecycle_ms"][stage]["p50"] or 0.0
            model.broker_hop_ms = max(model.broker_hop_ms + float(measured_life) - got, 0.0)
            run, probe = probe_run()
        model.sources.append(Source("broker_hop_ms", round(model.broker_hop_ms, 3),
                                    f"residual: lifecycle_ms.{stage}.p50 measured - modelled (broker hop and "
                                    "anything else the model leaves out)", False))
    if need_client and confirm_name is not None and confirm is not None:  # need_client implies both
        server = run.latency[confirm_name]
        fit = _fit_overhead(server, float(confirm["p50_ms"]), confirm.get("p95_ms"), seed)
        if fit is not None:
            model.client_overhead = fit
            model.sources.append(Source("client_overhead", fit, "fitted: endpoints[confirm] p50/p95 measured by "
                                        "the client vs the modelled server time (network, Locust)", False))


def _fit_overhead(server_ms: Sequence[float], p50: float, p95: float | None, seed: int) -> Dist | None:
    """A lognormal overhead o such that server + o has the measured p50 (and p95 when given)."""
    if len(server_ms) < 5:
        return None
    rng = _stream(seed, "fit-overhead")
    base = [rng.random() for _ in range(4 * len(server_ms))]
    xs = [server_ms[i % len(server_ms)] for i in range(len(base))]
    z = [statistics_normal_inv(u) for u in base]
    best: tuple[float, Dist] | None = None
    for sigma in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
        lo, hi = 0.0, max(p50, 1.0)
        for _ in range(30):  # bisection on the median so that the p50 matches
            mid = (lo + hi) / 2
            tot = [x + mid * math.exp(sigma * zz) for x, zz in zip(xs, z, strict=True)]
            if (percentile(tot, 50) or 0.0) < p50:
                lo = mid
            else:
                hi = mid
        med = (lo + hi) / 2
        tot = [x + med * math.exp(sigma * zz) for x, zz in zip(xs, z, strict=True)]
        err = abs((percentile(tot, 50) or 0.0) - p50) + (abs((percentile(tot, 95) or 0.0) - p95) if p95 else 0.0)
        if best is None or err < best[0]:
            best = (err, Dist(med, sigma))
        if not p95:
            break
    return best[1] if best else None


def statistics_normal_inv(u: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(min(max(u, 1e-9), 1 - 1e-9))


# ---------------------------------------------------------------------------------------- extrapolation

def default_scale_options(model: CapacityModel) -> list[dict[str, Any]]:
    """As measured; more workers; more workers + database + partitions; all of that on a bigger host."""
    a, d, db, p = model.api_workers, model.dispatchers, model.db_capacity, model.partitions
    cores = model.host_cores
    opts: list[dict[str, Any]] = [
        {"name": "as measured", "api_workers": a, "dispatchers": d, "db_capacity": db, "partitions": p},
        {"name": "4x API workers and dispatchers", "api_workers": 4 * a, "dispatchers": 4 * d,
         "db_capacity": db, "partitions": p},
        {"name": "4x workers, 4x database capacity, 4 outbox partitions", "api_workers": 4 * a,
         "dispatchers": 4 * d, "db_capacity": 4 * db, "partitions": max(4, p)},
    ]
    if cores:
        opts.append({"name": f"as above on {int(8 * cores)} cores, load generator elsewhere",
                     "api_workers": 8 * a, "dispatchers": 8 * d, "db_capacity": 8 * db, "partitions": max(8, p),
                     "cores": 8 * cores, "exclude_cpu": ("locust",)})
    return opts


def slo_held(pred: dict[str, Any]) -> bool:
    return all(s["held"] for s in pred["slo"])


def _knobs(opt: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in opt.items() if k in ("api_workers", "dispatchers", "db_capacity", "partitions",
                                                  "cores", "exclude_cpu")}


def saturation_multiple(model: CapacityModel, *, seed: int = 1, duration_s: float = 40.0, hi: float = 200.0,
                        **knobs: Any) -> dict[str, Any]:
    """The largest multiple whose SLOs hold and whose resources stay under SATURATION_UTIL (bisection)."""

    def ok(m: float) -> tuple[bool, dict[str, Any]]:
        p = model.predict(m, seed=seed, duration_s=duration_s, **knobs)
        return slo_held(p) and p["first_saturated"] is None, p

    good, pred = ok(1.0)
    if not good:
        lo_m, hi_m, failing = 0.0, 1.0, pred
    else:
        lo_m, m = 1.0, 2.0
        last_bad = None
        while m <= hi:
            good, pred = ok(m)
            if not good:
                last_bad = pred
                break
            lo_m, m = m, m * 2
        hi_m = m
        if last_bad is None:
            return {"multiple": lo_m, "limited_by": None, "note": f"held up to {hi:g}x (search limit)"}
        failing = last_bad
    while hi_m - lo_m > max(0.05 * lo_m, 0.1):
        mid = (lo_m + hi_m) / 2
        good, pred = ok(mid)
        if good:
            lo_m = mid
        else:
            hi_m, failing = mid, pred
    return {"multiple": round(lo_m, 2), "limited_by": _limit(failing), "first_failing_multiple": round(hi_m, 2)}


def _limit(pred: dict[str, Any]) -> str:
    if pred["first_saturated"]:
        return pred["first_saturated"]
    failed = [s["name"] for s in pred["slo"] if not s["held"]]
    return f"{pred['bottleneck']} (SLO {', '.join(failed)})" if failed else pred["bottleneck"]


def extrapolate(model: CapacityModel, multiples: Sequence[float] = (10, 20, 50),
                scale_options: Sequence[dict[str, Any]] | None = None, *, seed: int = 1,
                duration_s: float = 60.0, find_saturation: bool = True) -> list[dict[str, Any]]:
    """For each scale option: predictions at each multiple, which resource limits it, and (optionally)
    the option's saturation multiple."""
    out = []
    for opt in scale_options if scale_options is not None else default_scale_options(model):
        knobs = _knobs(opt)
        rows = []
        for m in multiples:
            p = model.predict(float(m), seed=seed, duration_s=duration_s, **knobs)
            confirm: dict[str, Any] = next((e for e in p["endpoints"].values() if e["kind"] == "confirm"), {})
            rows.append({
                "multiple": m,
                "confirm_rps": confirm.get("rps"), "confirm_p95_ms": confirm.get("p95_ms"),
                "confirm_p99_ms": confirm.get("p99_ms"),
                "executing_p95_ms": p["lifecycle_ms"]["executing"]["p95"],
                "executing_p99_ms": p["lifecycle_ms"]["executing"]["p99"],
                "slo_held": slo_held(p), "bottleneck": p["bottleneck"], "first_saturated": p["first_saturated"],
                "limited_by": _limit(p) if not slo_held(p) or p["first_saturated"] else None,
                "utilisation": p["utilisation"], "counts_per_s": p["counts_per_s"],
            })
        entry: dict[str, Any] = {"option": opt.get("name", "custom"),
                                 "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in knobs.items()},
                                 "predictions": rows}
        if find_saturation:
            entry["saturation"] = saturation_multiple(model, seed=seed, duration_s=duration_s, **knobs)
        out.append(entry)
    return out


def at_offered_rates(model: CapacityModel, load: dict[str, Any], multiple: float) -> CapacityModel:
    """A copy of the model whose endpoints arrive, at ``multiple``, at the rates ``load``'s steady window realised:
    what a comparison with that run must offer. Locust's Poisson arrivals (and the webhooks that follow the confirms,
    ~130 events per task) come out some percent off the profile's nominal rate in any run (0.183 and 0.452 confirms/s
    against 0.2 and 0.4 in two runs of 2026-12-03), so a model run at the calibration run's rate x the multiple
    would carry both runs' arrival noise into its host CPU and latencies. Endpoints the run did not log keep their
    calibrated rate; the webhooks keep their calibrated events per POST and arrive at the run's events per second."""
    measured = steady_endpoints(load)
    out = copy.deepcopy(model)
    for name, spec in model.endpoints.items():
        rps = _number((measured.get(name) or {}).get("rps"))
        if not rps:
            continue
        if spec.kind == "platform" and spec.events_per_request:
            events = rps * (_number(measured[name].get("events_per_request")) or spec.events_per_request)
            rate = events / spec.events_per_request / multiple
        else:
            rate = rps / multiple
        out.endpoints[name] = replace(spec, rate_1x=rate)
    return out


def with_changes(model: CapacityModel, **changes: Any) -> CapacityModel:
    """A copy of the model with some parameters replaced (for what-ifs and tests)."""
    return replace(copy.deepcopy(model), **changes)
