#!/usr/bin/env bash
# The slow tier, too long for CI's budget (docs/ci.md). For every system (a package under systems/, found by itself):
# its catalogue in simulation at 20 seeds; the simulated selfcheck at seed 1 (every bug x every scenario, a step per
# bug) and at seed 2 (each bug against the scenarios its registry entry names); 2,000 explored runs; explore-bench
# (every injected bug at five explore seeds, a step per bug); its whole catalogue on its real stack (CI runs three
# scenarios; a step per six scenarios, each on a fresh stack, at System.nightly_time_factor), the native selfcheck
# (each bug against its named scenarios, a step per eight bugs on one stack switched between them); ten minutes of
# fuzz on its stack; 10-minute loads at 1x and 5x; then what the system adds in systems/<name>/nightly.sh (its
# mutation sample, loads under faults, ...).
# Before them, every test that starts a whole native stack.
#   bash scripts/nightly.sh [--resume] [SYSTEM...]
#     no SYSTEM: everything (many hours); SYSTEM...: only those systems' parts (no whole-stack tests)
#     --resume: skip each step that already passed at this commit (the ledger, below)
# Output under $OUT (default out/nightly). The ledger, $OUT/ledger.tsv, gets a line per step: commit, command,
# passed|failed|interrupted, seconds (scripts/nightly-ledger.sh). No session sees the whole run end, so run it in a
# clone kept at one commit (git clone REPO DIR; cd DIR; bash scripts/nightly.sh --resume copilot) and resume it
# there: a step stopped midway (the process group killed) wrote no line and runs again from its start. Exit 1 if
# any step failed (each printed with "!! failed" and the run goes on); 130 on Ctrl-C.
set -euo pipefail
RESUME=0
if [[ "${1:-}" == "--resume" ]]; then RESUME=1; shift; fi
source "$(dirname "$0")/stack-env.sh"
source "$(dirname "$0")/nightly-ledger.sh"
OUT="${OUT:-out/nightly}"
LEDGER="$OUT/ledger.tsv"
COMMIT=$(git rev-parse HEAD)
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  COMMIT+="-dirty"
  if (( RESUME )); then echo "--resume: uncommitted changes; the ledger's results hold per commit" >&2; exit 2; fi
fi
mkdir -p "$OUT"
status=0

system_parts() {  # system_parts NAME: shell assignments of what nightly needs of it (scenarios.systems.System)
  python - "$1" <<'PY'
import shlex
import sys
from scenarios.catalogue import load_catalogue
from scenarios.systems import load_system
system = load_system(sys.argv[1])
parts = {"explore": system.explore, "stack": system.stack_runner, "fuzz": system.fuzz, "load": system.load}
print(*(f"has_{part}={int(value is not None)}" for part, value in parts.items()))
print(f"time_factor={system.nightly_time_factor or ''}")
print(f"bugs=({shlex.join(system.bugs)})")
print(f"native=({shlex.join(s.id for s in load_catalogue(system.name).values() if 'native' in s.shells)})")
PY
}

NATIVE_SCENARIOS_PER_STACK=6  # a step short enough to finish in a session; a stack's start and stop cost ~100 s
NATIVE_BUGS_PER_STACK=8  # the native selfcheck's step: 8 bugs' named scenarios (~1-2 each), well within a session

nightly_system() {
  local s="$1" o="$OUT/$1" parts has_explore has_stack has_fuzz has_load time_factor bugs native chunk
  parts=$(system_parts "$s")
  eval "$parts"
  # Twenty seeds: a scenario that misses its purpose at a few seeds in a hundred (the Copilot's C3 and R11 did, at 2
  # of 43 and 2 of 100) shows up here before a user who sets SEED meets it.
  for seed in $(seq 1 20); do
    step sortie simulate --system "$s" --all --seed "$seed" --no-report --out "$o/sim-seed-$seed"
  done
  for bug in "${bugs[@]}"; do  # every bug x every simulated scenario: the table of which scenarios catch it
    step sortie selfcheck --system "$s" --bug "$bug" --seed 1 --out "$o/selfcheck-sim/$bug"
  done
  # At a second seed, the scenarios each bug's registry entry promises catch it (the rest of the table is incidental).
  step sortie selfcheck --system "$s" --named --seed 2 --out "$o/selfcheck-sim-seed-2"
  if (( has_explore )); then
    step sortie explore --system "$s" --runs 2000 --seed 1 --out "$o/explore"  # nothing found, every target reached
    for bug in "${bugs[@]}"; do
      step sortie explore-bench --system "$s" --bug "$bug" --seeds 5 --runs 1000 --out "$o/explore-bench/$bug.json"
    done
  fi
  if (( has_stack )); then
    # Its whole native catalogue, a step per NATIVE_SCENARIOS_PER_STACK scenarios (each on a fresh stack).
    for (( i = 0; i < ${#native[@]}; i += NATIVE_SCENARIOS_PER_STACK )); do
      chunk=("${native[@]:i:NATIVE_SCENARIOS_PER_STACK}")
      step sortie run --system "$s" "${chunk[@]/#/--scenario=}" --seed 1 ${time_factor:+--time-factor "$time_factor"} \
        --out "$o/native/${chunk[0]}-${chunk[-1]}"
    done
    # Each bug against the scenarios its registry entry names, a step per NATIVE_BUGS_PER_STACK bugs on one stack
    # (switched from bug to bug where the system's runner can: scenarios.systems.BugSwitch; else a stack per bug).
    for (( i = 0; i < ${#bugs[@]}; i += NATIVE_BUGS_PER_STACK )); do
      chunk=("${bugs[@]:i:NATIVE_BUGS_PER_STACK}")
      step sortie selfcheck --stack native --system "$s" "${chunk[@]/#/--bug=}" --named --seed 1 \
        --out "$o/selfcheck-native/${chunk[0]}-${chunk[-1]}"
    done
  fi
  if (( has_fuzz )); then  # its API against its OpenAPI document, on its real stack where it has one
    step sortie fuzz --system "$s" --minutes 10 --seed 1 --out "$o/fuzz"
  fi
  if (( has_load )); then
    step slo_reported sortie load --system "$s" --profile 1x --duration 10m --seed 1 --out "$o/load-1x"
    step slo_reported sortie load --system "$s" --profile 5x --duration 10m --seed 1 --out "$o/load-5x"
  fi
  # What this system adds (sourced: it has step, slo_reported, OUT and $o).
  if [[ -f "systems/$s/nightly.sh" ]]; then source "systems/$s/nightly.sh"; fi
}

if (( $# == 0 )); then
  # Every whole-stack test, one at a time (two stacks at once on two cores starve each other): those CI runs in
  # scripts/stack.sh and those marked nightly (the kill of each process kind, the lifecycle, the external and
  # containers providers, the loads of tests/load). The catalogue's own tests are each system's native catalogue.
  step python -m pytest -n 0 -p no:cacheprovider -m "whole_stack and not catalogue" --durations=25
  # The tests too slow for the test command that need no stack (marked nightly), two at a time.
  step python -m pytest -n 2 -p no:cacheprovider -m "nightly and not whole_stack" --durations=25
  set -- $(python -c 'from scenarios.systems import system_names; print(*system_names())')
fi
for system in "$@"; do
  nightly_system "$system"
done
exit "$status"
