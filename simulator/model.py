"""A clock-driven model of the drone fleet platform.

Pure Python: no I/O, no wall clock, no simpy. Every public method takes ``now`` (seconds) explicitly and
all randomness comes from the ``random.Random`` given at construction, so one seed and one sequence of
calls give one history, byte for byte.

Internally two heaps drive everything:
- ``_actions``: what the platform will do (telemetry tick, alert, natural end, cancel completion),
  processed in time order by ``_advance(now)`` on every call, so queries see state changes on time;
- ``_deliveries``: emitted events keyed by the time they reach the subscriber (delivery faults such as
  reordering, duplication and late completion only move this key, never the platform's state).

Randomness is split into independent streams (faults, delivery, one per flight) so that, e.g., an extra
``get_flight`` call with a 5xx rate set does not change how long some later flight lasts.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from reference.copilot.platform import (
    EVENT_ALERT,
    EVENT_CANCELLED,
    EVENT_COMPLETED,
    EVENT_FAILED,
    EVENT_TELEMETRY,
    FLIGHT_CANCELLED,
    FLIGHT_COMPLETED,
    FLIGHT_EXECUTING,
    FLIGHT_FAILED,
    CancelResult,
    CreateFlight,
    DeviceState,
    FlightInfo,
    PlatformCapabilities,
    PlatformError,
    PlatformEvent,
    PlatformNotFound,
    PlatformRejected,
    PlatformThrottled,
    PlatformTimeout,
    PlatformUnavailable,
    PlatformUnsupported,
)

DELIVERY_NORMAL = "normal"
DELIVERY_TIMEOUT = "timeout"  # the platform acted, the answer arrives after the caller gave up
DELIVERY_DROP = "drop"  # the platform acted, the connection closes without an answer
DELIVERIES = (DELIVERY_NORMAL, DELIVERY_TIMEOUT, DELIVERY_DROP)
# A create's definite rejections (4xx: nothing was created, and a resend would be refused alike); the codes a
# history records for them in both shells (the app answers them 409 or 422).
DEVICE_REJECTED = "DEVICE_REJECTED"
DEVICE_UNKNOWN = "DEVICE_UNKNOWN"
DEVICE_OFFLINE = "DEVICE_OFFLINE"
CREATE_REJECTIONS = frozenset({DEVICE_REJECTED, DEVICE_UNKNOWN, DEVICE_OFFLINE})

ALERT_CODES = ("LOW_SIGNAL", "WIND_GUST", "GEOFENCE_NEAR", "BATTERY_WARN", "OBSTACLE_DETECTED")
ALERT_LEVELS = ("info", "warning", "warning", "critical")  # warnings twice as likely

# Action kinds on the internal timeline.
_TICK, _ALERT, _END, _CANCEL_DONE = 0, 1, 2, 3


def fleet_device_ids(count: int) -> list[str]:
    """The device ids a fleet of ``count`` drones gets (``--devices N`` and workload generators)."""
    return [f"DRONE-{i:04d}" for i in range(1, count + 1)]


@dataclass(frozen=True)
class PlatformConfig:
    telemetry_interval_s: float = 5.0
    alert_every_flight_s: float = 300.0  # mean of the exponential inter-arrival; 0 disables alerts
    alert_duplicate_prob: float = 0.10
    flight_median_s: float = 600.0
    flight_sigma: float = 0.5  # lognormal sigma of the flight duration
    cancel_delay_s: float = 10.0  # return-home time before a cancelled flight is CANCELLED
    fail_prob: float = 0.0  # probability that a flight ends FAILED (part-way) instead of COMPLETED
    battery_drain_per_s: float = 0.05  # percent per second, telemetry only


class FaultsError(ValueError):
    """A bad fault setting; ``field`` names it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


