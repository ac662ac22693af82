"""The capacity model (systems/copilot/capacity_model.py): calibration from load.json, rules that hold for every input,
and reproduction of a fixture's throughput. Everything runs in virtual time; no wall-clock assertions."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loadtests.quantiles import percentile
from loadtests.record import LoadRecord
from systems.copilot.capacity_model import (
    UNATTRIBUTED,
    Dist,
    _cpu_per_1x,
    at_offered_rates,
    calibrate,
    endpoint_kind,
    extrapolate,
    fit_cpu,
    measured_work,
    ps_slowdown,
    slo_held,
    with_changes,
)

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = sorted(p.parent.name for p in FIXTURES.glob("*/load.json"))
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((FIXTURES / name / "load.json").read_text())


@pytest.fixture(scope="module")
def model_1x():
    return calibrate(_load("1x"))


def _confirm(pred: dict) -> dict:  # type: ignore[type-arg]
    return next(e for e in pred["endpoints"].values() if e["kind"] == "confirm")


def _total_rps(endpoints: dict) -> float:  # type: ignore[type-arg]
    return sum(float(e.get("rps") or 0) for n, e in endpoints.items() if endpoint_kind(n) not in ("aggregate",
                                                                                                    "stream"))


@pytest.mark.parametrize("run", [r for r in RUNS if not _load(r)["fault_windows"]])
def test_calibrated_model_reproduces_the_fixture_throughput_within_20_percent(run):
    load = _load(run)
    model = calibrate(load)
    pred = model.predict(load["multiple"], duration_s=min(load["duration_s"], 600))
    name = next(n for n in load["endpoints"] if endpoint_kind(n) == "confirm")
    measured = load["endpoints"][name]["rps"]
    assert _confirm(pred)["rps"] == pytest.approx(measured, rel=0.20)
    measured_total = _total_rps({n: e for n, e in load["endpoints"].items()})
    assert _total_rps(pred["endpoints"]) == pytest.approx(measured_total, rel=0.20)


def test_every_parameter_says_where_it_came_from(model_1x):
    params = {s.parameter for s in model_1x.sources}
    for p in ("db_write", "publisher_per_message", "dispatcher_cpu", "platform_call", "host_cores",
              "broker_hop_ms", "api_workers", "dispatchers"):
        assert p in params, p
    measured = {s.parameter for s in model_1x.sources if not s.assumed}
    assert {"db_write", "platform_call", "host_cores", "api_workers", "dispatchers"} <= measured
    # The fixture has no read-transaction figure: the model says it assumed one.
    assert "db_read" in {s.parameter for s in model_1x.assumptions()}


def test_calibrates_from_the_load_runners_schema():
    """The names `sortie load` writes (docs/capacity.md): endpoints_steady, CPU demands with cpu_s,
    machine.cpus, rates, SLO targets as text."""
    load = {
        "profile": "1x", "multiple": 2.0, "duration_s": 120, "stack": "native",
        "machine": {"cpus": 4},
        "rates": {"confirms_per_s": 0.4, "double_click_ratio": 0.2, "sse_streams": 100},
        "workers": {"api_workers": 3, "api_threads": 20, "dispatchers": 4, "publisher": 1},
        "endpoints": {"POST /v1/drafts/{id}/confirm": {"requests": 1, "rps": 9.0, "p50_ms": 30, "p95_ms": 60}},
        "endpoints_steady": {"POST /v1/drafts/{id}/confirm": {"requests": 40, "rps": 0.44, "p50_ms": 30,
                                                              "p95_ms": 60},
                             "GET /v1/tasks/{id}": {"requests": 900, "rps": 10.0, "p50_ms": 6, "p95_ms": 20},
                             "GET /v1/stream": {"requests": 100, "rps": 0.5}},
        "service_times_ms": {
            "api_cpu_per_request": {"mean": 4.0, "n": 900, "cpu_s": 3.6, "source": "gunicorn CPU / requests"},
            "dispatcher_cpu_per_event": {"mean": 9.0, "n": 40, "cpu_s": 0.36, "source": "dispatchers' CPU"},
            "publisher_cpu_per_message": {"mean": 2.0, "n": 40, "cpu_s": 0.08, "source": "publisher CPU"},
            "db_tx": {"mean": 2.5, "n": 1000, "source": "pgbench latency average"},
            "platform_call": {"p50": 20.0, "p95": 50.0, "n": 40, "source": "dispatch attempt"},
        },
        "lifecycle_ms": {"dispatching": {"n": 40, "p50": 500}, "executing": {"n": 40, "p50": 560},
                         "completed": {"n": 40, "p50": 10560}},
        "timeseries": {"t": [0, 5, 10], "cpu_pct": {"api": [20, 22, 24], "postgres": [10, 10, 10]}},
        "slo": [{"name": "confirm_p99_ms", "target": "< 250 ms"}, {"name": "confirm_to_executing_p99_s",
                                                                  "target": "< 2 s"}],
        "fault_windows": [],
    }
    m = calibrate(load)
    assert (m.api_workers, m.api_threads, m.dispatchers, m.partitions, m.host_cores) == (3, 20, 4, 1, 4.0)
    assert m.endpoints["POST /v1/drafts/{id}/confirm"].rate_1x == pytest.approx(0.22)  # steady window, per 1x
    assert m.dispatcher_cpu.mean_ms == pytest.approx(9.0, rel=0.01)  # a CPU demand is used as is
    assert m.db_write.mean_ms == pytest.approx(2.5, rel=0.01)
    assert m.double_click_ratio == 0.2 and m.sse_streams_1x == 50
    assert m.slo == {"confirm_p99_ms": 250.0, "confirm_to_executing_p99_s": 2.0}
    assert m.flight.median_ms == pytest.approx(10000.0)
    assert m.cpu_cores_per_1x == {"api": pytest.approx(0.11), "postgres": pytest.approx(0.05)}
    # The rate-weighted mean API CPU per request equals the measured demand.
    eps = [e for e in m.endpoints.values() if e.kind in ("confirm", "read")]
    mean = sum(e.rate_1x * e.handler.mean_ms for e in eps) / sum(e.rate_1x for e in eps)
    assert mean == pytest.approx(4.0, rel=0.01)
    pred = m.predict(2.0, duration_s=60)
    assert pred["slo"][0]["target"] == 250.0


def test_missing_figures_fall_back_to_flagged_defaults():
    m = calibrate({"profile": "bare", "multiple": 1}, refine=False)
    assumed = {s.parameter for s in m.assumptions()}
    assert {"db_write_ms", "platform_call_ms", "dispatcher_cpu_ms", "publisher_per_message_ms"} <= assumed
    assert any(e.kind == "confirm" for e in m.endpoints.values())
    assert m.predict(1.0, duration_s=40)["endpoints"]


def test_prediction_is_deterministic_for_a_seed(model_1x):
    a = model_1x.predict(3.0, seed=7, duration_s=60)
    b = model_1x.predict(3.0, seed=7, duration_s=60)
    assert a == b


def test_prediction_has_the_load_json_shape_and_counts_dimensions_separately(model_1x):
    p = model_1x.predict(2.0, duration_s=60)
    assert set(p["lifecycle_ms"]) == {"dispatching", "executing", "completed"}
    for e in p["endpoints"].values():
        assert {"requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms"} <= set(e)
    assert {"api_workers", "db", "publisher", "dispatchers", "host_cpu"} <= set(p["utilisation"])
    c = p["counts_per_s"]
    # Seed 003 §15: a stream is a connection that neither writes nor changes state; writes outnumber state
    # changes (drafts and approvals write without changing a task's state).
    assert c["connections"] >= c["sse_streams"] > 0
    assert c["db_write_tx"] > c["state_changes"] > 0
    assert p["bottleneck"] in p["utilisation"]


@SLOW
@given(multiple=st.floats(min_value=0.2, max_value=40.0), seed=st.integers(min_value=0, max_value=10_000))
def test_throughput_never_exceeds_offered_load(model_1x, multiple, seed):
    p = model_1x.predict(multiple, seed=seed, duration_s=40)
    for e in p["endpoints"].values():
        assert e["rps"] <= e["offered_rps"] + 1e-9


@SLOW
@given(multiple=st.floats(min_value=0.3, max_value=6.0), factor=st.floats(min_value=1.5, max_value=4.0),
       seed=st.integers(min_value=0, max_value=10_000))
def test_utilisation_rises_with_the_multiple(model_1x, multiple, factor, seed):
    lo = model_1x.predict(multiple, seed=seed, duration_s=40)
    hi = model_1x.predict(multiple * factor, seed=seed, duration_s=40)
    # The bottleneck's utilisation always rises; every resource's does until one saturates (past that,
    # the resources behind a saturated one are starved of work, as in a real pipeline).
    assert hi["utilisation"][hi["bottleneck"]] >= lo["utilisation"][hi["bottleneck"]] - 1e-9
    if hi["first_saturated"] is None:
        # A 40 s run of a nearly idle resource holds a handful of jobs: its measured utilisation is sampling
        # noise (0.0026 vs 0.0036 was a counterexample). The rule is checked where a resource is busy enough
        # (>= 5%) for the samples to mean something, with 10% slack for the randomness of two arrival streams.
        for resource in ("api_workers", "db", "dispatchers", "host_cpu"):
            if lo["utilisation"][resource] >= 0.05:
                assert hi["utilisation"][resource] >= 0.9 * lo["utilisation"][resource], resource


@SLOW
@given(dispatchers=st.integers(min_value=1, max_value=4), multiple=st.floats(min_value=0.5, max_value=8.0),
       seed=st.integers(min_value=0, max_value=10_000))
def test_more_dispatchers_never_make_lifecycle_latency_worse(model_1x, dispatchers, multiple, seed):
    # Without the host CPU stretch, so only the dispatcher count differs (in expectation: mean latency).
    m = with_changes(model_1x, cpu_cores_per_1x={})

    def mean_executing(d: int) -> float:
        run = m.predict(multiple, dispatchers=d, seed=seed, duration_s=40)
        life = run["lifecycle_ms"]["executing"]
        assume(life["n"] >= 20)  # a p95 of five tasks is their slowest one: noise, not a rule
        return (life["p50"] or 0.0) + (life["p95"] or 0.0)

    # A dispatcher's loop is not work-conserving (an empty long poll is followed by an idle sleep, as the reference's
    # consumer_loop does), so one more dispatcher can put a task behind one idle sleep that fewer would not have
    # been in (seen: +125 ms at p95 of 42 tasks, with the old model too); never behind more than that.
    assert mean_executing(dispatchers + 1) <= mean_executing(dispatchers) * 1.05 + 1000.0 * m.publisher_poll_s


def test_a_starved_deployment_saturates_and_names_its_bottleneck(model_1x):
    m = with_changes(model_1x, cpu_cores_per_1x={}, dispatchers=1)
    slow = with_changes(m, dispatcher_cpu=Dist(2000.0, 0.2))  # 2 s per dispatch: at most 0.5 tasks/s
    p = slow.predict(5.0, duration_s=120)
    assert p["first_saturated"] == "dispatchers"
    assert not slo_held(p)
    assert p["lifecycle_ms"]["executing"]["unfinished"] > 0 or p["lifecycle_ms"]["executing"]["p99"] > 3000
    # More dispatchers relieve it.
    assert slow.predict(5.0, dispatchers=8, duration_s=120)["utilisation"]["dispatchers"] < 0.85


def test_extrapolation_names_the_limit_of_each_deployment(model_1x):
    options = [{"name": "as measured"},
               {"name": "more of everything", "api_workers": 8, "dispatchers": 8, "db_capacity": 8,
                "partitions": 4, "cores": 16.0, "exclude_cpu": ("locust",)}]
    out = extrapolate(model_1x, (10, 50), options, duration_s=40, find_saturation=True)
    assert [e["option"] for e in out] == ["as measured", "more of everything"]
    for e in out:
        assert [r["multiple"] for r in e["predictions"]] == [10, 50]
        for r in e["predictions"]:
            assert r["bottleneck"] in r["utilisation"]
            assert r["slo_held"] or r["limited_by"]
        assert e["saturation"]["multiple"] > 0
    # A bigger deployment saturates later.
    assert out[1]["saturation"]["multiple"] >= out[0]["saturation"]["multiple"]


def test_dist_fit_recovers_the_shape():
    d = Dist.fit(median=10.0, p95=10.0 * 2.718281828 ** (0.5 * 1.6449))
    assert d.sigma == pytest.approx(0.5, abs=1e-3)
    assert Dist.fit(mean=d.mean_ms, p95=10.0 * 2.718281828 ** (0.5 * 1.6449)).median_ms == pytest.approx(10.0,
                                                                                                         rel=0.01)
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([], 50) is None


def test_cpu_fit_separates_load_independent_cpu_from_per_multiple_cpu(model_1x):
    """Over runs at several multiples, CPU = fixed + per_1x x multiple per process: a JVM that idles at 0.2 core
    stays 0.2 core at 10x instead of 2 cores, so the host saturates later than a linear model says."""
    def run(k: float, api: float, broker: float) -> dict:  # type: ignore[type-arg]
        return {"multiple": k, "fault_windows": [], "timeseries": {"t": [0, 5, 10], "cpu_pct": {
            "api": [api] * 3, "rocketmq": [broker] * 3}}}

    loads = [run(1, 15, 20), run(5, 35, 20), run(8, 50, 20)]
    m = fit_cpu(model_1x, loads)
    assert m.cpu_cores_fixed["rocketmq"] == pytest.approx(0.2)
    assert m.cpu_cores_per_1x["rocketmq"] == pytest.approx(0.0, abs=1e-9)
    assert m.cpu_cores_fixed["api"] == pytest.approx(0.10) and m.cpu_cores_per_1x["api"] == pytest.approx(0.05)
    cores = m.host_cores or 2.0
    # plus the stream tier's fan-out, charged per frame (not in the fitted processes)
    sse = m.sse_fanout(10)["cores"]
    assert 0 < sse < 0.01
    assert m.cpu_utilisation(10, cores) == pytest.approx((0.3 + 10 * 0.05 + sse) / cores)
    assert any(s.parameter == "cpu_cores_fixed" and not s.assumed for s in m.sources)
    assert fit_cpu(model_1x, loads[:1]) is model_1x  # one multiple cannot separate the two


def test_cpu_fit_charges_the_request_bound_processes_per_request_and_the_rest_per_multiple(model_1x):
    """The API's CPU follows its requests, which grow slower than the multiple (webhook POSTs batch more events at
    higher rates): fitted against the runs' requests per second, and charged for the requests a prediction does."""
    from systems.copilot.load_analysis import WEBHOOK_ENDPOINT

    def run(k: float, reads: float, posts: float) -> dict:  # type: ignore[type-arg]
        api = 100 * 0.004 * (reads + posts) + (0 if k == 1 else 1.0)  # 4 ms per request, +0.01 core of noise at 2x
        sim = 100 * 0.002 * posts  # 2 ms per POST
        return {"multiple": k, "fault_windows": [], "timeseries": {"t": [0, 5, 10], "cpu_pct": {
                    "api": [api] * 3, "simulator": [sim] * 3, "rocketmq": [20] * 3}},
                "endpoints": {"GET /tasks/[id]": {"rps": reads}, WEBHOOK_ENDPOINT: {"rps": posts},
                              "GET /stream": {"rps": 1.0 * k}, "Aggregated": {"rps": reads + posts + k}}}

    one, two = run(1, 6, 25), run(2, 12, 45)
    assert measured_work(one) == {"requests": 31, "webhook_posts": 25}  # not the streams, not the aggregate row
    m = fit_cpu(model_1x, [one, two])
    # a line through 0, the ratio of the sums: over two close points a free intercept would soak up the noise
    # (here -0.012 core fixed and 4.4 ms per request)
    assert m.cpu_per_work["api"] == pytest.approx((0.124 + 0.238) / 88)
    assert m.cpu_per_work["simulator"] == pytest.approx(0.002)
    assert "rocketmq" not in m.cpu_per_work and m.cpu_cores_fixed["rocketmq"] == pytest.approx(0.2)
    cores = m.host_cores or 2.0
    sse = m.sse_fanout(5)["cores"]
    # at 5x: 30 reads/s and 75 POSTs/s (not 5 x 25 = 125)
    got = m.cpu_utilisation(5, cores, work={"requests": 105, "webhook_posts": 75})
    assert got == pytest.approx((0.362 / 88 * 105 + 0.002 * 75 + 0.2 + sse) / cores)
    # before a run has done any work: every endpoint's calibrated rate times the multiple
    rates = m.work_rates(5)
    assert rates["requests"] == pytest.approx(5 * sum(e.rate_1x for e in m.endpoints.values()
                                                      if endpoint_kind(e.name) not in ("stream", "aggregate")))
    assert fit_cpu(model_1x, [one, run(2, 12, 45) | {"endpoints": {}}]).cpu_per_work == {}  # one work rate: no fit


