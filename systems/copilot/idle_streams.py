"""Idle SSE streams for the stream-tier benchmark (``sortie load --idle-streams N``): one asyncio process opens
N ``GET /v1/stream`` connections to a loopback address, holds them for a bounded time, reads (and counts) what
arrives, and writes a JSON summary. Raw asyncio streams, no HTTP library: the client must cost far less than
the server it measures.

Each stream belongs to one of the given users (round robin), so the streams also receive the fan-out of those
users' task changes: "idle" means the client sends nothing, not that the server has nothing to send.

    python -m systems.copilot.idle_streams --url http://127.0.0.1:PORT --token-secret S --count 5000 \\
        --users u1,u2 --duration 120 --out idle.json

Bounded: at most ``--count`` (<= 20,000) connections, opened at most ``--open-rate`` per second, held at most
``--duration`` seconds; only loopback hosts are accepted. The process raises its own open-file limit.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import resource
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MAX_COUNT = 20_000
OPEN_RATE = 250.0  # connections opened per second: each open costs the tier ~1 ms of CPU (TLS-free JWT + ASGI)


class Tally:
    def __init__(self) -> None:
        self.opened = 0
        self.open_failed = 0
        self.refused: dict[str, int] = {}
        self.broken = 0
        self.events = 0
        self.heartbeats = 0
        self.open_ms: list[float] = []
        self.peak_open = 0
        self.open_now = 0

    def summary(self) -> dict[str, Any]:
        xs = sorted(self.open_ms)

        def q(p: float) -> float | None:
            return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 1) if xs else None

        return {"opened": self.opened, "open_failed": self.open_failed, "refused": self.refused,
                "broken": self.broken, "peak_open": self.peak_open, "events": self.events,
                "heartbeats": self.heartbeats, "open_ms": {"p50": q(50), "p95": q(95), "p99": q(99)}}


async def hold(host: str, port: int, token: str, until: float, tally: Tally) -> None:
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
    except (OSError, TimeoutError):
        tally.open_failed += 1
        return
    try:
        writer.write(f"GET /v1/stream HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        status = head.split(b" ", 2)[1].decode()
        if status != "200":
            tally.refused[status] = tally.refused.get(status, 0) + 1
            return
        tally.opened += 1
        tally.open_ms.append((time.monotonic() - t0) * 1000)
        tally.open_now += 1
        tally.peak_open = max(tally.peak_open, tally.open_now)
        try:
            while (left := until - time.monotonic()) > 0:
                try:
                    chunk = await asyncio.wait_for(reader.read(65536), left)
                except TimeoutError:
                    break
                if not chunk:
                    tally.broken += 1
                    break
                tally.events += chunk.count(b"event: task")
                tally.heartbeats += chunk.count(b": heartbeat")
        finally:
            tally.open_now -= 1
    except (OSError, asyncio.IncompleteReadError, TimeoutError, IndexError):
        tally.broken += 1
    finally:
        writer.close()


async def run(url: str, tokens: list[str], count: int, duration_s: float, open_rate: float, tally: Tally) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    until = time.monotonic() + duration_s
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = []
    for i in range(count):
        if stop.is_set() or time.monotonic() >= until:
            break
        tasks.append(asyncio.create_task(hold(host, port, tokens[i % len(tokens)], until, tally)))
        await asyncio.sleep(1.0 / open_rate)
    try:  # every stream ends itself at `until`; a signal ends them all at once
        async with asyncio.timeout(max(0.0, until - time.monotonic()) + 2.0):
            await stop.wait()
    except TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def raise_open_files_limit(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need + 256
    if soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def main(argv: list[str] | None = None) -> int:
    from reference.copilot.http.auth import issue_token

    ap = argparse.ArgumentParser(prog="python -m systems.copilot.idle_streams", description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-secret", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--users", required=True, help="comma-separated user ids (operators) the streams belong to")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--open-rate", type=float, default=OPEN_RATE, help="connections opened per second")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    host = urlsplit(args.url).hostname or ""
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"only loopback targets: {host}")
    if not 0 < args.count <= MAX_COUNT or not 0 < args.duration <= 3600:
        raise SystemExit(f"--count in 1..{MAX_COUNT}, --duration in (0, 3600]")
    limit = raise_open_files_limit(args.count)
    users = [u for u in args.users.split(",") if u]
    tokens = [issue_token(args.token_secret, u, ttl_s=args.duration + 600) for u in users]
    tally = Tally()
    t0 = time.time()
    asyncio.run(run(args.url, tokens, args.count, args.duration, args.open_rate, tally))
    out = {"url": args.url, "count": args.count, "users": len(users), "duration_s": args.duration,
           "nofile": limit, "wall_s": round(time.time() - t0, 1), **tally.summary()}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
