"""Operators' task streams (SSE) on the real stack, for B7: each client holds ``/v1/stream`` open through
the clients' Toxiproxy link, remembers the newest version of each task it was told about, and after a
drop reconnects and resyncs by version (a snapshot read of every task it knows). At the end each client
states the version it believes; the scenario compares that with the database."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import requests

from harness.history import FAIL, INFO, OK

Record = Callable[[str, str, str, dict[str, Any]], None]  # (process, type, f, value)


class StreamClient:
    def __init__(self, n: int, user: str, token: str, stream_url: str, api_url: str, record: Record) -> None:
        self.process, self.user = f"stream-{n}", user
        self.stream_url, self.api_url, self.record = stream_url, api_url, record
        self.headers = {"Authorization": f"Bearer {token}"}
        self.known: dict[str, int] = {}
        self.stop = threading.Event()
        self._resp: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name=self.process, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        dropped, backoff = False, 0.5
        while not self.stop.is_set():
            try:
                with requests.get(f"{self.stream_url}/v1/stream", headers=self.headers, stream=True,
                                  timeout=(3.0, 30.0)) as resp:
                    if resp.status_code != 200:
                        raise requests.ConnectionError(f"stream answered {resp.status_code}")
                    self._resp = resp
                    self.record(self.process, INFO, "stream-open", {"user_id": self.user, "after_drop": dropped})
                    if dropped:
                        self.resync("resync")
                    dropped, backoff = False, 0.5
                    # decode_unicode: lines of text (requests types them bytes)
                    for line in cast(Iterator[str], resp.iter_lines(decode_unicode=True)):
                        if self.stop.is_set():
                            return
                        if line and line.startswith("data:"):
                            change = json.loads(line[5:])
                            tid, version = change["task_id"], int(change["version"])
                            self.known[tid] = max(version, self.known.get(tid, -1))
            except Exception as exc:
                if self.stop.is_set():
                    return  # close() pulled the connection from under the reader
                if not isinstance(exc, (requests.RequestException, ValueError)):
                    raise
                if not dropped:
                    self.record(self.process, INFO, "stream-drop", {"user_id": self.user,
                                                                    "error": type(exc).__name__})
                dropped = True
            else:
                if not self.stop.is_set() and not dropped:
                    self.record(self.process, INFO, "stream-drop", {"user_id": self.user, "error": "EOF"})
                dropped = True
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 4.0)

    def resync(self, f: str) -> None:
        """Read the snapshot of every task this client knows; a newer version there was missed on the stream.

        Records one ``<f>-done`` operation even when the client knows no task yet: whether it knew any when
        the stream dropped depends on flight timing, the resync itself does not."""
        missed = 0
        for tid in sorted(self.known):
            before = self.known[tid]
            try:
                resp = requests.get(f"{self.api_url}/v1/tasks/{tid}", headers=self.headers, timeout=10)
            except requests.RequestException as exc:
                self.record(self.process, INFO, f, {"task_id": tid, "error": type(exc).__name__})
                continue
            if resp.status_code != 200:
                self.record(self.process, FAIL, f, {"task_id": tid, "status": resp.status_code,
                                                    "code": _code(resp)})
                continue
            now = int(resp.json()["version"])
            missed += now > before
            self.known[tid] = max(before, now)
            self.record(self.process, OK, f, {"task_id": tid, "stream_version": before, "version": now})
        self.record(self.process, OK, f"{f}-done", {"user_id": self.user, "tasks": len(self.known),
                                                    "missed_changes": missed})

    def close(self) -> None:
        """Stop listening, then state what the stream believes (``stream-final``)."""
        self.stop.set()
        if self._resp is not None:
            with contextlib.suppress(Exception):
                self._resp.close()
        self._thread.join(timeout=10)
        self.resync("stream-final")


def _code(resp: requests.Response) -> str:
    with contextlib.suppress(ValueError):
        return str(resp.json().get("code"))
    return f"HTTP_{resp.status_code}"