def test_a_predictions_host_cpu_follows_the_requests_its_run_does() -> None:
    """The run re-reads its own work every few virtual seconds: where the simulator's sender batches more events per
    POST, the API's CPU (charged per request) grows slower than the multiple, and the host's utilisation with it."""
    from systems.copilot.load_analysis import WEBHOOK_ENDPOINT

    fixture = _load("1x")
    load = {**fixture, "endpoints": {n: e for n, e in fixture["endpoints"].items() if endpoint_kind(n) != "platform"}}
    row = {"requests": 15000, "failures": 0, "rps": 25.0, "p50_ms": 7.0, "p95_ms": 13.0, "events_per_request": 1.02,
           "server_cpu_p50_ms": 2.3, "server_cpu_p95_ms": 3.4, "server_cpu_n": 15000}
    model = calibrate({**load, "endpoints": {**load["endpoints"], WEBHOOK_ENDPOINT: row}}, refine=False)
    assert {"api", "simulator"} <= model.cpu_per_work.keys()
    pred = model.predict(8, duration_s=200)
    eps = pred["endpoints"]
    work = {"requests": _total_rps(eps), "webhook_posts": float(eps[WEBHOOK_ENDPOINT]["rps"])}
    assert eps[WEBHOOK_ENDPOINT]["events_per_request"] > 1.1  # the POSTs batch: fewer requests than 8x
    assert work["requests"] < 0.97 * _total_rps(model.predict(1, duration_s=200)["endpoints"]) * 8
    by_work = model.cpu_utilisation(8, work=work)
    assert pred["utilisation"]["host_cpu"] == pytest.approx(by_work, rel=0.05)
    assert pred["utilisation"]["host_cpu"] < model.cpu_utilisation(8)  # below the linear upper bound


