"""Seed 001's device-inspection pipeline, the fixed variant: IS probe nodes with local outboxes (probe), workers under
slot leases fenced by epoch (worker, ingest), a leader supervising heartbeats and moving slots (leader), the tables
(models), the known defects (bugs) and coverage targets (coverage). Imports only the kernel; its effects are
performed by a shell (systems/inspection/sim.py in simulation)."""
