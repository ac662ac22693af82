"""How many of each worker a deployment runs: one value for both shells, so the simulation runs the same
processes as `sortie stack up` (two publishers race on outbox claims, two dispatchers on deliveries)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    publishers: int = 2
    dispatchers: int = 2
    report_workers: int = 1
    reconcilers: int = 1

    def __post_init__(self) -> None:
        for role, n in self.counts().items():
            if n < 1:
                raise ValueError(f"a deployment runs at least one {role} (got {n})")

    def counts(self) -> dict[str, int]:
        return {"publisher": self.publishers, "dispatcher": self.dispatchers,
                "report-worker": self.report_workers, "reconciler": self.reconcilers}

    def workers(self) -> list[tuple[str, str]]:
        """(process name, role) of every worker: ``dispatcher-2``; a role run once keeps its bare name."""
        return [(role if n == 1 else f"{role}-{i}", role)
                for role, n in self.counts().items() for i in range(1, n + 1)]