def test_the_hosts_utilisation_counts_the_machines_cpu_that_no_sampled_process_accounts_for(model_1x):
    """The kernel's loopback networking and short-lived processes use cores too (0.01 / 0.11 / 0.20 cores at
    1x / 2x / 5x, measured): the host's utilisation is the machine's, not the sum of the sampled processes."""
    def run(k: float, machine: list, api: list) -> dict:  # type: ignore[type-arg]
        return {"multiple": k, "fault_windows": [], "machine": {"cpus": 2},
                "timeseries": {"t": [0, 5, 10], "machine_cpu_pct": machine,
                               "cpu_pct": {"api": api, "rocketmq": [20, 20, 20]}}}

    # at 1x: 0.6 cores on the machine, 0.4 in processes; the sample without an api figure is not a difference
    one = run(1, [30, 30, 90], [20, 20, None])
    assert _cpu_per_1x(one, 1)[UNATTRIBUTED] == pytest.approx(0.2)
    # never negative (the two samplers do not read at the same instant)
    assert _cpu_per_1x(run(1, [10, 10, 10], [20, 20, 20]), 1)[UNATTRIBUTED] == 0.0
    assert UNATTRIBUTED not in _cpu_per_1x({**one, "machine": {}}, 1)  # no core count: nothing to subtract from
    m = fit_cpu(model_1x, [one, run(5, [70, 70, 70], [60, 60, 60])])
    # unattributed: 0.2 cores at 1x, 1.4 - 0.8 = 0.6 at 5x -> 0.1 fixed + 0.1 per 1x
    assert m.cpu_cores_fixed[UNATTRIBUTED] == pytest.approx(0.1) and m.cpu_cores_per_1x[UNATTRIBUTED] == (
        pytest.approx(0.1))
    sse = m.sse_fanout(5)["cores"]
    assert m.cpu_utilisation(5, 2.0) == pytest.approx((1.4 + sse) / 2.0)  # the machine's 70%, plus the fan-out


