#!/usr/bin/env bash
# The catalogue on the real stack, CI's subset (scripts/nightly.sh runs all of it): for the Copilot one scenario per
# real-stack mechanism (a PostgreSQL trigger, each Toxiproxy link cut, each kind of crash point, a held transaction,
# the simulator's fault knobs and device states, Redis, SSE, the database role, a stale broker consumer), windows scaled by 0.25
# (`--time-factor 1` runs the documented ones); for the job system (PostgreSQL through Toxiproxy, two instances as processes) a killed worker, a
# zombie, double enqueues and a database outage. Installs what it needs; output under ${OUT:-out}/ci-native*.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out}"
ci_native="C1 C2 C3 C5 C6 R2 R12 R13 T1 T5 B1 B4 B5 B6 B7 B8 B9 S1 S5 S8"
# shellcheck disable=SC2046
sortie run --stack native $(printf -- '--scenario %s ' $ci_native) --seed 1 --out "$OUT/ci-native"
sortie run --system jobs --scenario J2 --scenario J3 --scenario J5 --scenario J7 --seed 1 --out "$OUT/ci-native-jobs"
