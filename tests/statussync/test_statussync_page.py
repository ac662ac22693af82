"""The status page (reference/statussync/http/page/: static, served by the API, Centrifugo's official JavaScript
client) in headless Debian Chromium against the real stack: MariaDB, Centrifugo v6, the API (gunicorn) and an outbox
relay, the page's WebSocket and its HTTP each through a Toxiproxy link of its own. Producers report over HTTP as
the step services do; the relay publishes what they committed.

What the page shows is recorded from its DOM, in order (a MutationObserver the browser installs before the page's
own scripts run: each version a task's summary or detail cell shows, each notice added), not from the page's own
bookkeeping. The test cuts and heals the links (a gap the history covers, recovered; one beyond it, with the API
cut too, so the page is STALE until its snapshot loads), stalls the relay (the page's status:batchGet finds the
change), replays older publications as a relay past its lease would, and judges: the page converges on the
database, never shows an older state of a task's summary or detail, shows each notice once, and never shows another
user's task.

One stack and one browser for the module; marked whole_stack (scripts/stack.sh tests runs it, not the test command).
Skipped only when a binary is missing, naming its install command.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest
from sqlalchemy import func, select

from reference.statussync.http.auth import USER, issue_token
from reference.statussync.models import OUTBOX_DEAD, OUTBOX_PUBLISHED, Task, TaskOutbox
from reference.statussync.producer import Phase, step_event
from reference.statussync.registry import STEPS, TENANT
from reference.statussync.service import NewTask, user_channel
from stack.centrifugo import DEFAULT_VERSION, INSTALL_COMMAND, JS_CLIENT_PACKAGE, JS_CLIENT_VERSION, install_js_client
from stack.common import LOOPBACK, free_port
from stack.gobin import go_available, go_binary_path
from stack.mariadb import INSTALL_COMMAND as MARIADB_INSTALL_COMMAND
from stack.mariadb import mariadb_available
from stack.npm import npm_package_path
from stack.toxiproxy import DEFAULT_VERSION as TOXIPROXY_VERSION
from systems.statussync.processes import StatusApi
from systems.statussync.sim import SyncSpec
from systems.statussync.stack import CENTRIFUGO_PROXY, SyncStack

pytestmark = [
    pytest.mark.stack,
    pytest.mark.whole_stack,
    pytest.mark.skipif(not mariadb_available(), reason=f"mariadbd is not installed: {MARIADB_INSTALL_COMMAND}"),
    pytest.mark.skipif(not go_available() and not (go_binary_path(DEFAULT_VERSION, "centrifugo").exists()
                                                   and go_binary_path(TOXIPROXY_VERSION, "toxiproxy-server").exists()),
                       reason=f"centrifugo or toxiproxy is not built and 'go' is missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not shutil.which("npm") and not npm_package_path(JS_CLIENT_PACKAGE, JS_CLIENT_VERSION).exists(),
                       reason=f"the JS client {JS_CLIENT_PACKAGE}@{JS_CLIENT_VERSION} is not fetched and 'npm' is "
                              f"missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not shutil.which("chromedriver") or not (shutil.which("chromium")
                                                                 or shutil.which("chromium-browser")),
                       reason="chromium or chromedriver is missing: bash scripts/system-deps.sh"),
]

HISTORY = 6  # publications a channel keeps: a longer gap cannot be recovered
PAGE_USER, OTHER_USER = "page-user", "other-user"
PAGE_HTTP, PAGE_WS = "page-http", "page-ws"
WAIT_S = 30.0
POLL_S = 0.05
RELAY = {"poll_s": 0.1, "lease_s": 10.0, "backoff_base_s": 0.2, "backoff_cap_s": 1.0, "max_attempts": 100}
BATCH_GET_MS = 300  # the page's status:batchGet period (30-60 s by default)

# Installed before the page's scripts: what the DOM shows, in order (the page cannot hide a regression from it).
DOM_RECORDER = """
window.__shown = []; window.__notices = []; window.__states = [];
(() => {
  const last = new Map(), noticed = new Set();
  const look = () => {
    for (const el of document.querySelectorAll("[data-gate][data-version]")) {
      const key = el.dataset.task + "/" + el.dataset.gate;
      if (last.get(key) !== el.dataset.version) {
        last.set(key, el.dataset.version);
        window.__shown.push({task: el.dataset.task, gate: el.dataset.gate, version: el.dataset.version});
      }
    }
    for (const el of document.querySelectorAll("#notices li")) {
      if (!noticed.has(el)) { noticed.add(el); window.__notices.push(el.dataset.notice); }
    }
    const state = document.getElementById("connection");
    if (state && window.__states[window.__states.length - 1] !== state.dataset.state) {
      window.__states.push(state.dataset.state);
    }
  };
  new MutationObserver(look).observe(document, {subtree: true, childList: true, attributes: true,
                                                characterData: true});
})();
"""


@dataclass
class Step:
    """One step attempt's producer: its execution context and its next sequence number."""

    ctx: dict[str, Any]
    seq: int = 0


