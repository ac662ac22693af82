"""The reference Copilot task/dispatch backend (seed 000): a functional core behind small ports."""
