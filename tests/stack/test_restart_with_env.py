"""NativeStack.restart_with_env, what `sortie selfcheck --stack native` switches a stack's bug with
(scenarios.systems.BugSwitch): every process that reads the variable restarts with the new value, as the OS sees its
environment, and none is left running with the old one. Real processes (a Python HTTP server each, ~0.1 s to start)
on a stack with no services."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from stack.common import LOOPBACK, free_port
from stack.components import Component
from stack.native import NativeStack

BUG = "SORTIE_TEST_BUG"


def _server(name: str, run_dir: Path, env: dict[str, str]) -> Component:
    port = free_port()
    return Component(name, [sys.executable, "-m", "http.server", "--bind", LOOPBACK, "--directory", str(run_dir),
                            str(port)], health_url=f"http://{LOOPBACK}:{port}/", env=env)


@pytest.fixture
def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    native = NativeStack(tmp_path, SimpleNamespace(options=None))  # type: ignore[arg-type]
    native.start_component(_server("app", tmp_path, {BUG: "first"}))
    native.start_component(_server("other", tmp_path, {}))  # reads no bug: left alone
    yield native
    for comp in native.components.values():
        comp.stop()


def test_every_process_that_reads_the_bug_runs_the_new_one_and_none_the_old(stack: NativeStack) -> None:
    app, other = stack.components["app"], stack.components["other"]
    app_pid, other_pid = app.pid, other.pid
    assert app.pids_without({BUG: "second"}) == [app_pid]  # the OS's view, before
    stack.restart_with_env({BUG: "second"})
    assert app.pid != app_pid and app.pids_without({BUG: "second"}) == []
    assert app.pids_without({BUG: "first"}) == [app.pid]
    assert other.pid == other_pid


def test_a_process_still_running_with_the_old_bug_is_an_error_not_a_silent_switch(stack: NativeStack) -> None:
    app = stack.components["app"]
    app.env[BUG] = "second"  # the handle says so, but the process was started with "first" and never restarted
    with pytest.raises(RuntimeError, match="run without them"):
        stack.restart_with_env({BUG: "second"})