def test_sse_fanout_charges_each_change_per_open_stream_of_its_owner_and_each_heartbeat(model_1x):
    """Fan-out cost: changes heard + changes x streams per owner + heartbeats, each at sse_frame_ms; idle streams
    raise it (and the host's CPU), never the API's threads."""
    from reference.copilot.http.sse import HEARTBEAT_S

    base = model_1x.sse_fanout(5.0)
    idle = model_1x.sse_fanout(5.0, extra_streams=5000)
    streams = model_1x.sse_streams_1x * 5.0
    assert base["streams"] == pytest.approx(streams) and idle["streams"] == pytest.approx(streams + 5000)
    assert idle["heartbeats_per_s"] == pytest.approx((streams + 5000) / HEARTBEAT_S)
    assert idle["changes_per_s"] == base["changes_per_s"] > 0  # idle streams add no state changes
    per_owner = (streams + 5000) / (model_1x.operators_1x * 5.0)
    assert idle["deliveries_per_s"] == pytest.approx(idle["changes_per_s"] * per_owner)
    assert idle["cores"] == pytest.approx(idle["frames_per_s"] * model_1x.sse_frame_ms / 1000.0)
    assert idle["cores"] > base["cores"]
    assert model_1x.cpu_utilisation(5.0, 2.0, extra_streams=5000) > model_1x.cpu_utilisation(5.0, 2.0)
    pred, busy = model_1x.predict(5.0, duration_s=40), model_1x.predict(5.0, duration_s=40, extra_streams=5000)
    assert busy["counts_per_s"]["sse_streams"] == pytest.approx(streams + 5000, abs=0.01)
    assert busy["utilisation"]["stream_tier"] > pred["utilisation"]["stream_tier"]
    assert busy["config"]["api_threads"] == pred["config"]["api_threads"]  # streams hold no API thread


