"""The status sync's coverage targets (kernel.coverage): the dangerous places a run must be seen to reach before its
green verdict means anything. Declared here, marked where they happen (service, relay, reconciler; the harness's
client model marks the client's)."""

from __future__ import annotations

from kernel.coverage import Coverage

COVERAGE = Coverage()

DUPLICATE_ANSWERED = COVERAGE.target(
    "duplicate-answered", "a retried eventId was answered from the dedup table (its first answer, no new version)")
CONFLICT_REFUSED = COVERAGE.target(
    "conflict-refused", "an eventId came again with other content and was refused")
STALE_ATTEMPT = COVERAGE.target(
    "old-attempt-refused", "an event of an older step attempt (a zombie waking up) was refused")
STALE_SEQUENCE = COVERAGE.target(
    "old-sequence-refused", "an event whose sourceSeq was not above its producer's last was refused (reordered)")
RACING_PRODUCERS = COVERAGE.target(
    "racing-producers", "a producer's event was judged while another step of the task ran (parallel producers "
    "racing for the task's row lock)")
HEALTH_STALE = COVERAGE.target(
    "heartbeat-stale", "the health reconciler marked a running step STALE")
HEALTH_RACED = COVERAGE.target(
    "stale-races-completion", "a step the reconciler had marked STALE then completed or failed")
LEASE_TAKEN_OVER = COVERAGE.target(
    "lease-taken-over", "a relay claimed an outbox row whose lease had run out (its relay stopped or killed)")
PUBLISH_RETRIED = COVERAGE.target(
    "publish-retried", "a publish failed with a retryable error and the row went back with its backoff")
PUBLISHED_UNMARKED = COVERAGE.window(
    "publish→mark", "a fault hit a relay between a publish and its mark-published (the row is published again)",
    ("publish",), ("outbox.published", "outbox.claim"), roles=("relay",))
ANSWER_LOST = COVERAGE.window(
    "commit→answer", "a fault hit a producer between the service's commit of its event and the ledger's record of "
    "the answer (the retry must get the first answer)", ("event.report",), ("ledger.answer",),
    roles=("preparer", "parser", "storer"))
