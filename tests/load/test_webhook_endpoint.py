"""The platform's webhooks as an endpoint of a load run, from the simulator's delivery log (loadtests.analysis)."""

from __future__ import annotations

import pytest

from systems.copilot.load_analysis import WEBHOOK_ENDPOINT, webhook_endpoint

COLUMNS = ["sent_at", "events", "round_trip_ms", "server_ms", "server_cpu_ms"]
T0 = 1_700_000_000.0


def test_deliveries_in_the_window_give_rate_latency_events_per_batch_and_the_apis_cpu() -> None:
    items = [[T0 + 5.0, 50, 99.0, 90.0, 40.0]]  # during the ramp: outside the window
    items += [[T0 + 10.0 + i, 10 + i % 3, 8.0 + i, 6.0 + i, 2.0 + 0.1 * i] for i in range(40)]
    items += [[T0 + 60.0, 7, 1.0, None, None]]  # outside again
    got = webhook_endpoint({"columns": COLUMNS, "items": items}, T0, (10.0, 50.0))
    assert got["requests"] == 40 and got["failures"] == 0
    assert got["rps"] == pytest.approx(40 / 40.0)
    assert got["events_per_request"] == pytest.approx(sum(10 + i % 3 for i in range(40)) / 40, abs=0.01)
    assert got["p50_ms"] == pytest.approx(8.0 + 19.5, abs=1.0)
    assert got["server_cpu_n"] == 40 and got["server_cpu_p50_ms"] == pytest.approx(2.0 + 1.95, abs=0.11)
    assert got["server_n"] == 40


def test_no_deliveries_in_the_window_or_a_log_of_another_shape_give_nothing() -> None:
    assert webhook_endpoint({"columns": COLUMNS, "items": [[T0 + 1.0, 5, 1.0, 1.0, 1.0]]}, T0, (10.0, 20.0)) == {}
    assert webhook_endpoint({"columns": ["t", "n"], "items": [[T0 + 15.0, 5]]}, T0, (10.0, 20.0)) == {}
    assert webhook_endpoint({}, T0, (10.0, 20.0)) == {}


def test_deliveries_without_server_timing_still_count_but_carry_no_server_figures() -> None:
    items = [[T0 + 11.0 + i, 4, 3.0, None, None] for i in range(5)]
    got = webhook_endpoint({"columns": COLUMNS, "items": items}, T0, (10.0, 20.0))
    assert got["requests"] == 5 and "server_cpu_n" not in got
    assert WEBHOOK_ENDPOINT.startswith("POST ")


def test_the_apis_cpu_per_request_counts_the_logged_webhook_requests_when_there_are_some() -> None:
    from systems.copilot.load_analysis import cpu_service_times

    cpu = {"api-1": 6.0, "api-2": 4.0}
    estimated = cpu_service_times(cpu, {"platform_events": 1000}, api_requests=400, db_commits=0)["api_cpu_per_request"]
    assert estimated["n"] == 500 and estimated["mean"] == pytest.approx(20.0) and "rough" in estimated["source"]
    logged = cpu_service_times(cpu, {"platform_events": 1000}, api_requests=400, db_commits=0,
                               webhook_posts=600)["api_cpu_per_request"]
    assert logged["n"] == 1000 and logged["mean"] == pytest.approx(10.0) and "simulator" in logged["source"]


def test_webhook_posts_are_counted_by_the_logs_own_columns_plus_those_it_dropped() -> None:
    from systems.copilot.load_analysis import webhook_posts

    reordered = ["events", "server_ms", "server_cpu_ms", "round_trip_ms", "sent_at"]
    items = [[3, None, None, 1.0, T0 + t] for t in (1.0, 2.0, 9.0)]
    assert webhook_posts({"columns": reordered, "items": items, "missed": 0}, T0, 5.0) == 2
    assert webhook_posts({"columns": reordered, "items": items, "missed": 4}, T0, 5.0) == 6
    assert webhook_posts({"columns": ["t"], "items": [[T0]]}, T0, 5.0) == 0
