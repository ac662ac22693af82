#!/usr/bin/env bash
# The test suite: system packages, the virtualenv with test extras, then pytest. Extra args go to pytest.
set -euo pipefail
HERE="$(dirname "$0")"
bash "$HERE/system-deps.sh"
SORTIE_EXTRAS=test,postgres,stack,load,explore source "$HERE/env.sh"
cd "$ROOT"
# Binaries and jars of the native stack (Go builds, Maven), cached by version: a second run reuses them.
sortie stack install
exec python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile -m "not catalogue" "$@"
