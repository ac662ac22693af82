# The inspection pipeline's own nightly steps, sourced by scripts/nightly.sh after the generic ones ($o is its output
# dir), which already run its loads at 1x and 5x for 10 minutes each (systems/inspection/load.py). The seed's third
# traffic level (§9: 1x / 2x / 5x): 2x, 10 minutes.
step slo_reported sortie load --system inspection --profile 2x --duration 10m --seed 1 --out "$o/load-2x"
# §4.4's bounds under load (docs/systems/inspection.md, "Faults under load"): D's RTO (a worker killed -9), F's drain
# after a 5-minute database outage, G's replay after a 5-minute broker outage.
step slo_reported sortie load --system inspection --profile 1x --duration 5m --fault worker-kill --seed 1 \
  --out "$o/load-1x-worker-kill"
step slo_reported sortie load --system inspection --profile 1x --duration 10m --fault db-outage --seed 1 \
  --out "$o/load-1x-db-outage"
step slo_reported sortie load --system inspection --profile 1x --duration 10m --fault broker-outage --seed 1 \
  --out "$o/load-1x-broker-outage"
# Three scenarios on a three-node RabbitMQ cluster (quorum queues with a member on each node, a Toxiproxy link to
# each; the processes try the nodes in order): a cold start, a worker killed -9, the broker away two minutes (every
# node's link cut). CI and the rest of the nightly run one node.
step env SORTIE_INSPECTION_RABBITMQ_NODES=3 sortie run --system inspection --scenario P1 --scenario P4 \
  --scenario P8 --seed 1 --out "$o/native-3-nodes"
# A reshard under load (§3.4, §4.5): 16 -> 24 slots, the new map in force after a 60 s notice, at 1x for 5 minutes;
# nothing lost or applied twice (V21), and load.json's "reshard" measures the migration (docs/systems/inspection.md).
step slo_reported sortie load --system inspection --profile 1x --duration 5m --fault reshard --seed 1 \
  --out "$o/load-1x-reshard"
