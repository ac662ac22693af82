"""The clock-driven platform model: faults act (or not) as specified, events, determinism."""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.copilot.platform import (
    EVENT_ALERT,
    EVENT_CANCELLED,
    EVENT_COMPLETED,
    EVENT_TELEMETRY,
    FLIGHT_CANCELLED,
    FLIGHT_COMPLETED,
    FLIGHT_EXECUTING,
    CreateFlight,
    DeviceState,
    PlatformEvent,
    PlatformNotFound,
    PlatformRejected,
    PlatformThrottled,
    PlatformTimeout,
    PlatformUnavailable,
    PlatformUnsupported,
)
from simulator.model import (
    DELIVERY_DROP,
    DELIVERY_NORMAL,
    DELIVERY_TIMEOUT,
    FaultsError,
    PlatformConfig,
    PlatformFaults,
    PlatformModel,
)

DEVICE = "DRONE-0001"


def make_model(seed: int = 7, devices: int = 5, **config: float) -> PlatformModel:
    model = PlatformModel(random.Random(seed), PlatformConfig(**config))
    model.add_fleet(devices)
    return model


def req(request_id: str | None, reference: str = "task-1", device: str = DEVICE) -> CreateFlight:
    return CreateFlight(request_id, device, reference, [[30.0, 120.0], [30.01, 120.02]], 80.0)


def drain(model: PlatformModel, until: float) -> list[PlatformEvent]:
    """Every event up to ``until``, waking exactly when the model says something is due."""
    events: list[PlatformEvent] = []
    while (due := model.next_due()) is not None and due <= until:
        events.extend(model.pop_due(due))
    events.extend(model.pop_due(until))
    return events


def per_reference(model: PlatformModel) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for entry in model.ledger_json():
        counts[entry["reference"]] += 1
    return dict(counts)


# ----------------------------------------------------------------- create, idempotency, faults


def test_same_request_id_is_one_flight() -> None:
    model = make_model()
    first = model.create_flight(1.0, req("r1"))
    again = model.create_flight(2.0, req("r1"))
    assert first.unwrap() == again.unwrap()
    assert not first.replayed and again.replayed
    assert per_reference(model) == {"task-1": 1}
    assert first.unwrap().status == FLIGHT_EXECUTING


def test_without_idempotency_every_create_is_a_new_flight() -> None:
    model = make_model()
    model.faults.idempotency_key = False
    a = model.create_flight(1.0, req("r1")).unwrap()
    b = model.create_flight(2.0, req("r1")).unwrap()
    assert a.external_id != b.external_id
    assert per_reference(model) == {"task-1": 2}
    assert not model.capabilities().idempotency_key


def test_accept_then_timeout_acts_and_loses_the_answer() -> None:
    model = make_model()
    model.faults.accept_then_timeout = 1
    reply = model.create_flight(1.0, req("r1"))
    assert reply.delivery == DELIVERY_TIMEOUT and reply.value is not None
    with pytest.raises(PlatformTimeout):
        reply.unwrap()
    assert per_reference(model) == {"task-1": 1}
    assert model.faults.accept_then_timeout == 0
    found = model.find_by_request_id(2.0, "r1").unwrap()
    assert found is not None and found.external_id == reply.value.external_id
    # the retry with the same key returns the same flight, answered normally this time
    retry = model.create_flight(3.0, req("r1"))
    assert retry.delivery == DELIVERY_NORMAL and retry.unwrap().external_id == found.external_id


def test_dropped_response_acts() -> None:
    model = make_model()
    model.faults.drop_response = 1
    reply = model.create_flight(1.0, req("r1"))
    assert reply.delivery == DELIVERY_DROP
    assert len(model.ledger_json()) == 1


def test_injected_5xx_and_429_do_not_act() -> None:
    model = make_model()
    model.faults.error_5xx_rate = 1.0
    with pytest.raises(PlatformUnavailable):
        model.create_flight(1.0, req("r1")).unwrap()
    model.faults = PlatformFaults(error_429_rate=1.0)
    with pytest.raises(PlatformThrottled):
        model.create_flight(1.0, req("r2")).unwrap()
    assert model.ledger_json() == []


