"""The scenario catalogue, workloads, history recorder, invariant checkers and the runner."""
