#!/usr/bin/env bash
# The test suite: system packages, the virtualenv with test extras, then pytest. Extra args go to pytest.
# Tests that start a whole native stack (marker whole_stack) are not the test command's: scripts/stack.sh and
# scripts/nightly.sh run them (docs/ci.md); nor are those marked nightly (too slow for CI: scripts/nightly.sh). Those that start one real service (PostgreSQL, Redis, RocketMQ, the S3
# server, Toxiproxy, the platform simulator, gunicorn on PostgreSQL) stay here.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
exec python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile -m "not whole_stack and not nightly" "$@"
