"""The official JavaScript client (npm ``centrifuge``) in headless Debian Chromium against the real Centrifugo v6:
what a status page in a browser relies on. A page served from 127.0.0.1 connects with a token whose ``channels``
claim subscribes it on the server side, subscribes to a second channel with a subscription token, receives what the
server API publishes, and after a disconnect recovers the gap; a page from an origin the server does not allow is
refused.

One Centrifugo, one static page server and one browser for the module. Skipped only when a binary is missing
(centrifugo and the JS client: `sortie stack install`; Chromium: scripts/system-deps.sh).
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from stack.centrifugo import (
    DEFAULT_VERSION,
    INSTALL_COMMAND,
    JS_CLIENT_PACKAGE,
    JS_CLIENT_VERSION,
    CentrifugoConfig,
    LocalCentrifugo,
    Namespace,
    connection_token,
    install_js_client,
    subscription_token,
)
from stack.common import LOOPBACK, free_port
from stack.gobin import go_available, go_binary_path
from stack.npm import npm_package_path

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not go_available() and not go_binary_path(DEFAULT_VERSION, "centrifugo").exists(),
                       reason=f"centrifugo {DEFAULT_VERSION} is not built and 'go' is missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not shutil.which("npm") and not npm_package_path(JS_CLIENT_PACKAGE, JS_CLIENT_VERSION).exists(),
                       reason=f"the JS client {JS_CLIENT_PACKAGE}@{JS_CLIENT_VERSION} is not fetched and 'npm' is "
                              f"missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not shutil.which("chromedriver"), reason="chromedriver is missing: bash scripts/system-deps.sh"),
]

SECRET = secrets.token_hex(32)
SUMMARY = Namespace("task_user", history_size=10, history_ttl_s=300)
DETAIL = Namespace("task_detail", history_size=10, history_ttl_s=300)
WAIT_S = 20.0

# The page records what the client tells it; the test reads window.seen / window.subscribed / window.states.
PAGE = """<!doctype html>
<meta charset="utf-8"><title>centrifuge-js</title>
<script src="centrifuge.js"></script>
<script>
const q = new URLSearchParams(location.search);
window.seen = []; window.subscribed = []; window.states = [];
const client = new Centrifuge(q.get("ws"), {token: q.get("token"), minReconnectDelay: 100, maxReconnectDelay: 500});
const record = ctx => window.subscribed.push(
  {channel: ctx.channel, recovered: ctx.recovered, wasRecovering: ctx.wasRecovering,
   epoch: ctx.streamPosition ? ctx.streamPosition.epoch : null});
