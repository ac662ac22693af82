"""Crash points: the one mechanism by which both shells crash, pause or hold a process at a named place
in the core (like etcd's gofail). A point is data — (role, effect, when) -> action — and both shells read
the same points at the same places:
- the simulation (scenarios.sim.world) around each effect a simulated process performs;
- the real stack's processes (kernel.runtime.Runtime) around each effect they perform, armed through a
  JSON file the harness writes (``FilePoints``).

``role``: the kind of process — publisher, dispatcher, report-worker, reconciler, api (a user's request) — or a
group of roles another system registered (the job system's ``instance``: either pool instance): a group's point
fires at the first of its members' processes to reach it, its count shared by all of them.
``effect``: what it is doing — a platform method (create_flight), ``publish`` (or ``publish:<event type>``: only
a publish of that event), ``ack``, ``receive``, or the name of a transaction (``confirm.create``, ``cancel``,
``dispatch.write_back`` ...).
``when``: ``after`` the effect succeeded (the world saw it happen; the process dies before acting on the
answer), ``before`` it starts, or ``before-write``: inside the transaction, after its reads and before its
first write (``hold`` only: the window in which a competing transaction commits), or ``before-commit``: inside the
transaction, after its last statement and before its commit (``stop`` or ``kill``: a process stopped there keeps the
row locks its statements took; real stacks only, where the process's runtime checks it: the simulation's write lock
covers the whole database, so a transaction stopped there would hold up every writer, not the rows it wrote).
``action``: ``kill`` (SIGKILL; the supervisor restarts the process), ``stop`` (SIGSTOP for ``seconds``, a
zombie), ``hold`` (the process waits ``seconds`` at the point and then goes on).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from dataclasses import dataclass
from typing import Any

from kernel.effects import crash_name, crash_names

WHEN = ("before", "after", "before-write", "before-commit")
ACTIONS = ("kill", "stop", "hold")
# The roles crash points may name: the Copilot's processes, and those another system registers (jobs: its pool
# instances and reclaimer).
ROLES: set[str] = {"api", "publisher", "dispatcher", "report-worker", "reconciler"}
ROLE_GROUPS: dict[str, frozenset[str]] = {}  # a group's name -> its member roles


def register_roles(*roles: str, group: str | None = None) -> None:
    """Roles crash points may name; with ``group``, also that group of them (a point for whichever reaches it first)."""
    ROLES.update(roles)
    if group is not None:
        ROLES.add(group)
        ROLE_GROUPS[group] = ROLE_GROUPS.get(group, frozenset()) | frozenset(roles)


def armed_roles(role: str) -> tuple[str, ...]:
    """The roles whose points a process of ``role`` takes: its own, then each group it belongs to."""
    return (role, *sorted(g for g, members in ROLE_GROUPS.items() if role in members))


def crash_this_process(action: str) -> None:
    """A real process's ``kill`` or ``stop`` at a point, from the thread that reached it; after a stop, returns once
    the process is resumed (SIGCONT). The SIGSTOP goes to the calling thread, not the process: a process-directed
    one is taken by another thread (the main one), and the caller ran on past its point until the group stop
    reached it, doing what it was to stop before (21 of 30 times with two busy threads; test_crash_points.py). A
    SIGKILL takes every thread at once either way."""
    if action == "stop":
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        raise ValueError(f"not an action on the process: {action!r}")


@dataclass(frozen=True)
class CrashPoint:
    role: str
    effect: str
    when: str = "after"
    action: str = "kill"
    count: int = 1
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"crash point role {self.role!r}: one of {', '.join(sorted(ROLES))}")
        if self.when not in WHEN:
            raise ValueError(f"crash point when {self.when!r}: one of {', '.join(WHEN)}")
        if self.action not in ACTIONS:
            raise ValueError(f"crash point action {self.action!r}: one of {', '.join(ACTIONS)}")
        if (self.when == "before-write") != (self.action == "hold"):
            raise ValueError("a hold happens before a transaction's first write, and only there")
        if self.action in ("stop", "hold") and self.seconds <= 0:
            raise ValueError(f"a {self.action} crash point needs seconds > 0")
        if self.count < 1:
            raise ValueError("a crash point fires at least once (count >= 1)")

    @property
    def key(self) -> str:
        return f"{self.effect}@{self.when}"

    def as_json(self) -> dict[str, Any]:
        return {"role": self.role, "effect": self.effect, "when": self.when, "action": self.action,
                "count": self.count, "seconds": self.seconds}


effect_name = crash_name  # the name a crash point uses for an effect (kernel.effects)
effect_names = crash_names  # every name, the most specific first (``publish:TaskCreated``, ``publish``)


_INSTANCE = re.compile(r"[-.]\d+(\.\d+)*$")


def role_of(process: str) -> str:
    """The role of a process name: ``dispatcher-2`` -> dispatcher; a simulated user's requests are served by
    the API (``user-17.1`` -> api), as on the real stack."""
    if process.startswith(("user", "attacker", "reader", "operator")):
        return "api"
    return _INSTANCE.sub("", process)


def marker_path(path: str, point: CrashPoint) -> str:
    """The file that counts a point's firings on the real stack: one line per firing, the pid of the process that
    took it (so the harness resumes the process a ``stop`` stopped, not another one stopped by another point)."""
    return f"{path}.{point.role}.{point.key}.fired"


def fired_pids(marker: str) -> list[int]:
    """The pids that took a point, in the order they did (``marker_path``)."""
    try:
        with open(marker) as fh:
            return [int(line) for line in fh.read().split()]
    except (OSError, ValueError):
        return []


class FilePoints:
    """The real stack's view of the armed points: ``{"<role>": {"<effect>@<when>": {...CrashPoint fields}}}``
    in a JSON file the harness writes; a process takes its role's points and its groups' (``armed_roles``).
    Firings are counted across the processes of the role the point names and their restarts (a line with the pid
    per firing, appended under an exclusive lock: ``marker_path``)."""

    def __init__(self, path: str, role: str) -> None:
        self.path, self.role = path, role
        self._mtime = -1.0
        self._points: dict[tuple[str, str], CrashPoint] = {}

    def _load(self) -> dict[tuple[str, str], CrashPoint]:
        """(role, ``<effect>@<when>``) -> the point, for each role this process takes points of."""
        import json
        import os

        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return {}
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                with open(self.path) as fh:
                    data = json.loads(fh.read())
                self._points = {(role, k): CrashPoint(**{**v, "role": role})
                                for role in armed_roles(self.role) for k, v in data.get(role, {}).items()}
            except (OSError, ValueError, KeyError, TypeError):
                self._points = {}
        return self._points

    def take(self, effect: str, when: str) -> CrashPoint | None:
        """The point armed here, if it has a firing left (which this call consumes)."""
        points = self._load()
        if not points:
            return None
        import fcntl
        import os

        for role in armed_roles(self.role):
            point = points.get((role, f"{effect}@{when}"))
            if point is None:
                continue
            with open(marker_path(self.path, point), "a+") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.seek(0)
                if fh.read().count("\n") >= point.count:
                    continue
                fh.write(f"{os.getpid()}\n")
                fh.flush()
                os.fsync(fh.fileno())
            return point
        return None


def write_points(path: str, points: list[CrashPoint]) -> None:
    """Arm points for the real stack's processes (atomically; merged with what is armed already: arming a
    point again adds its count, as the simulation does)."""
    import json
    import os

    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = {}
    for p in points:
        entry = {k: v for k, v in p.as_json().items() if k != "role"}
        armed = data.setdefault(p.role, {}).get(p.key)
        if armed is not None:  # armed again: firings are counted since the first arming (FilePoints.take)
            entry["count"] += int(armed.get("count", 0))
        data[p.role][p.key] = entry
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
