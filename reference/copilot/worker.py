"""A reference worker as its own OS process: `python -m reference.copilot.worker ROLE --health-port N`.

Roles: publisher (outbox -> broker), dispatcher (TaskCreated/TaskCancelRequested consumer), report-worker,
reconciler. Settings come from SORTIE_* environment variables (reference.copilot.settings). The process's health
server and its graceful stop on SIGTERM are every system's (kernel.worker).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Generator
from typing import Any

from kernel.worker import run_worker
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER, REPORT_WORKER, consumer_loop
from reference.copilot.services.outbox import publisher_loop
from reference.copilot.services.reconcile import reconciler_loop
from reference.copilot.settings import Settings, build_runtime

# role -> (adapters it needs, the loop it runs)
ROLES: dict[str, tuple[dict[str, bool], Callable[[Policy], Generator[Any, Any, None]]]] = {
    "publisher": ({"broker": True, "listen": True}, publisher_loop),
    "dispatcher": ({"broker": True, "platform": True, "store": True, "notifier": True},
                   lambda p: consumer_loop(DISPATCHER, p)),
    "report-worker": ({"broker": True, "store": True, "notifier": True}, lambda p: consumer_loop(REPORT_WORKER, p)),
    "reconciler": ({"platform": True, "store": True, "notifier": True}, reconciler_loop),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.copilot.worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--health-port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.role} %(levelname)s %(message)s")
    settings = Settings.from_env()
    needs, loop = ROLES[args.role]
    return run_worker(args.role, lambda: build_runtime(settings, role=args.role, **needs),
                      lambda: loop(settings.make_policy()), args.health_port)


if __name__ == "__main__":
    sys.exit(main())
