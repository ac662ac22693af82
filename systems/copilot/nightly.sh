# The Copilot's own nightly steps, sourced by scripts/nightly.sh after the generic ones ($o is its output dir). Its
# whole native catalogue runs there once, at the documented windows (System.nightly_time_factor 1).
# CI's former gate: each injected bug caught within 300 explored runs at seed 1. Read from the generic step's
# explore-bench at seed 1 (explore's run i draws its case from (seed, i) whatever the workers: the same runs, so they
# are not run again).
step python - "$o/explore-bench" 300 <<'PY'
import json
import sys
from pathlib import Path

from scenarios.systems import load_system

bench, bound = Path(sys.argv[1]), int(sys.argv[2])
first = {bug: json.loads(p.read_text())["bugs"][bug]["runs_to_first_find"][0] if (p := bench / f"{bug}.json").exists()
         else "no bench" for bug in load_system("copilot").bugs}
late = {bug: runs for bug, runs in first.items() if not isinstance(runs, int) or runs > bound}
print(f"seed 1, runs to the first find: {first}")
sys.exit(f"not found within {bound} runs at seed 1: {late}" if late else 0)
PY
# The stream tier's benchmark: 5x with 5,000 idle SSE streams held open beside the profile's.
step slo_reported sortie load --system copilot --profile 5x --duration 2m --idle-streams 5000 --seed 1 \
  --out "$o/load-5x-idle-streams"
# Mutation testing on a sample (scripts/mutation.sh): each mutant judged by the scenarios that execute its line costs
# about 15-20 s on a loaded 2-core machine (60-140 s when each ran the whole catalogue), plus one coverage record
# per run (4-9 min), so 5 mutants per module (about 1.5 hours for its 48 modules); the whole table is by hand
# (--sample 30 --publish). Its session resumes an interrupted run by itself (the same command).
step bash scripts/mutation.sh --system copilot --sample 5 --out "$o/mutation"
