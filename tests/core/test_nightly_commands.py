"""scripts/nightly.sh is hours long and not part of CI, so an option renamed in the CLI would break it unseen: this
runs the script with every step recorded instead of run (its install and its steps stubbed) and checks that each
`sortie` command it would run parses against the CLI, and that it covers every system's part it promises."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from scenarios.systems import load_system, system_names
from sortie.cli import main

ROOT = Path(__file__).resolve().parents[2]
STUBS = """
step() { printf '%s\\n' "$*" >> "$RECORD"; }
slo_reported() { printf '%s\\n' "$*"; }
python() { "$PYTHON_BIN" "$@"; }
"""


def _recorded(tmp_path: Path) -> list[list[str]]:
    body = (ROOT / "scripts" / "nightly.sh").read_text()
    body = "\n".join(line for line in body.splitlines()
                     if "stack-env.sh" not in line and not line.startswith("step()"))
    script = tmp_path / "nightly-dry.sh"
    script.write_text(STUBS + body)
    record = tmp_path / "steps.txt"
    env = {**os.environ, "RECORD": str(record), "PYTHON_BIN": sys.executable, "OUT": "out/nightly"}
    subprocess.run(["bash", str(script)], cwd=ROOT, env=env, check=True, timeout=120)
    return [shlex.split(line) for line in record.read_text().splitlines()]


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    return _recorded(tmp_path_factory.mktemp("nightly"))


def test_every_sortie_step_parses(steps: list[list[str]]) -> None:
    bad = []
    for args in steps:
        args = args[1:] if args[0] == "slo_reported" else args
        if args[0] != "sortie":
            continue
        command = main.get_command(click.Context(main), args[1])
        try:
            assert command is not None, f"no verb {args[1]}"
            command.make_context(args[1], args[2:], parent=click.Context(main))
        except (click.ClickException, AssertionError) as err:
            bad.append(f"{shlex.join(args)}: {err}")
    assert bad == []


def test_every_system_gets_its_nightly_parts(steps: list[list[str]]) -> None:
    lines = [shlex.join(s) for s in steps]
    for name in system_names():
        system = load_system(name)
        mine = [line for line in lines if f"--system {name} " in line + " "]
        assert sum("simulate" in line for line in mine) == 20, name
        assert any(" selfcheck " in f" {line} " for line in mine), name
        explores = any("explore --system" in line and "--runs 2000" in line for line in mine)
        assert explores == (system.explore is not None), name
        runs_natively = any("sortie run --system" in line and "--all" in line for line in mine)
        assert runs_natively == (system.stack_runner is not None), name
        assert any("sortie load" in line for line in mine) == (system.load is not None), name