@dataclass
class Rig:
    stack: SyncStack
    api: StatusApi
    origin: str
    ws_url: str
    steps: dict[tuple[str, str], Step] = field(default_factory=dict)

    def create(self, task_id: str, owner: str) -> None:
        answer = self.api.create(NewTask(task_id, TENANT, owner, f"report {task_id}",
                                         tuple((s[0], s[1]) for s in STEPS)))
        for ctx in answer["steps"]:
            self.steps[(task_id, ctx["stepId"])] = Step(ctx)

    def report(self, task_id: str, step_id: str, event_type: str, business: str, **phase: Any) -> None:
        step = self.steps[(task_id, step_id)]
        step.seq += 1
        event = step_event(step.ctx, Phase(event_type, business, 0.0, **phase), step.seq, datetime.now(UTC))
        answer = self.api.report(event, step.ctx["executionToken"]).answer
        assert answer.get("accepted"), answer

    def versions(self, owner: str) -> dict[str, int]:
        assert self.stack.owner is not None
        with self.stack.owner.connect() as conn:
            return {r.id: int(r.version) for r in conn.execute(select(Task.id, Task.version)
                                                                .where(Task.owner_id == owner))}

    def unpublished(self) -> int:
        assert self.stack.owner is not None
        with self.stack.owner.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(TaskOutbox).where(
                TaskOutbox.status.not_in((OUTBOX_PUBLISHED, OUTBOX_DEAD)))).scalar_one())

    def link(self, name: str, up: bool) -> None:
        self.stack.toxiproxy.client.set_enabled(name, up)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with SyncStack() as stack:
        stack.reset()
        api_port = free_port()  # the page's origin (its link) must be known before Centrifugo starts
        _, page_port = stack.toxiproxy.client.create_proxy(PAGE_HTTP, f"{LOOPBACK}:{api_port}")
        origin = f"http://{LOOPBACK}:{page_port}"
        stack.start_centrifugo(SyncSpec(history_size=HISTORY), allowed_origins=(origin,))
        assert stack.centrifugo is not None
        _, ws_port = stack.toxiproxy.client.create_proxy(PAGE_WS, stack.centrifugo.address)
        history = stack.run_dir / "history.jsonl"
        urls = stack.start_api(history=history, ports=[api_port], js_client=install_js_client())
        stack.start_background([("relay", "relay-1")], {"relay": RELAY}, history, stack.run_dir / "go", urls)
        yield Rig(stack, StatusApi(urls, stack.token_secret), origin,
                  f"ws://{LOOPBACK}:{ws_port}/connection/websocket")


def until(check: Callable[[], Any], what: str, browser: Any) -> Any:
    """Poll a condition until it holds (a deadline, never a sleep standing in for it)."""
    deadline = time.monotonic() + WAIT_S
    while not (result := check()):
        if time.monotonic() > deadline:
            page = browser.execute_script("return [window.__states, window.sortiePage && window.sortiePage.events,"
                                          " window.__shown]")
            console = [entry["message"] for entry in browser.get_log("browser")][-10:]
            raise AssertionError(f"never saw {what}: page {page}; console {console}")
        time.sleep(POLL_S)
    return result


def shown(browser: Any) -> list[dict[str, str]]:
    return list(browser.execute_script("return window.__shown"))


def showing(browser: Any) -> dict[tuple[str, str], int]:
    """What the page shows now: (task, gate) -> version."""
    return {(r["task"], r["gate"]): int(r["version"]) for r in shown(browser)}


def converged(rig: Rig, browser: Any) -> bool:
    """The page shows the database's version of each of the user's tasks, in its summary and its detail."""
    now = showing(browser)
    return all(now.get((t, gate)) == v for t, v in rig.versions(PAGE_USER).items() for gate in ("summary", "detail"))


def page_events(browser: Any, event: str) -> list[dict[str, Any]]:
    return [e for e in browser.execute_script("return window.sortiePage.events") if e["event"] == event]


def state(browser: Any) -> str:
    return str(browser.execute_script("return document.getElementById('connection').dataset.state"))


