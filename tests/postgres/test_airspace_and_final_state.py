"""On a real PostgreSQL: the native close-airspace fault records, in the history, which areas it closed and
reopened (I12 reads it), and read_database gives the checkers the sites, permissions, approvals, the task's
draft and area, and the consumers' failure records (I12-I17)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine, select, text
from sqlalchemy.orm import sessionmaker

from chaos.native import NativeNemesis
from harness.history import AIRSPACE, NEMESIS, History
from reference.copilot.models import SiteArea
from reference.copilot.runtime import Runtime
from reference.copilot.services.confirm import ConfirmDraft, confirm_draft
from reference.copilot.services.drafts import create_draft, decide_approval
from systems.copilot.faults import FAULTS
from systems.copilot.state import FinalState, read_database
from systems.copilot.workload import APPROVER, WorkloadSpec, random_plan, seed_fleet

MakeDb = Callable[[str], Any]
Engines = Callable[[str], Engine]


def test_close_airspace_records_the_areas_it_closed_and_reopened(migrated_database: MakeDb,
                                                                  engines: Engines) -> None:
    import random

    db = migrated_database("sortie_airspace")
    admin = engines(db.owner_url)
    runtime = Runtime(sessionmaker(admin, expire_on_commit=False))
    with admin.begin() as conn:
        conn.execute(text("TRUNCATE user_device_permission, user_area_permission, device, site_area CASCADE"))
    fleet = runtime.transact(lambda tx: seed_fleet(tx, WorkloadSpec(confirms=1, window_s=1.0, devices=8, sites=4,
                                                                     operators=4)))
    nemesis = NativeNemesis(SimpleNamespace(endpoints=None), admin, 1.0, FAULTS)
    history = History()
    clock = iter(range(100))
    nemesis.attach(history, lambda: float(next(clock)))

    def closed() -> list[str]:
        with admin.connect() as conn:
            return list(conn.execute(select(SiteArea.id).where(SiteArea.airspace_open.is_(False))
                                     .order_by(SiteArea.id)).scalars())

    nemesis.apply("close-airspace", {"sites": 2}, on=True)
    assert closed() == ["SITE-001", "SITE-002"]
    nemesis.apply("close-airspace", {"sites": 2}, on=False)
    assert closed() == []
    ops = [op for op in history.ops if op.f == AIRSPACE]
    assert [(op.process, op.value) for op in ops] == [
        (NEMESIS, {"areas": ["SITE-001", "SITE-002"], "open": False}),
        (NEMESIS, {"areas": ["SITE-001", "SITE-002"], "open": True})]

    # read_database: what I12-I17 need, from PostgreSQL.
    user, area = fleet.operators[0]
    plan = random_plan(random.Random(1), fleet, area)

    def draft(tx: Any) -> tuple[str, int]:
        d = create_draft(tx, user, "patrol", area, plan)
        decide_approval(tx, APPROVER, d.id, d.version, approve=True)
        return str(d.id), d.version

    draft_id, version = runtime.transact(draft)
    created = runtime.run(confirm_draft(ConfirmDraft(user, draft_id, version, "k-1")))
    state = FinalState()
    with sessionmaker(admin)() as session:
        read_database(session, state)
    task = next(t for t in state.tasks if t["id"] == created.task_id)
    assert (task["area_id"], task["draft_id"], task["draft_version"]) == (area, draft_id, version)
    assert [(a["draft_id"], a["draft_version"], a["status"]) for a in state.approvals] == [
        (draft_id, version, "APPROVED")]
    assert {a["id"]: a["requires_approval"] for a in state.areas} == {a: True for a, _ in fleet.areas}
    assert (user, area) in state.area_permissions and (user, plan.device_id) in state.device_permissions
    assert state.event_failures == []
