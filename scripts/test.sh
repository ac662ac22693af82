#!/usr/bin/env bash
# The test suite: system packages, the virtualenv with test extras, then pytest. Extra args go to pytest.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
exec python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile -m "not catalogue" "$@"
