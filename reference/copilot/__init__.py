"""The reference Copilot task/dispatch backend (seed 000): a functional core behind small ports."""

import logging

# A library's loggers say nothing unless the application configures logging (the stack's processes do; the
# simulation records what happened in its history and report instead of printing the backend's alerts on stderr).
logging.getLogger("reference").addHandler(logging.NullHandler())
