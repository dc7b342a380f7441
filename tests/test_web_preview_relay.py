"""Preview through `agent-bridge relay serve`, in headless Chromium at phone size (390x844): the
phone reaches the workstation only through the relay (the daemon serves no page and the phone
never dials it). The page relay serve serves shows a session's dev server (tests/devserver.py)
in the previews' own origin (relay serve's preview port), its requests carried sealed over the
page's relay connection; Reload shows the dev server's new content, and so does the dev
server's own live reload, its WebSocket carried through the relay too.

The previewed page is hostile: it tries to read the web client's storage, IndexedDB and window,
to register a service worker on the client's origin and on its own, and to read the client's
files, and reports what it got to the dev server (``/__report``), the one place it may send
to. A monitor with the daemon's own login, on every subject of the workstation (`P.>`: no
user of relay serve may subscribe to more), hears no byte of the page. Screenshots go to
tests/artifacts/web/ (docs/images has them)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from nats.aio.msg import Msg

from tests.daemon import DaemonProcess
from tests.previewkit import dev_server, make_site
from tests.relaykit import ServedRelay, linked_daemon, relay_pairing_link
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, new_session, page_errors, shot

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]
T = TypeVar("T")

HOST = "test-box"
RELAY_GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'
#: what no relay may see of the page
PAGE_MARK = "marmalade-observatory-7714"

#: the previewed page: its content and assets, and what it can reach of the client, sent to
#: the dev server
HOSTILE = """<!doctype html><html><head><title>shop</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/style.css"></head><body>
<h1 id="greeting">GREETING</h1><p class="mark">MARK</p>
<script type="module" src="/app.js"></script></body></html>
"""

APP = """
const denied = (e) => 'denied: ' + e.name;
const report = { greeting: document.getElementById('greeting').textContent };
report.origin = location.origin;
report.css = getComputedStyle(document.body).backgroundColor;
report.asset = (await (await fetch('/big.txt')).text()).length;
const client = location.ancestorOrigins[location.ancestorOrigins.length - 1];
report.client = client;
const tryTop = (name, read) => {
  try { report[name] = read(); } catch (e) { report[name] = denied(e); }
};
tryTop('topStorage', () => Object.keys(window.top.localStorage));
tryTop('topDocument', () => window.top.document.title);
tryTop('topApp', () => String(window.top.agentBridge));
tryTop('topNacl', () => typeof window.top.nacl.box);
report.bootstrap = [typeof parent.toClient, typeof parent.port, typeof parent.nacl].join();
report.ownStorage = JSON.stringify(Object.entries(localStorage));
report.ownCookie = document.cookie;
report.dbs = (await indexedDB.databases()).map((d) => d.name);
try { await navigator.serviceWorker.register(client + '/sw.js'); report.clientSw = 'registered'; }
catch (e) { report.clientSw = 'refused: ' + e.name; }
try { await navigator.serviceWorker.register('/sw.js'); report.ownSw = 'registered'; }
catch (e) { report.ownSw = 'refused: ' + e.name; }
try { report.clientFile = (await (await fetch(client + '/healthz')).text()); }
catch (e) { report.clientFile = denied(e); }
// the dev server's live reload, carried through the relay (when live.txt says on)
const live = new WebSocket(`ws://${location.host}/__livereload`);
live.onmessage = async () => {
  if ((await (await fetch('/live.txt')).text()).trim() === 'on') location.reload();
};
report.live = await new Promise((done) => {
  live.onopen = () => done('open');
  live.onerror = () => done('error');
});
await fetch('/__report?r=' + encodeURIComponent(JSON.stringify(report)));
"""


@pytest.fixture
def workstation(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    # The daemon serves no web client: the phone cannot reach it anyway.
    more = 'name = "studio"\n[server]\nserve_web = false\n'
    yield from linked_daemon(tmp_path / "home", served.account_file(HOST), more)


def page(greeting: str) -> str:
    return HOSTILE.replace("GREETING", greeting).replace("MARK", PAGE_MARK)


def reports(port: int, n: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The first ``n`` reports the previewed page sent its dev server, once there are."""
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/__reports", timeout=10) as r:
            got = [json.loads(x) for x in json.loads(r.read())]
        if len(got) >= n:
            return got
        assert time.monotonic() < deadline, f"{len(got)} reports of {n}"
        time.sleep(0.1)


