"""The security log: a refusal that says someone tried what they may not (a forbidden device or area, an approval
of another draft version, a reused idempotency key, a self-approval) is recorded in ``security_log``, in its own
transaction after the refused one rolled back, so the attempt leaves a trace that the application itself cannot
change afterwards (INSERT and SELECT only, on PostgreSQL)."""

from __future__ import annotations

import uuid
from typing import Any

from reference.copilot.effects import Tx
from reference.copilot.models import SecurityEvent

SECURITY_CODES = frozenset({"FORBIDDEN_DEVICE", "FORBIDDEN_AREA", "APPROVAL_VERSION_MISMATCH",
                            "IDEMPOTENCY_KEY_REUSED", "SELF_APPROVAL"})


def record_refusal(tx: Tx, actor: str, action: str, code: str, draft_id: str | None,
                   detail: dict[str, Any]) -> None:
    try:
        draft = uuid.UUID(draft_id) if draft_id else None
    except ValueError:
        draft = None
    tx.session.add(SecurityEvent(at=tx.now, actor=actor[:128], action=action, code=code, draft_id=draft,
                                 detail={k: v for k, v in detail.items() if isinstance(v, (str, int, float, bool))
                                         or v is None}))
