#!/usr/bin/env bash
# The slow tier, too long for CI's budget (docs/ci.md). For every system (a package under systems/, found by itself):
# its catalogue in simulation at 20 seeds, the simulated selfcheck at two, 2,000 explored runs, explore-bench (every
# injected bug at five explore seeds), its whole catalogue on its real stack (CI runs three scenarios), the native
# selfcheck (a fresh stack per bug, each against the scenarios its registry entry names) and 10-minute loads at 1x
# and 5x; then what the system adds in systems/<name>/nightly.sh (its mutation sample, loads under faults, ...).
# Before them, every test that starts a whole native stack.
#   bash scripts/nightly.sh               everything (hours)
#   bash scripts/nightly.sh SYSTEM...     only those systems' parts (no whole-stack tests)
# Run it before resolving an issue that touches the stack. Output under out/nightly/; exit 1 if any step failed
# (each failed step is printed with "!! failed:" and the run goes on).
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out/nightly}"
status=0
step() { local t0=$SECONDS; echo "== $*"; if "$@"; then echo "== $(( SECONDS - t0 )) s"; else echo "!! failed: $*"; status=1; fi; }

system_has() {  # system_has NAME stack|load|explore|fuzz: the system supplies that part (scenarios.systems.System)
  python - "$1" "$2" <<'PY'
import sys
from scenarios.systems import load_system
part = {"stack": "stack_runner", "load": "load", "explore": "explore", "fuzz": "fuzz"}[sys.argv[2]]
sys.exit(0 if getattr(load_system(sys.argv[1]), part) is not None else 1)
PY
}

nightly_system() {
  local s="$1" o="$OUT/$1"
  # Twenty seeds: a scenario that misses its purpose at a few seeds in a hundred (the Copilot's C3 and R11 did, at 2
  # of 43 and 2 of 100) shows up here before a user who sets SEED meets it.
  for seed in $(seq 1 20); do
    step sortie simulate --system "$s" --all --seed "$seed" --no-report --out "$o/sim-seed-$seed"
  done
  step sortie selfcheck --system "$s" --seed 1 --out "$o/selfcheck-sim"  # every bug x every simulated scenario
  step sortie selfcheck --system "$s" --seed 2 --out "$o/selfcheck-sim-seed-2"
  if system_has "$s" explore; then
    step sortie explore --system "$s" --runs 2000 --seed 1 --out "$o/explore"  # nothing found, every target reached
    step sortie explore-bench --system "$s" --seeds 5 --runs 1000 --out "$o/explore-bench.json"
  fi
  if system_has "$s" stack; then
    step sortie run --system "$s" --all --seed 1 --out "$o/native"
    step sortie selfcheck --stack native --system "$s" --named --seed 1 --out "$o/selfcheck-native"
  fi
  if system_has "$s" fuzz; then  # its API against its OpenAPI document, on its real stack where it has one
    step sortie fuzz --system "$s" --minutes 10 --seed 1 --out "$o/fuzz"
  fi
  if system_has "$s" load; then
    step slo_reported sortie load --system "$s" --profile 1x --duration 10m --seed 1 --out "$o/load-1x"
    step slo_reported sortie load --system "$s" --profile 5x --duration 10m --seed 1 --out "$o/load-5x"
  fi
  # What this system adds (sourced: it has step, slo_reported, OUT and $o).
  if [[ -f "systems/$s/nightly.sh" ]]; then source "systems/$s/nightly.sh"; fi
}

if (( $# == 0 )); then
  # Every whole-stack test, one at a time (two stacks at once on two cores starve each other): those CI runs in
  # scripts/stack.sh and those marked nightly (the kill of each process kind, the lifecycle, the external and
  # containers providers, the loads of tests/load). The catalogue's own tests are each system's `sortie run --all`.
  step python -m pytest -n 0 -p no:cacheprovider -m "whole_stack and not catalogue" --durations=25
  set -- $(python -c 'from scenarios.systems import system_names; print(*system_names())')
fi
for system in "$@"; do
  nightly_system "$system"
done
exit "$status"
