#!/usr/bin/env bash
# The main job: every scenario in deterministic simulation, no services. Extra args go to `sortie simulate`.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
exec sortie simulate --all --seed "${SEED:-1}" --out "${OUT:-out/sim}" "$@"
