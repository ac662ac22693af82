"""Policy overrides in layers (the stack's, then a scenario's; reference.copilot.settings): a layer changes only what it
names in ``stale_after_s`` and in a retry policy, and the rest keeps the layer below (or the default)."""

from __future__ import annotations

import pytest

from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.settings import layered, policy_with
from reference.copilot.states import TaskStatus as S


def test_a_threshold_override_keeps_the_other_statuses() -> None:
    default = Policy()
    p = policy_with({"stale_after_s": {"EXECUTING": 20}})
    assert p.stale_after_s[S.EXECUTING] == 20.0
    assert {k: v for k, v in p.stale_after_s.items() if k != S.EXECUTING} == \
        {k: v for k, v in default.stale_after_s.items() if k != S.EXECUTING}


def test_a_retry_override_keeps_the_fields_it_does_not_name() -> None:
    assert policy_with({"outbox_retry": {"attempts": 3}}).outbox_retry == \
        RetryPolicy(attempts=3, base_s=Policy().outbox_retry.base_s, cap_s=Policy().outbox_retry.cap_s)


def test_layers_merge_thresholds_and_retries_and_replace_the_rest() -> None:
    stack = {"stale_after_s": {"QUEUED": 10, "EXECUTING": 60}, "report_retry": {"attempts": 20, "base_s": 1.0},
             "reconcile_interval_s": 2.0}
    scenario = {"stale_after_s": {"EXECUTING": 20}, "report_retry": {"attempts": 3}, "reconcile_interval_s": 5.0}
    merged = layered(stack, scenario)
    assert merged == {"stale_after_s": {"QUEUED": 10, "EXECUTING": 20}, "report_retry": {"attempts": 3, "base_s": 1.0},
                      "reconcile_interval_s": 5.0}
    assert stack["stale_after_s"] == {"QUEUED": 10, "EXECUTING": 60}  # the layers themselves are left alone
    p = policy_with(merged)
    assert (p.stale_after_s[S.QUEUED], p.stale_after_s[S.EXECUTING], p.report_retry.attempts,
            p.report_retry.base_s) == (10.0, 20.0, 3, 1.0)


@pytest.mark.parametrize("bad", [{"stale_after_s": {"FLYING": 3}}, {"outbox_retry": {"tries": 3}},
                                 {"no_such_field": 1}])
def test_a_malformed_override_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        policy_with(bad)
