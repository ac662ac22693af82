"""scripts/nightly.sh is hours long and not part of CI, so an option renamed in the CLI would break it unseen: this
runs the script with every step recorded instead of run (its install and its steps stubbed) and checks that each
`sortie` command it would run parses against the CLI, and that it covers every system's part it promises. Its
ledger (scripts/nightly-ledger.sh: each step's result, and --resume skipping what passed at the commit) runs here
on stand-in commands."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from scenarios.catalogue import load_catalogue
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
                     if "stack-env.sh" not in line and "nightly-ledger.sh" not in line)
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
        args = _command(args)
        if args[0] != "sortie":
            continue
        command = main.get_command(click.Context(main), args[1])
        try:
            assert command is not None, f"no verb {args[1]}"
            command.make_context(args[1], args[2:], parent=click.Context(main))
        except (click.ClickException, AssertionError) as err:
            bad.append(f"{shlex.join(args)}: {err}")
    assert bad == []


def _options(args: list[str], name: str) -> list[str]:
    """The values of an option given as `--name VALUE` or `--name=VALUE`."""
    values = [v for flag, v in zip(args, args[1:], strict=False) if flag == name]
    return values + [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]


def _command(args: list[str]) -> list[str]:
    """The command a step runs, without the wrappers before it (slo_reported; env and its assignments)."""
    while args and (args[0] in ("slo_reported", "env") or ("=" in args[0] and args[0].split("=")[0].isidentifier())):
        args = args[1:]
    return args


def _is_env(args: list[str]) -> bool:
    return args[0] == "env"


def _verb(args: list[str]) -> str | None:
    return args[args.index("sortie") + 1] if "sortie" in args else None


def test_every_system_gets_its_nightly_parts(steps: list[list[str]]) -> None:
    lines = [shlex.join(s) for s in steps]
    for name in system_names():
        system = load_system(name)
        mine = [args for args in steps if _options(args, "--system") == [name]]
        assert [_verb(args) for args in mine].count("simulate") == 20, name
        sim_checks = [args for args in mine if "selfcheck" in args and "--stack" not in args]
        # seed 1: every bug against every scenario (a step per bug); seed 2: each bug against its named scenarios
        assert sorted(b for args in sim_checks if "--named" not in args for b in _options(args, "--bug")) \
            == sorted(system.bugs), name
        assert [_options(args, "--seed") for args in sim_checks if "--named" in args] == [["2"]], name
        explores = any("explore --system" in line and "--runs 2000" in line for line in lines
                       if f"--system {name} " in line + " ")
        assert explores == (system.explore is not None), name
        benched = sorted(b for args in mine if "explore-bench" in args for b in _options(args, "--bug"))
        assert benched == (sorted(system.bugs) if system.explore is not None else []), name
        runs = [args for args in mine if _verb(args) == "run" and not _is_env(args)]
        native = [s.id for s in load_catalogue(name).values() if "native" in s.shells]
        # the whole native catalogue once, in order, at the system's nightly time factor (a system's own nightly.sh
        # may run some of it again on another stack, under env settings: systems/inspection/nightly.sh)
        assert [i for args in runs for i in _options(args, "--scenario")] \
            == (native if system.stack_runner is not None else []), name
        factor = [] if system.nightly_time_factor is None else [str(system.nightly_time_factor)]
        assert all(_options(args, "--time-factor") == factor for args in runs), name
        native_checks = [args for args in mine if "selfcheck" in args and "--stack" in args]
        # every bug (a system's own nightly.sh may check one again elsewhere: systems/statussync/nightly.sh)
        assert {b for args in native_checks for b in _options(args, "--bug")} \
            == (set(system.bugs) if system.stack_runner is not None else set()), name
        assert any(_verb(args) == "load" for args in mine) == (system.load is not None), name


LEDGER_STANDINS = """
set -euo pipefail
source "$LEDGER_SH"
status=0
ran() { echo "$1" >> "$RAN"; [[ "$1" != fails* ]]; }
step ran passes-1
step ran fails-1
step ran passes-2
exit "$status"
"""


def _ledger_run(tmp_path: Path, commit: str, resume: bool) -> tuple[int, list[str]]:
    ran = tmp_path / "ran.txt"
    ran.write_text("")
    env = {**os.environ, "LEDGER_SH": str(ROOT / "scripts" / "nightly-ledger.sh"), "RAN": str(ran),
           "COMMIT": commit, "LEDGER": str(tmp_path / "ledger.tsv"), "RESUME": str(int(resume))}
    done = subprocess.run(["bash", "-c", LEDGER_STANDINS], env=env, capture_output=True, text=True, timeout=30)
    return done.returncode, ran.read_text().split()


def test_the_ledger_records_each_step_and_resume_skips_what_passed_at_the_commit(tmp_path: Path) -> None:
    assert _ledger_run(tmp_path, "c1", resume=False) == (1, ["passes-1", "fails-1", "passes-2"])
    rows = [line.split("\t") for line in (tmp_path / "ledger.tsv").read_text().splitlines()]
    assert [(c, cmd, result) for c, cmd, result, _ in rows] == [
        ("c1", "ran passes-1", "passed"), ("c1", "ran fails-1", "failed"), ("c1", "ran passes-2", "passed")]
    assert all(seconds.isdigit() for *_, seconds in rows)
    # at the same commit only the failed step runs again; at another commit, or without --resume, every step
    assert _ledger_run(tmp_path, "c1", resume=True) == (1, ["fails-1"])
    assert _ledger_run(tmp_path, "c2", resume=True) == (1, ["passes-1", "fails-1", "passes-2"])
    assert _ledger_run(tmp_path, "c1", resume=False) == (1, ["passes-1", "fails-1", "passes-2"])
    assert len((tmp_path / "ledger.tsv").read_text().splitlines()) == 3 + 1 + 3 + 3