def test_sse_frame_cost_is_calibrated_from_the_stream_tiers_cpu_when_it_wrote_enough_frames():
    load = {"profile": "5x", "multiple": 5.0, "rates": {"operators": 250, "sse_streams": 250},
            "endpoints_steady": {"POST /v1/drafts/{id}/confirm": {"requests": 90, "rps": 1.0, "p50_ms": 30}},
            "sse": {"idle_streams": {"peak_open": 5000}, "resources": {"stream": {"cpu_pct_mean": 3.0}}}}
    m = calibrate(load, refine=False)
    assert m.operators_1x == 50 and m.calibrated_extra_streams == 5000
    frames = m.sse_fanout(5.0, 5000)["frames_per_s"]
    assert frames >= 100 and m.sse_frame_ms == pytest.approx(0.03 * 1000 / frames, rel=1e-3)
    assert "sse_frame_ms" not in {s.parameter for s in m.assumptions()}
    quiet = calibrate({**load, "sse": {"resources": {"stream": {"cpu_pct_mean": 3.0}}},
                       "rates": {"operators": 5, "sse_streams": 5}}, refine=False)
    assert "sse_frame_ms" in {s.parameter for s in quiet.assumptions()}  # too few frames to mean anything


def test_cpu_per_task_is_the_slope_of_cpu_against_work_so_idle_cpu_is_not_charged_per_task():
    # A dispatcher that idles at 0.8% of a core (its long poll) and spends 25 ms per task, 0.2 tasks/s: CPU / tasks
    # over the run would say 65 ms per task; the slope says 25.
    rng = random.Random(7)
    t, tasks, cpu, n = [], [], [], 0
    for i in range(300):
        t.append(1.5 * (i + 1))
        k = sum(1 for _ in range(3) if rng.random() < 0.1)  # tasks created in this 1.5 s sample
        n += k
        tasks.append(n)
        cpu.append(100.0 * (0.008 + k * 0.025 / 1.5))
    ratio = (sum(cpu) / 100.0 / len(cpu)) * t[-1] * 1000.0 / n
    assert ratio > 50
    load = {"profile": "1x", "multiple": 1.0,
            "endpoints_steady": {"POST /v1/drafts/{id}/confirm": {"requests": 60, "rps": 0.2, "p50_ms": 20}},
            "service_times_ms": {"dispatcher_per_task": {"mean": ratio, "cpu_s": 1.0, "source": "CPU demand"}},
            "timeseries": {"t": t, "tasks": tasks, "cpu_pct": {"dispatcher-1": cpu}}}
    m = calibrate(load, refine=False)
    assert m.dispatcher_cpu.mean_ms == pytest.approx(25.0, rel=0.1)
    assert "slope" in next(s.source for s in m.sources if s.parameter == "dispatcher_cpu")
    no_series = calibrate({**load, "timeseries": {}}, refine=False)
    assert no_series.dispatcher_cpu.mean_ms == pytest.approx(ratio, rel=1e-3)  # without the series: the ratio


def test_the_get_device_call_is_timed_from_the_history_and_used_before_dispatching():
    from systems.copilot.load_analysis import platform_call_times

    ops = [{"f": "get_device", "process": "dispatcher-1", "time": 1.000, "type": "invoke",
            "value": {"task_id": "a", "try": 0}},
           {"f": "get_device", "process": "dispatcher-2", "time": 1.001, "type": "invoke",
            "value": {"task_id": "b", "try": 0}},
           {"f": "get_device", "process": "dispatcher-2", "time": 1.031, "type": "ok",
            "value": {"task_id": "b", "try": 0}},
           {"f": "get_device", "process": "dispatcher-1", "time": 1.010, "type": "ok",
            "value": {"task_id": "a", "try": 0}},
           {"f": "create_flight", "process": "dispatcher-1", "time": 2.0, "type": "invoke", "value": {"task_id": "a"}},
           {"f": "create_flight", "process": "dispatcher-1", "time": 2.5, "type": "fail", "value": {"task_id": "a"}}]
    got = platform_call_times(ops)
    assert set(got) == {"platform_get_device"}  # a failed call has no latency to give
    assert got["platform_get_device"]["n"] == 2 and got["platform_get_device"]["max"] == pytest.approx(30.0, abs=0.01)
    load = _load("1x")
    slow = with_changes(calibrate(load), device_call=Dist(500.0, 0.0))
    fast = with_changes(slow, device_call=Dist(1.0, 0.0))
    d_slow = slow.predict(1.0, duration_s=120)["lifecycle_ms"]["dispatching"]["p50"]
    d_fast = fast.predict(1.0, duration_s=120)["lifecycle_ms"]["dispatching"]["p50"]
    assert d_slow - d_fast == pytest.approx(499.0, abs=5.0)  # one call before DISPATCHING, not two


