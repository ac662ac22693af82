#!/usr/bin/env bash
# Short loads on the native stack (docs/capacity.md; scripts/nightly.sh runs 5x and 10-minute ones). Exit non-zero
# for violated invariants (1) or a failed measurement (5); an SLO missed (3) is printed and written to load.json, not
# asserted here. The Copilot's confirm-capacity burst is 200 confirms here (1,000 by default: 36 s plus its settling); the
# job system's 1x runs with a database outage (producers retry with their keys) and writes its recovery figures.
set -euo pipefail
source "$(dirname "$0")/stack-env.sh"
OUT="${OUT:-out}"
slo_reported sortie load --profile 1x --duration 60s --stack native --seed 1 --capacity-confirms 200 --out "$OUT/ci-load-1x"
slo_reported sortie load --system jobs --profile 1x --duration 60s --fault db-outage --fault-window 10s --seed 1 \
  --out "$OUT/ci-load-jobs-1x"
