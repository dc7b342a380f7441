"""Preview in headless Chromium at phone size (390x844), the daemon serving the page: a
session's dev server (tests/devserver.py, with live reload) found by its port, opened full
screen, reloaded by its own live reload after a file edit, reloaded from the bar, closed. The
previewed page is hostile: it tries to read the client's storage and IndexedDB, register a
service worker and open the daemon's WebSocket, and reports what it got to the page above it
(postMessage, the one thing it may do). Screenshots go to tests/artifacts/web/."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.previewkit import dev_server, make_site
from tests.shipkit import ship_daemon
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import PHONE, login, page_errors, shot
from tests.wsclient import Client

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

#: the previewed page: what it can reach of the client, said to the page above it
HOSTILE = """<!doctype html><html><head><title>shop</title></head><body>
<h1 id="greeting">GREETING</h1>
<script type="module">
const report = { greeting: document.getElementById('greeting').textContent };
try { report.parentStorage = Object.keys(window.parent.localStorage); }
catch (e) { report.parentStorage = 'denied: ' + e.name; }
try { report.parentCookie = window.parent.document.cookie; }
catch (e) { report.parentCookie = 'denied: ' + e.name; }
report.ownStorage = JSON.stringify(Object.entries(localStorage));
report.ownCookie = document.cookie;
report.dbs = (await indexedDB.databases()).map((d) => d.name);
try { await navigator.serviceWorker.register('/sw.js'); report.sw = 'registered'; }
catch (e) { report.sw = 'refused: ' + e.name; }
report.ws = await new Promise((done) => {
  const ws = new WebSocket('DAEMON_WS');
  ws.onopen = () => { ws.send(JSON.stringify({ t: 'ping', id: 1 })); };
  ws.onmessage = (m) => done('answered: ' + m.data);
  ws.onerror = () => done('error');
  ws.onclose = () => done('closed');
});
window.parent.postMessage(report, '*');
const live = new WebSocket(`ws://${location.host}/__livereload`);
live.onmessage = () => location.reload();
</script></body></html>
"""


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from running(ship_daemon(tmp_path))


def page_text(d: DaemonProcess, greeting: str) -> str:
    return HOSTILE.replace("GREETING", greeting).replace("DAEMON_WS", d.url)


async def session_in(d: DaemonProcess, cwd: Path) -> str:
    c = await Client.open(d.url, d.token)
    try:
        made = await c.request("session.create", agent="demo", cwd=str(cwd))
        return str(made["session"]["session"])
    finally:
        await c.close()


def reports(p: Page) -> list[dict[str, Any]]:
    return list(p.eval("window.previewReports"))


def test_a_dev_server_previewed_on_a_phone_reaches_nothing_of_the_client(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    site = make_site(tmp_path / "shop", page_text(daemon, "Hello from the dev server"))
    (site / "sw.js").write_text("self.addEventListener('fetch', () => {});\n")
    with dev_server(site) as port:
        sid = asyncio.run(session_in(daemon, site))
        p = browser.page(*PHONE, mobile=True)
        try:
            login(p, daemon)
            p.eval(
                "window.previewReports = [];"
                "window.addEventListener('message', (e) => window.previewReports.push(e.data))"
            )
            p.wait_for(f"window.agentBridge.app.sessions.has({json.dumps(sid)})")
            p.eval(f"window.agentBridge.app.open({json.dumps(sid)})")
            p.click(".session .preview-btn")
            p.wait(f'.preview-port-btn[data-port="{port}"]', timeout_ms=30_000)
            shot(p, "preview-phone-ports")
            p.click(f'.preview-port-btn[data-port="{port}"]')
            p.wait(".preview-overlay iframe")
            p.wait_for("window.previewReports.length >= 1", 30_000)
            first = reports(p)[0]
            assert first["greeting"] == "Hello from the dev server"
            # nothing of the client: its storage, cookie, IndexedDB, service worker, daemon
            assert str(first["parentStorage"]).startswith("denied"), first
            assert str(first["parentCookie"]).startswith("denied"), first
            assert daemon.token not in first["ownStorage"] and first["ownCookie"] == ""
            client_dbs = p.eval("indexedDB.databases().then((l) => l.map((d) => d.name))")
            assert not set(first["dbs"]) & set(client_dbs), (first, client_dbs)
            assert first["sw"].startswith("refused"), first
            assert not first["ws"].startswith("answered"), first
            shot(p, "preview-phone-open")

            # the dev server's own live reload, through the preview
            (site / "index.html").write_text(page_text(daemon, "Edited by the agent"))
            p.wait_for("window.previewReports.length >= 2", 30_000)
            assert reports(p)[1]["greeting"] == "Edited by the agent"
            shot(p, "preview-phone-reloaded")
            p.click(".preview-reload")
            p.wait_for("window.previewReports.length >= 3", 30_000)
            assert reports(p)[2]["greeting"] == "Edited by the agent"

            # back to the session, the preview stays; then closed
            p.click(".preview-back")
            p.wait(".session textarea")
            p.click(".session .preview-btn")
            p.wait(".preview-overlay iframe")
            p.click(".preview-close")
            p.wait_for("!document.querySelector('.preview-overlay')")
            assert asyncio.run(previews(daemon)) == []
            # the previewed page's own refused service worker is its error, not the client's
            own = "A bad HTTP response code (403) was received when fetching the script."
            assert [e for e in page_errors(p) if e != own] == [], page_errors(p)
        finally:
            p.close()


async def previews(d: DaemonProcess) -> list[dict[str, Any]]:
    c = await Client.open(d.url, d.token)
    try:
        return list((await c.request("preview.list"))["previews"])
    finally:
        await c.close()
