"""PlatformClient over HTTP (the Flask simulator, or a real fleet platform with the same API).

Error mapping keeps what the caller may conclude (see reference.copilot.platform):
- connection refused / connect timeout: the request never left  -> PlatformUnreachable (outcome known)
- read timeout, connection dropped mid-call, garbled answer     -> PlatformTimeout (outcome unknown)
- 429 -> PlatformThrottled; 5xx -> PlatformUnavailable; 501 -> PlatformUnsupported;
  404 -> PlatformNotFound; other 4xx -> PlatformRejected with the platform's code.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from urllib3.exceptions import NewConnectionError

from kernel.runtime import open_transaction
from reference.copilot.platform import (
    CancelResult,
    CreateFlight,
    DeviceState,
    FlightInfo,
    PlatformCapabilities,
    PlatformError,
    PlatformNotFound,
    PlatformRejected,
    PlatformThrottled,
    PlatformTimeout,
    PlatformUnavailable,
    PlatformUnsupported,
)
from reference.copilot.runtime import note_platform_call

# A cancel on a flight that already ended: a refusal the port reports as CancelResult(accepted=False).
CANCEL_REFUSED_CODE = "FLIGHT_ALREADY_ENDED"


class PlatformUnreachable(PlatformUnavailable):
    """The connection could not be opened, so nothing was sent: the outcome is known (nothing happened)."""

    outcome_known = True


class HttpPlatformClient:
    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 1.0,
        read_timeout: float = 2.0,
        session: requests.Session | None = None,
        idempotency_key: bool = True,
        query_by_request_id: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout, read_timeout)
        self.session = session or requests.Session()
        # The platform cannot tell us these; they are what the deployment says the platform supports.
        self._capabilities = PlatformCapabilities(idempotency_key, query_by_request_id)

    def capabilities(self) -> PlatformCapabilities:
        return self._capabilities

    def close(self) -> None:
        self.session.close()

    # ----------------------------------------------------------------- PlatformClient

    def get_device(self, device_id: str) -> DeviceState:
        data = self._call("get_device", "GET", f"/api/v1/devices/{quote(device_id, safe='')}")
        try:
            return DeviceState(str(data["device_id"]), bool(data["online"]), float(data["battery"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad_answer(exc) from exc

    def create_flight(self, request: CreateFlight) -> FlightInfo:
        return _flight(self._call("create_flight", "POST", "/api/v1/flight-tasks", json=request.as_json()))

    def get_flight(self, external_id: str) -> FlightInfo:
        return _flight(self._call("get_flight", "GET", f"/api/v1/flight-tasks/{quote(external_id, safe='')}"))

    def find_by_request_id(self, request_id: str) -> FlightInfo | None:
        data = self._call("find_by_request_id", "GET", "/api/v1/flight-tasks",
                          params={"client_request_id": request_id})
        items = data.get("items")
        if not isinstance(items, list):
            raise _bad_answer(ValueError("items missing"))
        return _flight(items[0]) if items else None

    def cancel_flight(self, external_id: str) -> CancelResult:
        path = f"/api/v1/flight-tasks/{quote(external_id, safe='')}/commands"
        try:
            data = self._call("cancel_flight", "POST", path, json={"command": "cancel"})
        except PlatformRejected as exc:
            status = getattr(exc, "status", None)
            if exc.code == CANCEL_REFUSED_CODE and isinstance(status, str):
                return CancelResult(accepted=False, status=status)
            raise
        try:
            return CancelResult(accepted=bool(data["accepted"]), status=str(data["status"]))
        except (KeyError, TypeError) as exc:
            raise _bad_answer(exc) from exc

    # ----------------------------------------------------------------- transport

    def _call(self, what: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        current = open_transaction()
        if current is not None and not current.noting:  # called directly from inside a transaction
            note_platform_call(current, what, None, "client")
        try:
            resp = self.session.request(method, self.base_url + path, timeout=self.timeout, **kwargs)
        except requests.ConnectTimeout as exc:  # before ReadTimeout/ConnectionError: it is both
            raise PlatformUnreachable("CONNECT_TIMEOUT", str(exc)) from exc
        except requests.ReadTimeout as exc:
            raise PlatformTimeout("TIMEOUT", str(exc)) from exc
        except requests.ConnectionError as exc:
            if _never_connected(exc):
                raise PlatformUnreachable("CONNECT_FAILED", str(exc)) from exc
            raise PlatformTimeout("CONNECTION_DROPPED", str(exc)) from exc
        except requests.RequestException as exc:  # e.g. the body broke off half-way
            raise PlatformTimeout("TRANSPORT_ERROR", str(exc)) from exc
        body = _json_or_none(resp)
        if resp.status_code < 300:
            if not isinstance(body, dict):
                raise _bad_answer(ValueError(f"HTTP {resp.status_code}: body is not a JSON object"))
            return body
        raise _error_for(resp, body if isinstance(body, dict) else {})


def _never_connected(exc: requests.ConnectionError) -> bool:
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, NewConnectionError | ConnectionRefusedError)


def _json_or_none(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _error_for(resp: requests.Response, body: dict[str, Any]) -> PlatformError:
    status = resp.status_code
    code = str(body.get("code") or f"HTTP_{status}")
    message = str(body.get("message") or resp.reason or "")
    err: PlatformError
    if status == 429:
        err = PlatformThrottled(code, message)
        err.retry_after = _retry_after(resp.headers.get("Retry-After"))  # type: ignore[attr-defined]
    elif status == 501:
        err = PlatformUnsupported(code, message)
    elif status >= 500:
        err = PlatformUnavailable(code, message)
    elif status == 404:
        err = PlatformNotFound(code, message)
    else:
        err = PlatformRejected(code, message)
        if "status" in body:
            err.status = body["status"]  # type: ignore[attr-defined]
    return err


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: callers fall back to their own backoff


def _flight(data: Any) -> FlightInfo:
    try:
        return FlightInfo(
            external_id=str(data["external_id"]),
            request_id=data.get("client_request_id"),
            device_id=str(data["device_id"]),
            status=str(data["status"]),
            reference=data.get("reference"),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise _bad_answer(exc) from exc


def _bad_answer(exc: Exception) -> PlatformTimeout:
    # A 2xx we cannot read leaves the outcome as unknown as a lost answer.
    return PlatformTimeout("BAD_RESPONSE", f"unreadable platform answer: {exc}")
