"""The status service's event entry (reference.statussync.service) in process on SQLite, without its HTTP shell: the
rules that belong to the service whichever shell calls it (an execution token the service did not sign is refused
before anything is read or written, so a forger cannot claim the eventId a real producer will send)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.statussync.models import StatusBase
from reference.statussync.registry import STEPS, TENANT, install
from reference.statussync.service import NewTask, Refused, create_task, heartbeat, report_event

T = TypeVar("T")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        install(conn)
    yield engine
    engine.dispose()


def in_tx(engine: Engine, fn: Callable[[Tx], T]) -> T:
    with Session(engine) as session, session.begin():
        return fn(Tx(session, datetime.now(UTC).replace(tzinfo=None), lambda: pytest.fail("no ids drawn")))


def rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in StatusBase.metadata.sorted_tables}


def first_step(engine: Engine, task_id: str) -> dict[str, Any]:
    new = NewTask(task_id, TENANT, "u1", "report", tuple((s[0], s[1]) for s in STEPS))
    return dict(in_tx(engine, lambda tx: create_task(tx, new))["steps"][0])


def started(ctx: dict[str, Any]) -> dict[str, Any]:
    return {"eventId": f"{ctx['taskId']}:started", "taskId": ctx["taskId"], "taskAttempt": 1,
            "stepId": ctx["stepId"], "stepAttempt": ctx["stepAttempt"], "operationCode": ctx["operationCode"],
            "producerId": ctx["producerId"], "sourceSeq": 1, "eventType": "STEP_STARTED",
            "businessStatus": "PREPARING"}


@pytest.mark.parametrize(("name", "forged"), [("bad-signature", None), ("no-dot", "not-a-token"),
                                               ("not-base64", "%%%.0"), ("not-ascii", "é.é"), ("empty", "")])
def test_a_forged_token_is_refused_keeping_nothing_so_the_real_event_id_stays_free(engine: Engine, name: str,
                                                                                    forged: str | None) -> None:
    ctx = first_step(engine, f"task-forged-{name}")
    event = started(ctx)
    signed = ctx["executionToken"].rpartition(".")[0] + "." + "0" * 64 if forged is None else forged
    before = rows(engine)
    answer = in_tx(engine, lambda tx: report_event(tx, event, signed)).answer
    assert answer["code"] == "TOKEN_REFUSED" and answer["accepted"] is False
    assert rows(engine) == before  # no dedup row: the refusal is not this eventId's first answer
    real = in_tx(engine, lambda tx: report_event(tx, event, ctx["executionToken"])).answer
    assert real["accepted"] is True and real["duplicate"] is False


def test_a_heartbeat_takes_the_step_attempts_own_token(engine: Engine) -> None:
    ctx = first_step(engine, "task-heartbeat")
    in_tx(engine, lambda tx: report_event(tx, started(ctx), ctx["executionToken"]))
    args = (ctx["taskId"], ctx["stepId"], ctx["stepAttempt"], ctx["producerId"])
    assert in_tx(engine, lambda tx: heartbeat(tx, *args, ctx["executionToken"]))
    with pytest.raises(Refused, match="TOKEN_REFUSED"):
        in_tx(engine, lambda tx: heartbeat(tx, *args, "forged"))
    with pytest.raises(Refused, match="TOKEN_MISMATCH"):
        in_tx(engine, lambda tx: heartbeat(tx, ctx["taskId"], "02_parse", 1, ctx["producerId"],
                                           ctx["executionToken"]))
