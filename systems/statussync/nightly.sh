# The status sync's own nightly steps, sourced by scripts/nightly.sh after the generic ones ($o is its output dir;
# the generic steps ran its 1x and 5x loads). Seed 003 §15's other load cases, scaled as systems/statussync/load.py
# says: 10,000 idle connections held for two minutes (the full figure: about 3 minutes with the stack), a hot channel
# with 500 members, and a database restart under 1x.
step slo_reported sortie load --system statussync --profile idle --duration 2m --seed 1 --out "$o/load-idle"
step slo_reported sortie load --system statussync --profile hot --duration 5m --seed 1 --out "$o/load-hot"
step slo_reported sortie load --system statussync --profile db-restart --duration 3m --seed 1 --out "$o/load-db-restart"
