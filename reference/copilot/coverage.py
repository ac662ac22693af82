"""The Copilot's coverage targets (kernel.coverage says what a target is). Its workers declare them next to the
points they mark, at import; `sortie explore` counts them over each run."""

from __future__ import annotations

from kernel.coverage import Coverage, Window

COVERAGE = Coverage()
TARGETS = COVERAGE.targets
WINDOWS = COVERAGE.windows
target = COVERAGE.target
reached = COVERAGE.reached
window = COVERAGE.window
counting = COVERAGE.counting

__all__ = ["COVERAGE", "TARGETS", "WINDOWS", "Window", "counting", "reached", "target", "window"]