const receive = ctx => window.seen.push({channel: ctx.channel, offset: ctx.offset, data: ctx.data});
client.on("state", ctx => window.states.push(ctx.newState));
client.on("subscribed", record);   // server-side subscriptions (the token's channels claim)
client.on("publication", receive);
if (q.get("detail")) {
  const sub = client.newSubscription(q.get("detail"), {token: q.get("subToken")});
  sub.on("subscribed", record);
  sub.on("publication", receive);
  sub.subscribe();
}
client.connect();
window.client = client;
</script>
"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def static_site(directory: Path) -> Iterator[str]:
    """``directory`` served on a free loopback port; yields the origin."""
    httpd = ThreadingHTTPServer((LOOPBACK, free_port()), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-centrifugo-browser-test-"))
    pages = run_dir / "pages"
    pages.mkdir()
    shutil.copy(install_js_client(), pages / "centrifuge.js")
    (pages / "index.html").write_text(PAGE, encoding="utf-8")
    server: LocalCentrifugo | None = None
    try:
        with static_site(pages) as origin, static_site(pages) as foreign_origin:
            config = CentrifugoConfig(SECRET, secrets.token_hex(16), (SUMMARY, DETAIL), allowed_origins=(origin,))
            server = LocalCentrifugo(run_dir / "centrifugo", config).start()
            yield {"server": server, "origin": origin, "foreign_origin": foreign_origin}
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def open_page(browser: Any, site: dict[str, Any], origin: str, user: str, summary: str, detail: str = "") -> None:
    server = site["server"]
    query = {"ws": server.websocket_url,
             "token": connection_token(SECRET, user, expires_at=time.time() + 300, channels=[summary])}
    if detail:
        query |= {"detail": detail, "subToken": subscription_token(SECRET, user, detail, expires_at=time.time() + 300)}
    browser.get(f"{origin}/index.html?{urlencode(query)}")


def until(browser: Any, script: str, what: str) -> Any:
    """Poll a JavaScript expression until it is truthy (a deadline on a condition)."""
    try:
        return WebDriverWait(browser, WAIT_S, poll_frequency=0.05).until(lambda d: d.execute_script(script))
    except Exception as exc:
        state = browser.execute_script("return [window.states, window.subscribed, window.seen]")
        console = [entry["message"] for entry in browser.get_log("browser")][-10:]
        raise AssertionError(f"never saw {what}: page state {state}; console {console}") from exc


def seen(browser: Any, channel: str) -> list[tuple[int, Any]]:
    rows = browser.execute_script("return window.seen.filter(p => p.channel === arguments[0])", channel)
    return [(int(r["offset"]), r["data"]) for r in rows]


def test_the_js_client_receives_on_a_server_side_and_a_token_subscription(browser: Any, site: dict[str, Any]) -> None:
    user = f"t1/u{secrets.token_hex(3)}"
    summary, detail = f"task_user:{user}", f"task_detail:t1/{secrets.token_hex(3)}"
    open_page(browser, site, site["origin"], user, summary, detail)
    until(browser, "return window.subscribed.length === 2", "both subscriptions")
    server = site["server"]
    at_summary = server.api.publish(summary, {"version": "1", "lifecycleStatus": "RUNNING"})
    at_detail = server.api.publish(detail, {"version": "1", "steps": [{"id": "01_prepare"}]})
    until(browser, "return window.seen.length === 2", "both publications")
    assert seen(browser, summary) == [(at_summary.offset, {"version": "1", "lifecycleStatus": "RUNNING"})]
    assert seen(browser, detail) == [(at_detail.offset, {"version": "1", "steps": [{"id": "01_prepare"}]})]


def test_the_js_client_recovers_a_gap_after_a_disconnect(browser: Any, site: dict[str, Any]) -> None:
    user = f"t1/u{secrets.token_hex(3)}"
    summary, detail = f"task_user:{user}", f"task_detail:t1/{secrets.token_hex(3)}"
    server = site["server"]
    open_page(browser, site, site["origin"], user, summary, detail)
    until(browser, "return window.subscribed.length === 2", "both subscriptions")
    first = server.api.publish(summary, {"version": "1"})
    until(browser, "return window.seen.length === 1", "the first publication")
    browser.execute_script("window.client.disconnect()")
    until(browser, "return window.states[window.states.length - 1] === 'disconnected'", "the disconnect")
    missed = [server.api.publish(summary, {"version": str(v)}).offset for v in (2, 3, 4)]
    missed_detail = server.api.publish(detail, {"version": "2"}).offset
    browser.execute_script("window.client.connect()")
    until(browser, "return window.subscribed.length === 4 && window.seen.length === 5", "the recovery")
    again = browser.execute_script("return window.subscribed.slice(2)")
    assert all(s["recovered"] and s["wasRecovering"] for s in again), again
    assert [o for o, _ in seen(browser, summary)] == [first.offset, *missed]
    assert [o for o, _ in seen(browser, detail)] == [missed_detail]


def test_a_page_from_an_origin_the_server_does_not_allow_is_refused(browser: Any, site: dict[str, Any]) -> None:
    """The WebSocket upgrade carries the page's Origin; one outside client.allowed_origins is refused before any
    token is read (the log says "request Origin is not authorized"), and the client keeps retrying."""
    server = site["server"]
    log_size = server.log_path.stat().st_size
    open_page(browser, site, site["foreign_origin"], "t1/u1", "task_user:t1/u1")
    deadline = time.monotonic() + WAIT_S
    while "request Origin is not authorized" not in server.log_path.read_text()[log_size:]:
        assert time.monotonic() < deadline, server.log_path.read_text()[log_size:]
        time.sleep(0.05)  # polling the server's log with a deadline
    states = browser.execute_script("return window.states")
    assert "connected" not in states and states[-1] == "connecting", states


@pytest.mark.parametrize(("name", "version"), [("../escape", "1.0.0"), ("centrifuge", "../1"), ("", "1.0.0")])
def test_an_npm_name_or_version_that_is_not_one_is_refused_before_npm_runs(name: str, version: str) -> None:
    from stack.npm import NpmError, npm_package

    with pytest.raises(NpmError):
        npm_package(name, version)
