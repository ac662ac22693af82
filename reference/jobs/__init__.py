"""The second system under test: the job table and worker pool of seed 004 with the task DAG of seed 002, in a
seed-faithful and a fixed variant (reference.jobs.repo). Like reference/ (the Copilot), it imports no shell."""

import logging

# A library's loggers say nothing unless the application configures logging (the stack's worker does; the
# simulation records what happened in its history instead of on stderr).
logging.getLogger("jobs").addHandler(logging.NullHandler())