def test_a_handler_measured_in_the_api_replaces_the_latency_based_estimate_once_enough_requests_carry_it():
    load = _load("1x")
    name = "POST /drafts/[id]/confirm"
    estimated = calibrate(load, refine=False).endpoints[name].handler
    measured = {"server_cpu_p50_ms": 2.0, "server_cpu_p95_ms": 4.0}
    few = calibrate({**load, "endpoints": {**load["endpoints"], name: {**load["endpoints"][name], **measured,
                                                                        "server_cpu_n": 19}}}, refine=False)
    many = calibrate({**load, "endpoints": {**load["endpoints"], name: {**load["endpoints"][name], **measured,
                                                                         "server_cpu_n": 20}}}, refine=False)
    assert few.endpoints[name].handler == estimated  # 19 requests: not enough to replace the estimate
    handler = many.endpoints[name]
    assert handler.handler.median_ms == pytest.approx(2.0) and handler.handler != estimated
    assert handler.handler.median_ms * math.exp(1.645 * handler.handler.sigma) == pytest.approx(4.0, rel=1e-3)  # p95
    assert handler.server_side  # the rest of the request's time is the client overhead, not API CPU
    source = next(s for s in many.sources if s.parameter == f"handler[{name}]")
    assert "Server-Timing" in source.source and not source.assumed


def test_the_platforms_webhooks_take_their_rate_and_cpu_from_the_simulators_log_when_the_run_has_it() -> None:
    """Without the simulator's delivery log the webhooks are a profile estimate charged the API's whole CPU per
    request; with it, their measured batches per second and the API's Server-Timing CPU per batch."""
    from systems.copilot.load_analysis import WEBHOOK_ENDPOINT

    fixture = _load("1x")  # its synthetic endpoints include a platform row; a real run's Locust table has none
    load = {**fixture, "endpoints": {n: e for n, e in fixture["endpoints"].items() if endpoint_kind(n) != "platform"}}
    estimated = calibrate(load, refine=False)
    assert "platform webhooks" in estimated.endpoints and WEBHOOK_ENDPOINT not in estimated.endpoints
    row = {"requests": 600, "failures": 0, "rps": 2.5, "p50_ms": 6.0, "p95_ms": 12.0, "events_per_request": 9.6,
           "server_cpu_p50_ms": 1.5, "server_cpu_p95_ms": 3.0, "server_cpu_n": 600}
    measured = calibrate({**load, "endpoints": {**load["endpoints"], WEBHOOK_ENDPOINT: row}}, refine=False)
    assert "platform webhooks" not in measured.endpoints
    spec = measured.endpoints[WEBHOOK_ENDPOINT]
    assert spec.kind == "platform" and spec.rate_1x == pytest.approx(2.5 / load["multiple"])
    assert spec.handler.median_ms == pytest.approx(1.5) and spec.server_side
    assert spec.handler.median_ms < estimated.endpoints["platform webhooks"].handler.median_ms


def test_the_simulators_sender_carries_more_events_per_post_as_the_rate_grows_and_loses_none() -> None:
    """One POST at a time, carrying what arrived meanwhile (simulator/app.py): measured 1.02 / 1.09 / 1.50 events per
    POST at 1x / 2x / 5x, so POSTs grow less than the events. Scaling POSTs linearly put the model's total
    throughput at 5x 41% above the run's."""
    from systems.copilot.load_analysis import WEBHOOK_ENDPOINT

    fixture = _load("1x")
    load = {**fixture, "endpoints": {n: e for n, e in fixture["endpoints"].items() if endpoint_kind(n) != "platform"}}
    row = {"requests": 15000, "failures": 0, "rps": 25.0, "p50_ms": 7.0, "p95_ms": 13.0, "events_per_request": 1.02,
           "server_cpu_p50_ms": 2.3, "server_cpu_p95_ms": 3.4, "server_cpu_n": 15000}
    model = calibrate({**load, "endpoints": {**load["endpoints"], WEBHOOK_ENDPOINT: row}}, refine=False)
    model = with_changes(model, cpu_cores_per_1x={})  # no host CPU: the batching alone
    assert model.endpoints[WEBHOOK_ENDPOINT].events_per_request == 1.02
    events_1x = 25.0 / load["multiple"] * 1.02
    posts = {}
    for k in (1, 8):
        webhooks = model.predict(k, duration_s=200)["endpoints"][WEBHOOK_ENDPOINT]
        assert webhooks["rps"] * webhooks["events_per_request"] == pytest.approx(events_1x * k, rel=0.05)  # none lost
        posts[k] = webhooks
    assert posts[1]["events_per_request"] < 1.1 < posts[8]["events_per_request"]
    assert posts[8]["rps"] < 0.95 * 8 * posts[1]["rps"]