def test_rejections_do_not_act() -> None:
    model = make_model()
    model.faults.reject_next = 1
    with pytest.raises(PlatformRejected) as exc:
        model.create_flight(1.0, req("r1")).unwrap()
    assert exc.value.code == "DEVICE_REJECTED"
    model.faults.reject_devices = {DEVICE}
    with pytest.raises(PlatformRejected):
        model.create_flight(2.0, req("r2")).unwrap()
    model.set_device("DRONE-0002", online=False)
    with pytest.raises(PlatformRejected) as offline:
        model.create_flight(3.0, req("r3", device="DRONE-0002")).unwrap()
    assert offline.value.code == "DEVICE_OFFLINE"
    assert model.ledger_json() == []
    assert model.faults.reject_next == 0
    # the reject_next count was consumed: the next create on a healthy device succeeds
    model.create_flight(4.0, req("r4", device="DRONE-0003")).unwrap()
    assert len(model.ledger_json()) == 1


def test_unknown_flight_and_device() -> None:
    model = make_model()
    with pytest.raises(PlatformNotFound):
        model.get_flight(0.0, "FLT-999999").unwrap()
    with pytest.raises(PlatformNotFound):
        model.get_device(0.0, "nope").unwrap()
    assert model.get_device(0.0, DEVICE).unwrap().online


def test_no_query_mode_is_unsupported() -> None:
    model = make_model()
    model.faults.query_supported = False
    with pytest.raises(PlatformUnsupported):
        model.find_by_request_id(0.0, "r1").unwrap()
    assert not model.capabilities().query_by_request_id


# ----------------------------------------------------------------- cancel


def test_cancel_is_accepted_then_cancelled_after_the_return_home() -> None:
    model = make_model(flight_median_s=10_000.0, flight_sigma=0.01, cancel_delay_s=10.0)
    flight = model.create_flight(0.0, req("r1")).unwrap()
    result = model.cancel_flight(100.0, flight.external_id).unwrap()
    assert result.accepted and result.status == FLIGHT_EXECUTING
    again = model.cancel_flight(105.0, flight.external_id).unwrap()  # idempotent: no restart
    assert again.accepted
    assert model.get_flight(109.9, flight.external_id).unwrap().status == FLIGHT_EXECUTING
    assert model.get_flight(110.0, flight.external_id).unwrap().status == FLIGHT_CANCELLED
    events = drain(model, 200.0)
    assert events[-1].kind == EVENT_CANCELLED and events[-1].at == 110.0
    assert [e for e in events if e.at > 110.0] == []  # telemetry stopped
    entry = model.ledger_json()[0]
    assert entry["cancel_requested_at"] == 100.0 and entry["cancelled_at"] == 110.0
    assert entry["status"] == FLIGHT_CANCELLED


def test_cancel_after_completion_is_refused() -> None:
    model = make_model(flight_median_s=60.0, flight_sigma=0.01)
    flight = model.create_flight(0.0, req("r1")).unwrap()
    result = model.cancel_flight(1_000.0, flight.external_id).unwrap()
    assert not result.accepted and result.status == FLIGHT_COMPLETED


def test_cancel_timeout_takes_effect() -> None:
    model = make_model(flight_median_s=10_000.0)
    flight = model.create_flight(0.0, req("r1")).unwrap()
    model.faults.cancel_timeout = 1
    reply = model.cancel_flight(10.0, flight.external_id)
    assert reply.delivery == DELIVERY_TIMEOUT
    assert model.get_flight(100.0, flight.external_id).unwrap().status == FLIGHT_CANCELLED


# ----------------------------------------------------------------- events


def test_telemetry_seq_increases_per_flight_and_terminal_is_last() -> None:
    model = make_model(alert_every_flight_s=60.0, alert_duplicate_prob=0.0)
    for i in range(5):
        model.create_flight(float(i), req(f"r{i}", reference=f"task-{i}", device=f"DRONE-000{i + 1}"))
    events = drain(model, 20_000.0)
    by_flight: dict[str, list[PlatformEvent]] = defaultdict(list)
    for event in events:
        by_flight[event.external_id].append(event)
    assert len(by_flight) == 5
    for flight_events in by_flight.values():
        telemetry = [e for e in flight_events if e.kind == EVENT_TELEMETRY]
        seqs = [e.seq for e in telemetry]
        assert all(a < b for a, b in itertools.pairwise(seqs))
        assert set(telemetry[0].payload) == {"lat", "lon", "alt_m", "battery"}
        assert [e.seq for e in flight_events] == list(range(1, len(flight_events) + 1))  # one counter
        assert flight_events[-1].kind == EVENT_COMPLETED
        assert any(e.kind == EVENT_ALERT for e in flight_events)
    assert [e.at for e in events] == sorted(e.at for e in events)  # delivered in time order