EVENT_KINDS = (EVENT_TELEMETRY, EVENT_ALERT, EVENT_COMPLETED, EVENT_FAILED, EVENT_CANCELLED)
_COUNT_FIELDS = ("accept_then_timeout", "drop_response", "reject_next", "cancel_timeout")
_PROB_FIELDS = ("error_5xx_rate", "error_429_rate", "duplicate_event_prob", "refuse_cancel_prob", "fail_flight_prob",
                "abort_flight_prob")
_SECONDS_FIELDS = ("reorder_window_s", "late_completion_s", "response_timeout_delay_s")
_FLAG_FIELDS = ("idempotency_key", "query_supported")


@dataclass
class PlatformFaults:
    """Fault knobs. Counts are consumed (decremented) as the faults fire."""

    accept_then_timeout: int = 0  # next N creates act, then the answer times out
    drop_response: int = 0  # next N creates act, then the connection drops
    error_5xx_rate: float = 0.0  # per call, without acting
    error_429_rate: float = 0.0  # per call, without acting
    reject_next: int = 0  # next N creates get DEVICE_REJECTED, without acting
    reject_devices: set[str] = field(default_factory=set)  # always DEVICE_REJECTED
    duplicate_event_prob: float = 0.0  # any event delivered twice
    reorder_window_s: float = 0.0  # each delivery delayed by U(0, window): shuffles within the window
    late_completion_s: float = 0.0  # terminal events delivered this much later (status is on time)
    cancel_timeout: int = 0  # next N cancels take effect, then the answer times out
    refuse_cancel_prob: float = 0.0  # a cancel of a live flight is refused (the drone cannot abort now)
    fail_flight_prob: float = 0.0  # a flight started now fails part-way (FAILED: battery, motor, link)
    abort_flight_prob: float = 0.0  # a flight started now is aborted part-way by the platform's operator (CANCELLED)
    lose_event_kinds: set[str] = field(default_factory=set)  # events of these kinds are never delivered
    idempotency_key: bool = True  # False: every create makes a new flight
    query_supported: bool = True  # False: no query by request id
    response_timeout_delay_s: float = 5.0  # HTTP shell only: how late a "timeout" answer comes

    def to_json(self) -> dict[str, Any]:
        return {
            "accept_then_timeout": self.accept_then_timeout,
            "drop_response": self.drop_response,
            "error_5xx_rate": self.error_5xx_rate,
            "error_429_rate": self.error_429_rate,
            "reject_next": self.reject_next,
            "reject_devices": sorted(self.reject_devices),
            "duplicate_event_prob": self.duplicate_event_prob,
            "reorder_window_s": self.reorder_window_s,
            "late_completion_s": self.late_completion_s,
            "cancel_timeout": self.cancel_timeout,
            "refuse_cancel_prob": self.refuse_cancel_prob,
            "fail_flight_prob": self.fail_flight_prob,
            "abort_flight_prob": self.abort_flight_prob,
            "lose_event_kinds": sorted(self.lose_event_kinds),
            "idempotency_key": self.idempotency_key,
            "query_supported": self.query_supported,
            "response_timeout_delay_s": self.response_timeout_delay_s,
        }

    @classmethod
    def from_json(cls, data: Any, base: PlatformFaults | None = None) -> PlatformFaults:
        """Validate ``data``; fields it omits come from ``base`` (partial update) or the defaults.

        Raises :class:`FaultsError` (a ValueError) naming the first bad field.
        """
        if not isinstance(data, Mapping):
            raise FaultsError("faults", "must be a JSON object")
        values: dict[str, Any] = (base or cls()).to_json()
        for key in data:
            if key not in values:
                raise FaultsError(str(key), "unknown fault")
        for key, raw in data.items():
            values[key] = _validate_fault(key, raw)
        values["reject_devices"] = set(values["reject_devices"])
        values["lose_event_kinds"] = set(values["lose_event_kinds"])
        return cls(**values)


# How the platform is deployed, not a passing fault: a step that sets one leaves the other as it was, and the end of a
# window leaves both (a deployment does not change back when a fault window closes).
PLATFORM_CAPABILITIES = ("idempotency_key", "query_supported")


