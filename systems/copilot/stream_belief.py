"""What an operator's task stream client believes and how it resyncs (B7, I38), written once for both shells: it
remembers the newest version and status of each task the stream told it about (``Belief``), and after a drop, or
when the stream says it may have missed changes (``event: resync``), resyncs from the persisted state (the user's
recently changed tasks, then a snapshot read of every other task it knows: ``resync``). At the end each client states
what it believes (``stream-final``); I38 compares that with the database. Drivers: systems.copilot.streams on the
real stack, systems.copilot.sim_streams in simulation. No I/O here."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from harness.history import FAIL, INFO, OK
from reference.copilot import coverage

STREAM_OPEN, STREAM_DROP, STREAM_FINAL = "stream-open", "stream-drop", "stream-final"
RESYNC_EVENT = "event: resync"  # reference.copilot.http.sse.RESYNC_FRAME's event line
LIST_LIMIT = 200  # GET /v1/tasks?limit=: the most a page holds
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.5, 4.0  # a client's backoff between reconnects, doubling
# At the end a dropped client gets this long to reconnect and resync before it states its belief: a run can end just
# after the clients' link came back, inside a backoff (found by explore: seed 1 run 1739, closed 0.9 s after the heal,
# the client 4 s from its next try, judged on a belief it had had no chance to resync). One that is still dropped
# after it is judged on what it believes.
FINAL_RECONNECT_S = 2 * RECONNECT_MAX_S + 2.0
RESYNC_FOUND_MISSED = coverage.target(
    "stream-resync-found-missed", "a stream's client resynced (after a drop or a resync hint) and found a change its "
    "stream had missed")


@dataclass
class Belief:
    """What one stream client believes of its user's tasks: the newest (version, status) the stream or a resync told
    it. Versions only grow, so an older change heard late (a resync raced by the stream) changes nothing."""

    known: dict[str, tuple[int, str]] = field(default_factory=dict)
    stale: bool = False  # the stream said it may have missed changes: resync before trusting it

    def hear(self, line: str) -> None:
        """One line of the SSE stream (sse.frame, sse.RESYNC_FRAME): a ``data:`` line of a ``task`` event carries a
        change; ``event: resync`` says changes may have been missed."""
        if line == RESYNC_EVENT:
            self.stale = True
        elif line.startswith("data:") and '"task_id"' in line:
            change = json.loads(line[5:])
            self.learn(str(change["task_id"]), int(change["version"]), str(change["status"]))

    def learn(self, task_id: str, version: int, status: str) -> None:
        if version > self.version(task_id):
            self.known[task_id] = (version, status)

    def version(self, task_id: str) -> int:
        return self.known.get(task_id, (-1, ""))[0]


@dataclass(frozen=True)
class Snapshot:
    """What ``resync`` asks its driver for: the task's snapshot (``GET /v1/tasks/<id>``). It is answered with
    (HTTP status, body): status 0 when no answer came (the body's ``error`` says why)."""

    task_id: str


@dataclass(frozen=True)
class TaskList:
    """What ``resync`` asks first (but at ``stream-final``): the user's most recently changed tasks
    (``GET /v1/tasks?limit=LIST_LIMIT``), answered like a Snapshot."""


Read = Snapshot | TaskList
Answer = tuple[int, dict[str, Any]]


def resync(belief: Belief, process: str, user: str, f: str
           ) -> Generator[Read, Answer, list[tuple[str, str, dict[str, Any]]]]:
    """Reread the persisted state: the user's recently changed tasks first (which finds the tasks the stream never
    told of too), then the snapshot of every other task the client knows; a newer version there was missed on the
    stream. Returns the history operations (type, f, value) to record, after the reads.
    ``stream-final`` does not list the user's tasks: it states what the client believed, for I38 to judge.

    Records one ``<f>-done`` operation even when the client knows no task yet: whether it knew any when the stream
    dropped depends on flight timing, the resync itself does not."""
    belief.stale = False
    ops: list[tuple[str, str, dict[str, Any]]] = []
    missed, listed = 0, set()
    if f != STREAM_FINAL:
        status, body = yield TaskList()
        if status == 200:
            for task in body["tasks"]:
                tid, now = str(task["id"]), int(task["version"])
                before, believed = belief.known.get(tid, (-1, ""))
                missed += now > before
                belief.learn(tid, now, str(task["status"]))
                listed.add(tid)
                ops.append((OK, f, {"task_id": tid, "stream_version": before, "stream_status": believed,
                                    "version": now, "status": task["status"], "listed": True}))
        else:
            ops.append((INFO if status == 0 else FAIL, f"{f}-list", {"status": status, **body}))
    for tid in sorted(set(belief.known) - listed):
        before, believed = belief.known[tid]
        status, body = yield Snapshot(tid)
        if status == 0:
            ops.append((INFO, f, {"task_id": tid, "error": body.get("error")}))
            continue
        if status != 200:
            ops.append((FAIL, f, {"task_id": tid, "status": status, "code": str(body.get("code"))}))
            continue
        now = int(body["version"])
        missed += now > before
        belief.learn(tid, now, str(body["status"]))
        ops.append((OK, f, {"task_id": tid, "stream_version": before, "stream_status": believed, "version": now,
                            "status": body["status"]}))
    if missed and f != STREAM_FINAL:
        coverage.reached(RESYNC_FOUND_MISSED)
    if f != STREAM_FINAL and any(type_ != OK for type_, _, _ in ops):
        # A read got no answer (the database down: 503, retry): changes may still be missed, so the client resyncs
        # again at the stream's next frame, a heartbeat at the latest (found by explore: a resync in a db-outage).
        belief.stale = True
    ops.append((OK, f"{f}-done", {"user_id": user, "tasks": len(belief.known), "missed_changes": missed,
                                  "listed": len(listed)}))
    return ops
