"""Operators' task streams (SSE) on the real stack, for B7 and I38: each client holds ``/v1/stream`` open through the
clients' Toxiproxy link and keeps its belief and resyncs as systems.copilot.stream_belief says (written once for both
shells; systems.copilot.sim_streams drives it in simulation)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import requests

from harness.history import INFO
from systems.copilot.stream_belief import (
    FINAL_RECONNECT_S,
    LIST_LIMIT,
    RECONNECT_FIRST_S,
    RECONNECT_MAX_S,
    STREAM_DROP,
    STREAM_FINAL,
    STREAM_OPEN,
    Answer,
    Belief,
    Snapshot,
    resync,
)

Record = Callable[[str, str, str, dict[str, Any]], None]  # (process, type, f, value)
class StreamClient:
    def __init__(self, n: int, user: str, token: str, stream_url: str, api_url: str, record: Record) -> None:
        self.process, self.user = f"stream-{n}", user
        self.stream_url, self.api_url, self.record = stream_url, api_url, record
        self.headers = {"Authorization": f"Bearer {token}"}
        self.belief = Belief()
        self.stop = threading.Event()
        self.serving = threading.Event()  # open, and resynced after its last drop
        self._resp: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name=self.process, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        dropped, backoff = False, RECONNECT_FIRST_S
        while not self.stop.is_set():
            try:
                with requests.get(f"{self.stream_url}/v1/stream", headers=self.headers, stream=True,
                                  timeout=(3.0, 30.0)) as resp:
                    if resp.status_code != 200:
                        raise requests.ConnectionError(f"stream answered {resp.status_code}")
                    self._resp = resp
                    self.record(self.process, INFO, STREAM_OPEN, {"user_id": self.user, "after_drop": dropped})
                    if dropped:
                        self.resync("resync")
                    dropped, backoff = False, RECONNECT_FIRST_S
                    self.serving.set()
                    # decode_unicode: lines of text (requests types them bytes)
                    for line in cast(Iterator[str], resp.iter_lines(decode_unicode=True)):
                        if self.stop.is_set():
                            return
                        if line:
                            self.belief.hear(line)
                            if self.belief.stale:  # the stream may have missed changes
                                self.resync("resync")
            except Exception as exc:
                self.serving.clear()
                if self.stop.is_set():
                    return  # close() pulled the connection from under the reader
                if not isinstance(exc, (requests.RequestException, ValueError)):
                    raise
                if not dropped:
                    self.record(self.process, INFO, STREAM_DROP, {"user_id": self.user,
                                                                  "error": type(exc).__name__})
                dropped = True
            else:
                self.serving.clear()
                if not self.stop.is_set() and not dropped:
                    self.record(self.process, INFO, STREAM_DROP, {"user_id": self.user, "error": "EOF"})
                dropped = True
            self.stop.wait(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    def resync(self, f: str) -> None:
        """``resync`` over HTTP, at the API."""
        steps = resync(self.belief, self.process, self.user, f)
        answer: Answer | None = None
        try:
            while True:
                ask = steps.send(answer)  # type: ignore[arg-type]  # None starts the generator
                answer = self._get(f"/v1/tasks/{ask.task_id}" if isinstance(ask, Snapshot)
                                   else f"/v1/tasks?limit={LIST_LIMIT}")
        except StopIteration as done:
            for type_, name, value in done.value:
                self.record(self.process, type_, name, value)

    def _get(self, path: str) -> Answer:
        try:
            resp = requests.get(f"{self.api_url}{path}", headers=self.headers, timeout=10)
        except requests.RequestException as exc:
            return 0, {"error": type(exc).__name__}
        if resp.status_code != 200:
            return resp.status_code, {"code": _code(resp)}
        return 200, resp.json()

    def close(self) -> None:
        """Stop listening, then state what the stream believes (``stream-final``). A dropped stream first gets up to
        FINAL_RECONNECT_S to reconnect and resync, as its client would after the run."""
        self.serving.wait(FINAL_RECONNECT_S)
        self.stop.set()
        if self._resp is not None:
            with contextlib.suppress(Exception):
                self._resp.close()
        self._thread.join(timeout=10)
        self.resync(STREAM_FINAL)


def _code(resp: requests.Response) -> str:
    with contextlib.suppress(ValueError):
        return str(resp.json().get("code"))
    return f"HTTP_{resp.status_code}"
