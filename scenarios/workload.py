"""Workloads: the fleet and users a run starts with, and operators who create drafts, confirm them
(double clicks, same-key retries), read task snapshots and cancel. Every client operation is recorded
as invoke + ok/fail/info in the history."""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import exc

from harness.history import FAIL, INFO, INVOKE, OK
from reference.effects import Transact, Tx
from reference.errors import DomainError, StaleWrite
from reference.models import Device, SiteArea, UserAreaPermission, UserDevicePermission
from reference.services.cancel import request_cancel
from reference.services.confirm import ConfirmDraft, confirm_draft
from reference.services.drafts import Plan, create_draft, decide_approval, revise_draft
from reference.tasks import fresh
from scenarios.sim.world import Killed
from simulator.model import fleet_device_ids

PROFILES_DIR = Path(__file__).resolve().parent.parent / "loadtests" / "profiles"
APPROVER = "approver-1"
RETRYABLE_CODES = frozenset({"SERVICE_UNAVAILABLE"})


@dataclass(frozen=True)
class Profile:
    """A traffic profile (DESIGN.md §8); the file states its assumptions."""

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
    path = Path(name_or_path)
    if not path.exists():
        path = PROFILES_DIR / f"{name_or_path}.yaml"
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


@dataclass(frozen=True)
class WorkloadSpec:
    confirms: int  # tasks the users mean to create
    window_s: float  # confirms arrive uniformly at random (Poisson) over this window
    drafts_per_confirm: float = 1.0  # some drafts are never confirmed
    double_click_ratio: float = 0.10
    same_key_burst: int = 1  # C4: this many concurrent confirms with one key
    cancel_ratio: float = 0.0
    cancel_clicks: int = 1  # C6: concurrent cancel requests per cancel (a double click), 0.3 s apart
    reads_per_s: float = 0.0
    devices: int = 40
    sites: int = 4
    operators: int = 10
    confirm_retries: int = 6
    bad_requests: tuple[str, ...] = ()  # S1-S7: kinds of bad request (BAD_REQUESTS) sent by attackers
    bad_each: int = 2  # how many of each kind
    sse_streams: int = 0  # B7: operators holding a task stream open (real stack: the simulation has no HTTP)

    @classmethod
    def from_profile(cls, profile: Profile, duration_s: float) -> WorkloadSpec:
        return cls(confirms=round(profile.confirms_per_s * duration_s), window_s=duration_s,
                   drafts_per_confirm=profile.drafts_per_s / profile.confirms_per_s,
                   double_click_ratio=profile.double_click_ratio, cancel_ratio=profile.cancel_ratio,
                   reads_per_s=profile.snapshot_reads_per_s, devices=profile.devices, sites=profile.sites,
                   operators=profile.operators)


# Bad requests (seed 000 §7.3) -> the codes a correct backend refuses them with. Each is tried by an
# "attacker" client process; its ops carry ``expect`` so the scenario checks the refusal.
BAD_REQUESTS: dict[str, tuple[str, ...]] = {
    "forbidden-area": ("FORBIDDEN_AREA",),  # S1: a draft in a site the user may not operate
    "forbidden-device": ("FORBIDDEN_DEVICE",),  # S1: a device the user may not fly
    "invalid-altitude": ("ALTITUDE_OUT_OF_RANGE",),  # S2: model-drafted parameters out of range
    "outside-area": ("COORDINATES_OUTSIDE_AREA",),  # S2: waypoints outside the site
    "unknown-action": ("UNKNOWN_ACTION",),  # S2
    "stale-draft-version": ("STALE_DRAFT_VERSION",),  # S3: confirm an old version of a revised draft
    "key-reuse": ("IDEMPOTENCY_KEY_REUSED",),  # S4: one key, another draft
    "approval-other-version": ("APPROVAL_VERSION_MISMATCH",),  # S6: approved v1, confirm v2
}