def test_duplicate_alerts_share_their_seq() -> None:
    model = make_model(alert_every_flight_s=20.0, alert_duplicate_prob=0.5, flight_median_s=2_000.0)
    model.create_flight(0.0, req("r1"))
    alerts = [e for e in drain(model, 50_000.0) if e.kind == EVENT_ALERT]
    seqs = [e.seq for e in alerts]
    duplicated = {s for s in seqs if seqs.count(s) == 2}
    assert duplicated and len(duplicated) < len(set(seqs))
    assert max(seqs.count(s) for s in seqs) == 2
    for seq in duplicated:
        a, b = (e for e in alerts if e.seq == seq)
        assert a == b  # the same event, delivered twice


def _run(seed: int, faults: PlatformFaults | None = None, flights: int = 20) -> PlatformModel:
    model = make_model(seed=seed, devices=flights)
    if faults is not None:
        model.faults = faults
    for i in range(flights):
        model.create_flight(i * 3.0, req(f"r{i}", reference=f"task-{i}", device=f"DRONE-{i + 1:04d}"))
    return model


def test_reorder_shuffles_but_loses_nothing() -> None:
    plain = drain(_run(3), 50_000.0)
    shuffled = drain(_run(3, PlatformFaults(reorder_window_s=30.0)), 50_000.0)
    assert shuffled != plain
    assert sorted(shuffled, key=lambda e: (e.external_id, e.seq)) == sorted(
        plain, key=lambda e: (e.external_id, e.seq)
    )
    ats = [e.at for e in shuffled]
    assert ats != sorted(ats)  # really out of order


def test_duplicate_event_fault_only_adds_copies() -> None:
    plain = drain(_run(4), 50_000.0)
    dup = drain(_run(4, PlatformFaults(duplicate_event_prob=0.2)), 50_000.0)
    assert len(dup) > len(plain)
    assert {(e.external_id, e.seq) for e in dup} == {(e.external_id, e.seq) for e in plain}


def test_late_completion_delays_only_the_event() -> None:
    model = make_model(flight_median_s=100.0, flight_sigma=0.01, alert_every_flight_s=0.0)
    model.faults.late_completion_s = 50.0
    flight = model.create_flight(0.0, req("r1")).unwrap()
    status_seen_at = None
    popped: list[tuple[float, PlatformEvent]] = []
    t = 0.0
    while t < 300.0:  # step the clock to see when the status changes and when the event arrives
        t += 1.0
        popped.extend((t, e) for e in model.pop_due(t))
        if (
            status_seen_at is None
            and model.get_flight(t, flight.external_id).unwrap().status == FLIGHT_COMPLETED
        ):
            status_seen_at = t
    ended_at = model.ledger_json()[0]["ended_at"]
    completed = [(at, e) for at, e in popped if e.kind == EVENT_COMPLETED]
    assert len(completed) == 1
    popped_at, event = completed[0]
    assert event.at == ended_at
    assert status_seen_at is not None and status_seen_at - ended_at < 1.0  # status on time
    assert ended_at + 50.0 <= popped_at < ended_at + 51.0  # event 50 s late
    assert all(at <= ended_at for at, e in popped if e.kind == EVENT_TELEMETRY)


def test_same_seed_same_history() -> None:
    faults = PlatformFaults(reorder_window_s=10.0, duplicate_event_prob=0.1, error_5xx_rate=0.2)

    def history(seed: int) -> str:
        model = _run(seed, PlatformFaults.from_json(faults.to_json()))
        events = [e.as_json() for e in drain(model, 50_000.0)]
        return json.dumps({"events": events, "ledger": model.ledger_json()})

    assert history(11) == history(11)
    assert history(11) != history(12)