def test_total_throughput_compares_the_endpoints_both_the_model_and_the_run_have() -> None:
    """A run that logged the platform's webhooks, compared with a model calibrated on one that did not: the webhook
    row (tens of requests per second) has no counterpart in the model and must not count on one side only."""
    from systems.copilot.capacity_report import Run, compare
    from systems.copilot.load_analysis import WEBHOOK_ENDPOINT

    fixture = _load("1x")
    load = {**fixture, "endpoints": {n: e for n, e in fixture["endpoints"].items() if endpoint_kind(n) != "platform"}}
    model = calibrate(load, refine=False)
    logged = {**load, "endpoints": {**load["endpoints"], WEBHOOK_ENDPOINT: {"requests": 9000, "rps": 30.0,
                                                                               "p50_ms": 5.0, "p95_ms": 9.0}}}
    rows = {f["figure"]: f for f in compare(model, Run("1x", Path("1x"), LoadRecord.parse(logged)), in_sample=True,
                                            duration_s=300)["figures"]}
    total = rows["total throughput (req/s)"]
    assert total["measured"] == pytest.approx(_total_rps(load["endpoints"]), rel=1e-6)
    assert abs(total["error_pct"]) <= 20


def _with_server_timing(load: dict, name: str, *, wall: tuple[float, float], cpu: tuple[float, float]) -> dict:  # type: ignore[type-arg]
    row = {**load["endpoints"][name], "server_p50_ms": wall[0], "server_p95_ms": wall[1], "server_n": 400,
           "server_cpu_p50_ms": cpu[0], "server_cpu_p95_ms": cpu[1], "server_cpu_n": 400}
    return {**load, "endpoints": {**load["endpoints"], name: row}}


def test_a_handlers_wall_time_beyond_its_cpu_and_transactions_is_a_wait_that_stretches_with_the_host() -> None:
    """Server-Timing's wall minus its CPU minus the modelled transactions: the handler's round trips through Toxiproxy
    and to Redis. Unrefined, percentiles subtracted; refined, fitted so the modelled server time has the measured wall
    p50; without wall figures, no wait."""
    from systems.copilot.capacity_model import _Run

    name = "POST /drafts/[id]/confirm"
    load = _with_server_timing(_load("1x"), name, wall=(8.0, 20.0), cpu=(2.5, 4.0))
    raw = calibrate(load, refine=False)
    spec = raw.endpoints[name]
    db_ms = raw.db_write.mean_ms  # a confirm is one write transaction
    assert spec.wait is not None and spec.wait.median_ms == pytest.approx(8.0 - 2.5 - db_ms, rel=1e-6)
    assert spec.wait.median_ms * math.exp(1.645 * spec.wait.sigma) == pytest.approx(20.0 - 4.0 - db_ms, rel=1e-3)
    no_wall = {**load, "endpoints": {**load["endpoints"], name: {
        k: v for k, v in load["endpoints"][name].items() if not k.startswith("server_p")}}}
    assert calibrate(no_wall, refine=False).endpoints[name].wait is None

    refined = calibrate(load)
    assert refined.endpoints[name].wait is not None
    assert any(s.parameter == f"wait[{name}]" and s.source.startswith("fitted") for s in refined.sources)
    overhead, refined.client_overhead = refined.client_overhead, None  # the server's side alone
    run = _Run(refined, 1.0, api_workers=refined.api_workers, dispatchers=refined.dispatchers,
               db_capacity=refined.db_capacity, partitions=refined.partitions, cores=None, exclude_cpu=(), seed=1,
               duration_s=1800.0, warmup_s=10.0)
    run.execute()
    assert overhead is not None
    assert percentile(run.latency[name], 50) == pytest.approx(8.0, rel=0.10)

    def server_p50(wait_ms: float, stretch: float) -> float:
        refined.endpoints[name].wait = Dist(wait_ms, 0.0)
        probe = _Run(refined, 1.0, api_workers=refined.api_workers, dispatchers=refined.dispatchers,
                     db_capacity=refined.db_capacity, partitions=refined.partitions, cores=None, exclude_cpu=(),
                     seed=1, duration_s=600.0, warmup_s=10.0)
        probe._p_wait, probe._norm = 0.0, stretch  # every draw stretched by this, as a busier host would on average
        probe.execute()
        return percentile(probe.latency[name], 50)

    # The wait holds the request, and a busier host (its Toxiproxy, PostgreSQL and Redis) stretches it.
    assert server_p50(100.0, 1.0) - server_p50(0.0, 1.0) == pytest.approx(100.0, rel=0.05)
    assert server_p50(100.0, 2.0) - server_p50(0.0, 2.0) == pytest.approx(200.0, rel=0.05)


