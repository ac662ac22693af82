"""The third system under test: seed 003's task status sync (a status service whose success means persisted, an
outbox relayed to a Centrifugo, clients that merge snapshots and publications by version). The fixed variant's
core, sans-IO: its schema (models), registries (registry), the event entry (service), the outbox relay (relay), the
health reconciler (reconciler), producers with a durable sourceSeq (producer) and the client's merge rules (client).
Like every reference, it imports only the kernel."""

import logging

# A library's loggers say nothing unless the application configures logging.
logging.getLogger("reference.statussync").addHandler(logging.NullHandler())