def platform_defaults(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The default values of these knobs (the end of a platform fault window), as JSON; capabilities stay."""
    defaults = PlatformFaults().to_json()
    return {k: defaults[k] for k in knobs if k in defaults and k not in PLATFORM_CAPABILITIES}


def _validate_fault(key: str, raw: Any) -> Any:
    if key in _COUNT_FIELDS:
        if isinstance(raw, float) and raw.is_integer():  # JSON has one number type: 3.0 is the integer 3
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise FaultsError(key, "must be a non-negative integer")
        return raw
    if key in _FLAG_FIELDS:
        if not isinstance(raw, bool):
            raise FaultsError(key, "must be true or false")
        return raw
    if key == "lose_event_kinds":
        if not isinstance(raw, list | tuple | set) or not all(k in EVENT_KINDS for k in raw):
            raise FaultsError(key, f"must be a list of event kinds ({', '.join(EVENT_KINDS)})")
        return set(raw)
    if key == "reject_devices":
        if not isinstance(raw, list | tuple | set) or not all(isinstance(d, str) for d in raw):
            raise FaultsError(key, "must be a list of device ids")
        return set(raw)
    try:
        value = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else math.nan
    except OverflowError:  # an integer beyond a double's range
        value = math.inf
    if not math.isfinite(value):
        raise FaultsError(key, "must be a finite number")
    if key in _PROB_FIELDS and not 0.0 <= value <= 1.0:
        raise FaultsError(key, "must be a probability in [0, 1]")
    if key in _SECONDS_FIELDS and value < 0.0:
        raise FaultsError(key, "must be >= 0 seconds")
    return value


T = TypeVar("T")


@dataclass(frozen=True)
class Reply(Generic[T]):
    """What one platform call produced, and how (whether) the answer reaches the caller."""

    value: T | None = None
    error: PlatformError | None = None
    delivery: str = DELIVERY_NORMAL
    replayed: bool = False  # create only: an idempotent replay returned an existing flight

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> T:
        """The value as the caller experiences it: lost answers raise PlatformTimeout."""
        if self.delivery == DELIVERY_TIMEOUT:
            raise PlatformTimeout("TIMEOUT", "no answer within the timeout")
        if self.delivery == DELIVERY_DROP:
            raise PlatformTimeout("CONNECTION_DROPPED", "connection closed without an answer")
        if self.error is not None:
            raise self.error
        return cast(T, self.value)


@dataclass(slots=True)
class _Device:
    device_id: str
    online: bool
    battery: float


@dataclass(slots=True, eq=False)
class _Flight:
    external_id: str
    request_id: str | None
    reference: str
    device_id: str
    created_at: float
    end_at: float  # planned natural end
    outcome: str  # COMPLETED, FAILED or (aborted by the platform) CANCELLED at end_at
    track: list[tuple[float, float]]  # (lat, lon) polyline, at least two points
    seg_rate: float  # polyline segments flown per second
    altitude_m: float
    battery0: float
    rng: random.Random | None
    status: str = FLIGHT_EXECUTING
    done: bool = False
    seq: int = 0
    ended_at: float | None = None
    cancel_requested_at: float | None = None
    cancelled_at: float | None = None

    def info(self) -> FlightInfo:
        return FlightInfo(self.external_id, self.request_id, self.device_id, self.status, self.reference)

    def ledger(self) -> dict[str, Any]:
        return {
            "external_id": self.external_id,
            "request_id": self.request_id,
            "reference": self.reference,
            "device_id": self.device_id,
            "created_at": self.created_at,
            "status": self.status,
            "ended_at": self.ended_at,
            "cancel_requested_at": self.cancel_requested_at,
            "cancelled_at": self.cancelled_at,
        }


class PlatformModel:
    """The fleet platform: devices, flights, the ledger of every flight really started, and events."""

    def __init__(
        self,
        rng: random.Random,
        config: PlatformConfig | None = None,
        faults: PlatformFaults | None = None,
    ) -> None:
        self.config = config or PlatformConfig()
        self.faults = faults or PlatformFaults()
        self._fault_rng = random.Random(rng.getrandbits(64))
        self._delivery_rng = random.Random(rng.getrandbits(64))
        self._flight_seed = rng.getrandbits(64)
        self.events_lost = 0  # events never delivered (faults.lose_event_kinds)
        self._now = 0.0
        self._devices: dict[str, _Device] = {}
        self._flights: dict[str, _Flight] = {}
        self._ledger: list[_Flight] = []
        self._by_request: dict[str, list[_Flight]] = {}
        self._actions: list[tuple[float, int, int, _Flight, int]] = []
        self._deliveries: list[tuple[float, int, PlatformEvent]] = []
        self._tie = itertools.count()  # heap tie-breaker: insertion order, never hash order

    # ----------------------------------------------------------------- introspection

    @property
    def now(self) -> float:
        """The latest time the model has been advanced to."""
        return self._now

    @property
    def flight_count(self) -> int:
        return len(self._ledger)

    @property
    def flights_in_air(self) -> int:
        return sum(1 for f in self._ledger if not f.done)

    @property
    def last_flight_end(self) -> float | None:
        """When the last finished flight ended (platform time), or None."""
        ends = [f.ended_at for f in self._ledger if f.ended_at is not None]
        return max(ends) if ends else None

    @property
    def pending_deliveries(self) -> int:
        return len(self._deliveries)

    def capabilities(self) -> PlatformCapabilities:
        return PlatformCapabilities(
            idempotency_key=self.faults.idempotency_key, query_by_request_id=self.faults.query_supported
        )

    def ledger_json(self) -> list[dict[str, Any]]:
        return [f.ledger() for f in self._ledger]

    def devices_json(self) -> list[dict[str, Any]]:
        return [
            {"device_id": d.device_id, "online": d.online, "battery": d.battery}
            for d in self._devices.values()
        ]

    # ----------------------------------------------------------------- devices (control plane)

    def add_device(self, device_id: str, online: bool = True, battery: float = 100.0) -> None:
        self._devices[device_id] = _Device(device_id, online, _check_battery(battery))

    def add_fleet(self, count: int) -> list[str]:
        ids = fleet_device_ids(count)
        for device_id in ids:
            self.add_device(device_id)
        return ids

    def has_device(self, device_id: str) -> bool:
        return device_id in self._devices

    def set_device(self, device_id: str, *, online: bool | None = None, battery: float | None = None) -> None:
        device = self._devices[device_id]  # KeyError: unknown device
        if online is not None:
            device.online = online
        if battery is not None:
            device.battery = _check_battery(battery)

    def upsert_device(self, device_id: str, online: bool = True, battery: float = 100.0) -> None:
        """POST /control/devices: add the device, or set both fields of a known one (a forgotten one comes back)."""
        if device_id in self._devices:
            self.set_device(device_id, online=online, battery=battery)
        else:
            self.add_device(device_id, online, battery)

    def remove_device(self, device_id: str) -> bool:
        """The platform forgets the device (unbound, decommissioned): it answers DEVICE_NOT_FOUND from now on and
        refuses flights on it; flights already started finish. False if it did not know the device."""
        return self._devices.pop(device_id, None) is not None

    # ----------------------------------------------------------------- platform API

    def get_device(self, now: float, device_id: str) -> Reply[DeviceState]:
        self._advance(now)
        if (err := self._injected_error()) is not None:
            return Reply(error=err)
        device = self._devices.get(device_id)
        if device is None:
            return Reply(error=PlatformNotFound("DEVICE_NOT_FOUND", device_id))
        return Reply(value=DeviceState(device.device_id, device.online, device.battery))

    def create_flight(self, now: float, req: CreateFlight) -> Reply[FlightInfo]:
        self._advance(now)
        if (err := self._injected_error()) is not None:
            return Reply(error=err)  # 429 / 5xx: refused before acting
        faults = self.faults
        # An idempotent replay returns the stored result, so it is checked before any rejection.
        if faults.idempotency_key and req.request_id is not None:
            existing = self._by_request.get(req.request_id)
            if existing:
                return Reply(value=existing[0].info(), delivery=self._create_delivery(), replayed=True)
        if req.device_id in faults.reject_devices:
            return Reply(error=PlatformRejected(DEVICE_REJECTED, f"device {req.device_id} rejected"))
        if faults.reject_next > 0:
            faults.reject_next -= 1
            return Reply(error=PlatformRejected(DEVICE_REJECTED, f"device {req.device_id} rejected"))
        device = self._devices.get(req.device_id)
        if device is None:
            return Reply(error=PlatformRejected(DEVICE_UNKNOWN, f"no device {req.device_id}"))
        if not device.online:
            return Reply(error=PlatformRejected(DEVICE_OFFLINE, f"device {req.device_id} is offline"))
        flight = self._start_flight(req, device)
        return Reply(value=flight.info(), delivery=self._create_delivery())

    def get_flight(self, now: float, external_id: str) -> Reply[FlightInfo]:
        self._advance(now)
        if (err := self._injected_error()) is not None:
            return Reply(error=err)
        flight = self._flights.get(external_id)
        if flight is None:
            return Reply(error=PlatformNotFound("FLIGHT_NOT_FOUND", external_id))
        return Reply(value=flight.info())

    def query_by_request_id(self, now: float, request_id: str) -> Reply[list[FlightInfo]]:
        """Every flight created with ``request_id``, oldest first (several only without idempotency)."""
        self._advance(now)
        if not self.faults.query_supported:
            return Reply(error=PlatformUnsupported("QUERY_UNSUPPORTED", "no query by request id"))
        if (err := self._injected_error()) is not None:
            return Reply(error=err)
        return Reply(value=[f.info() for f in self._by_request.get(request_id, ())])

    def find_by_request_id(self, now: float, request_id: str) -> Reply[FlightInfo | None]:
        reply = self.query_by_request_id(now, request_id)
        if reply.error is not None:
            return Reply(error=reply.error)
        items = reply.value or []
        return Reply(value=items[0] if items else None)

    def cancel_flight(self, now: float, external_id: str) -> Reply[CancelResult]:
        self._advance(now)
        if (err := self._injected_error()) is not None:
            return Reply(error=err)
        flight = self._flights.get(external_id)
        if flight is None:
            return Reply(error=PlatformNotFound("FLIGHT_NOT_FOUND", external_id))
        delivery = DELIVERY_NORMAL
        if self.faults.cancel_timeout > 0:
            self.faults.cancel_timeout -= 1
            delivery = DELIVERY_TIMEOUT
        if flight.done:
            return Reply(value=CancelResult(accepted=False, status=flight.status), delivery=delivery)
        if self.faults.refuse_cancel_prob > 0 and self._fault_rng.random() < self.faults.refuse_cancel_prob:
            return Reply(value=CancelResult(accepted=False, status=flight.status), delivery=delivery)
        if flight.cancel_requested_at is None:  # repeated cancels do not restart the return-home
            flight.cancel_requested_at = self._now
            self._schedule(self._now + self.config.cancel_delay_s, _CANCEL_DONE, flight)
        return Reply(value=CancelResult(accepted=True, status=flight.status), delivery=delivery)

    # ----------------------------------------------------------------- events

    def next_due(self) -> float | None:
        """When ``pop_due`` may next return something: never later than the next delivery (it can be
        earlier when a delivery fault delays the event produced at that time)."""
        actions = self._actions
        while actions and actions[0][3].done:  # lazily drop ticks of flights that already ended
            heapq.heappop(actions)
        times = []
        if actions:
            times.append(actions[0][0])
        if self._deliveries:
            times.append(self._deliveries[0][0])
        return min(times) if times else None

    def pop_due(self, now: float) -> list[PlatformEvent]:
        """Every event delivered at or before ``now``, in delivery-time order (ties: emission order)."""
        self._advance(now)
        deliveries = self._deliveries
        out: list[PlatformEvent] = []
        limit = self._now
        lost = self.faults.lose_event_kinds
        while deliveries and deliveries[0][0] <= limit:
            event = heapq.heappop(deliveries)[2]
            if event.kind in lost:
                self.events_lost += 1
                continue
            out.append(event)
        return out

    # ----------------------------------------------------------------- internals

    def _injected_error(self) -> PlatformError | None:
        faults = self.faults
        if faults.error_429_rate > 0 and self._fault_rng.random() < faults.error_429_rate:
            return PlatformThrottled("THROTTLED", "injected 429")
        if faults.error_5xx_rate > 0 and self._fault_rng.random() < faults.error_5xx_rate:
            return PlatformUnavailable("UNAVAILABLE", "injected 5xx")
        return None

    def _create_delivery(self) -> str:
        faults = self.faults
        if faults.accept_then_timeout > 0:
            faults.accept_then_timeout -= 1
            return DELIVERY_TIMEOUT
        if faults.drop_response > 0:
            faults.drop_response -= 1
            return DELIVERY_DROP
        return DELIVERY_NORMAL

    def _start_flight(self, req: CreateFlight, device: _Device) -> _Flight:
        cfg = self.config
        number = len(self._ledger) + 1
        rng = random.Random(self._flight_seed + number)
        now = self._now
        duration = rng.lognormvariate(math.log(cfg.flight_median_s), cfg.flight_sigma)
        outcome = FLIGHT_COMPLETED
        if cfg.fail_prob > 0 and rng.random() < cfg.fail_prob:
            outcome = FLIGHT_FAILED
            duration *= rng.uniform(0.1, 1.0)  # failures happen part-way
        elif self.faults.fail_flight_prob > 0 or self.faults.abort_flight_prob > 0:
            # Drawn from the flight's own generator, and only under the fault: other flights draw as before.
            u = rng.random()
            if u < self.faults.fail_flight_prob + self.faults.abort_flight_prob:
                outcome = FLIGHT_FAILED if u < self.faults.fail_flight_prob else FLIGHT_CANCELLED
                duration *= rng.uniform(0.1, 1.0)
        track = [(float(w[0]), float(w[1])) for w in req.waypoints] or [(0.0, 0.0)]
        if len(track) == 1:
            track.append(track[0])
        flight = _Flight(
            external_id=f"FLT-{number:06d}",
            request_id=req.request_id,
            reference=req.reference,
            device_id=req.device_id,
            created_at=now,
            end_at=now + duration,
            outcome=outcome,
            track=track,
            seg_rate=(len(track) - 1) / duration,
            altitude_m=float(req.altitude_m),
            battery0=device.battery,
            rng=rng,
        )
        self._flights[flight.external_id] = flight
        self._ledger.append(flight)
        if req.request_id is not None:
            self._by_request.setdefault(req.request_id, []).append(flight)
        if now + cfg.telemetry_interval_s < flight.end_at:
            self._schedule(now + cfg.telemetry_interval_s, _TICK, flight, 1)
        self._schedule_alert(flight, now)
        self._schedule(flight.end_at, _END, flight)
        return flight

    def _schedule(self, at: float, kind: int, flight: _Flight, k: int = 0) -> None:
        heapq.heappush(self._actions, (at, next(self._tie), kind, flight, k))

    def _schedule_alert(self, flight: _Flight, after: float) -> None:
        mean = self.config.alert_every_flight_s
        if mean > 0 and flight.rng is not None:
            at = after + flight.rng.expovariate(1.0 / mean)
            if at < flight.end_at:
                self._schedule(at, _ALERT, flight)

    def _advance(self, now: float) -> None:
        self._now = now = max(self._now, now)  # the clock never goes backwards
        actions = self._actions
        cfg = self.config
        while actions and actions[0][0] <= now:
            at, _, kind, flight, k = heapq.heappop(actions)
            if flight.done:
                continue
            if kind == _TICK:  # the hot path (~95% of events): kept inline
                dt = at - flight.created_at
                track = flight.track
                pos = dt * flight.seg_rate
                i = min(int(pos), len(track) - 2)
                frac = pos - i
                (lat0, lon0), (lat1, lon1) = track[i], track[i + 1]
                battery = flight.battery0 - cfg.battery_drain_per_s * dt
                payload: dict[str, Any] = {
                    "lat": lat0 + (lat1 - lat0) * frac,
                    "lon": lon0 + (lon1 - lon0) * frac,
                    "alt_m": flight.altitude_m,
                    "battery": max(0.0, battery),
                }
                self._emit(flight, EVENT_TELEMETRY, at, payload)
                nxt = flight.created_at + (k + 1) * cfg.telemetry_interval_s  # no float drift
                if nxt < flight.end_at:
                    self._schedule(nxt, _TICK, flight, k + 1)
            elif kind == _ALERT:
                rng = cast(random.Random, flight.rng)
                payload = {"code": rng.choice(ALERT_CODES), "level": rng.choice(ALERT_LEVELS)}
                event = self._emit(flight, EVENT_ALERT, at, payload)
                if rng.random() < cfg.alert_duplicate_prob:  # same alert, same seq, a bit later
                    self._deliver(event, at + rng.uniform(0.0, cfg.telemetry_interval_s))
                self._schedule_alert(flight, at)
            elif kind == _END:
                self._finish(flight, at, flight.outcome)
            else:  # _CANCEL_DONE
                flight.cancelled_at = at
                self._finish(flight, at, FLIGHT_CANCELLED)

    def _finish(self, flight: _Flight, at: float, status: str) -> None:
        if status == FLIGHT_CANCELLED and flight.cancelled_at is None:
            flight.cancelled_at = at  # aborted by the platform's operator (abort_flight_prob), not at our request
        flight.status = status
        flight.done = True
        flight.ended_at = at
        flight.rng = None  # free the per-flight generator
        kind = {FLIGHT_COMPLETED: EVENT_COMPLETED, FLIGHT_FAILED: EVENT_FAILED}.get(status, EVENT_CANCELLED)
        self._emit(flight, kind, at, {"status": status}, late=self.faults.late_completion_s)

    def _emit(
        self, flight: _Flight, kind: str, at: float, payload: dict[str, Any], late: float = 0.0
    ) -> PlatformEvent:
        flight.seq += 1
        event = PlatformEvent(
            flight.external_id, flight.request_id, flight.reference, flight.seq, kind, at, payload
        )
        self._deliver(event, at + late)
        return event

    def _deliver(self, event: PlatformEvent, at: float) -> None:
        faults = self.faults
        if faults.reorder_window_s <= 0 and faults.duplicate_event_prob <= 0:
            heapq.heappush(self._deliveries, (at, next(self._tie), event))
            return
        rng = self._delivery_rng
        if faults.reorder_window_s > 0:
            at += rng.uniform(0.0, faults.reorder_window_s)
        heapq.heappush(self._deliveries, (at, next(self._tie), event))
        if faults.duplicate_event_prob > 0 and rng.random() < faults.duplicate_event_prob:
            dup_at = at + rng.uniform(0.0, self.config.telemetry_interval_s)
            heapq.heappush(self._deliveries, (dup_at, next(self._tie), event))


def _check_battery(battery: float) -> float:
    if isinstance(battery, bool) or not isinstance(battery, int | float) or not 0.0 <= battery <= 100.0:
        raise ValueError(f"battery: must be a number in [0, 100], got {battery!r}")
    return float(battery)
