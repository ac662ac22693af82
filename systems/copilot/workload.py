"""Workloads: traffic profiles, the workload a scenario runs (how many users do what), the fleet a run starts
with, and the simulation's driver of the user model (systems.copilot.users)."""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reference.copilot import api
from reference.copilot.effects import Tx
from reference.copilot.models import Device, SiteArea, UserAreaPermission, UserDevicePermission
from scenarios.sim.world import Killed
from simulator.model import fleet_device_ids
from systems.copilot.users import (
    APPROVER_ID,
    NEEDS_A_VICTIM,
    SUPERVISOR_ID,
    Arrival,
    Fleet,
    Record,
    Request,
    Together,
    User,
    Wait,
    no_answer,
    random_plan,
    reader,
    schedule,
)

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
APPROVER = APPROVER_ID  # the approver's user id (tests and tools seed with it)
__all__ = ["APPROVER", "Fleet", "random_plan"]  # re-exported: the fleet is seeded here, used by the user model


@dataclass(frozen=True)
class Profile:
    """A traffic profile (docs/capacity.md); the file states its assumptions."""

    name: str
    devices: int
    sites: int
    operators: int
    drafts_per_s: float
    confirms_per_s: float
    double_click_ratio: float
    flight_median_s: float
    flight_sigma: float
    telemetry_interval_s: float
    alert_every_flight_s: float
    alert_duplicate_ratio: float
    cancel_ratio: float
    snapshot_reads_per_s: float
    sse_streams: int
    slo: dict[str, float]
    assumptions: list[str]


def load_profile(name_or_path: str) -> Profile:
    """A profile file (systems/copilot/profiles/NAME.yaml or a path). ValueError when there is none."""
    path = Path(name_or_path)
    if not path.exists():
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise ValueError(f"no profile {name_or_path!r}: give a file in {PROFILES_DIR} or a path")
    data = yaml.safe_load(path.read_text())
    base = data
    if "extends" in data:  # a multiple of another profile: rates and fleet scale together
        base = yaml.safe_load((path.parent / f"{data['extends']}.yaml").read_text())
        k = float(data["multiple"])
        base = {**base, "name": data["name"], "assumptions": base["assumptions"] + data.get("assumptions", []),
                "devices": int(base["devices"] * k), "sites": int(base["sites"] * k),
                "operators": int(base["operators"] * k),
                "drafts_per_s": base["drafts_per_s"] * k, "confirms_per_s": base["confirms_per_s"] * k,
                "snapshot_reads_per_s": base["snapshot_reads_per_s"] * k, "sse_streams": int(base["sse_streams"] * k)}
    fd = base["flight_duration"]
    return Profile(
        name=base["name"], devices=base["devices"], sites=base["sites"], operators=base["operators"],
        drafts_per_s=base["drafts_per_s"], confirms_per_s=base["confirms_per_s"],
        double_click_ratio=base["double_click_ratio"], flight_median_s=fd["median_s"], flight_sigma=fd["sigma"],
        telemetry_interval_s=base["telemetry_interval_s"], alert_every_flight_s=base["alert_every_flight_min"] * 60,
        alert_duplicate_ratio=base["alert_duplicate_ratio"], cancel_ratio=base["cancel_ratio"],
        snapshot_reads_per_s=base["snapshot_reads_per_s"], sse_streams=base["sse_streams"], slo=base["slo"],
        assumptions=list(base["assumptions"]),
    )


def resolve_profile(name: str) -> tuple[Profile, float]:
    """A profile file (systems/copilot/profiles/NAME.yaml or a path) or ``<k>x`` for any multiple of 1x, with its
    multiple of 1x. ValueError when it is neither."""
    path = Path(name)
    if not path.exists():
        path = PROFILES_DIR / f"{name}.yaml"
    if path.exists():
        data = yaml.safe_load(path.read_text())
        return load_profile(str(path)), float(data.get("multiple", 1))
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)x", name)
    if not m or float(m[1]) <= 0:
        raise ValueError(f"no profile {name!r}: give a file in {PROFILES_DIR} or a multiple like 3x")
    return scale_profile(load_profile("1x"), float(m[1])), float(m[1])


