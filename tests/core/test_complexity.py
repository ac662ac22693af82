"""The complexity gate: ruff's C901 (max-complexity in pyproject.toml [tool.ruff.lint.mccabe]) over the whole
checkout, with a list of named exceptions that can only shrink (complex_functions.txt, next to this file).

A function over the limit that is not listed fails; so does a listed one that is gone, back at or under the limit, or
whose complexity differs from its entry (lower: lower the entry; higher: split it instead). ruff cannot except one
function by name without a noqa comment in the code, so this test, not `ruff check .`, runs C901.
Rewrite the list after splitting functions: `.venv/bin/python tests/core/test_complexity.py --write`."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = Path(__file__).with_name("complex_functions.txt")
_HEADER = """\
# Functions over ruff's C901 limit (pyproject.toml [tool.ruff.lint.mccabe] max-complexity), with their complexity.
# The list only shrinks: tests/core/test_complexity.py fails on a function over the limit not listed here, and on an
# entry that is gone, at or under the limit, or no longer exact. Never add a line: split the function.
"""


def _qualname(path: Path, line: int, name: str) -> str:
    """module.Class.function of the def named ``name`` on ``line`` (ruff gives the file, line and bare name)."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")

    def walk(node: ast.AST, scope: tuple[str, ...]) -> str | None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, child.name)
                if not isinstance(child, ast.ClassDef) and child.name == name and child.lineno == line:
                    return ".".join((module, *inner))
            found = walk(child, inner)
            if found:
                return found
        return None

    found = walk(ast.parse(path.read_text(encoding="utf-8")), ())
    assert found, f"{path}:{line}: no def {name} (ruff and ast disagree)"
    return found


def measured() -> dict[str, int]:
    """Every function over the limit in this checkout: qualified name -> complexity (ruff's count)."""
    done = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--select", "C901", "--output-format",
                           "json", "--exit-zero", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    over = {}
    for finding in json.loads(done.stdout):
        match = re.fullmatch(r"`(\w+)` is too complex \((\d+) > \d+\)", finding["message"])
        assert match, finding["message"]
        name = _qualname(Path(finding["filename"]), finding["location"]["row"], match[1])
        over[name] = int(match[2])
    return over


def allowed() -> dict[str, int]:
    entries = {}
    for line in ALLOWED.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, complexity = line.split()
            entries[name] = int(complexity)
    return entries


def test_no_function_is_more_complex_than_the_limit_or_its_listed_exception() -> None:
    over, listed = measured(), allowed()
    new = {name: c for name, c in over.items() if name not in listed}
    gone = sorted(name for name in listed if name not in over)
    changed = {name: (listed[name], c) for name, c in over.items() if name in listed and c != listed[name]}
    problems = [f"{name}: complexity {c}, over the limit, not in {ALLOWED.name}: split it" for name, c in new.items()]
    problems += [f"{name}: at or under the limit now (or gone): delete its line from {ALLOWED.name}" for name in gone]
    problems += [f"{name}: complexity {now}, listed as {was}: " + ("set its line to it" if now < was else "split it")
                 for name, (was, now) in changed.items()]
    assert not problems, "\n".join(problems)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    ALLOWED.write_text(_HEADER + "".join(f"{name} {c}\n" for name, c in sorted(measured().items())), encoding="utf-8")
