"""The Flask simulator and HttpPlatformClient against a real werkzeug server on 127.0.0.1."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from flask import Flask
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from reference.copilot.adapters.platform_http import HttpPlatformClient, PlatformUnreachable
from reference.copilot.platform import (
    FLIGHT_CANCELLED,
    FLIGHT_COMPLETED,
    CreateFlight,
    PlatformEvent,
    PlatformNotFound,
    PlatformRejected,
    PlatformThrottled,
    PlatformTimeout,
    PlatformUnavailable,
    PlatformUnsupported,
)
from simulator.app import DELIVERY_COLUMNS, Simulator, create_app, simulator_of
from simulator.model import PlatformConfig, PlatformModel

DEVICE = "DRONE-0001"


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it is truthy or the deadline passes (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@contextmanager
def serve(app: Any) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    # A short poll interval keeps shutdown() (and so each test's teardown) quick.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class Platform:
    base: str
    sim: Simulator
    client: HttpPlatformClient

    def faults(self, **changes: Any) -> None:
        resp = requests.put(f"{self.base}/control/faults", json=changes, timeout=5)
        assert resp.status_code == 200, resp.text

    def ledger(self) -> list[dict[str, Any]]:
        return requests.get(f"{self.base}/control/ledger", timeout=5).json()  # type: ignore[no-any-return]


def start_platform(time_scale: float = 1.0, **config: float) -> Iterator[Platform]:
    model = PlatformModel(random.Random(3), PlatformConfig(**config))
    model.add_fleet(5)
    app: Flask = create_app(model, time_scale=time_scale, seed=3)
    sim = simulator_of(app)
    with serve(app) as base:
        client = HttpPlatformClient(base, connect_timeout=1.0, read_timeout=0.5)
        try:
            yield Platform(base, sim, client)
        finally:
            sim.close()  # first: wakes handlers still sleeping out a "timeout" answer
            client.close()


@pytest.fixture
def platform() -> Iterator[Platform]:
    yield from start_platform(time_scale=1.0)


@pytest.fixture
def fast_platform() -> Iterator[Platform]:
    # 60 s flights at 120x: about half a second of wall time each.
    yield from start_platform(time_scale=120.0, flight_median_s=60.0, flight_sigma=0.1, cancel_delay_s=5.0)


@pytest.fixture
def long_platform() -> Iterator[Platform]:
    # ~100 s flights at 100x, 0.1 s return-home: a cancel always lands well before the natural end.
    yield from start_platform(
        time_scale=100.0, flight_median_s=10_000.0, flight_sigma=0.01, cancel_delay_s=10.0
    )


def req(request_id: str | None, reference: str = "task-1", device: str = DEVICE) -> CreateFlight:
    return CreateFlight(request_id, device, reference, [[30.0, 120.0], [30.01, 120.02]], 80.0, ["photo"])


# ----------------------------------------------------------------- round trip


def test_create_get_find_cancel_round_trip(platform: Platform) -> None:
    client = platform.client
    flight = client.create_flight(req("r1"))
    assert flight.request_id == "r1" and flight.reference == "task-1" and flight.status == "EXECUTING"
    replay = requests.post(f"{platform.base}/api/v1/flight-tasks", json=req("r1").as_json(), timeout=5)
    assert replay.status_code == 200 and replay.json()["external_id"] == flight.external_id
    assert client.get_flight(flight.external_id) == flight
    assert client.find_by_request_id("r1") == flight
    assert client.find_by_request_id("never-sent") is None
    result = client.cancel_flight(flight.external_id)
    assert result.accepted and result.status == "EXECUTING"
    assert client.get_device("DRONE-0002").battery == 100.0
    with pytest.raises(PlatformNotFound):
        client.get_flight("FLT-999999")
    with pytest.raises(PlatformNotFound):
        client.get_device("nope")
    assert [e["reference"] for e in platform.ledger()] == ["task-1"]
    assert platform.ledger()[0]["cancel_requested_at"] is not None


def test_create_without_request_id(platform: Platform) -> None:
    a = platform.client.create_flight(req(None))
    b = platform.client.create_flight(req(None))
    assert a.external_id != b.external_id and a.request_id is None


def test_malformed_create_is_400(platform: Platform) -> None:
    url = f"{platform.base}/api/v1/flight-tasks"
    for body in ({"device_id": DEVICE}, {**req("r").as_json(), "waypoints": [["x", 1]]}, [1, 2]):
        resp = requests.post(url, json=body, timeout=5)
        assert resp.status_code == 400
        assert resp.json()["code"] == "INVALID_REQUEST"
    resp = requests.post(url, data=b"not json", headers={"Content-Type": "application/json"}, timeout=5)
    assert resp.status_code == 400
    assert platform.ledger() == []


def test_unknown_route_is_a_json_error(platform: Platform) -> None:
    resp = requests.get(f"{platform.base}/api/v1/nothing-here", timeout=5)
    assert resp.status_code == 404 and resp.json()["code"] == "NOT_FOUND"


# ----------------------------------------------------------------- error mapping


def test_429_503_reject_and_unsupported_mapping(platform: Platform) -> None:
    client = platform.client
    platform.faults(error_429_rate=1.0)
    with pytest.raises(PlatformThrottled) as throttled:
        client.create_flight(req("r1"))
    assert throttled.value.retry_after == 1.0  # type: ignore[attr-defined]
    platform.faults(error_429_rate=0.0, error_5xx_rate=1.0)
    with pytest.raises(PlatformUnavailable) as unavailable:
        client.create_flight(req("r1"))
    assert not unavailable.value.outcome_known
    platform.faults(error_5xx_rate=0.0, reject_next=1)
    with pytest.raises(PlatformRejected) as rejected:
        client.create_flight(req("r1"))
    assert rejected.value.code == "DEVICE_REJECTED" and rejected.value.outcome_known
    with pytest.raises(PlatformRejected) as unknown:
        client.create_flight(req("r1", device="DRONE-9999"))
    assert unknown.value.code == "DEVICE_UNKNOWN"
    platform.faults(query_supported=False)
    with pytest.raises(PlatformUnsupported) as unsupported:
        client.find_by_request_id("r1")
    assert unsupported.value.code == "QUERY_UNSUPPORTED"
    assert platform.ledger() == []  # nothing above acted


def test_offline_device_is_rejected(platform: Platform) -> None:
    resp = requests.post(
        f"{platform.base}/control/devices",
        json={"device_id": DEVICE, "online": False, "battery": 40},
        timeout=5,
    )
    assert resp.status_code == 200
    assert not platform.client.get_device(DEVICE).online
    with pytest.raises(PlatformRejected) as exc:
        platform.client.create_flight(req("r1"))
    assert exc.value.code == "DEVICE_OFFLINE"


def test_accept_then_timeout_is_a_timeout_and_the_flight_exists(platform: Platform) -> None:
    platform.faults(accept_then_timeout=1, response_timeout_delay_s=2.0)
    with pytest.raises(PlatformTimeout) as exc:
        platform.client.create_flight(req("r1"))
    assert not exc.value.outcome_known
    assert [e["request_id"] for e in platform.ledger()] == ["r1"]
    found = platform.client.find_by_request_id("r1")
    assert found is not None and platform.client.create_flight(req("r1")) == found  # replay, no 2nd flight
    assert len(platform.ledger()) == 1


def test_dropped_response_is_a_timeout_and_the_flight_exists(platform: Platform) -> None:
    platform.faults(drop_response=1)
    with pytest.raises(PlatformTimeout) as exc:
        platform.client.create_flight(req("r1"))
    assert exc.value.code == "CONNECTION_DROPPED"
    assert [e["request_id"] for e in platform.ledger()] == ["r1"]
    # the server survives the dropped connection
    assert platform.client.find_by_request_id("r1") is not None


def test_cancel_timeout_takes_effect(long_platform: Platform) -> None:
    flight = long_platform.client.create_flight(req("r1"))
    long_platform.faults(cancel_timeout=1, response_timeout_delay_s=2.0)
    with pytest.raises(PlatformTimeout):
        long_platform.client.cancel_flight(flight.external_id)
    wait_for(lambda: long_platform.client.get_flight(flight.external_id).status == FLIGHT_CANCELLED)
    entry = long_platform.ledger()[0]
    assert entry["cancelled_at"] - entry["cancel_requested_at"] == pytest.approx(10.0)


def test_connection_refused_is_unreachable_with_known_outcome() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = HttpPlatformClient(f"http://127.0.0.1:{port}", connect_timeout=0.5)
    with pytest.raises(PlatformUnreachable) as exc:
        client.create_flight(req("r1"))
    assert exc.value.outcome_known and isinstance(exc.value, PlatformUnavailable)


def test_capabilities_are_configured_not_learned() -> None:
    client = HttpPlatformClient("http://127.0.0.1:1", idempotency_key=False, query_by_request_id=False)
    caps = client.capabilities()
    assert not caps.idempotency_key and not caps.query_by_request_id


# ----------------------------------------------------------------- cancel after completion, events


def test_cancel_of_completed_flight_is_refused(fast_platform: Platform) -> None:
    flight = fast_platform.client.create_flight(req("r1"))
    wait_for(lambda: fast_platform.client.get_flight(flight.external_id).status == FLIGHT_COMPLETED)
    result = fast_platform.client.cancel_flight(flight.external_id)
    assert not result.accepted and result.status == FLIGHT_COMPLETED


class Receiver:
    """A tiny webhook endpoint; fails its first ``fail_first`` deliveries with a 500."""

    def __init__(self, fail_first: int = 0, server_timing: str | None = None) -> None:
        self.events: list[PlatformEvent] = []
        self.posts = 0
        self.fail_first = fail_first
        self.server_timing = server_timing  # sent with each successful answer, as the API's is
        self.cond = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        with self.cond:
            self.posts += 1
            if self.posts <= self.fail_first:
                return Response("boom", status=500)(environ, start_response)
            self.events.extend(PlatformEvent.from_json(item) for item in request.get_json())
            self.cond.notify_all()
        headers = {"Server-Timing": self.server_timing} if self.server_timing else {}
        return Response("", status=204, headers=headers)(environ, start_response)

    def wait(self, predicate: Callable[[list[PlatformEvent]], bool], timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.events), timeout), "webhook events missing"


@pytest.mark.parametrize("header", ["app;dur=1.5, cpu;dur=0.75", None])
def test_the_delivery_log_has_every_successful_post_with_the_receivers_server_timing(
        fast_platform: Platform, header: str | None) -> None:
    receiver = Receiver(fail_first=1, server_timing=header)
    before = time.time()
    with serve(receiver) as hook_url:
        requests.post(f"{fast_platform.base}/control/webhook", json={"url": hook_url + "/events"}, timeout=5)
        flight = fast_platform.client.create_flight(req("r1"))
        receiver.wait(lambda events: any(e.kind == "completed" and e.external_id == flight.external_id
                                         for e in events))

        def logged() -> dict[str, Any] | None:
            # The simulator logs a delivery once the answer is back, after the receiver has seen its events:
            # wait until the log has caught up with what the receiver counted.
            log = requests.get(f"{fast_platform.base}/control/webhook-deliveries", timeout=5).json()
            with receiver.cond:
                posts, events = receiver.posts, len(receiver.events)
            rows = log["items"]
            # The failed first attempt is not a delivery; every successful one is, with every event it carried.
            return log if len(rows) == posts - 1 and sum(r[1] for r in rows) == events else None

        log = wait_for(logged)
    assert log["columns"] == ["sent_at", "events", "round_trip_ms", "server_ms", "server_cpu_ms"]
    rows = log["items"]
    assert len(rows) >= 2
    assert all(before <= r[0] <= time.time() and r[2] >= 0 for r in rows)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    expected = (1.5, 0.75) if header else (None, None)
    assert {(r[3], r[4]) for r in rows} == {expected}


def _log_deliveries(sim: Simulator, numbers: range) -> None:
    """Log deliveries as the sender does, the n-th sent at 1000 + n - 1 (epoch s)."""
    with sim.lock:
        for n in numbers:
            assert sim.deliveries_logged == n - 1
            sim.log_delivery([1000.0 + n - 1, 1, 1.0, None, None])


def test_the_delivery_log_is_read_on_from_a_cursor_and_says_how_many_it_dropped(platform: Platform) -> None:
    platform.sim.deliveries = deque(maxlen=4)  # DELIVERY_LOG, small

    def read(after: str | None = None) -> requests.Response:
        return requests.get(f"{platform.base}/control/webhook-deliveries",
                            params=None if after is None else {"after": after}, timeout=5)

    _log_deliveries(platform.sim, range(1, 4))
    first = read().json()
    assert [r[0] for r in first["items"]] == [1000.0, 1001.0, 1002.0] and (first["next"], first["missed"]) == (3, 0)
    assert read("3").json() | {"columns": None} == {"columns": None, "items": [], "next": 3, "missed": 0}
    _log_deliveries(platform.sim, range(4, 10))
    # Deliveries 1..9 were logged and the log holds 6..9: a reader at 3 never sees 4 and 5, and is told so.
    behind = read("3").json()
    assert [r[0] for r in behind["items"]] == [1005.0, 1006.0, 1007.0, 1008.0]
    assert (behind["next"], behind["missed"]) == (9, 2)
    assert [r[0] for r in read("7").json()["items"]] == [1007.0, 1008.0]
    assert read("9").json()["items"] == [] and read("12").json()["next"] == 12
    for bad in ("-1", "x", "1.5", "", "9" * 19, "٣"):
        resp = read(bad)
        assert resp.status_code == 400 and resp.json()["code"] == "INVALID_REQUEST", bad


def test_a_load_runs_reader_drains_the_log_while_it_runs_without_duplicates_or_silent_losses(
        platform: Platform) -> None:
    from systems.copilot.load_analysis import webhook_posts
    from systems.copilot.sampler import WebhookDeliveries

    platform.sim.deliveries = deque(maxlen=4)
    reader = WebhookDeliveries(platform.base, every_s=3600.0)
    reader.drain(force=True)
    assert reader.result() == {"columns": list(DELIVERY_COLUMNS), "items": [], "missed": 0}
    _log_deliveries(platform.sim, range(1, 4))
    reader.drain()  # within every_s of the last read: not read yet
    assert reader.result()["items"] == []  # type: ignore[index]
    reader.drain(force=True)
    _log_deliveries(platform.sim, range(4, 10))
    reader.drain(force=True)
    got = reader.result()
    assert got is not None and [r[0] for r in got["items"]] == [1000.0, 1001.0, 1002.0, 1005.0, 1006.0, 1007.0, 1008.0]
    assert got["missed"] == 2 and reader.unreadable == 0
    # POSTs answered up to 5.5 s after 1000: the four logged ones and the two dropped (older than any logged).
    assert webhook_posts(got, 1000.0, 5.5) == 6


def test_a_reader_that_never_reached_the_simulator_has_no_log() -> None:
    from systems.copilot.sampler import WebhookDeliveries

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reader = WebhookDeliveries(f"http://127.0.0.1:{port}", timeout_s=1.0)
    reader.drain(force=True)
    assert reader.unreadable == 1 and reader.result() is None


def test_webhook_delivers_events_at_least_once(fast_platform: Platform) -> None:
    receiver = Receiver(fail_first=1)
    with serve(receiver) as hook_url:
        resp = requests.post(
            f"{fast_platform.base}/control/webhook", json={"url": hook_url + "/events"}, timeout=5
        )
        assert resp.status_code == 200
        flight = fast_platform.client.create_flight(req("r1"))
        receiver.wait(
            lambda events: any(e.kind == "completed" and e.external_id == flight.external_id for e in events)
        )
    mine = [e for e in receiver.events if e.external_id == flight.external_id]
    telemetry = [e.seq for e in mine if e.kind == "telemetry"]
    assert telemetry and telemetry == sorted(telemetry)
    assert mine[-1].kind == "completed" and mine[-1].reference == "task-1"
    assert receiver.posts >= 2  # the first delivery failed and was retried
    health = requests.get(f"{fast_platform.base}/control/health", timeout=5).json()
    assert health["webhook_failures"] >= 1 and health["webhook_batches_dropped"] == 0
    # the same events can be polled by delivery index
    polled = requests.get(f"{fast_platform.base}/api/v1/events", params={"after": 0}, timeout=5).json()
    assert [i["seq"] for i in polled["items"] if i["external_id"] == flight.external_id] == [
        e.seq for e in mine
    ]
    indexes = [i["index"] for i in polled["items"]]
    assert indexes == list(range(1, len(indexes) + 1))
    later = requests.get(
        f"{fast_platform.base}/api/v1/events", params={"after": indexes[-1]}, timeout=5
    ).json()
    assert later["next"] >= indexes[-1]


# ----------------------------------------------------------------- control plane


def test_faults_put_validates_and_merges(platform: Platform) -> None:
    url = f"{platform.base}/control/faults"
    bad = requests.put(url, json={"error_5xx_rate": 2}, timeout=5)
    assert bad.status_code == 400
    assert bad.json()["field"] == "error_5xx_rate" and "error_5xx_rate" in bad.json()["message"]
    unknown = requests.put(url, json={"bogus": 1}, timeout=5)
    assert unknown.status_code == 400 and unknown.json()["field"] == "bogus"
    assert requests.put(url, data=b"[", timeout=5).status_code == 400
    platform.faults(reject_devices=["DRONE-0002"], drop_response=2)
    platform.faults(drop_response=1)  # partial: other fields stay
    current = requests.get(url, timeout=5).json()
    assert current["reject_devices"] == ["DRONE-0002"] and current["drop_response"] == 1


def test_reset_clears_flights_and_faults(platform: Platform) -> None:
    platform.client.create_flight(req("r1"))
    platform.faults(error_5xx_rate=0.5)
    resp = requests.post(f"{platform.base}/control/reset", json={"seed": 9}, timeout=5)
    assert resp.status_code == 200 and resp.json()["seed"] == 9
    assert platform.ledger() == []
    assert requests.get(f"{platform.base}/control/faults", timeout=5).json()["error_5xx_rate"] == 0.0
    assert platform.client.get_device(DEVICE).online  # the fleet survives a reset


def test_a_reset_may_ask_for_other_flights_and_the_next_one_restores_them(platform: Platform) -> None:
    configured = platform.sim.model.config.flight_median_s
    resp = requests.post(f"{platform.base}/control/reset", json={"seed": 3, "flight_median_s": 14400}, timeout=5)
    assert resp.status_code == 200, resp.text
    assert platform.sim.model.config.flight_median_s == 14400.0
    flight = platform.client.create_flight(req("long"))
    with platform.sim.lock:
        left = [f.end_at - f.created_at for f in platform.sim.model._ledger if f.external_id == flight.external_id]
    assert left and left[0] > 5 * configured  # hours of model time, not the configured minutes (seeded)
    for name in ("flight_median_s", "cancel_delay_s"):
        for bad in (0, -5, "long", 10**400, True):
            refused = requests.post(f"{platform.base}/control/reset", json={name: bad}, timeout=5)
            assert refused.status_code == 400 and refused.json()["code"] == "INVALID_REQUEST", (name, bad)
            assert refused.json()["message"].startswith(name)
    assert platform.sim.model.config.flight_median_s == 14400.0  # a refused reset changed nothing
    assert requests.post(f"{platform.base}/control/reset", json={}, timeout=5).status_code == 200
    assert platform.sim.model.config.flight_median_s == configured


def test_a_reset_may_ask_for_a_longer_return_home(long_platform: Platform) -> None:
    """R4 on the real stack: a cancelled flight stays unconfirmed past the client's read timeout."""
    platform = long_platform
    configured = platform.sim.model.config.cancel_delay_s  # 10 model s: 0.1 s of wall time at 100x
    resp = requests.post(f"{platform.base}/control/reset", json={"cancel_delay_s": 6000}, timeout=5)
    assert resp.status_code == 200, resp.text
    assert platform.sim.model.config.cancel_delay_s == 6000.0
    assert platform.sim.model.config.flight_median_s == 10_000.0  # only what the reset names
    flight = platform.client.create_flight(req("cancel-late"))
    assert platform.client.cancel_flight(flight.external_id).accepted
    time.sleep(1.0)  # 100 model seconds: ten of the configured return homes, a sixtieth of this one
    assert platform.client.get_flight(flight.external_id).status != "CANCELLED"

    assert requests.post(f"{platform.base}/control/reset", json={}, timeout=5).status_code == 200
    assert platform.sim.model.config.cancel_delay_s == configured
    flight = platform.client.create_flight(req("cancel-soon"))
    assert platform.client.cancel_flight(flight.external_id).accepted
    deadline = time.monotonic() + 30
    while platform.client.get_flight(flight.external_id).status != "CANCELLED":
        assert time.monotonic() < deadline, "the configured return home never ended"
        time.sleep(0.05)
