"""``python -m simulator``: run the platform simulator on a threaded werkzeug server."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from werkzeug.serving import make_server

from simulator.app import create_app, simulator_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8780, help="0 picks a free port (printed on start)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=1.0, help="model seconds per wall second")
    parser.add_argument("--devices", type=int, default=200, help="fleet size: DRONE-0001..")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("werkzeug").setLevel(args.log_level.upper())  # else it logs every request

    app = create_app(time_scale=args.time_scale, seed=args.seed, devices=args.devices)
    server = make_server(args.host, args.port, app, threaded=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() blocks until serve_forever returns, so it must run off the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"sortie simulator listening on http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    finally:
        simulator_of(app).close()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
