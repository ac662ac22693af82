"""Tunable limits of the workers: retries, thresholds, batch sizes. One object, passed in."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from reference.copilot import bugs
from reference.copilot.effects import Jitter, Sleep, Work
from reference.copilot.states import TaskStatus


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries, exponential backoff with equal jitter: before retry n+1 sleep d/2 + U(0, d/2) with
    d = min(cap, base * 2^n) (AWS's "equal jitter": spread like full jitter, but never a burst of retries)."""

    attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 8.0

    def tries(self) -> Iterable[int]:
        """Attempt numbers 0, 1, ... of one call, at most ``attempts`` of them."""
        if bugs.active(bugs.RETRY_NO_CAP):
            return itertools.count()  # INJECTED BUG retry-no-cap: retries for as long as the call fails
        return range(self.attempts)

    def min_delay(self, n: int) -> float:
        """The shortest wait before retry n+1: half the exponential step ("equal jitter"), so retries are
        spaced at least this much whatever the jitter draws."""
        return min(self.cap_s, self.base_s * (2**n)) / 2

    def max_delay(self, n: int) -> float:
        """The longest wait before retry n+1: the whole exponential step (half of it, plus jitter up to the other
        half)."""
        return min(self.cap_s, self.base_s * (2**n))

    def delay(self, n: int, fraction: float) -> float:
        """The wait before retry n+1 for a jitter draw ``fraction`` in [0, 1): from min_delay(n) to max_delay(n)."""
        step = self.max_delay(n)
        return step / 2 + fraction * step / 2

    def backoff(self, n: int) -> Work[float]:
        delay = self.delay(n, (yield Jitter(1.0)))
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
    # Retries are bounded (seed 000 §5.5); what runs out goes DEAD for an operator to re-drive (services.ops).
    # An outbox row: 240 claims that failed to publish. Each row backs off by its own claims (services.outbox), so
    # it goes DEAD no sooner than sum(min_delay(n) for n < 239) after its first failure: 59 minutes of a broker that
    # is down (the seed's "close RocketMQ, the outbox still holds the event and resends it on recovery" holds for any
    # shorter outage; invariant I30).
    outbox_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=240, base_s=1.0, cap_s=30.0))
    # A report: 20 failed uploads, about 25 minutes of an object store that is down.
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
    # An idle outbox publisher that is notified of new rows (services.outbox.OUTBOX_CHANNEL) still claims this
    # often: for rows whose claim lease ran out (a publisher died) and for any notification a broken link lost.
    outbox_wait_s: float = 5.0
    # A DISPATCHING, EXECUTING or CANCEL_PENDING task the reconciler cannot settle because the platform does not
    # answer its query goes to MANUAL_REVIEW once it has not moved for this long (a healthy platform answers; this is
    # how long it may stay unreachable before a person must look).
    escalate_after_s: float = 1800.0

    @property
    def reconcile_bound_s(self) -> float:
        """How long a task whose event was lost may wait for the reconciler once the platform answers: the longest
        stale threshold, the scan that finds it, and the scan in progress. A recovery bound shorter than this blames
        the reference for waiting as its policy says it should."""
        return max(self.stale_after_s.values()) + 2 * self.reconcile_interval_s

    def publisher_pause(self, failed_rounds: int) -> float:
        """How long an outbox publisher pauses after its ``failed_rounds``-th failed round in a row (a round whose
        publish the broker refused, or whose claim failed): doubling from the idle poll, at most 30 s. A round with
        nothing to claim says nothing about the broker and leaves the count as it was (invariant I30)."""
        return min(30.0, self.poll_idle_s * 2 ** min(failed_rounds, 6))
