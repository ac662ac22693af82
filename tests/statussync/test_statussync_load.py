"""The status sync's load (systems/statussync/load.py) without a stack: its plan (who owns which task, which
connections), a client's regression and convergence checks, the figures from commits and receipts, and the exit code
(an invariant violated fails, a missed SLO is reported as 3). The run itself is nightly (scripts/nightly.sh)."""

from __future__ import annotations

import pytest

from reference.statussync.client import ClientStore
from systems.statussync.load import (
    FAILED,
    OK,
    PROFILES,
    SLO_MISSED,
    Connection,
    Plan,
    Records,
    Send,
    exit_code,
    figures,
    open_files_limit,
    ports_short,
    slo_verdicts,
    unconverged,
)


def _push(task: str, version: int) -> dict[str, object]:
    return {"channel": "task_user:t1/u0", "pub": {"data": {"task": {"id": task, "version": str(version)}}}}


def test_the_plan_gives_every_task_an_owner_with_a_live_client() -> None:
    plan = Plan.of(PROFILES["1x"])
    live = {user for user, is_live in plan.connections if is_live}
    assert len(plan.tasks) == PROFILES["1x"].tasks and {owner for _, owner in plan.tasks} <= live
    hot = Plan.of(PROFILES["hot"])
    assert hot.connections.count(("hot", True)) == PROFILES["hot"].hot_members
    assert {owner for _, owner in hot.tasks} == {"hot"}
    idle = Plan.of(PROFILES["idle"])
    assert sum(1 for _, is_live in idle.connections if not is_live) == PROFILES["idle"].idle


def test_the_machine_must_have_room_for_the_idle_connections() -> None:
    """The idle profile's 10,000 WebSockets: the soft limit of open files raised up to the hard one, a hard limit or a
    port range too small refused with the command that fixes it."""
    n = len(Plan.of(PROFILES["idle"]).connections)
    assert n > 10_000
    assert open_files_limit(n, 1024, 1 << 20) == n + 512
    assert open_files_limit(n, 1 << 20, 1 << 20) is None and open_files_limit(n, -1, -1) is None
    assert open_files_limit(n, 1024, -1) == n + 512
    with pytest.raises(ValueError, match="ulimit -Hn"):
        open_files_limit(n, 1024, 4096)
    assert ports_short(n, "32768\t60999\n") is None
    assert "ip_local_port_range" in (ports_short(n, "50000 59999") or "")


def test_an_older_publication_is_reordered_not_shown_and_a_view_that_goes_back_is_a_regression(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Records()
    client = Connection(0, "u0", "ws://unused", "token", rec, live=True)
    for version in (2, 4, 3):
        client._publication(_push("load-00000", version))
    assert (rec.reordered, rec.regressions, client.seen) == (1, [], {"load-00000": 4})  # the version gate held
    # A client whose gate lets an older version through: the view goes back, and the load says so
    broken = Connection(1, "u1", "ws://unused", "token", Records(), live=True)
    monkeypatch.setattr(ClientStore, "_gate", lambda self, kind: {})
    for version in (4, 3):
        broken._publication(_push("load-00000", version))
    assert broken.rec.regressions == ["connection 1 (u1): load-00000 shown v3 after v4"]
    monkeypatch.undo()
    owners = {"load-00000": "u0", "load-00001": "u0"}
    assert unconverged([client], {"load-00000": 4, "load-00001": 1}, owners) == \
        ["connection 0 (u0): load-00001 vNone of v1"]
    client._publication(_push("load-00001", 1))
    assert unconverged([client], {"load-00000": 4, "load-00001": 1}, owners) == []


def test_figures_time_each_delivery_from_its_commit_and_from_its_intended_send() -> None:
    rec = Records(sends=[Send("a", intended=100.0, sent=100.5, answered=100.6, status=200, version=2),
                         Send("a", intended=130.0, sent=130.0, answered=130.1, status=503)],
                  deliveries=[(0, "a", 2, 101.6), (0, "a", 1, 99.0)],
                  samples=[{"oldest_outbox_s": 1.5, "load1": 3.0}, {"oldest_outbox_s": 0.5, "load1": 4.0}])
    fig = figures(rec, commits={("a", 2): 100.55, ("a", 1): 98.0}, published={("a", 2): 101.05})
    assert (fig["events"], fig["accepted"], fig["errors"], fig["error_statuses"]) == (2, 1, 1, {"503": 1})
    assert abs(fig["event_ms"]["corrected"]["p99"] - 600) < 1 and abs(fig["event_ms"]["raw"]["p99"] - 100) < 1
    assert abs(fig["commit_to_publish_ms"]["p99"] - 500) < 1
    assert abs(fig["commit_to_visible_ms"]["from_commit"]["max"] - 1050) < 2
    assert fig["commit_to_visible_ms"]["from_commit"]["count"] == 1  # the driven event only (v1: its creation)
    assert abs(fig["commit_to_visible_ms"]["corrected"]["p99"] - 1600) < 2
    assert fig["oldest_outbox_s"] == 1.5 and fig["load_average"] == [3.0, 4.0]
    slos = slo_verdicts(fig)
    assert exit_code(fig, slos, []) == SLO_MISSED  # the event entry's corrected p99 of 600 ms is over 250
    assert exit_code(fig, {k: {**v, "met": True} for k, v in slos.items()}, []) == OK
    assert exit_code(fig, slos, ["connection 0 (u0): a v1 of v2"]) == FAILED
    assert exit_code({**fig, "regressions": ["x"]}, slos, []) == FAILED
    assert exit_code({**fig, "failed_connections": 1}, slos, []) == FAILED  # an idle connection never held


def test_under_a_database_restart_an_event_never_accepted_fails_the_run() -> None:
    rec = Records(sends=[Send("a", intended=100.0, sent=100.0, answered=100.1, status=200, version=2),
                         Send("a", intended=130.0, sent=130.0, answered=250.0, status=503)])
    fig = figures(rec, commits={("a", 2): 100.05}, published={("a", 2): 100.5})
    met = {k: {**v, "met": True} for k, v in slo_verdicts(fig).items()}
    assert exit_code(fig, met, []) == OK  # elsewhere an unanswered report is an error figure, not a lost event
    assert exit_code(fig, met, [], every_event_answered=True) == FAILED
    assert PROFILES["db-restart"].db_restart and not PROFILES["1x"].db_restart