def test_the_page_converges_through_cut_links_and_never_shows_an_older_state(rig: Rig, browser: Any) -> None:
    a, b, foreign = "task-a", "task-b", "task-foreign"
    summary_channel = user_channel(TENANT, PAGE_USER)
    for task_id, owner in ((a, PAGE_USER), (b, PAGE_USER), (foreign, OTHER_USER)):
        rig.create(task_id, owner)
    rig.report(a, "01_prepare", "STEP_STARTED", "PREPARING")
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": DOM_RECORDER})
    bearer = issue_token(rig.stack.token_secret, f"{TENANT}/{PAGE_USER}", USER, ttl_s=3600)
    browser.get(f"{rig.origin}/app/#{urlencode({'token': bearer, 'ws': rig.ws_url, 'batchGetMs': BATCH_GET_MS})}")
    for kind in ("STEP_STARTED", "STEP_PROGRESS", "STEP_PROGRESS"):  # while the page subscribes and loads (§8.3)
        rig.report(b, "01_prepare", kind, "PREPARING")
    until(lambda: converged(rig, browser) and state(browser) == "LIVE", "the page on the database", browser)

    # A gap the history covers: the page's WebSocket cut while A's step progresses and fails (a notice)
    rig.link(PAGE_WS, False)
    until(lambda: state(browser) == "RECOVERING", "the page noticing the cut", browser)
    rig.report(a, "01_prepare", "STEP_PROGRESS", "PREPARING")
    rig.report(a, "01_prepare", "STEP_FAILED", "PARSE_FAILED", error={
        "category": "BUSINESS_INPUT", "code": "UNSUPPORTED_FILE_FORMAT", "retryable": True,
        "userMessage": "unsupported file format"})
    until(lambda: rig.unpublished() == 0, "the relay publishing the gap", browser)
    snapshots_before = len(page_events(browser, "snapshot"))
    rig.link(PAGE_WS, True)
    until(lambda: converged(rig, browser) and state(browser) == "LIVE", "the page recovering the gap", browser)
    summary_again = [e for e in page_events(browser, "subscribed") if e["channel"] == summary_channel][-1]
    assert summary_again["recovered"] is True and summary_again["first"] is False, summary_again
    assert len(page_events(browser, "snapshot")) == snapshots_before  # recovered: nothing reloaded
    notices = browser.execute_script("return window.__notices")
    assert len(notices) == 1 and notices[0].startswith(f"{a}:"), notices

    # A gap beyond the history, the API cut too: the page is STALE, keeps what it showed, then loads the snapshot
    rig.link(PAGE_WS, False)
    rig.link(PAGE_HTTP, False)
    until(lambda: state(browser) == "RECOVERING", "the page noticing the cut", browser)
    for _ in range(HISTORY + 2):
        rig.report(b, "01_prepare", "STEP_PROGRESS", "PREPARING")
    until(lambda: rig.unpublished() == 0, "the relay publishing the gap", browser)
    rig.link(PAGE_WS, True)
    until(lambda: state(browser) == "STALE" and "snapshot failed" in browser.find_element("id", "problem").text,
          "the page STALE, its snapshot refused by the cut API", browser)
    lost = [e for e in page_events(browser, "subscribed") if e["channel"] == summary_channel][-1]
    assert lost["recovered"] is False, lost
    assert showing(browser)[(b, "summary")] < rig.versions(PAGE_USER)[b]  # the old state, kept, not cleared
    rig.link(PAGE_HTTP, True)
    until(lambda: converged(rig, browser) and state(browser) == "LIVE", "the page loading the snapshot", browser)

    # The relay stalled (its link to Centrifugo cut): nothing is published, the page's batch check finds the change
    rig.link(CENTRIFUGO_PROXY, False)
    rig.report(b, "01_prepare", "STEP_PROGRESS", "PREPARING")
    until(lambda: showing(browser)[(b, "summary")] == rig.versions(PAGE_USER)[b], "the batch check's summary",
          browser)
    assert rig.unpublished() > 0  # still not published: the page learnt it from status:batchGet (§13.2)
    assert any(e["newer"] for e in page_events(browser, "batchGet"))
    rig.link(CENTRIFUGO_PROXY, True)
    until(lambda: converged(rig, browser) and rig.unpublished() == 0, "the relay's publications after", browser)

    # Older publications again (a relay past its lease publishes what another already did): nothing changes
    assert rig.stack.owner is not None and rig.stack.centrifugo is not None
    with rig.stack.owner.connect() as conn:
        old = conn.execute(select(TaskOutbox.channel, TaskOutbox.payload).where(TaskOutbox.aggregate_id == a)
                           .order_by(TaskOutbox.aggregate_version)).all()
    for row in old:
        rig.stack.centrifugo.api.publish(row.channel, row.payload)
    rig.report(a, "02_parse", "STEP_STARTED", "PARSING")  # after the replays on the same channels: a marker
    until(lambda: converged(rig, browser), "the page after the replays", browser)

    record = shown(browser)
    for task_id in (a, b):
        for gate in ("summary", "detail"):
            versions = [int(r["version"]) for r in record if (r["task"], r["gate"]) == (task_id, gate)]
            assert versions == sorted(versions), f"{task_id} {gate} went back: {versions}"
            assert versions[-1] == rig.versions(PAGE_USER)[task_id]
    assert {r["task"] for r in record} == {a, b}  # never another user's task
    assert browser.execute_script("return window.__notices") == notices  # shown once: not by a snapshot or replay
