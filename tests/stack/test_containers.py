"""The containers provider (stack/containers.py). Its stack tests need a Docker engine and skip with the
precise reason where none answers (this machine has none); the detection itself, the provider factory's
refusal and the CLI's one-line error are checked here everywhere, with DOCKER_HOST at a dead socket.
The wiring shared with the native provider (components, Toxiproxy links, migration and app role, broker
provisioning) is exercised by the native and external tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_end_to_end import SPEC
from test_end_to_end import test_a_confirmed_draft_flies_completes_and_gets_its_report as confirm_flies_and_reports

from reference.copilot.topology import Topology
from stack.containers import docker_available
from systems.copilot.stack import CopilotApp


@pytest.fixture
def dead_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    host = f"unix://{tmp_path / 'no-engine' / 'docker.sock'}"
    monkeypatch.setenv("DOCKER_HOST", host)
    return host


def test_detection_reports_an_unreachable_engine_with_its_address(dead_docker: str) -> None:
    ok, reason = docker_available()
    assert ok is False
    assert reason.startswith("no Docker engine reachable (") and dead_docker in reason
    assert "\n" not in reason


def test_the_provider_refuses_without_an_engine(dead_docker: str, tmp_path: Path) -> None:
    from stack.providers import ProviderUnavailable, provider

    with pytest.raises(ProviderUnavailable, match="needs a Docker engine: no Docker engine reachable"):
        provider("containers", tmp_path / "run", CopilotApp())
    assert not (tmp_path / "run").exists()  # nothing was started or written


@pytest.mark.parametrize("argv", [["stack", "up", "--stack", "containers"],
                                  ["run", "--stack", "containers", "--scenario", "R1"]])
def test_the_cli_fails_with_one_line_naming_the_missing_engine(dead_docker: str, tmp_path: Path,
                                                               argv: list[str]) -> None:
    from click.testing import CliRunner

    from sortie.cli import main

    extra = ["--run-dir", str(tmp_path / "run")] if argv[0] == "stack" else ["--out", str(tmp_path / "out")]
    result = CliRunner().invoke(main, [*argv, *extra])
    assert result.exit_code == 4  # the environment lacks something (sortie.exits)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: the containers provider needs a Docker engine: "
                                                   "no Docker engine reachable (")
    assert "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)


def test_embedded_and_unknown_kinds_are_refused(tmp_path: Path) -> None:
    from stack.providers import ProviderUnavailable, provider

    with pytest.raises(ProviderUnavailable, match="sortie simulate"):
        provider("embedded", tmp_path, CopilotApp())
    with pytest.raises(ProviderUnavailable, match="unknown stack provider"):
        provider("kubernetes", tmp_path, CopilotApp())


# --- on a Docker engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def native() -> Iterator[Any]:
    """A ContainersStack (named like test_end_to_end's fixture so its check runs unchanged)."""
    ok, reason = docker_available()
    if not ok:
        pytest.skip(reason)
    from stack.containers import ContainersStack
    from systems.copilot.stack import CopilotApp, CopilotOptions

    stack = ContainersStack(Path(tempfile.mkdtemp(prefix="sortie-ctr-")), CopilotApp(CopilotOptions(
        time_scale=60.0, devices=SPEC.devices, topology=Topology(publishers=1, dispatchers=1), api_workers=1,
        policy={"reconcile_interval_s": 2.0, "invisible_s": 10.0})))
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.mark.stack
@pytest.mark.whole_stack
@pytest.mark.nightly
def test_end_to_end_through_the_containers_provider(native: Any, fleet: Any) -> None:
    assert set(native.endpoints.proxies) == {"postgres", "redis", "rocketmq", "s3", "platform", "webhook"}
    confirm_flies_and_reports(native, fleet)


@pytest.mark.stack
@pytest.mark.whole_stack
@pytest.mark.nightly
def test_redis_container_stops_and_starts_on_the_same_address(native: Any) -> None:
    redis = native.services["redis"]
    redis.flushall()
    redis.stop()
    assert not redis.running
    redis.start()
    assert redis.running


@pytest.mark.stack
@pytest.mark.whole_stack
@pytest.mark.nightly
def test_teardown_removes_every_container(native: Any) -> None:
    import docker

    ids = [svc.container.get_container_id() for svc in native.services.values()]
    native.stop()
    client = docker.from_env()
    try:
        alive = [c.id for c in client.containers.list(all=True) if c.id in ids]
    finally:
        client.close()
    assert alive == []