def scale_profile(base: Profile, k: float) -> Profile:
    """Every rate and the fleet scaled by k (as the 2x/5x files do), per-flight behaviour unchanged."""
    return dataclasses.replace(
        base, name=f"{k:g}x", devices=int(base.devices * k), sites=max(1, int(base.sites * k)),
        operators=max(1, int(base.operators * k)), drafts_per_s=base.drafts_per_s * k,
        confirms_per_s=base.confirms_per_s * k, snapshot_reads_per_s=base.snapshot_reads_per_s * k,
        sse_streams=int(base.sse_streams * k),
        assumptions=[*base.assumptions, f"Everything in 1x multiplied by {k:g}; per-flight behaviour unchanged."])


@dataclass(frozen=True)
class WorkloadSpec:
    confirms: int  # tasks the users mean to create
    window_s: float  # confirms arrive uniformly at random (Poisson) over this window
    drafts_per_confirm: float = 1.0  # some drafts are never confirmed
    double_click_ratio: float = 0.10
    same_key_burst: int = 1  # C4: this many concurrent confirms with one key
    # C4: the first this many confirming operators confirm their version again afterwards, with a new key (a client
    # that lost its key): answered with the task the version made, never a second one (I42)
    rekeyed_confirms: int = 0
    # C4: the first this many confirming operators then revise their draft (a new version): their tasks keep the
    # version they confirmed (I51)
    revised_after_confirm: int = 0
    # S3: the first this many confirming operators draft from the goal alone (GENERATING), confirm too early (refused
    # DRAFT_NOT_READY), then confirm the version the planner wrote (I54)
    planned_drafts: int = 0
    cancel_ratio: float = 0.0
    cancel_clicks: int = 1  # C6: concurrent cancel requests per cancel (a double click), 0.3 s apart
    reads_per_s: float = 0.0
    devices: int = 40
    sites: int = 4
    operators: int = 10
    confirm_retries: int = 6
    bad_requests: tuple[str, ...] = ()  # S1-S7: kinds of bad request (BAD_REQUESTS) sent by attackers
    bad_each: int = 2  # how many of each kind
    sse_streams: int = 0  # B7: task streams held open, by the operators in turn (more than operators: several each)
    polls_after_confirm: int = 3  # snapshot reads an operator makes after its confirm (the UI polling)
    flight_median_s: float = 120.0  # the simulated platform's median flight, in model seconds
    # The median flight on the real stack, in wall seconds (its simulator runs model time faster than the wall;
    # None: the stack's own flights, NativeOptions.time_scale), for a scenario whose flights must outlast its windows.
    stack_flight_median_s: float | None = None
    # A cancelled flight's return home on the real stack, in wall seconds (None: the stack's own, a tenth of a second
    # at its time scale), for a scenario whose cancels must stay unconfirmed past the client's read timeout there.
    stack_cancel_delay_s: float | None = None

    def __post_init__(self) -> None:
        for kind in NEEDS_A_VICTIM:
            if kind in self.bad_requests and self.operators < 2:
                raise ValueError(f"bad_requests: {kind} needs two operators at least (its victim is another one)")
        for name in ("flight_median_s", "stack_flight_median_s", "stack_cancel_delay_s"):
            seconds = getattr(self, name)
            if seconds is not None and seconds <= 0:
                raise ValueError(f"{name}: a duration, greater than 0 (got {seconds})")

    @classmethod
    def from_profile(cls, profile: Profile, duration_s: float) -> WorkloadSpec:
        return cls(confirms=round(profile.confirms_per_s * duration_s), window_s=duration_s,
                   drafts_per_confirm=profile.drafts_per_s / profile.confirms_per_s,
                   double_click_ratio=profile.double_click_ratio, cancel_ratio=profile.cancel_ratio,
                   reads_per_s=profile.snapshot_reads_per_s, devices=profile.devices, sites=profile.sites,
                   operators=profile.operators)


def stream_users(fleet: Fleet, spec: WorkloadSpec) -> list[str]:
    """Who holds each of the ``sse_streams`` streams: the operators in turn."""
    users = [user for user, _ in fleet.operators]
    return [users[i % len(users)] for i in range(spec.sse_streams)] if users else []