class Overheard:
    """A monitor on a thread of its own (it keeps reading while the test waits on the page)."""

    def __init__(self, served: ServedRelay) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.monitor, self.captured = self.run(overhear(served))

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    def blob(self) -> bytes:
        self.run(self.monitor.flush())
        return b"\n".join(m.data for m in list(self.captured))

    def close(self) -> None:
        self.run(self.monitor.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def overhear(served: ServedRelay) -> tuple[nats.NATS, list[Msg]]:
    """Every message of the workstation's subjects, with its daemon's own login."""
    login = json.loads(served.account_file(HOST).read_text())["daemon"]
    monitor = await nats.connect(
        f"nats://127.0.0.1:{served.port}",
        user=login["user"],
        password=login["password"],
        inbox_prefix=f"agent-bridge.{HOST}._INBOX",
    )
    captured: list[Msg] = []

    async def keep(msg: Msg) -> None:
        captured.append(msg)

    await monitor.subscribe(f"agent-bridge.{HOST}.>", cb=keep)
    await monitor.flush()
    return monitor, captured


def test_a_phone_previews_a_dev_server_through_relay_serve_and_the_page_reaches_nothing(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    site = make_site(tmp_path / "shop", page("Hello through the relay"))
    (site / "app.js").write_text(APP)
    (site / "style.css").write_text(
        "body { background: rgb(255, 244, 214); font-family: sans-serif; }\n"
    )
    asset = base64.b64encode(os.urandom(384 * 1024)).decode()  # 512 KiB of text
    (site / "big.txt").write_text(asset)
    (site / "sw.js").write_text("self.addEventListener('fetch', () => {});\n")
    (site / "live.txt").write_text("off")
    heard = Overheard(served)
    link = relay_pairing_link(workstation)
    relay_page = f"http://127.0.0.1:{served.web_port}"
    preview_origin = f"http://127.0.0.1:{served.preview_port}"
    p = browser.page(*PHONE, mobile=True)
    try:
        with dev_server(site) as port:
            p.goto(link)
            p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
            p.wait("#ns-agent option[value=demo]", state="attached")
            new_session(p, site)
            p.click(".session .preview-btn")
            p.wait(f'.preview-port-btn[data-port="{port}"]', timeout_ms=30_000)
            p.click(f'.preview-port-btn[data-port="{port}"]')
            p.wait(".preview-overlay iframe")
            first = reports(port, 1)[0]

            # the dev server's page and its assets, in the previews' own origin
            assert first["greeting"] == "Hello through the relay", first
            assert first["css"] == "rgb(255, 244, 214)" and first["asset"] == len(asset), first
            assert first["origin"] == preview_origin and first["client"] == relay_page, first
            # nothing of the client: its window, storage, keys, IndexedDB, service worker, files
            for key in ("topStorage", "topDocument", "topApp", "topNacl", "clientFile"):
                assert str(first[key]).startswith("denied"), (key, first)
            assert "agent-bridge" not in first["ownStorage"] and first["ownCookie"] == "", first
            # its own origin's bootstrap keeps the client's port to itself (module scope)
            assert first["bootstrap"] == "undefined,undefined,undefined", first
            client_dbs = p.eval("indexedDB.databases().then((l) => l.map((d) => d.name))")
            assert client_dbs and not set(first["dbs"]) & set(client_dbs), (first, client_dbs)
            assert first["clientSw"] == "refused: SecurityError", first
            assert first["ownSw"].startswith("refused"), first  # the relay serves no /sw.js
            assert first["live"] == "open", first
            shot(p, "preview-relay-phone-open")

            # the agent edits the page: Reload shows it (the page's live reload is off)
            (site / "index.html").write_text(page("Edited by the agent"))
            p.click(".preview-reload")
            second = reports(port, 2)[1]
            assert second["greeting"] == "Edited by the agent", second
            assert second["asset"] == len(asset) and second["live"] == "open", second
            shot(p, "preview-relay-phone-reloaded")

            # and the dev server's own live reload, its WebSocket carried through the relay
            (site / "index.html").write_text(page("Live reloaded"))
            (site / "live.txt").write_text("on")
            third = reports(port, 3)[2]
            assert third["greeting"] == "Live reloaded" and third["live"] == "open", third

            p.click(".preview-close")
            p.wait_for("!document.querySelector('.preview-overlay')")
            listed = "window.agentBridge.app.client.request('preview.list').then((r) => r.previews)"
            assert p.eval(listed) == []
            # what the previewed page tried and was refused is its error, not the client's
            theirs = ("(404) was received when fetching the script", "/sw.js", "CORS policy")
            theirs += ("net::ERR_FAILED",)
            mine = [e for e in page_errors(p) if not any(t in e for t in theirs)]
            assert mine == [], page_errors(p)

        blob = heard.blob()
        assert len(heard.captured) > 20, len(heard.captured)
        assert PAGE_MARK.encode() not in blob and asset[:64].encode() not in blob
        assert b"HTTP/1.1" not in blob and b"__report" not in blob and b"greeting" not in blob
        assert b"__livereload" not in blob and b"reload" not in blob
    finally:
        p.close()
        heard.close()
