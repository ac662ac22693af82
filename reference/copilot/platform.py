"""The drone-platform port: what the reference needs from a fleet platform, and how calls can fail.

The error classes encode what the caller may conclude. A definite rejection or a throttle means the
platform did not create anything; a timeout or a 5xx means the outcome is *unknown* and must be
answered by a query (or the platform's idempotency key), never by a blind resend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# Flight statuses as the platform reports them.
FLIGHT_ACCEPTED = "ACCEPTED"
FLIGHT_EXECUTING = "EXECUTING"
FLIGHT_COMPLETED = "COMPLETED"
FLIGHT_FAILED = "FAILED"
FLIGHT_CANCELLED = "CANCELLED"
FLIGHT_TERMINAL = frozenset({FLIGHT_COMPLETED, FLIGHT_FAILED, FLIGHT_CANCELLED})


@dataclass(frozen=True)
class DeviceState:
    device_id: str
    online: bool
    battery: float  # 0..100
    known: bool = True  # False: the platform answered that it has no such device


@dataclass(frozen=True)
class FlightInfo:
    external_id: str
    request_id: str | None
    device_id: str
    status: str
    reference: str | None = None


@dataclass(frozen=True)
class CreateFlight:
    """A create-flight request. ``request_id`` is the platform's idempotency key (None when the platform
    has none); ``reference`` is our task id, carried as business metadata."""

    request_id: str | None
    device_id: str
    reference: str
    waypoints: list[list[float]]
    altitude_m: float
    actions: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "client_request_id": self.request_id,
            "device_id": self.device_id,
            "reference": self.reference,
            "waypoints": self.waypoints,
            "altitude_m": self.altitude_m,
            "actions": self.actions,
        }


@dataclass(frozen=True)
class CancelResult:
    accepted: bool  # False: the platform refused (e.g. the flight already ended)
    status: str  # the flight's status after the request


@dataclass(frozen=True)
class PlatformEvent:
    """One event pushed by the platform (webhook): telemetry, alert, completed, failed, cancelled."""

    external_id: str
    request_id: str | None
    reference: str | None
    seq: int
    kind: str
    at: float
    payload: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "external_id": self.external_id,
            "request_id": self.request_id,
            "reference": self.reference,
            "seq": self.seq,
            "kind": self.kind,
            "at": self.at,
            "payload": self.payload,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlatformEvent:
        return cls(
            external_id=str(data["external_id"]),
            request_id=data.get("request_id"),
            reference=data.get("reference"),
            seq=int(data["seq"]),
            kind=str(data["kind"]),
            at=float(data["at"]),
            payload=dict(data.get("payload") or {}),
        )


EVENT_TELEMETRY = "telemetry"
EVENT_ALERT = "alert"
EVENT_COMPLETED = "completed"
EVENT_FAILED = "failed"
EVENT_CANCELLED = "cancelled"


class PlatformError(Exception):
    """Base class. ``outcome_known`` says whether the caller knows nothing was created."""

    outcome_known = True
    retryable = False

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class PlatformRejected(PlatformError):
    """A definite refusal (4xx): nothing was created. Not retried automatically."""


class PlatformNotFound(PlatformError):
    """The flight or device does not exist."""


class PlatformThrottled(PlatformError):
    """429: the request was not processed; retry after backoff."""

    retryable = True


class PlatformUnavailable(PlatformError):
    """5xx or connection refused before the request was processed: outcome unknown for writes."""

    outcome_known = False
    retryable = True


class PlatformTimeout(PlatformError):
    """No answer within the timeout: the platform may or may not have acted."""

    outcome_known = False
    retryable = True


class PlatformUnsupported(PlatformError):
    """The platform has no such capability (no query by request id)."""


@dataclass(frozen=True)
class PlatformCapabilities:
    idempotency_key: bool = True
    query_by_request_id: bool = True


class PlatformClient(Protocol):
    """Every method raises a :class:`PlatformError` subclass on failure."""

    def capabilities(self) -> PlatformCapabilities: ...

    def get_device(self, device_id: str) -> DeviceState: ...

    def create_flight(self, request: CreateFlight) -> FlightInfo: ...

    def get_flight(self, external_id: str) -> FlightInfo: ...

    def find_by_request_id(self, request_id: str) -> FlightInfo | None: ...

    def cancel_flight(self, external_id: str) -> CancelResult: ...
