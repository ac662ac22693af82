"""Seed 003's task status sync (reference: reference/statussync/): its deployment in simulation
(systems.statussync.sim) with a Centrifugo model and client models, its invariants S1-S15
(systems.statussync.checkers), its faults, explore draws, rule matrix and catalogue (catalogue/*.yaml). The native
stack (MariaDB, Centrifugo) comes later: every scenario runs in simulation only for now."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The faults: imported with the system, which registers them (chaos.faults.registry("statussync")).
import systems.statussync.faults  # noqa: F401
from harness.history import History
from reference.statussync.bugs import BUGS, SEED, SEED_DEFECTS
from reference.statussync.service import TASK_NOT_FOUND
from scenarios.systems import System
from systems.statussync.checkers import INVARIANTS, SyncState
from systems.statussync.explore import EXPLORE
from systems.statussync.fuzz import FUZZ
from systems.statussync.load import load
from systems.statussync.rules import RULES
from systems.statussync.sim import SyncSpec


@contextmanager
def _injected(name: str) -> Iterator[Any]:
    """``seed``: the seed-faithful variant (the seed's own defects on together); any other name: one known bug."""
    with BUGS.injected(SEED_DEFECTS if name == SEED else name) as on:
        yield on


def _deploy(scenario: Any, seed: int, **overrides: Any) -> Any:
    from systems.statussync.sim import SyncDeployment

    return SyncDeployment(scenario.workload, seed)


def _no_overrides(which: str, value: dict[str, Any]) -> None:
    if value:
        raise ValueError(f"the status sync takes no {which}")


def _answered(code: str, why: str) -> Any:
    def check(h: History, s: SyncState) -> str | None:
        return None if any(op.f == "event.report" and op.type == "ok" and op.value.get("code") == code
                           for op in h.ops) else why
    check.__doc__ = f"Some report was answered {code}."
    return check


def _duplicate_answered(h: History, s: SyncState) -> str | None:
    """A report was answered from the dedup table (a retry after a lost answer, or an eventId sent again)."""
    return None if any(op.f == "event.report" and op.type == "ok" and op.value.get("duplicate") for op in h.ops) \
        else "no report was answered as a duplicate"


def _op_seen(f: str, why: str, **want: Any) -> Any:
    def check(h: History, s: SyncState) -> str | None:
        return None if any(op.f == f and all(op.value.get(k) == v for k, v in want.items()) for op in h.ops) \
            else why
    check.__doc__ = f"The history has a {f} op{' with ' + str(want) if want else ''}."
    return check


def _went_stale(h: History, s: SyncState) -> str | None:
    """The health reconciler marked a running step STALE."""
    return None if any(e["step_health"] == "STALE" for e in s.events) else "no step went STALE"


def _producers_raced(h: History, s: SyncState) -> str | None:
    """Two step producers of one task interleaved in its version order (A, B, A)."""
    by_task: dict[str, list[str]] = {}
    for e in s.events:
        if e["step_id"] and e["event_type"].startswith("STEP_") and e["event_type"] != "STEP_HEALTH_CHANGED":
            by_task.setdefault(e["task_id"], []).append(e["producer_id"])
    for producers in by_task.values():
        runs = [p for i, p in enumerate(producers) if i == 0 or producers[i - 1] != p]
        if len(runs) > len(set(runs)):
            return None
    return "no two producers of one task interleaved"


def _republished(h: History, s: SyncState) -> str | None:
    """An outbox row was published twice (its relay died before the mark, and the row was claimed again once its
    lease ran out)."""
    published = Counter(op.value["outbox_id"] for op in h.ops if op.f == "publish" and op.type == "ok")
    return None if any(n > 1 for n in published.values()) else "no outbox row was published twice"


def _dead_rows(h: History, s: SyncState) -> str | None:
    """Some outbox row went DEAD (a permanent publish error)."""
    return None if any(o["status"] == "DEAD" for o in s.outbox) else "no outbox row went DEAD"


def _producer_restarted(h: History, s: SyncState) -> str | None:
    """A killed producer was restarted and resumed from its ledger."""
    return None if any(op.f == "restart" and not str(op.value.get("process")).startswith(("relay", "health"))
                       for op in h.ops) else "no producer was restarted"


def _two_versions(h: History, s: SyncState) -> str | None:
    """Tasks bound to both status definition versions (the registry changed while tasks ran)."""
    bound = {t["status_definition_version"] for t in s.task_rows}
    return None if len(bound) > 1 else f"every task bound {sorted(bound)}"


EXPECTATIONS = {
    "duplicate-answered": _duplicate_answered,
    "conflict-refused": _answered("EVENT_ID_CONFLICT", "no reuse was refused"),
    "old-attempt-refused": _answered("STALE_ATTEMPT", "no old attempt was refused"),
    "old-sequence-refused": _answered("STALE_SEQUENCE", "no old sequence was refused"),
    "late-report-refused": _answered("TASK_TERMINAL", "no report after a task's end was refused"),
    "token-refused": _answered("TOKEN_MISMATCH", "no report was refused for its token"),
    "producers-raced": _producers_raced,
    "went-stale": _went_stale,
    "republished": _republished,
    "publish-failed": _op_seen("publish", "no publish failed", status=503),
    "dead-rows": _dead_rows,
    "not-recovered": _op_seen("recover", "no client failed to recover", recovered=False),
    "recovered": _op_seen("recover", "no client recovered from history", recovered=True),
    "notice-shown": _op_seen("notice", "no client showed a notice", type="TASK_FAILED"),
    "foreign-refused": _op_seen("detail-token", "no foreign detail token was refused", code=TASK_NOT_FOUND),
    "lru-closed": _op_seen("unsubscribe", "no client closed its least recently used detail to open a 21st"),
    "producer-restarted": _producer_restarted,
    "registry-changed": _two_versions,
}

def _stack_runner(req: Any) -> Any:
    from systems.statussync.stack import stack_runner  # the native stack's imports only when it runs

    return stack_runner(req)


SYSTEM = System(
    name="statussync", title="seed 003's task status sync: a status service, its outbox relays, Centrifugo, clients",
    catalogue_dir=Path(__file__).resolve().parent / "catalogue", catalogue_order="Y", workload_type=SyncSpec,
    invariants=INVARIANTS, expectations=EXPECTATIONS, deploy=_deploy, injected=_injected,
    bug_names=lambda: (SEED, *BUGS.names), bugs=BUGS.bugs, check_overrides=_no_overrides, explore=EXPLORE,
    rules=RULES, variants={"fixed": None, SEED: SEED}, stack_runner=_stack_runner,
    # Y13: no fault, every task's reports through both API replicas, failures and progress relayed to real
    # WebSocket clients whose belief S8, S9 and S12 judge (about 50 s with the stack's start and stop).
    ci_stack_scenarios=("Y13",), fuzz=FUZZ, load=load,
)