def test_next_due_is_never_late() -> None:
    model = _run(5, PlatformFaults(reorder_window_s=20.0, late_completion_s=30.0), flights=5)
    previous = 0.0
    while (due := model.next_due()) is not None:
        assert due >= previous
        for event in model.pop_due(due):
            assert event.at <= due
        previous = due


def test_an_hour_at_1x_keeps_up() -> None:
    """Smoke size check (no timing assertion): ~720 flights and ~85k events in one simulated hour."""
    model = make_model(seed=1, devices=200)
    arrivals = random.Random(2)
    t, next_create, n, count = 0.0, arrivals.expovariate(0.2), 0, 0
    while t < 3600.0:
        due = model.next_due()
        t = min(next_create, due if due is not None else next_create)
        if t >= next_create:
            n += 1
            model.create_flight(t, req(f"r{n}", reference=f"task-{n}", device=f"DRONE-{n % 200 + 1:04d}"))
            next_create += arrivals.expovariate(0.2)
        count += len(model.pop_due(t))
    assert 600 < n < 850 and 60_000 < count < 120_000


# ----------------------------------------------------------------- faults JSON


def test_faults_json_round_trip() -> None:
    faults = PlatformFaults(reject_devices={"b", "a"}, error_5xx_rate=0.5, accept_then_timeout=2)
    data = faults.to_json()
    assert data["reject_devices"] == ["a", "b"]
    assert PlatformFaults.from_json(json.loads(json.dumps(data))) == faults
    partial = PlatformFaults.from_json({"drop_response": 3}, base=faults)
    assert partial.drop_response == 3 and partial.error_5xx_rate == 0.5


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"error_5xx_rate": 1.5}, "error_5xx_rate"),
        ({"error_429_rate": "x"}, "error_429_rate"),
        ({"accept_then_timeout": -1}, "accept_then_timeout"),
        ({"drop_response": 1.5}, "drop_response"),
        ({"reject_next": True}, "reject_next"),
        ({"idempotency_key": "no"}, "idempotency_key"),
        ({"reject_devices": "DRONE-0001"}, "reject_devices"),
        ({"reorder_window_s": -2}, "reorder_window_s"),
        ({"no_such_fault": 1}, "no_such_fault"),
    ],
)
def test_faults_json_validation_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field) as exc:
        PlatformFaults.from_json(data)
    assert isinstance(exc.value, FaultsError) and exc.value.field == field


# ----------------------------------------------------------------- property


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.floats(0, 5)), max_size=40))
def test_one_flight_per_request_id(calls: list[tuple[int, float]]) -> None:
    model = make_model(devices=3)
    now = 0.0
    seen: dict[str, str] = {}
    for rid_no, dt in calls:
        now += dt
        rid = f"r{rid_no}"
        info = model.create_flight(now, req(rid, reference=f"task-{rid_no}")).unwrap()
        assert seen.setdefault(rid, info.external_id) == info.external_id
    ledger = model.ledger_json()
    assert len(ledger) == len({rid for rid, _ in calls})
    assert sorted(e["request_id"] for e in ledger) == sorted(seen)


def test_a_forgotten_device_is_unknown_and_its_flight_finishes() -> None:
    model = PlatformModel(random.Random(3))
    model.add_fleet(2)
    flying = model.create_flight(0.0, CreateFlight("r-1", "DRONE-0001", "t-1", [[30.0, 120.0], [30.01, 120.02]], 80.0))
    assert flying.ok and flying.value is not None
    assert model.remove_device("DRONE-0001") and not model.remove_device("DRONE-0001")
    read = model.get_device(1.0, "DRONE-0001")
    assert isinstance(read.error, PlatformNotFound) and read.error.code == "DEVICE_NOT_FOUND"
    refused = model.create_flight(1.0, CreateFlight("r-2", "DRONE-0001", "t-2", [[30.0, 120.0]], 80.0))
    assert isinstance(refused.error, PlatformRejected) and refused.error.code == "DEVICE_UNKNOWN"
    ended = model.get_flight(100_000.0, flying.value.external_id)
    assert ended.value is not None and ended.value.status == FLIGHT_COMPLETED
    model.upsert_device("DRONE-0001", online=False)  # POST /control/devices brings it back
    assert model.get_device(100_001.0, "DRONE-0001").value == DeviceState("DRONE-0001", False, 100.0)
