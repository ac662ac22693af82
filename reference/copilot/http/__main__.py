"""``python -m reference.copilot.http``: serve the Copilot API on a threaded werkzeug server.

SQLite URLs get their schema created here (PostgreSQL schemas come from the Alembic migrations).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import sessionmaker
from werkzeug.serving import make_server

from reference.copilot.http.app import create_app, hub_of
from reference.copilot.models import Base
from reference.copilot.runtime import Runtime


def engine_for(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database in (None, "", ":memory:"):
        raise SystemExit("an in-memory SQLite database cannot be shared by server threads: use a file")
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    Base.metadata.create_all(engine)
    return engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.copilot.http", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("SORTIE_DATABASE_URL"), required=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700, help="0 picks a free port (printed on start)")
    parser.add_argument("--token-secret", default=os.environ.get("SORTIE_TOKEN_SECRET"))
    parser.add_argument("--webhook-token", default=os.environ.get("SORTIE_WEBHOOK_TOKEN"))
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    for name in ("database_url", "token_secret", "webhook_token"):
        if not getattr(args, name):
            parser.error(f"--{name.replace('_', '-')} is required (or its SORTIE_* environment variable)")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("werkzeug").setLevel(args.log_level.upper())

    engine = engine_for(args.database_url)
    runtime = Runtime(sessions=sessionmaker(engine, expire_on_commit=False))
    app = create_app(runtime, token_secret=args.token_secret, webhook_token=args.webhook_token)
    server = make_server(args.host, args.port, app, threaded=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        hub_of(app).close()  # ends the SSE streams so their threads finish
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"sortie api listening on http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
