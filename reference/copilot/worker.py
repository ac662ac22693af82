"""A reference worker as its own OS process: `python -m reference.copilot.worker ROLE --health-port N`.

Roles: publisher (outbox -> broker), dispatcher (TaskCreated/TaskCancelRequested consumer), report-worker,
reconciler. Settings come from SORTIE_* environment variables (reference.copilot.settings). The process serves
GET /health on 127.0.0.1 once its adapters are built, and stops gracefully on SIGTERM: the current unit of work
finishes (a consumer's batch, a publisher's claimed batch), and the loop ends before the next one or in its next
sleep, so a worker with a backlog stops at once instead of running on until its supervisor kills it.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kernel.logs import DEFECT_MARK, is_defect, one_line
from reference.copilot.policy import Policy
from reference.copilot.runtime import LOOP_ENDED, Stopping
from reference.copilot.services.consumer import DISPATCHER, REPORT_WORKER, consumer_loop
from reference.copilot.services.outbox import publisher_loop
from reference.copilot.services.reconcile import reconciler_loop
from reference.copilot.settings import Settings, build_runtime

log = logging.getLogger("sortie.worker")

# role -> (adapters it needs, the loop it runs)
ROLES: dict[str, tuple[dict[str, bool], Callable[[Policy], Generator[Any, Any, None]]]] = {
    "publisher": ({"broker": True, "listen": True}, publisher_loop),
    "dispatcher": ({"broker": True, "platform": True, "store": True, "notifier": True},
                   lambda p: consumer_loop(DISPATCHER, p)),
    "report-worker": ({"broker": True, "store": True, "notifier": True}, lambda p: consumer_loop(REPORT_WORKER, p)),
    "reconciler": ({"platform": True, "store": True, "notifier": True}, reconciler_loop),
}


def serve_health(port: int, role: str, state: dict[str, Any]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/health" and state.get("ready")
            body = json.dumps({"role": role, "status": "ok" if ok else "starting", **state}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def _loop_ended(runtime: Any, error: BaseException | None) -> None:
    """Records in the run's history (when it keeps one) that the loop ended without being stopped (invariant I34)."""
    if runtime.recorder is not None:
        runtime.recorder.op("info", LOOP_ENDED, {"process": runtime.recorder.process,
                                                 "error": None if error is None else one_line(error)[:300]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.copilot.worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--health-port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.role} %(levelname)s %(message)s")
    settings = Settings.from_env()
    needs, loop = ROLES[args.role]
    state: dict[str, Any] = {"ready": False, "started_at": time.time()}
    health = serve_health(args.health_port, args.role, state) if args.health_port else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopping

    runtime = build_runtime(settings, role=args.role, **needs)
    runtime.sleep = sleep
    runtime.stop_requested = stop.is_set
    state["ready"] = True
    log.info("ready")
    try:
        runtime.run(loop(settings.make_policy()))
        if not stop.is_set():
            _loop_ended(runtime, None)
    except Stopping:
        log.info("stopped on signal")
    except Exception as exc:
        if is_defect(exc):  # with the mark a harness reads (kernel.logs.defects_in_log); the supervisor restarts it
            log.error("the %s loop ended %s%s", args.role, DEFECT_MARK, one_line(exc), exc_info=exc)
        if not stop.is_set():  # an error met while stopping (a client closed under it) is the stop's doing
            _loop_ended(runtime, exc)
        raise
    finally:
        if runtime.broker is not None and hasattr(runtime.broker, "close"):
            runtime.broker.close()
        if runtime.outbox_listener is not None:
            runtime.outbox_listener.close()
        if health is not None:
            health.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
