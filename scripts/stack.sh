#!/usr/bin/env bash
# CI's native tier (docs/ci.md has the choices, what each covers and its time; scripts/nightly.sh runs the rest):
#   bash scripts/stack.sh SYSTEM   the system's CI scenarios (its System.ci_stack_scenarios, at most three) on its
#                                  native stack (one stack for them); windows at `sortie run`'s default time factor;
#                                  output under ${OUT:-out}/ci-native-SYSTEM
#   bash scripts/stack.sh tests    the tests that start a whole native stack (marker whole_stack), except those
#                                  marked nightly; one at a time: two stacks at once on two cores starve each other
#   bash scripts/stack.sh          both: every system's scenarios, then the tests
# Installs what it needs.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out}"

native_scenarios() {
  local system="$1" ids
  # The system's own list (System.ci_stack_scenarios, with why each was chosen; tests/core/test_systems_ci.py: at
  # most three, each in its catalogue). "-": the system has no real stack.
  ids="$(python - "$system" <<'PY'
import sys
from scenarios.systems import load_system
system = load_system(sys.argv[1])
print("-" if system.stack_runner is None else " ".join(system.ci_stack_scenarios))
PY
)"
  if [[ "$ids" == "-" ]]; then echo "scripts/stack.sh: system '$system' has no real stack: nothing runs natively"; return 0; fi
  # shellcheck disable=SC2046
  sortie run --system "$system" $(printf -- '--scenario %s ' $ids) --seed 1 --out "$OUT/ci-native-$system"
}

whole_stack_tests() {
  python -m pytest -n 0 -m "whole_stack and not nightly" --durations=25
}

case "${1:-all}" in
  tests) whole_stack_tests ;;
  all)
    for system in $(python -c 'from scenarios.systems import system_names; print(*system_names())'); do
      native_scenarios "$system"
    done
    whole_stack_tests ;;
  *) native_scenarios "$1" ;;
esac
