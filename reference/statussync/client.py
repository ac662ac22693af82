"""The client's merge rules (§8, §13.1): a view per task for the summary and one for the detail, each with its own
version gate (only a higher version is applied; a duplicate or an older publication changes nothing), the snapshot
loaded after subscribing with publications buffered meanwhile and replayed by version, notices shown once by their
id (a gate apart from the state's), LIVE / RECOVERING / STALE, and the detail subscriptions an LRU of at most 20.
Pure: the harness's client model (or a real client) feeds it what arrives and does what it answers."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reference.statussync.bugs import BUGS
from reference.statussync.models import PENDING, RUNNING, TERMINAL

LIVE, RECOVERING, STALE = "LIVE", "RECOVERING", "STALE"
MAX_DETAIL_SUBSCRIPTIONS = 20  # §6.5: maxDetailSubscriptionsPerConnection, an application policy


def init_order() -> tuple[str, str]:
    """§8.3: subscribe, then load the snapshot (the publications in between are buffered)."""
    return ("snapshot", "subscribe") if BUGS.active("snapshot-then-subscribe") else ("subscribe", "snapshot")


@dataclass
class ClientStore:
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id -> the summary's task body
    detail: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id -> the detail projection
    summary_version: dict[str, int] = field(default_factory=dict)
    detail_version: dict[str, int] = field(default_factory=dict)
    notices_seen: set[str] = field(default_factory=set)
    state: str = RECOVERING
    buffering: bool = False
    buffer: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def _gate(self, kind: str) -> dict[str, int]:
        if BUGS.active("one-version-gate"):
            return self.summary_version
        return self.summary_version if kind == "summary" else self.detail_version

    def receive(self, kind: str, message: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
        """A publication (or a snapshot's item): (the version applied or None, a notice to show or None)."""
        if self.buffering:
            self.buffer.append((kind, message))
            return None, None
        return self._apply(kind, message)

    def _apply(self, kind: str, message: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
        body = message["task"] if kind == "summary" else message
        task_id = str(body["id"] if kind == "summary" else body["taskId"])
        version = int(body["version"])
        gate = self._gate(kind)
        applied = None
        if version > gate.get(task_id, 0):
            gate[task_id] = version
            (self.summary if kind == "summary" else self.detail)[task_id] = body
            applied = version
        notice = message.get("notice")
        if notice is not None and notice["id"] not in self.notices_seen:
            self.notices_seen.add(notice["id"])
            return applied, notice
        return applied, None

    def begin_snapshot(self) -> None:
        self.buffering = True

    def end_snapshot(self, items: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, int]]:
        """Apply the snapshot's items, then what arrived meanwhile (by version): (kind, task, version) applied.
        Notices are not shown again from a snapshot (§8.5)."""
        self.buffering = False
        applied = []
        for kind, message in items:
            version, _ = self._apply(kind, {k: v for k, v in message.items() if k != "notice"})
            if version is not None:
                applied.append((kind, _task_of(kind, message), version))
        buffered, self.buffer = self.buffer, []
        for kind, message in buffered:
            version, _ = self._apply(kind, message)
            if version is not None:
                applied.append((kind, _task_of(kind, message), version))
        self.state = LIVE
        return applied

    def batch_known(self, open_details: Iterable[str]) -> dict[str, int]:
        """§13.2: what status:batchGet asks about, with the version known of each: every unfinished task shown (its
        summary's version), and every open detail not yet ended (the lower of its two versions, so that a detail
        behind its summary comes back too)."""
        opened = set(open_details)
        known = {}
        for task_id, version in self.summary_version.items():
            running = self.summary.get(task_id, {}).get("lifecycleStatus") in (PENDING, RUNNING)
            ended = self.detail.get(task_id, {}).get("lifecycleStatus") in TERMINAL
            if task_id in opened and not ended:
                known[task_id] = min(version, self.detail_version.get(task_id, 0))
            elif running:
                known[task_id] = version
        return known

    def resubscribed(self, recovered: bool) -> bool:
        """After a reconnect: True when the snapshot must be loaded (history could not prove continuity)."""
        if recovered or BUGS.active("ignores-recovered-false"):
            self.state = LIVE
            return False
        self.state = STALE
        return True


def _task_of(kind: str, message: dict[str, Any]) -> str:
    return str(message["task"]["id"] if kind == "summary" else message["taskId"])


@dataclass
class DetailSubscriptions:
    """The open detail subscriptions, least recently used first (§6.5)."""

    open: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def want(self, task_id: str) -> list[str]:
        """Open ``task_id``'s detail: the subscriptions to close first to stay within the limit."""
        if task_id in self.open:
            self.open.move_to_end(task_id)
            return []
        evicted = []
        while len(self.open) >= MAX_DETAIL_SUBSCRIPTIONS:
            evicted.append(self.open.popitem(last=False)[0])
        self.open[task_id] = None
        return evicted