def bad_plans(rng: random.Random, fleet: Fleet, kind: str, user_area: str) -> tuple[str, Plan]:
    """(area, plan) of a bad draft of this kind, for an operator of ``user_area``."""
    other = next(a for a, _ in fleet.areas if a != user_area)
    plan = random_plan(rng, fleet, user_area)
    if kind == "forbidden-area":
        return other, random_plan(rng, fleet, other)
    if kind == "forbidden-device":
        return user_area, replace(plan, device_id=fleet.devices_by_area[other][0])
    if kind == "invalid-altitude":
        return user_area, replace(plan, altitude_m=5000.0)
    if kind == "outside-area":
        return user_area, replace(plan, waypoints=random_plan(rng, fleet, other).waypoints)
    if kind == "unknown-action":
        return user_area, replace(plan, actions=["self_destruct"])
    return user_area, plan


@dataclass
class Fleet:
    areas: list[tuple[str, list[list[float]]]]
    devices_by_area: dict[str, list[str]]
    operators: list[tuple[str, str]]  # (user, area)


def seed_fleet(tx: Tx, spec: WorkloadSpec) -> Fleet:
    """Sites as squares on a grid, devices spread over them, operators each working one site."""
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
    operators = []
    for u in range(spec.operators):
        user, aid = f"operator-{u + 1:03d}", areas[u % len(areas)][0]
        tx.session.add(UserAreaPermission(user_id=user, area_id=aid))
        for did in devices_by_area[aid]:
            tx.session.add(UserDevicePermission(user_id=user, device_id=did))
        operators.append((user, aid))
    return Fleet(areas, devices_by_area, operators)


def random_plan(rng: random.Random, fleet: Fleet, area_id: str) -> Plan:
    poly = dict(fleet.areas)[area_id]
    (lat0, lon0), (lat1, lon1) = poly[0], poly[2]
    pts = [[round(rng.uniform(lat0 + 0.001, lat1 - 0.001), 6), round(rng.uniform(lon0 + 0.001, lon1 - 0.001), 6)]
           for _ in range(rng.randint(3, 8))]
    return Plan(device_id=rng.choice(fleet.devices_by_area[area_id]), waypoints=pts,
                altitude_m=float(rng.choice([40, 60, 80, 100])),
                actions=rng.sample(["photo", "video", "thermal_scan", "hover"], 2), speed_mps=8.0)