def seed_fleet(tx: Tx, spec: WorkloadSpec) -> Fleet:
    """Sites as squares on a grid, devices spread over them, operators each working one site, and the approver
    (``APPROVER_ID``) holding a permission on every site."""
    areas: list[tuple[str, list[list[float]]]] = []
    for i in range(spec.sites):
        lat, lon = 30.0 + (i // 10) * 0.1, 120.0 + (i % 10) * 0.1
        poly = [[lat, lon], [lat, lon + 0.05], [lat + 0.05, lon + 0.05], [lat + 0.05, lon]]
        aid = f"SITE-{i + 1:03d}"
        tx.session.add(SiteArea(id=aid, name=f"Site {i + 1}", polygon=poly, max_altitude_m=120.0,
                                airspace_open=True, requires_approval=True))
        areas.append((aid, poly))
    tx.session.flush()
    devices_by_area: dict[str, list[str]] = {a: [] for a, _ in areas}
    for n, did in enumerate(fleet_device_ids(spec.devices)):
        aid = areas[n % len(areas)][0]
        tx.session.add(Device(id=did, area_id=aid))
        devices_by_area[aid].append(did)
    tx.session.flush()
    for aid, _ in areas:  # the approver decides drafts of every site; the supervisor resolves its manual reviews
        tx.session.add(UserAreaPermission(user_id=APPROVER_ID, area_id=aid))
        tx.session.add(UserAreaPermission(user_id=SUPERVISOR_ID, area_id=aid))
    operators = []
    for u in range(spec.operators):
        user, aid = f"operator-{u + 1:03d}", areas[u % len(areas)][0]
        tx.session.add(UserAreaPermission(user_id=user, area_id=aid))
        for did in devices_by_area[aid]:
            tx.session.add(UserDevicePermission(user_id=user, device_id=did))
        operators.append((user, aid))
    return Fleet(areas, devices_by_area, operators)


class SimUsers:
    """The simulation's driver of the user model (systems.copilot.users): each user is a simulated process whose
    requests run the application layer (reference.copilot.api) as simulated processes of the API, so validation,
    request dedup and the error mapping are those of the real API. A killed request is an unknown outcome
    (status 0) to its user."""

    def __init__(self, world: Any, spec: WorkloadSpec, fleet: Fleet, seed: int | str) -> None:
        self.world, self.spec, self.fleet, self.seed = world, spec, fleet, seed
        self.ports = api.Ports(cache=world.cache)
        self.tasks: list[tuple[str, str]] = []  # confirmed (user, task id): what readers read
        self.active = 0
        self.done = False

    @property
    def task_ids(self) -> list[str]:
        return [t for _, t in self.tasks]

    def start(self) -> None:
        env = self.world.env
        env.process(self._arrivals(schedule(self.spec, self.fleet, self.seed)))
        if self.spec.reads_per_s > 0:
            running = lambda: not (self.done and self.active == 0)  # noqa: E731
            env.process(self.run(reader(self.tasks, self.spec.reads_per_s, random.Random(f"{self.seed}:reader"),
                                        running)))

    def _arrivals(self, arrivals: list[Arrival]) -> Generator[Any, Any, None]:
        env = self.world.env
        for a in arrivals:
            if a.at > env.now:
                yield env.timeout(a.at - env.now)
            env.process(self._top(a.start(self.tasks)))
        self.done = True

    def _top(self, user: User) -> Generator[Any, Any, None]:
        self.active += 1
        try:
            yield from self.run(user)
        finally:
            self.active -= 1

    def run(self, user: User) -> Generator[Any, Any, Any]:
        """Perform a user's steps in virtual time; returns what the user returns."""
        env, history = self.world.env, self.world.history
        answer: Any = None
        while True:
            try:
                step = user.send(answer)
            except StopIteration as stop:
                return stop.value
            answer = None
            if isinstance(step, Request):
                answer = yield from self._request(step)
            elif isinstance(step, Record):
                history.add(env.now, step.process, step.type, step.f, step.value)
            elif isinstance(step, Wait):
                yield env.timeout(max(0.0, step.seconds))
            elif isinstance(step, Together):
                procs = [env.process(self.run(u)) for u in step.users]
                done = yield env.all_of(procs)
                answer = [done[p] for p in procs]
            else:
                raise TypeError(f"unknown user step {step!r}")

    def _request(self, step: Request) -> Generator[Any, Any, api.Reply]:
        out: dict[str, Any] = {}

        def done(value: Any, error: BaseException | None) -> None:
            out["value"], out["error"] = value, error

        yield self.world.drive(step.process, api.handle(step.cmd, self.ports), on_done=done)
        error = out.get("error")
        if isinstance(error, Killed):
            return no_answer()
        if error is not None:  # handle() maps every exception; this would be a harness bug
            raise error
        reply: api.Reply = out["value"]
        ctype = "application/problem+json" if reply.status >= 400 else "application/json"
        return api.Reply(reply.status, reply.body, {**reply.headers, "Content-Type": ctype})

