"""The job system's shell-side parts: the service its handlers call (simulated), its invariants and the simulation
of a deployment (two instances of a worker pool and a reclaimer over one database)."""
