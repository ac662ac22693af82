"""Hand-built FinalState + History fixtures for the invariant checkers.

``baseline()`` builds a small, fully consistent run: every task has a legal audit chain starting at creation,
one outbox event (SENT) per version, the subscribed consumers processed each event once, flights in the
platform ledger match the tasks and their recorded dispatch attempts, COMPLETED tasks have an uploaded report
whose object is in the store, and the history holds each task's confirm and platform operations; each task's
draft version is approved before its confirm, in a site whose airspace is open, by a user who may operate the
site and the device. Every checker holds on it. Tests then break one thing and expect the matching checker to
name the task and the operations of the history that concern it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from harness.history import FAIL, INFO, INVOKE, OK, History, Op
from systems.copilot.checkers import CheckContext
from systems.copilot.state import FinalState

T0 = 1_767_225_600.0  # epoch seconds of history time 0 (2026-01-01T00:00:00Z)
BOUND_S = 600.0

# Paths through the state machine, by final status (each step is one audited transition after CREATED).
PATHS: dict[str, list[str]] = {
    "COMPLETED": ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "COMPLETED"],
    "CANCELLED_IN_FLIGHT": ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "CANCELLED"],
    "CANCELLED_EARLY": ["CANCELLED"],
    "FAILED_PRECHECK": ["QUEUED", "VALIDATING", "FAILED"],
    "MANUAL_REVIEW": ["QUEUED", "VALIDATING", "DISPATCHING", "MANUAL_REVIEW"],
    "DISPATCHING": ["QUEUED", "VALIDATING", "DISPATCHING"],
}
EVENT_TYPE = {"CREATED": "TaskCreated", "CANCEL_PENDING": "TaskCancelRequested", "COMPLETED": "TaskCompleted"}
CONSUMER = {"TaskCreated": "dispatcher", "TaskCancelRequested": "dispatcher", "TaskCompleted": "report-worker"}
FLOWN = {"COMPLETED", "CANCELLED_IN_FLIGHT"}  # paths whose task really flew (one ledger entry)
AREAS = ("SITE-001", "SITE-002", "SITE-003")  # every site requires approval
DEVICE = "DRONE-0001"


@dataclass
class Scene:
    state: FinalState = field(default_factory=lambda: FinalState(
        t0=T0, heal_time=0.0, end_time=0.0,
        areas=[{"id": a, "airspace_open": True, "requires_approval": True} for a in AREAS]))
    history: History = field(default_factory=History)
    _audit_id: int = 0
    _event_no: int = 0
    _flight_no: int = 0

    # ---------------------------------------------------------------- building

    def op(self, time: float, process: str, type_: str, f: str, **value: Any) -> Op:
        return self.history.add(time, process, type_, f, value)

    def audit(self, task_id: str | None, at: float, frm: str | None, to: str | None, fv: int | None,
              tv: int | None, *, actor: str = "dispatcher", action: str = "STEP") -> dict[str, Any]:
        self._audit_id += 1
        row = {"id": self._audit_id, "task_id": task_id, "action": action, "actor": actor, "from": frm, "to": to,
               "from_version": fv, "to_version": tv, "at": T0 + at}
        self.state.audit.append(row)
        return row

    def event(self, task_id: str, event_type: str, version: int, at: float, *, processed: bool = True,
              status: str = "SENT") -> dict[str, Any]:
        self._event_no += 1
        row = {"id": f"evt-{self._event_no:04d}", "task_id": task_id, "event_type": event_type,
               "task_version": version, "status": status, "created_at": T0 + at,
               "sent_at": T0 + at + 0.1 if status == "SENT" else None}
        self.state.outbox.append(row)
        consumer = CONSUMER.get(event_type)
        if processed and consumer is not None and status == "SENT":
            self.state.processed.append({"consumer": consumer, "event_id": row["id"], "task_id": task_id})
        return row

    def flight(self, task_id: str, at: float, status: str, *, ended_at: float | None = None,
               cancelled_at: float | None = None) -> dict[str, Any]:
        self._flight_no += 1
        row = {"external_id": f"FLT-{self._flight_no:06d}", "request_id": f"{task_id}:1", "reference": task_id,
               "device_id": DEVICE, "created_at": T0 + at, "status": status,
               "ended_at": T0 + ended_at if ended_at is not None else None, "cancel_requested_at": None,
               "cancelled_at": T0 + cancelled_at if cancelled_at is not None else None}
        self.state.ledger.append(row)
        return row

    def approve(self, draft_id: str, version: int, at: float, status: str = "APPROVED") -> dict[str, Any]:
        row = {"id": f"appr-{len(self.state.approvals) + 1:04d}", "draft_id": draft_id, "draft_version": version,
               "status": status, "approver_id": "approver-1", "decided_at": T0 + at}
        self.state.approvals.append(row)
        return row

    def permit(self, user: str, area: str, device: str = DEVICE) -> None:
        self.state.area_permissions.add((user, area))
        self.state.device_permissions.add((user, device))

    def task(self, task_id: str, path: str | list[str], *, user: str, key: str, start: float,
             area: str = AREAS[0]) -> dict[str, Any]:
        """A confirmed task that went along ``path`` (a PATHS name, or the statuses after CREATED), with
        everything a correct run leaves behind (its draft's version 1 approved, its user permitted)."""
        steps = PATHS[path] if isinstance(path, str) else list(path)
        flown = path in FLOWN if isinstance(path, str) else "EXECUTING" in steps
        proc = f"user-{task_id}"
        draft = f"draft-{task_id}"
        self.approve(draft, 1, start - 0.5)
        self.permit(user, area)
        self.op(start, proc, INVOKE, "confirm", user_id=user, key=key, draft_id=draft, draft_version=1, attempt=0)
        self.op(start + 0.01, proc, OK, "confirm", user_id=user, key=key, draft_id=draft, draft_version=1,
                attempt=0, task_id=task_id, replayed=False)
        self.audit(task_id, start, None, "CREATED", None, 0, actor=user, action="TASK_CREATED")
        self.event(task_id, "TaskCreated", 0, start)
        status, t = "CREATED", start
        flight = None
        for version, to in enumerate(steps, start=1):
            t += 1.0
            if to == "DISPATCHING":  # the device check just before the pre-flight check (I23)
                self.op(t - 0.6, "dispatcher-1", INVOKE, "get_device", task_id=task_id, method="get_device")
                self.op(t - 0.55, "dispatcher-1", OK, "get_device", task_id=task_id, method="get_device",
                        online=True, battery=80.0)
            if to == "EXECUTING" and flown and flight is None:  # the platform call, in the history
                self.op(t - 0.5, "dispatcher-1", INVOKE, "create_flight", task_id=task_id, method="create_flight",
                        request_id=f"{task_id}:1")
                flight = self.flight(task_id, t - 0.4, "EXECUTING")
                self.op(t - 0.3, "dispatcher-1", OK, "create_flight", task_id=task_id, method="create_flight",
                        request_id=f"{task_id}:1", external_id=flight["external_id"], status="EXECUTING")
            if to == "COMPLETED" and flight is not None:
                flight.update(status="COMPLETED", ended_at=T0 + t - 0.2)
            if to == "CANCELLED" and flight is not None:
                flight.update(status="CANCELLED", cancel_requested_at=T0 + t - 0.6, cancelled_at=T0 + t - 0.2,
                              ended_at=T0 + t - 0.2)
            confirmed = status == "CANCEL_PENDING" and to == "CANCELLED"  # the platform's cancelled event
            how = {"actor": "platform-events", "action": "CANCEL_CONFIRMED"} if confirmed else \
                {"action": "DISPATCH_STARTED"} if to == "DISPATCHING" else {}
            self.audit(task_id, t, status, to, version - 1, version, **how)
            self.event(task_id, EVENT_TYPE.get(to, "TaskStatusChanged"), version, t)
            status = to
        row = {"id": task_id, "user_id": user, "idempotency_key": key, "status": status, "version": len(steps),
               "external_task_id": flight["external_id"] if flight else None, "device_id": DEVICE,
               "created_at": T0 + start, "updated_at": T0 + t, "alert_count": 0, "last_telemetry_seq": 0,
               "dispatch_attempts": 1 if "DISPATCHING" in steps else 0, "area_id": area, "draft_id": draft,
               "draft_version": 1}
        self.state.tasks.append(row)
        if "DISPATCHING" in steps:  # the dispatch attempt, closed by the platform's answer
            outcome = "ACCEPTED" if flight else "PENDING" if status == "DISPATCHING" else "UNKNOWN"
            self.state.dispatch_attempts.append({
                "task_id": task_id, "attempt": 1, "request_id": f"{task_id}:1", "outcome": outcome,
                "external_task_id": flight["external_id"] if flight else None,
                "error_code": "PLATFORM_TIMEOUT" if outcome == "UNKNOWN" else None})
        if status == "COMPLETED":
            key_ = f"reports/{task_id}.json"
            digest = f"sha-{task_id}"
            self.state.reports.append({"task_id": task_id, "status": "UPLOADED", "object_key": key_,
                                       "sha256": digest, "attempts": 1, "last_error": None})
            self.state.objects[key_] = digest
        self.state.end_time = max(self.state.end_time, t + 1.0)
        return row

    def deliver_all(self, at: float) -> list[Op]:
        """The broker's delivery (attempt 1) of every event a consumer processed, recorded at ``at``."""
        outbox = {o["id"]: o for o in self.state.outbox}
        return [self.op(at, f"{p['consumer']}-1", INFO, "deliver", group=p["consumer"], event_id=p["event_id"],
                        event_type=outbox[p["event_id"]]["event_type"], task_id=p["task_id"], attempt=1)
                for p in self.state.processed]

    def replace_op(self, index: int, *, type_: str | None = None, drop: tuple[str, ...] = (), **value: Any) -> Op:
        """Rewrite one recorded operation in place (operations are immutable)."""
        old = self.history.ops[index]
        new_value = {k: v for k, v in old.value.items() if k not in drop} | value
        op = Op(old.index, old.time, old.process, type_ or old.type, old.f, new_value)
        self.history.ops[index] = op
        return op

    def forget_task(self, task_id: str) -> None:
        """Remove every database row of the task (the platform's ledger and the object store keep theirs)."""
        st = self.state
        st.tasks = [t for t in st.tasks if t["id"] != task_id]
        st.audit = [a for a in st.audit if a["task_id"] != task_id]
        st.outbox = [o for o in st.outbox if o["task_id"] != task_id]
        st.processed = [p for p in st.processed if p["task_id"] != task_id]
        st.reports = [r for r in st.reports if r["task_id"] != task_id]
        st.dispatch_attempts = [a for a in st.dispatch_attempts if a["task_id"] != task_id]

    # ---------------------------------------------------------------- reading

    def ctx(self, *, fast_path_modelled: bool = True) -> CheckContext:
        """A hand-made run is a simulation: its fast path's latency is the scene's to say (I25)."""
        return CheckContext(self.history, self.state, recovery_bound_s=BOUND_S, fast_path_modelled=fast_path_modelled)

    def ops_of(self, task_id: str, fs: tuple[str, ...] | None = None) -> list[int]:
        """Indices of the operations whose value names the task (what a checker should point at)."""
        return [op.index for op in self.history.ops
                if op.value.get("task_id") == task_id and (fs is None or op.f in fs)]

    def the_task(self, task_id: str) -> dict[str, Any]:
        return next(t for t in self.state.tasks if t["id"] == task_id)

    def chain(self, task_id: str) -> list[dict[str, Any]]:
        return [a for a in self.state.audit if a["task_id"] == task_id]

    def events(self, task_id: str) -> list[dict[str, Any]]:
        return [o for o in self.state.outbox if o["task_id"] == task_id]

    def flights(self, task_id: str) -> list[dict[str, Any]]:
        return [f for f in self.state.ledger if f["reference"] == task_id]

    def copy(self) -> Scene:
        return copy.deepcopy(self)


# Task ids of the baseline, by what happened to them.
COMPLETED = "task-completed"
CANCELLED_IN_FLIGHT = "task-cancelled-in-flight"
CANCELLED_EARLY = "task-cancelled-early"
FAILED_PRECHECK = "task-failed-precheck"
MANUAL_REVIEW = "task-manual-review"
OTHER_COMPLETED = "task-completed-2"


def baseline() -> Scene:
    s = Scene()
    s.op(0.0, "nemesis", INFO, "start-fault", fault="duplicate-delivery", prob=0.5)
    s.task(COMPLETED, "COMPLETED", user="operator-001", key="k-1", start=1.0)
    s.task(CANCELLED_IN_FLIGHT, "CANCELLED_IN_FLIGHT", user="operator-001", key="k-2", start=2.0)
    s.task(CANCELLED_EARLY, "CANCELLED_EARLY", user="operator-002", key="k-1", start=3.0)
    s.task(FAILED_PRECHECK, "FAILED_PRECHECK", user="operator-002", key="k-2", start=4.0)
    s.task(MANUAL_REVIEW, "MANUAL_REVIEW", user="operator-003", key="k-1", start=5.0)
    s.task(OTHER_COMPLETED, "COMPLETED", user="operator-003", key="k-2", start=6.0)
    # A client retry with the same key, answered with the same task (a replay is not a violation).
    s.op(8.0, "user-retry", INVOKE, "confirm", user_id="operator-001", key="k-1", draft_id=f"draft-{COMPLETED}",
         draft_version=1, attempt=1)
    s.op(8.1, "user-retry", OK, "confirm", user_id="operator-001", key="k-1", draft_id=f"draft-{COMPLETED}",
         draft_version=1, attempt=1, task_id=COMPLETED, replayed=True)
    # A refused confirm (no task): recorded, names no task.
    s.op(9.0, "user-bad", INVOKE, "confirm", user_id="operator-002", key="k-9", draft_id="draft-x", draft_version=2)
    s.op(9.1, "user-bad", FAIL, "confirm", user_id="operator-002", key="k-9", draft_id="draft-x", draft_version=2,
         code="STALE_DRAFT_VERSION")
    # The owner's read of a finished task, answered with its last state (I24: a state the task had).
    s.op(9.5, "user-read", INVOKE, "read", user_id="operator-001", task_id=COMPLETED)
    s.op(9.6, "user-read", OK, "read", user_id="operator-001", task_id=COMPLETED, status="COMPLETED", version=5)
    s.op(10.0, "nemesis", INFO, "stop-fault", fault="duplicate-delivery")
    s.state.heal_time = 10.0
    return s
