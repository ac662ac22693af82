"""Imports run one way (docs/architecture.md, Layout): the import-linter contracts of pyproject.toml
[tool.importlinter] (systems > sortie > reports > loadtests > stack > scenarios > chaos > harness > kernel; the generic
layers import no system, no reference and not the platform simulator; a reference imports only the kernel; a system
imports no other system), lazy imports inside functions included, run by the normal pytest run so
CI checks them. A broken contract fails with import-linter's report: every illegal import, file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_packages_import_one_way() -> None:
    lint = Path(sys.executable).parent / "lint-imports"  # the virtualenv's own, installed by the `test` extra
    assert lint.exists(), f"{lint} is missing: install the test extra (pip install -e '.[test]')"
    # Run in this checkout: it reads ./pyproject.toml and analyses these packages, not another checkout installed
    # in editable mode (lint-imports also puts its cwd first on sys.path).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"import contracts broken (lint-imports exit {done.returncode}):\n" \
                                 f"{done.stdout}\n{done.stderr}"
    assert " KEPT" in done.stdout and " 0 broken" in done.stdout, done.stdout
