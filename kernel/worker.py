"""A reference's worker as its own OS process, for every system: the health server a supervisor polls, and the main
loop that runs one worker generator on a kernel.runtime.Runtime until SIGTERM. The process serves GET /health on
127.0.0.1 once its adapters are built, and stops gracefully on SIGTERM: the current unit of work finishes (a
consumer's batch, a publisher's claimed batch), and the loop ends before the next one or in its next sleep, so a
worker with a backlog stops at once instead of running on until its supervisor kills it."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kernel.effects import Work
from kernel.logs import DEFECT_MARK, is_defect, one_line
from kernel.runtime import LOOP_ENDED, OpRecorder, Runtime, Stopping, loop_ended_value

log = logging.getLogger("sortie.worker")


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


def _loop_ended(recorder: OpRecorder | None, error: BaseException | None) -> None:
    """Records in the run's history (when it keeps one) that the loop ended without being stopped (I34, J11)."""
    if recorder is not None:
        recorder.op("info", LOOP_ENDED, loop_ended_value(recorder.process, error))


def run_worker(role: str, build: Callable[[], Runtime], work: Callable[[], Work[None]], health_port: int = 0) -> int:
    """Serve /health, build the runtime (``build``: its adapters), then run the worker generator ``work()`` on it
    until SIGTERM or SIGINT; a loop that ends on its own is recorded (and its defect logged with kernel.logs's mark)."""
    state: dict[str, Any] = {"ready": False, "started_at": time.time()}
    health = serve_health(health_port, role, state) if health_port else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopping

    runtime = build()
    runtime.sleep = sleep
    runtime.stop_requested = stop.is_set
    state["ready"] = True
    log.info("ready")
    try:
        runtime.run(work())
        if not stop.is_set():
            _loop_ended(runtime.recorder, None)
    except Stopping:
        log.info("stopped on signal")
    except Exception as exc:
        if is_defect(exc):  # with the mark a harness reads (kernel.logs.defects_in_log); the supervisor restarts it
            log.error("the %s loop ended %s%s", role, DEFECT_MARK, one_line(exc), exc_info=exc)
        if not stop.is_set():  # an error met while stopping (a client closed under it) is the stop's doing
            _loop_ended(runtime.recorder, exc)
        raise
    finally:
        if runtime.broker is not None and hasattr(runtime.broker, "close"):
            runtime.broker.close()
        if runtime.outbox_listener is not None:
            runtime.outbox_listener.close()
        if health is not None:
            health.shutdown()
    return 0
