#!/usr/bin/env bash
# CI's native tier (docs/ci.md has the choices, what each covers and its time; scripts/nightly.sh runs the rest):
#   bash scripts/stack.sh SYSTEM   the system's CI scenarios on its native stack (one stack for them), at most three,
#                                  each chosen to cover several real-stack mechanisms; windows at `sortie run`'s
#                                  default time factor; output under ${OUT:-out}/ci-native-SYSTEM
#   bash scripts/stack.sh tests    the tests that start a whole native stack (marker whole_stack), except those
#                                  marked nightly; one at a time: two stacks at once on two cores starve each other
#   bash scripts/stack.sh          both: every system's scenarios, then the tests
# Installs what it needs.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out}"

# A system's CI scenarios (catalogue ids). The Copilot: B9 holds the dispatcher's transaction and cuts the platform's
# and the webhooks' links (Toxiproxy) under cancels; B15 stops the publisher at two crash points (SIGSTOP) and cuts
# the broker's link mid-batch; T2 makes PostgreSQL refuse inserts (the fault trigger) until a poison message is
# dead-lettered by RocketMQ and re-driven by the operator. The job system: J2 kills two instances at crash points
# (after its work, after a claim), J3 stops one (a zombie whose late outcome is fenced), J7 cuts PostgreSQL's link.
ci_scenarios() {
  case "$1" in
    copilot) echo "B9 B15 T2" ;;
    jobs) echo "J2 J3 J7" ;;
    *) echo "scripts/stack.sh: no CI scenarios listed for system '$1' (add at most three)" >&2; return 1 ;;
  esac
}

native_scenarios() {
  local system="$1" ids
  ids="$(ci_scenarios "$system")"
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
