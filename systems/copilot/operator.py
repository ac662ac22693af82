"""The Copilot's own verbs (System.commands): a supervisor's actions on a running stack through its API (`sortie
review`, `sortie ops dead`, `sortie ops redrive`), and `sortie stack bench`, its native stack's own figures."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from scenarios.systems import RequestRefused, StackUnavailable

RUN_DIR = click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/stack"),
                       show_default=True, help="Where `sortie stack up` keeps the stack's state.")
SUPERVISOR = click.option("--supervisor", default="supervisor-1", show_default=True,
                          help="The supervisor's user id (needs a permission on the task's area).")


def as_supervisor(run_dir: Path, supervisor: str, command: Callable[[Any], Any]) -> None:
    """Send ``command(principal)`` to a running stack's API with a short-lived supervisor token and print the
    answer; RequestRefused when the API refused it (its problem is printed)."""
    import requests

    from reference.copilot import api
    from reference.copilot.http.auth import issue_token
    from reference.copilot.http.client import headers_for, http_request, reply_of
    from stack.native import Endpoints

    path = run_dir / "stack.json"
    if not path.exists():
        raise StackUnavailable(f"no stack state in {path}: is a stack up (`sortie stack up`)?")
    ep = Endpoints.read(path)
    req = http_request(command(api.Principal(supervisor, "supervisor")))
    token = issue_token(ep.app["token_secret"], supervisor, role="supervisor", ttl_s=300)
    try:
        resp = requests.request(req.method, ep.api_url + req.path, json=req.body, headers=headers_for(req, token),
                                timeout=30)
    except requests.RequestException as exc:
        raise StackUnavailable(f"the API at {ep.api_url} did not answer: {exc}") from None
    reply = reply_of(resp.status_code, resp.headers, resp.text)
    click.echo(json.dumps(reply.body, indent=2))
    if not reply.ok:
        raise RequestRefused(f"the API refused it ({resp.status_code})")


@click.command()
@click.argument("task_id")
@click.option("--resolution", type=click.Choice(["executing", "completed", "failed", "cancelled", "redispatch"]),
              required=True, help="What became of the flight (or, when the platform has none, dispatch it again under "
              "the same platform key); the platform is asked first and must agree.")
@click.option("--reason", required=True, help="Why (stored in the audit log).")
@SUPERVISOR
@RUN_DIR
def review(task_id: str, resolution: str, reason: str, supervisor: str, run_dir: Path) -> None:
    """Take TASK_ID out of MANUAL_REVIEW on a running Copilot stack, through the API (POST /v1/tasks/{id}/review)."""
    from reference.copilot import api

    as_supervisor(run_dir, supervisor,
                  lambda me: api.ResolveReview(me, task_id, {"resolution": resolution, "reason": reason}))


@click.group()
def ops() -> None:
    """Operator actions on a running Copilot stack, through its API: what the automatic paths gave up on, and
    re-drives."""


@ops.command("dead")
@SUPERVISOR
@RUN_DIR
def ops_dead(supervisor: str, run_dir: Path) -> None:
    """List what waits for a re-drive on the supervisor's areas: outbox events and reports gone DEAD after their
    retries, and consumers' dead letters (GET /v1/ops/dead)."""
    from reference.copilot import api

    as_supervisor(run_dir, supervisor, lambda me: api.ListDead(me))


@ops.command("redrive")
@click.argument("kind", type=click.Choice(["outbox", "report", "dead-letter"]))
@click.argument("item_id", metavar="ID")
@click.option("--reason", required=True, help="Why (stored in the audit log).")
@SUPERVISOR
@RUN_DIR
def ops_redrive(kind: str, item_id: str, reason: str, supervisor: str, run_dir: Path) -> None:
    """Re-drive one waiting item with a fresh budget of attempts: an outbox event (its event id), a report (its
    task id) or a dead letter (its id), as `sortie ops dead` lists them (POST /v1/ops/dead/{kind}/{id}/redrive)."""
    from reference.copilot import api

    as_supervisor(run_dir, supervisor, lambda me: api.Redrive(me, kind, item_id, {"reason": reason}))


@click.command("bench")
@click.option("--tasks", type=click.IntRange(min=1), default=5, show_default=True,
              help="Tasks confirmed one at a time on the idle stack.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the figures as JSON.")
def stack_bench(tasks: int, out: Path | None) -> None:
    """The Copilot's native stack's own figures: warm start to all-ready, resident memory of each part at idle, and
    confirm-to-DISPATCHING/-EXECUTING of single tasks at idle (database timestamps)."""
    import tempfile

    from rich.console import Console

    from systems.copilot.stack_bench import bench_stack

    with Console().status("starting a native stack, idling 10 s, confirming tasks one at a time"):
        figures = bench_stack(Path(tempfile.mkdtemp(prefix="sortie-bench-")), tasks)
    click.echo(json.dumps(figures, indent=2))
    if out:
        out.write_text(json.dumps(figures, indent=2) + "\n")


def commands() -> Mapping[str, Sequence[click.Command]]:
    return {"sortie": [review, ops], "stack": [stack_bench]}
