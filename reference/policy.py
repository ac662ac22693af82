"""Tunable limits of the workers: retries, thresholds, batch sizes. One object, passed in."""

from __future__ import annotations

from dataclasses import dataclass, field

from reference.effects import Jitter, Sleep, Work
from reference.states import TaskStatus


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries, exponential backoff with full jitter (sleep ~ U(0, min(cap, base * 2^n)))."""

    attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 8.0

    def backoff(self, n: int) -> Work[float]:
        delay = yield Jitter(min(self.cap_s, self.base_s * (2**n)))
        yield Sleep(delay)
        return delay


@dataclass(frozen=True)
class Policy:
    platform_retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_dispatch_attempts: int = 3  # dispatches after a definite "not created"
    min_battery: float = 25.0
    max_deliveries: int = 5  # a message failing this often becomes a dead letter
    consumer_batch: int = 16
    invisible_s: float = 30.0
    outbox_batch: int = 50
    outbox_lease_s: float = 30.0
    outbox_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=1_000_000, base_s=1.0, cap_s=30.0))
    report_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=20, base_s=5.0, cap_s=120.0))
    reconcile_interval_s: float = 30.0
    reconcile_batch: int = 200
    # How long a task may sit in a status before the reconciler looks at it.
    stale_after_s: dict[TaskStatus, float] = field(default_factory=lambda: {
        TaskStatus.CREATED: 120.0,
        TaskStatus.QUEUED: 60.0,
        TaskStatus.VALIDATING: 60.0,
        TaskStatus.DISPATCHING: 60.0,
        TaskStatus.DISPATCH_FAILED: 30.0,
        TaskStatus.EXECUTING: 900.0,
        TaskStatus.CANCEL_PENDING: 60.0,
    })
    poll_idle_s: float = 0.5