def test_each_service_time_draws_its_own_stretch_and_its_tail_widens_with_load_faster_than_its_median():
    """The host's CPU stretches a service time by an M/M/c wait drawn per request (Erlang C probability, exponential
    length; its mean is the M/M/c slowdown), relative to the calibration run's median draw: the tail grows more than
    the median (measured 1x -> 5x: confirm p50 +57%, p95 +98%)."""
    import random

    from systems.copilot.capacity_model import _Run

    model = calibrate(_load("1x"), refine=False)

    def draws(multiple: float) -> tuple[_Run, list[float]]:
        run = _Run(model, multiple, api_workers=model.api_workers, dispatchers=model.dispatchers,
                   db_capacity=model.db_capacity, partitions=model.partitions, cores=None, exclude_cpu=(), seed=1,
                   duration_s=60.0, warmup_s=10.0)
        rng = random.Random(7)
        return run, sorted(run._stretch(rng) for _ in range(40_000))

    low, at_1x = draws(1.0)
    high, at_5x = draws(5.0)
    assert high.k > low.k >= 1.0 - 1e-9
    for run, xs in ((low, at_1x), (high, at_5x)):
        assert sum(xs) / len(xs) == pytest.approx(run._norm * ps_slowdown(run.cpu_rho, run.cores), rel=0.03)
    assert at_1x[len(at_1x) // 2] == pytest.approx(1.0)  # the calibration's median is its own: fewer than half wait
    p50_growth = at_5x[len(at_5x) // 2] / at_1x[len(at_1x) // 2]
    p95_growth = at_5x[int(0.95 * len(at_5x))] / at_1x[int(0.95 * len(at_1x))]
    assert p95_growth > p50_growth


def test_a_run_is_compared_at_the_load_it_was_offered_not_the_calibration_runs_rate_times_its_multiple() -> None:
    """Locust's arrivals come out some percent off the nominal rate in every run: a 2x run that realised 30% more
    confirms than twice the calibration run's must be predicted at its own rates (the model's throughput follows
    it), and every other endpoint at its own rate too."""
    from systems.copilot.capacity_report import Run, compare

    load = _load("1x")
    model = calibrate(load, refine=False)
    name = next(n for n in load["endpoints"] if endpoint_kind(n) == "confirm")
    busy = {n: {**e, "rps": 2 * float(e["rps"]) * (1.3 if n == name else 1.0)} for n, e in load["endpoints"].items()}
    run_2x = Run("2x", Path("2x"), LoadRecord.parse({**load, "multiple": 2, "endpoints": busy}))
    offered = at_offered_rates(model, run_2x.load, 2)
    assert offered.endpoints[name].rate_1x == pytest.approx(1.3 * model.endpoints[name].rate_1x)
    assert model.endpoints[name].rate_1x == pytest.approx(float(load["endpoints"][name]["rps"]))  # a copy
    rows = {f["figure"]: f for f in compare(model, run_2x, in_sample=False, duration_s=1200)["figures"]}
    confirm = rows["confirm throughput (req/s)"]
    assert confirm["measured"] == pytest.approx(2.6 * float(load["endpoints"][name]["rps"]))
    assert abs(confirm["error_pct"]) <= 15  # against -23% at the calibration run's rate x 2
    assert abs(rows["total throughput (req/s)"]["error_pct"]) <= 10


def test_host_speed_compares_the_apis_cpu_per_client_request_and_leaves_the_webhook_batches_out() -> None:
    """The same code on a faster host spends less CPU per request: the diagnostic weighs each endpoint by its
    requests, ignores the simulator's webhook batches (their size grows with the load) and says nothing without
    Server-Timing, and the capacity report's trust notes name a run whose host moved past the threshold."""
    from systems.copilot.capacity_report import HOST_SPEED_NOTE_PCT, _trust, api_cpu_per_request_ms, host_speed

    def load(confirm_ms: float, read_ms: float, webhook_ms: float) -> dict:  # type: ignore[type-arg]
        return {"endpoints_steady": {
            "POST /v1/drafts/{id}/confirm": {"requests": 100, "server_cpu_mean_ms": confirm_ms, "server_cpu_n": 100},
            "GET /v1/tasks/{id}": {"requests": 300, "server_cpu_mean_ms": read_ms, "server_cpu_n": 300},
            "POST /v1/platform/events (simulator)": {"requests": 50, "server_cpu_mean_ms": webhook_ms,
                                                     "server_cpu_n": 50}}}

    slow, fast = load(4.0, 2.0, 9.0), load(3.0, 1.5, 30.0)
    assert api_cpu_per_request_ms(slow) == pytest.approx((100 * 4.0 + 300 * 2.0) / 400)
    speed = host_speed(slow, fast)
    assert speed is not None and speed["change_pct"] == pytest.approx(-25.0)
    assert host_speed({"endpoints_steady": {"GET /v1/tasks/{id}": {"requests": 3}}}, fast) is None
    model = calibrate(_load("1x"), refine=False)
    notes = _trust(model, [{"run": "1x", "multiple": 1, "figures": [], "host_speed": speed},
                           {"run": "2x", "multiple": 2, "figures": [],
                            "host_speed": {**speed, "change_pct": HOST_SPEED_NOTE_PCT / 2}}], [])
    assert [n for n in notes if "the host ran faster" in n and n.startswith("Run 1x")]
    assert not [n for n in notes if n.startswith("Run 2x")]


def test_a_calibration_is_done_once_per_process_and_handed_out_as_copies() -> None:
    load = _load("1x")
    first = calibrate(load, seed=7)
    first.broker_hop_ms = -1.0  # a caller's change stays its own
    again = calibrate(load, seed=7)
    assert again is not first and again.broker_hop_ms != -1.0
    assert again.as_json() == calibrate(load, seed=7).as_json()
    assert calibrate(load, seed=7, refine=False).as_json() != again.as_json()  # the arguments are the key
