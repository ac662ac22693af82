"""The operator path over HTTP: a supervisor lists what waits for a re-drive (GET /v1/ops/dead) and re-drives it
(POST /v1/ops/dead/{kind}/{id}/redrive) with a reason; everyone else is refused before anything is read."""

from __future__ import annotations

import uuid

from api_support import Api, assert_problem

from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import RetryPolicy
from reference.copilot.services.outbox import release

SUPERVISOR = "supervisor-1"


def _dead_outbox_row(api: Api) -> tuple[str, str]:
    """A task whose TaskCreated event the publisher gave up on (release with no attempts left)."""
    task_id = api.task()["task_id"]
    from sqlalchemy import select

    def give_up(tx) -> str:
        event_id = tx.session.scalars(select(TaskEventOutbox.id).where(
            TaskEventOutbox.task_id == uuid.UUID(task_id))).one()
        assert release(tx, [str(event_id)], 0.0, "broker unavailable", RetryPolicy(attempts=0)) == [str(event_id)]
        return str(event_id)

    return task_id, api.runtime.transact(give_up)


def test_a_supervisor_lists_and_redrives_a_dead_outbox_event_once(api: Api) -> None:
    task_id, event_id = _dead_outbox_row(api)
    supervisor = api.headers(SUPERVISOR, "supervisor")
    url = f"/v1/ops/dead/outbox/{event_id}/redrive"
    body = {"reason": "the broker is back"}
    with api.unchanged():
        assert_problem(api.client.get("/v1/ops/dead", headers=api.headers()), 403, "FORBIDDEN_ROLE")
        assert_problem(api.client.post(url, json=body, headers=api.headers()), 403, "FORBIDDEN_ROLE")
        assert_problem(api.client.post(url, json={}, headers=supervisor), 422, "MISSING_FIELD")
        assert_problem(api.client.post(url, json={"reason": " "}, headers=supervisor), 422, "INVALID_PARAMETERS")
        assert_problem(api.client.post(f"/v1/ops/dead/queue/{event_id}/redrive", json=body, headers=supervisor),
                       404, "UNKNOWN_KIND")
        # A supervisor without a permission on the task's area sees nothing and finds nothing.
        stranger = api.headers("mallory", "supervisor")
        assert api.client.get("/v1/ops/dead", headers=stranger).get_json() == {
            "outbox": [], "reports": [], "dead_letters": []}
        assert_problem(api.client.post(url, json=body, headers=stranger), 404, "OUTBOX_EVENT_NOT_FOUND")
    listed = api.client.get("/v1/ops/dead", headers=supervisor)
    assert listed.status_code == 200
    [row] = listed.get_json()["outbox"]
    assert (row["event_id"], row["task_id"], row["event_type"]) == (event_id, task_id, "TaskCreated")
    assert row["last_error"] == "broker unavailable" and row["dead_at"]

    resp = api.client.post(url, json=body, headers=supervisor)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json() == {"kind": "outbox", "id": event_id, "status": "PENDING", "redrive_count": 1}
    assert api.client.get("/v1/ops/dead", headers=supervisor).get_json()["outbox"] == []
    with api.unchanged():  # a double click: the second re-drive finds nothing waiting
        assert_problem(api.client.post(url, json=body, headers=supervisor), 409, "NOT_DEAD")


def test_the_ops_cli_lists_and_redrives_through_a_running_api(api: Api, tmp_path) -> None:
    """`sortie ops dead` and `sortie ops redrive` against the API served over real HTTP (werkzeug, a thread)."""
    import json
    import threading

    from api_support import SECRET
    from click.testing import CliRunner
    from werkzeug.serving import make_server

    from sortie.cli import main
    from stack.native import Endpoints

    task_id, event_id = _dead_outbox_row(api)
    server = make_server("127.0.0.1", 0, api.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        Endpoints(run_dir=str(tmp_path), api_url=f"http://127.0.0.1:{server.port}",
                  app={"token_secret": SECRET}).write(tmp_path / "stack.json")
        runner = CliRunner()
        listed = runner.invoke(main, ["ops", "dead", "--run-dir", str(tmp_path)])
        assert listed.exit_code == 0, listed.output
        assert [o["event_id"] for o in json.loads(listed.output)["outbox"]] == [event_id]
        args = ["ops", "redrive", "outbox", event_id, "--reason", "broker back", "--run-dir", str(tmp_path)]
        done = runner.invoke(main, args)
        assert done.exit_code == 0, done.output
        assert json.loads(done.output)["status"] == "PENDING"
        again = runner.invoke(main, args)  # nothing waits any more: the problem is printed, exit 2 (refused)
        assert again.exit_code == 2 and json.loads(again.output)["code"] == "NOT_DEAD"
        missing = runner.invoke(main, ["ops", "dead", "--run-dir", str(tmp_path / "nowhere")])
        assert missing.exit_code == 4 and "is a stack up" in missing.output  # no stack: the environment
    finally:
        server.shutdown()
        thread.join(timeout=10)
