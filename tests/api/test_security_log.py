"""Refused confirms (and drafts, approvals) that are security-relevant leave a trace: a row in the append-only
security log, written after the refused transaction rolled back; the refusal itself changes nothing else."""

from __future__ import annotations

from api_support import OWNER, Api, assert_problem, draft_body, plan
from sqlalchemy import select

from reference.copilot.models import SecurityEvent


def _log(api: Api) -> list[tuple[str, str, str]]:
    with api.runtime.sessions() as s:
        return [(e.actor, e.action, e.code) for e in s.scalars(select(SecurityEvent).order_by(SecurityEvent.id))]


def test_security_relevant_refusals_are_logged_outside_the_refused_transaction(api: Api) -> None:
    first = api.ready_draft()
    key = api.new_key()
    assert api.confirm(first["id"], 1, key).status_code == 201
    second = api.ready_draft()
    mine = api.create_draft()
    with api.unchanged():  # the refused work rolled back: no task, audit, outbox, draft or approval row
        assert_problem(api.confirm(second["id"], 1, key), 409, "IDEMPOTENCY_KEY_REUSED")
        assert_problem(api.client.post("/v1/drafts", json=draft_body(device_id="DRONE-0002"),
                                       headers=api.draft_headers()), 403, "FORBIDDEN_DEVICE")
        assert_problem(api.client.post("/v1/drafts", json={**draft_body(), "area_id": "SITE-002"},
                                       headers=api.draft_headers()), 403, "FORBIDDEN_AREA")
        assert_problem(api.client.patch(f"/v1/drafts/{mine['id']}", headers=api.headers(),
                                        json={"expected_version": 1, "plan": plan(device_id="DRONE-0002")}),
                       403, "FORBIDDEN_DEVICE")
        assert_problem(api.client.post(f"/v1/drafts/{mine['id']}/approvals",
                                       json={"draft_version": 1, "decision": "approve"},
                                       headers=api.headers(OWNER, "approver")), 403, "SELF_APPROVAL")
    assert _log(api) == [(OWNER, "CONFIRM", "IDEMPOTENCY_KEY_REUSED"), (OWNER, "CREATE_DRAFT", "FORBIDDEN_DEVICE"),
                         (OWNER, "CREATE_DRAFT", "FORBIDDEN_AREA"), (OWNER, "REVISE_DRAFT", "FORBIDDEN_DEVICE"),
                         (OWNER, "APPROVE", "SELF_APPROVAL")]
    with api.runtime.sessions() as s:
        confirm = s.scalars(select(SecurityEvent).order_by(SecurityEvent.id)).first()
        assert str(confirm.draft_id) == second["id"] and confirm.detail["task_id"]  # the task the key made


def test_ordinary_refusals_are_not_security_events(api: Api) -> None:
    draft = api.ready_draft()
    with api.unchanged():
        assert_problem(api.confirm(draft["id"], 7, api.new_key()), 409, "STALE_DRAFT_VERSION")
        assert_problem(api.confirm(draft["id"], 1, None), 400, "MISSING_IDEMPOTENCY_KEY")
    assert _log(api) == []


def test_a_refusal_is_answered_even_when_its_trace_cannot_be_written(api: Api, monkeypatch, caplog) -> None:
    import reference.copilot.api as api_module

    def broken(*_args, **_kwargs):
        raise RuntimeError("security log unavailable")

    monkeypatch.setattr(api_module, "record_refusal", broken)
    with api.unchanged():
        assert_problem(api.client.post("/v1/drafts", json=draft_body(device_id="DRONE-0002"),
                                       headers=api.draft_headers()), 403, "FORBIDDEN_DEVICE")
    assert any("security log write failed" in r.getMessage() for r in caplog.records)
