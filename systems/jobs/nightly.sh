# The job system's own nightly steps, sourced by scripts/nightly.sh after the generic ones ($o is its output dir).
# Its loads under faults: a database outage, and instances killed.
step slo_reported sortie load --system jobs --profile 1x --duration 5m --fault db-outage --fault-window 60s --seed 1 \
  --out "$o/load-1x-db-outage"
step slo_reported sortie load --system jobs --profile 1x --duration 5m --fault worker-kill --seed 1 \
  --out "$o/load-1x-kill"
# Mutation testing on a sample (scripts/mutation.sh): a survivor costs about 8 s, so 10 mutants per module.
step bash scripts/mutation.sh --system jobs --sample 10 --out "$o/mutation"
