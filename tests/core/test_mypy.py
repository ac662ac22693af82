"""The type gate: mypy with pyproject.toml's [tool.mypy] (strict on the kernel and the generic scenario core, its
defaults elsewhere) over every package, run by the normal pytest run so CI checks it.

Files that still have errors are listed with their count in mypy_baseline.txt (next to this file); the list only
shrinks. A file with an error that is not listed fails, and so does a listed file whose count changed (more: fix
what you added; fewer: lower its line, or delete it at zero). A failure prints mypy's errors of the files at fault.
Rewrite the list after fixing errors: `.venv/bin/python tests/core/test_mypy.py --write`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("mypy_baseline.txt")
_HEADER = """\
# Files with mypy errors today (pyproject.toml [tool.mypy]) and how many. The list only shrinks:
# tests/core/test_mypy.py fails on an error in a file not listed here and on a count that changed. Never add a line.
"""
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ", re.MULTILINE)


def mypy() -> tuple[Counter[str], str]:
    """Errors per file, and mypy's output."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), f"mypy did not run (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return Counter(m["path"] for m in _ERROR.finditer(done.stdout)), done.stdout


def baseline() -> Counter[str]:
    listed: Counter[str] = Counter()
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            path, count = line.split()
            listed[path] = int(count)
    return listed


def test_mypy_finds_no_error_beyond_the_shrinking_baseline() -> None:
    found, output = mypy()
    listed = baseline()
    problems = [f"{path}: {n} mypy error(s), listed as {listed[path]}"
                + (": fix what is new" if n > listed[path] else f": set its line in {BASELINE.name} to {n}")
                for path, n in sorted(found.items()) if n != listed[path]]
    problems += [f"{path}: no mypy error any more: delete its line from {BASELINE.name}"
                 for path in sorted(listed) if path not in found]
    at_fault = {p.split(":", 1)[0] for p in problems}
    details = "\n".join(line for line in output.splitlines() if line.split(":", 1)[0] in at_fault)
    assert not problems, "\n".join(problems) + "\n\n" + details


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    BASELINE.write_text(_HEADER + "".join(f"{path} {n}\n" for path, n in sorted(mypy()[0].items())), encoding="utf-8")
