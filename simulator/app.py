"""The Flask platform simulator: the clock-driven model behind a fleet-platform shaped JSON API.

Model time is wall time scaled: ``model_now = base + (monotonic() - t0) * time_scale``. A pump thread
advances the model, keeps a bounded buffer of delivered events (``GET /api/v1/events``) and hands
batches to a sender thread that POSTs them to registered webhooks, at least once.

Run one process (one worker): the model lives in memory. Gunicorn: ``gunicorn -w 1 --threads 8
'simulator.app:create_app()'`` with SORTIE_SIM_SEED / SORTIE_SIM_TIME_SCALE / SORTIE_SIM_DEVICES.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import queue
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeGuard, TypeVar

import requests
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from reference.copilot.http.server_timing import parse as parse_server_timing
from reference.copilot.platform import (
    CreateFlight,
    FlightInfo,
    PlatformError,
    PlatformNotFound,
    PlatformRejected,
    PlatformThrottled,
    PlatformUnavailable,
    PlatformUnsupported,
)
from simulator import openapi
from simulator.model import (
    DELIVERY_DROP,
    DELIVERY_TIMEOUT,
    FaultsError,
    PlatformFaults,
    PlatformModel,
    Reply,
)

log = logging.getLogger("sortie.simulator")

EXTENSION_KEY = "sortie_simulator"
EVENT_BUFFER = 200_000  # bounded poll buffer: ~2 simulated hours at 1x
MAX_BATCH = 500
MAX_RESET_DURATION_S = 30 * 86400.0  # a reset's flight median or return-home time, in model seconds: a month
RESET_DURATIONS = ("flight_median_s", "cancel_delay_s")  # the PlatformConfig fields a reset may set
WEBHOOK_ATTEMPTS = 5
DELIVERY_COLUMNS = ("sent_at", "events", "round_trip_ms", "server_ms", "server_cpu_ms")
# Successful webhook deliveries kept for GET /control/webhook-deliveries: about 65 minutes at 1x (~25 per second,
# measured), about 20 at 5x (~84 per second). A load run drains the log with its ``after`` cursor while it runs, so
# only a reader that falls that far behind loses deliveries (the answer's ``missed`` counts them).
DELIVERY_LOG = 100_000
WEBHOOK_TIMEOUT = (1.0, 2.0)
RETRY_AFTER_S = 1

T = TypeVar("T")


class Simulator:
    """The shared state behind the Flask app. Every model access holds ``lock``."""

    def __init__(self, model: PlatformModel, *, time_scale: float, seed: int) -> None:
        if not time_scale > 0 or not math.isfinite(time_scale):
            raise ValueError(f"time_scale: must be a positive number, got {time_scale!r}")
        self.lock = threading.Lock()
        self.model = model
        self.seed = seed
        self.time_scale = time_scale
        self._initial_devices = model.devices_json()  # restored by reset()
        self._initial_config = model.config  # restored by reset() unless it is given other flights
        self._t0 = time.monotonic()
        # Model time starts at the wall clock's epoch seconds, so event times and the ledger read as dates
        # (and, at time_scale 1, compare directly with the database's timestamps).
        self._base = max(model.now, time.time())
        self.webhooks: list[str] = []
        self.webhook_headers: dict[str, dict[str, str]] = {}  # e.g. the receiver's shared-secret header
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENT_BUFFER)
        self.next_index = 1
        self.stats = {"webhook_batches_sent": 0, "webhook_failures": 0, "webhook_batches_dropped": 0}
        # Per successful delivery: [sent at (epoch s), events, round trip ms, the receiver's Server-Timing app and cpu
        # ms or None]. The receiver's own CPU per batch is what a capacity model charges the API for the platform's
        # traffic, which no load client sees.
        self.deliveries: deque[list[Any]] = deque(maxlen=DELIVERY_LOG)
        self.deliveries_logged = 0  # the number of the newest delivery in the log (1, 2, ...; never reused)
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._outbox: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._http = requests.Session()

    # ----------------------------------------------------------------- clock and model access

    def model_now(self) -> float:
        return self._base + (time.monotonic() - self._t0) * self.time_scale

    def call(self, fn: Callable[[PlatformModel, float], T]) -> T:
        with self.lock:
            result = fn(self.model, self.model_now())
        self._wake.set()  # a new flight or cancel may move the next due event earlier
        return result

    def reset(self, seed: int | None = None, flight_median_s: float | None = None,
              cancel_delay_s: float | None = None) -> None:
        """A fresh model; its flights last ``flight_median_s`` model seconds (median) and a cancelled one returns home
        in ``cancel_delay_s`` (None: the configured ones)."""
        given = dict(zip(RESET_DURATIONS, (flight_median_s, cancel_delay_s), strict=True))
        durations = {k: v for k, v in given.items() if v is not None}
        with self.lock:
            if seed is not None:
                self.seed = seed
            config = dataclasses.replace(self._initial_config, **durations)
            model = PlatformModel(random.Random(self.seed), config)
            for d in self._initial_devices:
                model.add_device(d["device_id"], d["online"], d["battery"])
            self.model = model
            self._t0 = time.monotonic()
            self._base = time.time()
            self.events.clear()  # indexes stay monotonic so pollers never see an index reused
        self._wake.set()

    # ----------------------------------------------------------------- background threads

    def start(self) -> None:
        for target, name in ((self._pump_loop, "sim-pump"), (self._send_loop, "sim-webhooks")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)
        self._http.close()

    def pump_once(self) -> float | None:
        """Move due events from the model to the buffer and the webhook queue; return the next due."""
        with self.lock:
            now = self.model_now()
            events = self.model.pop_due(now)
            due = self.model.next_due()
            batch = []
            for event in events:
                item = event.as_json()
                item["index"] = self.next_index
                self.next_index += 1
                batch.append(item)
            self.events.extend(batch)
            send = bool(batch) and bool(self.webhooks)
        if send:
            self._outbox.put(batch)
        return None if due is None else (due - now) / self.time_scale

    def _pump_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                wait = self.pump_once()
            except Exception:  # keep pumping; a bug here must not silently stop all events
                log.exception("event pump failed")
                wait = 0.1
            # Short waits batch events; the cap bounds how stale a wake-up can be after a reset.
            wait = 0.2 if wait is None else min(max(wait, 0.002), 0.2)
            self._wake.wait(wait)
            self._wake.clear()

    def _send_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                batch = self._outbox.get(timeout=0.2)
            except queue.Empty:
                continue
            while len(batch) < MAX_BATCH:  # merge what piled up while we were sending
                try:
                    batch = batch + self._outbox.get_nowait()
                except queue.Empty:
                    break
            for start in range(0, len(batch), MAX_BATCH):
                chunk = batch[start : start + MAX_BATCH]
                for url in list(self.webhooks):
                    self._deliver(url, chunk)

    def log_delivery(self, row: list[Any]) -> None:
        """Log one successful delivery (``DELIVERY_COLUMNS``) as number ``deliveries_logged``. Holds ``lock``."""
        self.deliveries_logged += 1
        self.deliveries.append(row)

    def _deliver(self, url: str, batch: list[dict[str, Any]]) -> None:
        for attempt in range(WEBHOOK_ATTEMPTS):
            try:
                sent_at, started = time.time(), time.perf_counter()
                resp = self._http.post(url, json=batch, timeout=WEBHOOK_TIMEOUT,
                                       headers=self.webhook_headers.get(url))
                if 200 <= resp.status_code < 300:
                    round_trip_ms = (time.perf_counter() - started) * 1000
                    timing = parse_server_timing(resp.headers.get("Server-Timing"))
                    with self.lock:
                        self.stats["webhook_batches_sent"] += 1
                        self.log_delivery([round(sent_at, 4), len(batch), round(round_trip_ms, 3),
                                           timing.get("app"), timing.get("cpu")])
                    return
            except requests.RequestException:
                pass
            self.stats["webhook_failures"] += 1
            if self.stopping.wait(0.05 * 2**attempt):
                return
        self.stats["webhook_batches_dropped"] += 1
        log.warning(
            "webhook %s: dropped a batch of %d events after %d attempts", url, len(batch), WEBHOOK_ATTEMPTS
        )

    def events_after(self, after: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        with self.lock:
            if not self.events:
                return [], False
            first = self.events[0]["index"]
            skip = max(0, after + 1 - first)
            # Past the end: nothing (islice refuses a start beyond sys.maxsize, e.g. ?after=10**30).
            items = [] if skip >= len(self.events) else list(itertools.islice(self.events, skip, skip + limit))
            return items, after + 1 < first


# --------------------------------------------------------------------- HTTP helpers


def _error(http_status: int, code: str, message: str = "", **extra: Any) -> tuple[Response, int]:
    return jsonify({"code": code, "message": message, **extra}), http_status


def _platform_error(err: PlatformError) -> tuple[Response, int] | Response:
    if isinstance(err, PlatformThrottled):
        resp = jsonify({"code": err.code, "message": err.message})
        resp.status_code = 429
        resp.headers["Retry-After"] = str(RETRY_AFTER_S)
        return resp
    if isinstance(err, PlatformUnavailable):
        return _error(503, err.code, err.message)
    if isinstance(err, PlatformNotFound):
        return _error(404, err.code, err.message)
    if isinstance(err, PlatformUnsupported):
        return _error(501, err.code, err.message)
    if isinstance(err, PlatformRejected):
        return _error(422 if err.code == "DEVICE_UNKNOWN" else 409, err.code, err.message)
    return _error(500, err.code, err.message)


def _flight_json(info: FlightInfo) -> dict[str, Any]:
    return {
        "external_id": info.external_id,
        "client_request_id": info.request_id,
        "device_id": info.device_id,
        "status": info.status,
        "reference": info.reference,
    }


def _drop_connection() -> Response:
    """Close the client's connection without an HTTP answer.

    Shutting the raw socket down makes the client read EOF (requests: ConnectionError); the server's
    own attempt to write the response then fails with EPIPE, which werkzeug and gunicorn's sync and
    threaded workers treat as a client disconnect.
    """
    sock = request.environ.get("werkzeug.socket") or request.environ.get("gunicorn.socket")
    if sock is None:  # e.g. Flask's test client: there is no connection to drop
        raise ConnectionAbortedError("drop_response: no raw socket in the WSGI environ")
    with contextlib.suppress(OSError):  # already closed by the peer: nothing left to drop
        sock.shutdown(socket.SHUT_RDWR)
    return Response(b"", status=500)


def _answer(sim: Simulator, reply: Reply[T], ok: Callable[[T], tuple[Any, int]]) -> Any:
    if reply.delivery == DELIVERY_DROP:
        return _drop_connection()
    if reply.delivery == DELIVERY_TIMEOUT:
        # The platform acted; the answer comes after the client gave up. stopping cuts it short.
        sim.stopping.wait(sim.model.faults.response_timeout_delay_s)
    if reply.error is not None:
        return _platform_error(reply.error)
    return ok(reply.value)  # type: ignore[arg-type]


def _parse_create(body: Any) -> CreateFlight:
    if not isinstance(body, dict):
        raise TypeError("body: must be a JSON object")
    rid = body.get("client_request_id")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise ValueError("client_request_id: must be a non-empty string or null")
    for key in ("device_id", "reference"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise ValueError(f"{key}: must be a non-empty string")
    waypoints = body.get("waypoints")
    if not isinstance(waypoints, list) or not waypoints or not all(_is_point(w) for w in waypoints):
        raise ValueError("waypoints: must be a non-empty list of [lat, lon(, alt)] numbers")
    altitude = body.get("altitude_m")
    if not _is_number(altitude) or not 0 < altitude <= 10_000:
        raise ValueError("altitude_m: must be a number in (0, 10000]")
    actions = body.get("actions", [])
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ValueError("actions: must be a list of strings")
    return CreateFlight(
        request_id=rid,
        device_id=body["device_id"],
        reference=body["reference"],
        waypoints=[[float(x) for x in w] for w in waypoints],
        altitude_m=float(altitude),
        actions=list(actions),
    )


def _is_number(x: Any) -> TypeGuard[int | float]:
    """A finite JSON number that converts to a float (an integer beyond a double's range does not)."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # math.isfinite(10**400)
        return False


def _is_point(w: Any) -> bool:
    return isinstance(w, list) and 2 <= len(w) <= 3 and all(_is_number(x) for x in w)


# --------------------------------------------------------------------- the app


def create_app(
    model: PlatformModel | None = None,
    *,
    time_scale: float | None = None,
    seed: int | None = None,
    devices: int | None = None,
    start_threads: bool = True,
) -> Flask:
    """Build the simulator app. Unset arguments come from SORTIE_SIM_TIME_SCALE / SORTIE_SIM_SEED /
    SORTIE_SIM_DEVICES (so ``gunicorn 'simulator.app:create_app()'`` is configurable), else 1.0 / 0 / 0.
    ``devices`` adds a fleet DRONE-0001.. to a model built here (not to one passed in)."""
    scale = time_scale if time_scale is not None else float(os.environ.get("SORTIE_SIM_TIME_SCALE", "1.0"))
    seed_ = seed if seed is not None else int(os.environ.get("SORTIE_SIM_SEED", "0"))
    if model is None:
        model = PlatformModel(random.Random(seed_))
        model.add_fleet(devices if devices is not None else int(os.environ.get("SORTIE_SIM_DEVICES", "0")))
    sim = Simulator(model, time_scale=scale, seed=seed_)

    app = Flask("sortie-simulator")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION_KEY] = sim

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        return _error(exc.code or 500, (exc.name or "error").upper().replace(" ", "_"), exc.description or "")

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Any:
        if isinstance(exc, ConnectionAbortedError):
            raise exc
        log.exception("simulator error")
        return _error(500, "INTERNAL", "internal simulator error")

    # ------------------------------------------------------------- platform API

    @app.post("/api/v1/flight-tasks")
    def create_flight() -> Any:
        try:
            req = _parse_create(request.get_json(silent=True))
        except (TypeError, ValueError) as exc:
            return _error(400, "INVALID_REQUEST", str(exc))
        reply = sim.call(lambda m, now: m.create_flight(now, req))
        return _answer(sim, reply, lambda info: (jsonify(_flight_json(info)), 200 if reply.replayed else 201))

    @app.get("/api/v1/flight-tasks/<external_id>")
    def get_flight(external_id: str) -> Any:
        reply = sim.call(lambda m, now: m.get_flight(now, external_id))
        return _answer(sim, reply, lambda info: (jsonify(_flight_json(info)), 200))

    @app.get("/api/v1/flight-tasks")
    def query_flights() -> Any:
        rid = request.args.get("client_request_id")
        if not rid:
            return _error(400, "INVALID_REQUEST", "client_request_id: query parameter required")
        reply = sim.call(lambda m, now: m.query_by_request_id(now, rid))
        return _answer(sim, reply, lambda items: (jsonify({"items": [_flight_json(i) for i in items]}), 200))

    @app.post("/api/v1/flight-tasks/<external_id>/commands")
    def command(external_id: str) -> Any:
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or body.get("command") != "cancel":
            return _error(400, "INVALID_COMMAND", 'command: only "cancel" is supported')
        reply = sim.call(lambda m, now: m.cancel_flight(now, external_id))

        def ok(result: Any) -> tuple[Any, int]:
            if result.accepted:
                return jsonify({"accepted": True, "status": result.status}), 202
            return _error(
                409, "FLIGHT_ALREADY_ENDED", "the flight has ended", accepted=False, status=result.status
            )

        return _answer(sim, reply, ok)

    @app.get("/api/v1/devices/<device_id>")
    def get_device(device_id: str) -> Any:
        reply = sim.call(lambda m, now: m.get_device(now, device_id))
        return _answer(
            sim,
            reply,
            lambda d: (jsonify({"device_id": d.device_id, "online": d.online, "battery": d.battery}), 200),
        )

    @app.get("/api/v1/events")
    def poll_events() -> Any:
        try:
            after = int(request.args.get("after", "0"))
            limit = min(int(request.args.get("limit", "1000")), 10_000)
        except ValueError:
            return _error(400, "INVALID_REQUEST", "after, limit: must be integers")
        items, truncated = sim.events_after(after, max(limit, 1))
        nxt = items[-1]["index"] if items else after
        return jsonify({"items": items, "next": nxt, "truncated": truncated})

    # ------------------------------------------------------------- control plane

    @app.get("/control/health")
    def health() -> Any:
        with sim.lock:
            body = {
                "status": "ok",
                "model_time": sim.model_now(),
                "time_scale": sim.time_scale,
                "seed": sim.seed,
                "flights": sim.model.flight_count,
                "pending_deliveries": sim.model.pending_deliveries,
                "events_delivered": sim.next_index - 1,
                "webhooks": list(sim.webhooks),
                **sim.stats,
            }
        return jsonify(body)

    @app.get("/control/faults")
    def get_faults() -> Any:
        with sim.lock:
            return jsonify(sim.model.faults.to_json())

    @app.put("/control/faults")
    def put_faults() -> Any:
        body = request.get_json(silent=True)
        with sim.lock:
            try:
                faults = PlatformFaults.from_json(body, base=sim.model.faults)
            except FaultsError as exc:
                return _error(400, "INVALID_FAULTS", str(exc), field=exc.field)
            sim.model.faults = faults
            return jsonify(faults.to_json())

    @app.post("/control/reset")
    def reset() -> Any:
        body = request.get_json(silent=True) or {}
        seed_arg = body.get("seed") if isinstance(body, dict) else None
        if isinstance(seed_arg, float) and seed_arg.is_integer():  # JSON has one number type: 9.0 is 9
            seed_arg = int(seed_arg)
        if seed_arg is not None and (isinstance(seed_arg, bool) or not isinstance(seed_arg, int)):
            return _error(400, "INVALID_REQUEST", "seed: must be an integer")
        durations: dict[str, float] = {}
        for name in RESET_DURATIONS:
            value = body.get(name) if isinstance(body, dict) else None
            if value is None:
                continue
            if not _is_number(value) or not 0 < value <= MAX_RESET_DURATION_S:
                return _error(400, "INVALID_REQUEST", f"{name}: must be a number in (0, {MAX_RESET_DURATION_S:g}]")
            durations[name] = float(value)
        sim.reset(seed_arg, **durations)
        return jsonify({"status": "reset", "seed": sim.seed})

    @app.get("/control/webhook-deliveries")
    def webhook_deliveries() -> Any:
        after_arg = request.args.get("after", "0")
        if not after_arg.isascii() or not after_arg.isdigit() or len(after_arg) > 18:
            return _error(400, "INVALID_REQUEST", "after: must be an integer >= 0")
        after = int(after_arg)
        with sim.lock:
            newest = sim.deliveries_logged
            oldest = newest - len(sim.deliveries) + 1  # the number of the oldest delivery the log still holds
            items = list(itertools.islice(sim.deliveries, max(0, after - oldest + 1), None))
        # Numbered 1, 2, ...: ``next`` is the newest returned (pass it as ``after`` to read on), ``missed`` how many
        # after ``after`` the bounded log no longer holds.
        return jsonify({"columns": list(DELIVERY_COLUMNS), "items": items, "next": newest if items else after,
                        "missed": max(0, oldest - after - 1)})

    @app.get("/control/ledger")
    def ledger() -> Any:
        with sim.lock:
            return jsonify(sim.model.ledger_json())

    @app.post("/control/devices")
    def upsert_device() -> Any:
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("device_id"), str) or not body["device_id"]:
            return _error(400, "INVALID_REQUEST", "device_id: must be a non-empty string")
        online = body.get("online", True)
        battery = body.get("battery", 100.0)
        if not isinstance(online, bool):
            return _error(400, "INVALID_REQUEST", "online: must be true or false")
        if not _is_number(battery) or not 0 <= battery <= 100:
            return _error(400, "INVALID_REQUEST", "battery: must be a number in [0, 100]")
        with sim.lock:
            sim.model.upsert_device(body["device_id"], online, float(battery))
        return jsonify({"device_id": body["device_id"], "online": online, "battery": float(battery)})

    @app.delete("/control/devices/<device_id>")
    def remove_device(device_id: str) -> Any:
        with sim.lock:
            if not sim.model.remove_device(device_id):
                return _error(404, "DEVICE_NOT_FOUND", f"no device {device_id}")
        return jsonify({"device_id": device_id, "removed": True})

    @app.post("/control/webhook")
    def add_webhook() -> Any:
        body = request.get_json(silent=True)
        body = body if isinstance(body, dict) else {}
        url = body.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return _error(400, "INVALID_REQUEST", "url: must be an http(s) URL")
        headers = body.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in headers.items()):
            return _error(400, "INVALID_REQUEST", "headers: must be an object of strings")
        with sim.lock:
            if url not in sim.webhooks:
                sim.webhooks.append(url)
            sim.webhook_headers[url] = dict(headers)
            return jsonify({"webhooks": list(sim.webhooks)})

    @app.delete("/control/webhook")
    def clear_webhooks() -> Any:
        with sim.lock:
            sim.webhooks.clear()
            sim.webhook_headers.clear()
        return jsonify({"webhooks": []})

    # ------------------------------------------------------------- this API's OpenAPI document

    @app.get("/openapi.json")
    def openapi_document() -> Any:
        return Response(openapi.document_json(), mimetype="application/json")

    if start_threads:
        sim.start()
    return app


def simulator_of(app: Flask) -> Simulator:
    return app.extensions[EXTENSION_KEY]
