"""The short snapshot cache: it absorbs polling, is scoped to the reading user, and losing it changes no
answer (docs/systems/copilot.md: Redis holds caches only)."""

from __future__ import annotations

from typing import Any

from api_support import OWNER, SECRET, WEBHOOK_TOKEN, Api, build_api
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from reference.copilot.http.app import create_app


class DictCache:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.data.get(key)

    def set(self, key: str, value: str, ttl_s: float) -> None:
        assert 0 < ttl_s <= 5
        self.data[key] = value


def _with_cache(api: Api, cache: DictCache) -> FlaskClient:
    return create_app(api.runtime, token_secret=SECRET, webhook_token=WEBHOOK_TOKEN, cache=cache).test_client()


def test_a_polled_snapshot_is_served_from_the_cache_and_equals_the_database() -> None:
    api = build_api()
    cache = DictCache()
    client = _with_cache(api, cache)
    task = api.task()
    first = client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers())
    second = client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers())
    assert first.status_code == second.status_code == 200
    assert "X-Cache" not in first.headers and second.headers["X-Cache"] == "hit"
    assert first.get_json() == second.get_json() == api.client.get(
        f"/v1/tasks/{task['task_id']}", headers=api.headers()).get_json()


def test_another_user_never_reads_a_cached_snapshot() -> None:
    api = build_api()
    client = _with_cache(api, DictCache())
    task = api.task()
    assert client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).status_code == 200
    other = next(user for user, _ in api.fleet.operators if user != OWNER)
    resp = client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers(other))
    assert resp.status_code == 404 and resp.get_json()["code"] == "TASK_NOT_FOUND"


def test_losing_the_cache_changes_no_answer() -> None:
    api = build_api()
    cache = DictCache()
    client = _with_cache(api, cache)
    task = api.task()
    warm = client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers()).get_json()
    cache.data.clear()  # Redis flushed or restarted
    cold = client.get(f"/v1/tasks/{task['task_id']}", headers=api.headers())
    assert cold.status_code == 200 and "X-Cache" not in cold.headers and cold.get_json() == warm


# ------------------------------------------------------------------------------ request dedup of confirms


def _confirm(client: FlaskClient, draft: dict[str, Any], headers: dict[str, str]) -> TestResponse:
    return client.post(f"/v1/drafts/{draft['id']}/confirm", headers=headers, json={"draft_version": draft["version"]})


def test_a_repeated_confirm_is_answered_from_the_cache_with_the_same_task() -> None:
    api = build_api()
    cache = DictCache()
    client = _with_cache(api, cache)
    draft = api.ready_draft()
    headers = api.headers(**{"Idempotency-Key": "double-click"})
    first, again = _confirm(client, draft, headers), _confirm(client, draft, headers)
    assert first.status_code == 201 and "X-Dedup" not in first.headers
    assert again.status_code == 200 and again.headers["X-Dedup"] == "hit"
    assert again.get_json()["task_id"] == first.get_json()["task_id"]
    assert api.counts()["drone_task"] == 1


def test_the_same_key_for_another_draft_is_never_a_cache_hit() -> None:
    api = build_api()
    client = _with_cache(api, DictCache())
    one, other = api.ready_draft(), api.ready_draft()
    headers = api.headers(**{"Idempotency-Key": "reused"})
    assert _confirm(client, one, headers).status_code == 201
    resp = _confirm(client, other, headers)
    assert resp.status_code == 409 and resp.get_json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert "X-Dedup" not in resp.headers


def test_without_the_cache_a_repeated_confirm_gets_the_same_task_from_the_database() -> None:
    api = build_api()
    cache = DictCache()
    client = _with_cache(api, cache)
    draft = api.ready_draft()
    headers = api.headers(**{"Idempotency-Key": "k"})
    first = _confirm(client, draft, headers)
    cache.data.clear()  # Redis flushed or restarted between the two clicks
    again = _confirm(client, draft, headers)
    assert again.status_code == 200 and "X-Dedup" not in again.headers
    assert again.get_json()["task_id"] == first.get_json()["task_id"] and api.counts()["drone_task"] == 1