class Users:
    """Drives the workload inside a SimWorld (see scenarios.sim.world)."""

    def __init__(self, world: Any, spec: WorkloadSpec, fleet: Fleet, rng: random.Random) -> None:
        self.world, self.spec, self.fleet, self.rng = world, spec, fleet, rng
        self.task_ids: list[str] = []
        self.active = 0
        self.done = False
        self._keys = 0

    def start(self) -> None:
        self.world.env.process(self._arrivals())
        if self.spec.reads_per_s > 0:
            self.world.env.process(self._readers())
        for n, kind in enumerate(k for k in self.spec.bad_requests for _ in range(self.spec.bad_each)):
            self.world.env.process(self._attacker(n, kind))

    def _attacker(self, n: int, kind: str) -> Generator[Any, Any, None]:
        """One bad request of ``kind`` (BAD_REQUESTS); each refusal is expected with its code."""
        env, rng = self.world.env, self.rng
        self.active += 1
        yield env.timeout(rng.uniform(0.0, self.spec.window_s))
        proc = f"attacker-{n}"
        user, area = self.fleet.operators[rng.randrange(len(self.fleet.operators))]
        value = {"user_id": user, "kind": kind}
        expect = {"expect": list(BAD_REQUESTS[kind])}
        bad_area, plan = bad_plans(rng, self.fleet, kind, area)

        def draft(plan: Plan = plan, area: str = bad_area, approve: bool = True) -> Generator[Any, Any, Any]:
            def fn(tx: Tx) -> tuple[str, int]:
                d = create_draft(tx, user, "patrol the fire lanes", area, plan)
                if approve:
                    decide_approval(tx, APPROVER, d.id, d.version, approve=True)
                return str(d.id), d.version
            return (yield Transact(fn, "draft.create"))

        def revise(draft_id: str) -> Generator[Any, Any, Any]:
            new_plan = random_plan(rng, self.fleet, area)
            return (yield Transact(lambda tx: revise_draft(tx, user, draft_id, 1, new_plan).version, "draft.revise"))

        def confirm(draft_id: str, version: int, key: str) -> Generator[Any, Any, Any]:
            return (yield from confirm_draft(ConfirmDraft(user, draft_id, version, key)))

        def call(f: str, work: Any, val: dict[str, Any]) -> Generator[Any, Any, Any]:
            result = yield from self._call(proc, f, work, val)
            answer = {"task_id": result.task_id, "replayed": result.replayed} if hasattr(result, "task_id") else {}
            self.world.history.add(env.now, proc, OK, f, {**val, **answer})  # an accepted bad request shows
            return result

        try:
            if kind in ("forbidden-area", "forbidden-device", "invalid-altitude", "outside-area", "unknown-action"):
                yield from call("draft", draft(), {**value, **expect})
            elif kind in ("stale-draft-version", "approval-other-version"):
                draft_id, _ = yield from call("draft", draft(), value)
                version = yield from call("revise", revise(draft_id), {**value, "draft_id": draft_id})
                confirm_version = 1 if kind == "stale-draft-version" else version
                yield from call("confirm", confirm(draft_id, confirm_version, f"bad-{n}"),
                                {**value, **expect, "key": f"bad-{n}", "draft_id": draft_id,
                                 "draft_version": confirm_version})
            elif kind == "key-reuse":
                first, _ = yield from call("draft", draft(), value)
                yield from call("confirm", confirm(first, 1, f"bad-{n}"),
                                {**value, "key": f"bad-{n}", "draft_id": first, "draft_version": 1})
                second, _ = yield from call("draft", draft(), value)
                yield from call("confirm", confirm(second, 1, f"bad-{n}"),
                                {**value, **expect, "key": f"bad-{n}", "draft_id": second, "draft_version": 1})
        except Exception:
            pass  # recorded by _call: the refusal is what the scenario checks
        finally:
            self.active -= 1

    def _arrivals(self) -> Generator[Any, Any, None]:
        env, spec = self.world.env, self.spec
        drafts = round(spec.confirms * spec.drafts_per_confirm)
        rate = drafts / spec.window_s if spec.window_s > 0 else float("inf")
        to_confirm = set(self.rng.sample(range(drafts), spec.confirms)) if drafts else set()
        for n in range(drafts):
            if rate != float("inf"):
                yield env.timeout(self.rng.expovariate(rate))
            user, area = self.fleet.operators[self.rng.randrange(len(self.fleet.operators))]
            env.process(self._operator(n, user, area, n in to_confirm))
        self.done = True

    def _call(self, process: str, f: str, work: Any, value: dict[str, Any]) -> Generator[Any, Any, Any]:
        """Run one client operation through the core and record it."""
        world = self.world
        world.history.add(world.env.now, process, INVOKE, f, value)
        result: dict[str, Any] = {}

        def done(v: Any, err: BaseException | None) -> None:
            result["value"], result["error"] = v, err

        yield world.drive(process, work, on_done=done)
        err = result.get("error")
        if err is None:
            return result.get("value")
        if isinstance(err, DomainError):
            world.history.add(world.env.now, process, FAIL, f, {**value, "code": err.code})
        elif isinstance(err, StaleWrite):  # the API answers 409 TASK_CHANGED (reference.http.app)
            world.history.add(world.env.now, process, FAIL, f, {**value, "code": "TASK_CHANGED"})
        elif isinstance(err, exc.OperationalError):
            world.history.add(world.env.now, process, FAIL, f, {**value, "code": "SERVICE_UNAVAILABLE"})
            err = DomainError("SERVICE_UNAVAILABLE", str(err), status=503)
        elif isinstance(err, Killed):
            world.history.add(world.env.now, process, INFO, f, {**value, "error": "CONNECTION_RESET"})
        else:
            world.history.add(world.env.now, process, INFO, f, {**value, "error": type(err).__name__})
        raise err

    def _operator(self, n: int, user: str, area: str, confirm: bool) -> Generator[Any, Any, None]:
        env, rng = self.world.env, self.rng
        self.active += 1
        proc = f"user-{n}"
        plan = random_plan(rng, self.fleet, area)

        def draft_and_approval() -> Generator[Any, Any, tuple[str, int]]:
            def fn(tx: Tx) -> tuple[str, int]:
                d = create_draft(tx, user, "patrol the fire lanes", area, plan)
                decide_approval(tx, APPROVER, d.id, d.version, approve=True)
                return str(d.id), d.version
            return (yield Transact(fn, "draft.create"))

        draft = None
        for attempt in range(self.spec.confirm_retries):
            try:
                draft = yield from self._call(proc, "draft", draft_and_approval(), {"user_id": user})
                break
            except DomainError as err:  # recorded; a 503 is worth another try, anything else is not
                if err.code not in RETRYABLE_CODES:
                    break
                yield env.timeout(rng.uniform(1.0, 2.0) * 2**attempt)
            except Exception:
                break
        if draft is None:
            self.active -= 1
            return
        draft_id, version = draft
        if not confirm:
            self.active -= 1
            return
        yield env.timeout(rng.uniform(2.0, 20.0))  # reading the draft
        self._keys += 1
        key = f"confirm-{n}-{self._keys}"
        clicks = self.spec.same_key_burst
        if clicks == 1 and rng.random() < self.spec.double_click_ratio:
            clicks = 2
        procs = [env.process(self._confirm(f"{proc}.{c}", user, draft_id, version, key, delay=0.3 * c if
                                           self.spec.same_key_burst == 1 else 0.0))
                 for c in range(clicks)]
        answers = yield simpy_all(env, procs)
        task_id = next((a for a in answers.values() if a), None)
        if task_id is not None:
            self.task_ids.append(task_id)
            if rng.random() < self.spec.cancel_ratio:
                yield env.timeout(rng.uniform(20.0, 120.0))
                clicks = [env.process(self._cancel(f"{proc}.cancel{c}", user, task_id, delay=0.3 * c))
                          for c in range(self.spec.cancel_clicks)]
                yield simpy_all(env, clicks)
        self.active -= 1

    def _cancel(self, proc: str, user: str, task_id: str, delay: float) -> Generator[Any, Any, None]:
        if delay:
            yield self.world.env.timeout(delay)
        value = {"user_id": user, "task_id": task_id}
        try:
            answer = yield from self._call(proc, "cancel",
                                           _tx(lambda tx: request_cancel(tx, task_id, user), "cancel"), value)
        except Exception:
            return  # recorded by _call
        self.world.history.add(self.world.env.now, proc, OK, "cancel",
                               {**value, "status": str(answer.status), "version": answer.version})

    def _confirm(self, proc: str, user: str, draft_id: str, version: int, key: str,
                 delay: float) -> Generator[Any, Any, str | None]:
        env, rng = self.world.env, self.rng
        if delay:
            yield env.timeout(delay)
        value = {"user_id": user, "key": key, "draft_id": draft_id, "draft_version": version}
        for attempt in range(self.spec.confirm_retries):
            try:
                created = yield from self._call(proc, "confirm",
                                                confirm_draft(ConfirmDraft(user, draft_id, version, key)),
                                                {**value, "attempt": attempt})
            except DomainError as err:
                if err.code not in RETRYABLE_CODES:
                    return None
                yield env.timeout(rng.uniform(1.0, 2.0) * 2**attempt)  # the user clicks again, same key
                continue
            except Killed:  # the connection reset: the outcome is unknown, so the user retries, same key
                yield env.timeout(rng.uniform(1.0, 2.0))
                continue
            except Exception:
                return None
            self.world.history.add(env.now, proc, OK, "confirm", {**value, "task_id": created.task_id,
                                                                  "replayed": created.replayed})
            return created.task_id
        return None

    def _readers(self) -> Generator[Any, Any, None]:
        env, rng, world = self.world.env, self.rng, self.world
        while not (self.done and self.active == 0):
            yield env.timeout(rng.expovariate(self.spec.reads_per_s))
            if not self.task_ids:
                continue
            tid = self.task_ids[rng.randrange(len(self.task_ids))]
            try:
                view = world.transact(lambda tx, tid=tid: fresh(tx, tid))
            except exc.SQLAlchemyError:
                if world.record_reads:
                    world.history.add(env.now, "reader", FAIL, "read", {"task_id": tid, "code": "SERVICE_UNAVAILABLE"})
                continue
            if world.record_reads:
                world.history.add(env.now, "reader", OK, "read",
                                  {"task_id": tid, "status": view.status.value, "version": view.version})


def _tx(fn: Any, name: str) -> Generator[Any, Any, Any]:
    return (yield Transact(fn, name))


def simpy_all(env: Any, procs: list[Any]) -> Any:
    return env.all_of(procs)
