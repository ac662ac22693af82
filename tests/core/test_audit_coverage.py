"""I26 on whole runs: seed 000 §7.3 wants the audit log to cover every key action of a person (a confirm, an approval
decided, a manual intervention). Each of these four omissions (a re-drive's row of either kind, a draft's, an approval
decision's) violated nothing in any simulated scenario at seed 1 before I26 (mutation testing, 2026-12-05, had found a
re-drive's row deletable); now I26 catches each, and nothing else does."""

from __future__ import annotations

from typing import Any

import pytest

import reference.copilot.services.drafts as drafts
import reference.copilot.services.ops as ops
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

CATALOGUE = load_catalogue("copilot")


def _dropping(module: Any, prefix: str) -> Any:
    """The module's add_audit, leaving out the rows whose action starts with ``prefix``."""
    real = module.add_audit

    def add_audit(tx: Any, *, actor: str, action: str, **fields: Any) -> None:
        if not action.startswith(prefix):
            real(tx, actor=actor, action=action, **fields)

    return add_audit


@pytest.mark.parametrize("module,action,scenario", [
    (ops, "OUTBOX_REDRIVEN", "R11"),
    (ops, "REPORT_REDRIVEN", "R11"),
    (drafts, "DRAFT_CREATED", "C4"),
    (drafts, "APPROVAL_", "S6"),
])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_person_s_action_left_out_of_the_audit_log_violates_i26(
        module: Any, action: str, scenario: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "add_audit", _dropping(module, action))
    result = simulate(CATALOGUE[scenario], seed)
    assert "I26" in {v.invariant for v in result.verdicts if v.status == VIOLATED}
