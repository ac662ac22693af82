"""The scenario catalogue, workloads, invariant checkers and the runner (the history they record is harness.history)."""
