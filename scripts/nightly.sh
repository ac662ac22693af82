#!/usr/bin/env bash
# The slow tier, too long for CI's budget (docs/ci.md): every test that starts a whole native stack (CI runs
# those not marked nightly), the whole catalogue on the native stack (CI runs three scenarios per system), again
# at the documented windows, the selfcheck on the native stack (a fresh stack per bug), the simulation at more
# seeds, 2,000 explored runs and explores of every injected bug at five seeds, a mutation sample of each reference
# (scripts/mutation.sh), and 10-minute loads.
# Run it before resolving an issue that touches the stack. Output under out/nightly/.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out/nightly}"
status=0
step() { echo "== $*"; "$@" || { echo "!! failed: $*"; status=1; }; }
# Every whole-stack test, one at a time (two stacks at once on two cores starve each other): those CI runs in
# scripts/stack.sh and those marked nightly (the kill of each process kind, the lifecycle, the external and
# containers providers, the loads of tests/load). The catalogue's own tests are `sortie run --all` below.
step python -m pytest -n 0 -p no:cacheprovider -m "whole_stack and not catalogue" --durations=25
# Twenty seeds: a scenario that misses its purpose at a few seeds in a hundred (C3 and R11 did, at 2 of 43 and 2 of
# 100) shows up here before a user who sets SEED meets it.
for seed in $(seq 1 20); do
  step sortie simulate --all --seed "$seed" --out "$OUT/sim-seed-$seed"
done
for seed in 1 2 3; do
  step sortie simulate --system jobs --all --seed "$seed" --out "$OUT/sim-jobs-seed-$seed"
done
step sortie selfcheck --seed 1 --out "$OUT/selfcheck-sim"  # every bug x every simulation scenario
step sortie selfcheck --seed 2 --out "$OUT/selfcheck-sim-seed-2"
step sortie explore --runs 2000 --seed 1 --out "$OUT/explore"  # the clean reference: nothing found, every target reached
step sortie explore --system jobs --runs 2000 --seed 1 --out "$OUT/explore-jobs"  # the job system's fixed variant
# Every injected bug at explore seeds 1-5: runs to the first find, shrunk size.
step sortie explore-bench --seeds 5 --runs 1000 --out "$OUT/explore-bench.json"
# CI's former gate (2.5 minutes, out of CI since its budget went to 35 minutes): each bug caught within 300 runs at
# seed 1 itself (the last, no-version-predicate, at run 94), shrunk briefly.
step sortie explore-bench --seeds 1 --runs 300 --workers 2 --shrink-steps 10 --out "$OUT/explore-bench-seed-1.json"
step sortie explore-bench --system jobs --seeds 5 --runs 1000 --out "$OUT/explore-bench-jobs.json"
# Mutation testing on a sample (issue 54): mutants of each module of each reference, judged by the system's
# catalogue in simulation; a survivor is a defect no check sees (table.md and survivors.md in each DIR). A Copilot
# survivor costs about 70 s (its whole catalogue), a job system's about 8 s, so the Copilot's sample is 3 per module
# (about an hour for its 46 modules on 2 cores) and the job system's 10. The whole table (30 per module) is by hand:
# bash scripts/mutation.sh --system NAME --sample 30 --publish.
step bash scripts/mutation.sh --system copilot --sample 3 --out "$OUT/mutation-copilot"
step bash scripts/mutation.sh --system jobs --sample 10 --out "$OUT/mutation-jobs"
step sortie run --stack native --all --seed 1 --out "$OUT/native"  # CI runs three of these (scripts/stack.sh)
step sortie run --stack native --all --seed 1 --time-factor 1 --out "$OUT/native-tf1"
step sortie run --system jobs --all --seed 1 --out "$OUT/native-jobs"  # the job system's catalogue on its stack
step sortie selfcheck --stack native --seed 1 --out "$OUT/selfcheck-native"
# The job system's bugs on its stack, each against the scenarios its registry entry names (a fresh stack per bug).
step sortie selfcheck --stack native --system jobs --named --seed 1 --out "$OUT/selfcheck-native-jobs"
step slo_reported sortie load --profile 1x --duration 10m --stack native --seed 1 --out "$OUT/load-1x"
step slo_reported sortie load --profile 5x --duration 10m --stack native --seed 1 --out "$OUT/load-5x"
# The stream tier's benchmark (issue 13): 5x with 5,000 idle SSE streams held open beside the profile's.
step slo_reported sortie load --profile 5x --duration 2m --idle-streams 5000 --stack native --seed 1 \
  --out "$OUT/load-5x-idle-streams"
step slo_reported sortie load --system jobs --profile 1x --duration 10m --seed 1 --out "$OUT/load-jobs-1x"
step slo_reported sortie load --system jobs --profile 5x --duration 10m --seed 1 --out "$OUT/load-jobs-5x"
step slo_reported sortie load --system jobs --profile 1x --duration 5m --fault db-outage --fault-window 60s --seed 1 \
  --out "$OUT/load-jobs-1x-db-outage"
step slo_reported sortie load --system jobs --profile 1x --duration 5m --fault worker-kill --seed 1 --out "$OUT/load-jobs-1x-kill"
exit "$status"
