"""Operator alerts: something needs a person (a row gone DEAD after its retries). One structured log record per
alert on the ``reference.alerts`` logger, at ERROR, with a stable code in ``extra`` for a log pipeline to route;
the durable record is the audit row written in the same transaction, and ``GET /v1/ops/dead`` lists what waits."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("reference.alerts")


def alert(code: str, **fields: Any) -> None:
    text = " ".join(f"{k}={v}" for k, v in sorted(fields.items()))
    log.error("ALERT %s %s", code, text, extra={"alert": code, "alert_fields": fields})
