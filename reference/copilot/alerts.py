"""Operator alerts: something needs a person (a row gone DEAD after its retries). One structured log record per
alert on the ``reference.copilot.alerts`` logger, at ERROR, with a stable code in ``extra`` for a log pipeline to route;
the durable record is the audit row written in the same transaction, and ``GET /v1/ops/dead`` lists what waits."""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger("reference.copilot.alerts")


def alert(code: str, **fields: Any) -> None:
    text = " ".join(f"{k}={v}" for k, v in sorted(fields.items()))
    log.error("ALERT %s %s", code, text, extra={"alert": code, "alert_fields": fields})


_ALERT = re.compile(r"\bALERT ([A-Z_]+) (.*)$")
# The fields an alert names its item by (a log line's "k=v" text; other values may hold spaces).
ITEM_FIELDS = ("event_id", "task_id", "job_id")


def alerts_in_log(text: str) -> list[dict[str, str]]:
    """The alerts in a component's log text, as {"code", and the item fields it names}: the real stack's harness reads
    them there (the simulation hears the records themselves)."""
    found: list[dict[str, str]] = []
    for line in text.splitlines():
        if (m := _ALERT.search(line)) is None:
            continue
        code, rest = m.groups()
        item = {k: v.group(1) for k in ITEM_FIELDS if (v := re.search(rf"(?:^| ){k}=(\S+)", rest)) is not None}
        found.append({"code": code, **item})
    return found
