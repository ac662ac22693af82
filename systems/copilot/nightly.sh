# The Copilot's own nightly steps, sourced by scripts/nightly.sh after the generic ones ($o is its output dir).
# Its whole catalogue again at the documented windows (CI and the generic step run them scaled by 0.25).
step sortie run --system copilot --all --seed 1 --time-factor 1 --out "$o/native-tf1"
# CI's former gate: each injected bug caught within 300 explored runs at seed 1 itself, shrunk briefly.
step sortie explore-bench --system copilot --seeds 1 --runs 300 --workers 2 --shrink-steps 10 \
  --out "$o/explore-bench-seed-1.json"
# The stream tier's benchmark: 5x with 5,000 idle SSE streams held open beside the profile's.
step slo_reported sortie load --system copilot --profile 5x --duration 2m --idle-streams 5000 --seed 1 \
  --out "$o/load-5x-idle-streams"
# Mutation testing on a sample (scripts/mutation.sh): each mutant judged by the scenarios that execute its line costs
# about 15-20 s on a loaded 2-core machine (60-140 s when each ran the whole catalogue), plus one coverage record
# per run (4-9 min), so 5 mutants per module (about 1.5 hours for its 48 modules); the whole table is by hand
# (--sample 30 --publish).
step bash scripts/mutation.sh --system copilot --sample 5 --out "$o/mutation"
