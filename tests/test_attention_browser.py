"""The web client as an installed PWA in headless Chromium (Debian's), against a real daemon:
its manifest and icons, the service worker showing a push delivered through the DevTools
protocol, the notification's click opening the session, presence keeping a watched session
quiet, and the settings panel. Screenshots land in tests/artifacts/web/ (docs/notifications.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import running
from tests.notify_fakes import WS, FakePushService, Receiver, receivers
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import open_view
from tests.wsclient import Client

pytestmark = BROWSER_TESTS

ARTIFACTS = ROOT / "tests" / "artifacts" / "web"
NOTIFICATIONS = (
    "(async () => (await (await navigator.serviceWorker.ready).getNotifications())"
    ".map((n) => ({title: n.title, body: n.body, tag: n.tag, data: n.data,"
    " actions: (n.actions || []).map((a) => a.action + '=' + a.title)})))()"
)

BROWSER_KEY = (
    "new Promise((ok) => { const r = indexedDB.open('agent-bridge', 1);"
    " r.onsuccess = () => { const g = r.result.transaction('kv').objectStore('kv').get('vapid');"
    " g.onsuccess = () => ok(g.result?.public ?? null); }; })"
)

KEPT_TOKEN = (
    "new Promise((ok) => { const r = indexedDB.open('agent-bridge', 1);"
    " r.onupgradeneeded = () => r.result.createObjectStore('kv');"
    " r.onsuccess = () => { const g = r.result.transaction('kv').objectStore('kv').get('token');"
    " g.onsuccess = () => ok(g.result ?? null); }; })"
)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    yield from receivers()


@pytest.fixture(scope="module")
def push_service() -> Iterator[FakePushService]:
    p = FakePushService()
    yield p
    p.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[DaemonProcess]:
    config = (
        "[notify]\nmin_turn_s = 0\n"
        f'[[notify.targets]]\nurl = "{receiver.url}"\nname = "webhook on 127.0.0.1"\n'
        'kinds = ["permission", "turn_end", "error"]\n'
    )
    home = tmp_path_factory.mktemp("attention-browser") / "home"
    yield from running(DaemonProcess(home, config=config))


@pytest.fixture
def page(browser: Browser, daemon: DaemonProcess) -> Iterator[Page]:
    p = browser.page(1280, 860)
    p.goto(origin(daemon) + "/#token=" + daemon.token)
    p.wait("#conn[data-state=open]")
    p.wait_for("navigator.serviceWorker.ready.then((r) => Boolean(r.active))")
    yield p
    errors = [e["text"] for e in p.logs() if e["type"] in ("error", "pageerror")]
    p.close()
    assert not errors, errors


def origin(d: DaemonProcess) -> str:
    return f"http://127.0.0.1:{d.port}"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def with_client(d: DaemonProcess, fn: Any) -> Any:
    async def run() -> Any:
        c = await Client.open(d.url, d.token)
        try:
            return await fn(c)
        finally:
            await c.close()

    return asyncio.run(run())


def create_sessions(d: DaemonProcess, cwd: Path, n: int) -> list[str]:
    async def make(c: Client) -> list[str]:
        out = []
        for _ in range(n):
            result = await c.request("session.create", agent="demo", cwd=str(cwd))
            out.append(str(result["session"]["session"]))
        return out

    return list(with_client(d, make))


def run_turn(d: DaemonProcess, session: str, text: str) -> None:
    async def turn(c: Client) -> None:
        await c.request("session.subscribe", session=session)
        await c.request("session.send", session=session, text=text)
        await c.turn(session)

    with_client(d, turn)


def test_manifest_has_png_icons_and_the_worker_registers(page: Page, daemon: DaemonProcess) -> None:
    with urllib.request.urlopen(origin(daemon) + "/manifest.webmanifest") as resp:
        manifest = json.loads(resp.read())
    icons = {i["sizes"]: i for i in manifest["icons"]}
    for size in (192, 512):
        icon = icons[f"{size}x{size}"]
        assert icon["type"] == "image/png"
        with urllib.request.urlopen(origin(daemon) + icon["src"]) as resp:
            assert resp.headers["Content-Type"] == "image/png"
            assert png_size(resp.read()) == (size, size)
    assert icons["any"]["src"] == "/icon.svg"
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    scope = page.eval("navigator.serviceWorker.ready.then((r) => r.scope)")
    assert scope == origin(daemon) + "/"
    assert page.eval("Boolean(navigator.serviceWorker.controller)") in (True, False)


def test_a_push_shows_a_notification_whose_click_opens_the_session(
    page: Page, daemon: DaemonProcess, project: Path
) -> None:
    (session,) = create_sessions(daemon, project, 1)
    page._call("grant", permissions=["notifications"], origin=origin(daemon))
    payload = {
        "kind": "permission",
        "title": "demo asks permission (project)",
        "body": "Write: demo.txt",
        "session": session,
        "agent": "demo",
        "url": f"{origin(daemon)}/#session={session}",
        "request_id": "perm-1",
        "options": [
            {"id": "allow", "label": "Allow", "kind": "allow_once"},
            {"id": "deny", "label": "Deny", "kind": "reject_once"},
        ],
    }
    page._call("push", origin=origin(daemon) + "/", data=json.dumps(payload))
    page.wait_for(f"{NOTIFICATIONS}.then((n) => n.length === 1)")
    (shown,) = page.eval(NOTIFICATIONS)
    assert shown["title"] == payload["title"]
    assert shown["body"] == "Write: demo.txt"
    assert shown["data"]["url"] == payload["url"]
    assert shown["tag"] == f"{session}:permission"
    max_actions = page.eval("Notification.maxActions")
    assert shown["actions"] == ["allow=Allow", "deny=Deny"][:max_actions]
    # The page shows no session; the notification's click opens this one. (Chromium has no
    # DevTools command that clicks a notification: the worker is given the click event.)
    assert page.eval("window.agentBridge.app.current") is None
    page._call(
        "swEval",
        expr="(async () => { const [n] = await self.registration.getNotifications();"
        " self.dispatchEvent(new NotificationEvent('notificationclick', {notification: n}));"
        " })()",
    )
    page.wait_for(f"window.agentBridge.app.current?.id === {json.dumps(session)}")
    assert page.url().endswith(f"#session={session}")
    page.wait(".session textarea")
    page.wait_for(f"{NOTIFICATIONS}.then((n) => n.length === 0)")  # closed by the click
    page.screenshot(ARTIFACTS / "notify-opened-session.png")


def test_presence_keeps_the_shown_session_quiet(
    page: Page, daemon: DaemonProcess, receiver: Receiver, project: Path
) -> None:
    watched, elsewhere = create_sessions(daemon, project, 2)
    page.goto(f"{origin(daemon)}/?link#session={watched}")  # a deep link, opened anew
    page.wait(".session textarea")
    page.wait_for(f"window.agentBridge.app.current?.id === {json.dumps(watched)}")
    time.sleep(0.5)  # the presence report is on its way with the page's own requests
    before = len(receiver.hits)
    run_turn(daemon, watched, "echo seen on screen")
    run_turn(daemon, elsewhere, "echo nobody looks")
    hits = receiver.wait(before + 1)
    time.sleep(1.5)
    new = receiver.hits[before:]
    assert len(new) == 1, [h.json() for h in new]
    assert new[0].json()["message"].endswith(f"#session={elsewhere}")
    assert hits[before].json()["title"].startswith(f"{WS} · demo finished")


def test_settings_panel_lists_channels_and_sends_a_test(
    page: Page, daemon: DaemonProcess, receiver: Receiver
) -> None:
    open_view(page, "settings")  # notifications are in Settings
    page.wait("#notify-channels li")
    assert page.texts("#notify-channels li") == ["webhook on 127.0.0.1 error, permission, turn_end"]
    assert "0 device(s)" in page.text("#notify-devices")
    before = len(receiver.hits)
    page.click("#notify-test")
    page.wait("#notify-status .check-pass")
    assert page.text("#notify-status").startswith("✓ webhook on 127.0.0.1:")
    hit = receiver.wait(before + 1)[before]
    assert hit.json()["title"] == f"{WS} · agent-bridge test notification"
    page.eval("document.querySelector('#notify-settings').scrollIntoView()")
    page.screenshot(ARTIFACTS / "notify-settings.png")
    open_view(page, "sessions")


def permission_pushed(
    d: DaemonProcess, push_service: FakePushService, cwd: Path, name: str, subscribe: bool = True
) -> dict[str, Any]:
    """A turn of the demo agent that waits for a permission, nobody watching: the payload the
    daemon pushed (encrypted, signed) to a subscription, as the push service decrypted it."""

    async def go(c: Client) -> dict[str, Any]:
        if subscribe:
            await c.request("webpush.subscribe", subscription=push_service.subscription(name))
        result = await c.request("session.create", agent="demo", cwd=str(cwd))
        session = result["session"]["session"]
        await c.request("session.subscribe", session=session)
        await c.request("session.send", session=session, text="write the file")
        await c.events_until(lambda b: b["type"] == "permission_request", session=session)
        await c.request("webpush.unsubscribe", endpoint=push_service.subscription(name)["endpoint"])
        return {"session": session}

    before = len(push_service.messages)
    session = with_client(d, go)["session"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        mine = [m for m in push_service.messages[before:] if m["name"] == name]
        if mine:
            assert not push_service.problems, push_service.problems
            payload: dict[str, Any] = mine[0]["payload"]
            assert payload["session"] == session and payload["kind"] == "permission"
            return payload
        time.sleep(0.05)
    raise AssertionError(f"no push for {name}: {push_service.problems}")


def click(page: Page, action: str = "") -> None:
    page._call(
        "swEval",
        expr="(async () => { const [n] = await self.registration.getNotifications();"
        f" self.dispatchEvent(new NotificationEvent('notificationclick', {{notification: n,"
        f" action: {json.dumps(action)}}})); }})()",
    )


def session_events(d: DaemonProcess, session: str) -> list[dict[str, Any]]:
    async def go(c: Client) -> list[dict[str, Any]]:
        await c.request("session.subscribe", session=session)
        frames = []
        while True:
            try:
                frame = await c.next_push(1.0)
            except TimeoutError:
                return frames
            if frame.get("t") == "event":
                frames.append(frame["block"])

    return list(with_client(d, go))


def stub_push_manager(page: Page, sub: dict[str, Any]) -> None:
    """Headless Chromium reaches no vendor push service: its PushManager gets the subscription
    a browser would (keys the local push service decrypts with); the rest is the page's own."""
    page.eval(
        "(() => { const sub = " + json.dumps(sub) + "; let made = null;"
        " PushManager.prototype.subscribe = async function (options) {"
        "   window.__serverKey = Array.from(new Uint8Array(options.applicationServerKey));"
        "   made = { endpoint: sub.endpoint, options, toJSON: () => sub,"
        "     unsubscribe: async () => { made = null; return true; } }; return made; };"
        " PushManager.prototype.getSubscription = async function () { return made; };"
        " return true; })()"
    )


def test_turned_on_in_the_panel_the_daemons_push_is_answered_from_the_notification(
    page: Page, daemon: DaemonProcess, push_service: FakePushService, project: Path
) -> None:
    page._call("grant", permissions=["notifications"], origin=origin(daemon))
    # Headless Chromium reaches no vendor push service: its PushManager gets the subscription
    # a browser would (keys the local push service decrypts with); the rest is the page's own.
    stub_push_manager(page, push_service.subscription("chromium-1"))
    open_view(page, "settings")
    page.click("#notify-toggle")
    page.wait("text=Notifications are on for this device (1 workstation).")
    # subscribed with this browser's own VAPID key, which the daemon then signs with
    key = page.eval(BROWSER_KEY)
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    assert page.eval("window.__serverKey") == list(raw)
    push_service.server_keys["chromium-1"] = key
    assert page.text("#notify-toggle") == "Turn off on this device"
    payload = permission_pushed(daemon, push_service, project, "chromium-1", subscribe=False)
    assert "Write: demo.txt" in payload["body"]
    page._call("push", origin=origin(daemon) + "/", data=json.dumps(payload))
    page.wait_for(f"{NOTIFICATIONS}.then((n) => n.length === 1)")
    (shown,) = page.eval(NOTIFICATIONS)
    assert shown["title"].startswith(f"{WS} · demo asks permission")
    allow = next(o for o in payload["options"] if o["kind"] == "allow_once")
    # Turning notifications on kept the remembered token where the worker reads it.
    click(page, allow["id"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ends = [b for b in session_events(daemon, payload["session"]) if b["type"] == "session_end"]
        if ends:
            break
    assert ends and ends[-1]["reason"] == "completed", ends
    assert page.eval("window.agentBridge.app.current") is None  # answered without opening
    assert page.eval(KEPT_TOKEN) == daemon.token
    open_view(page, "settings")
    page.click("#notify-toggle")  # off again: the daemon forgets this device, the page the token
    page.wait("text=Notifications are off for this device.")
    open_view(page, "sessions")
    assert page.eval(KEPT_TOKEN) is None
    channels = with_client(daemon, lambda c: c.request("notify.channels"))
    assert channels["webpush"]["subscriptions"] == 0


def test_a_tap_without_a_token_opens_the_session_with_the_prompt_in_view(
    page: Page, daemon: DaemonProcess, push_service: FakePushService, project: Path
) -> None:
    payload = permission_pushed(daemon, push_service, project, "chromium-2")
    page._call("grant", permissions=["notifications"], origin=origin(daemon))
    page._call("push", origin=origin(daemon) + "/", data=json.dumps(payload))
    page.wait_for(f"{NOTIFICATIONS}.then((n) => n.length === 1)")
    click(page)
    page.wait(f".blk-permission[data-id={json.dumps(payload['request_id'])}][data-state=open]")
    assert page.url().endswith(f"#session={payload['session']}")
    page.screenshot(ARTIFACTS / "notify-permission-opened.png")


def test_sign_out_deletes_the_token_kept_for_the_worker(page: Page, daemon: DaemonProcess) -> None:
    page.eval(
        "new Promise((ok) => { const r = indexedDB.open('agent-bridge', 1);"
        " r.onupgradeneeded = () => r.result.createObjectStore('kv');"
        " r.onsuccess = () => { const tx = r.result.transaction('kv', 'readwrite');"
        " tx.objectStore('kv').put('kept-token', 'token'); tx.oncomplete = () => ok(true); }; })"
    )
    assert page.eval(KEPT_TOKEN) == "kept-token"
    open_view(page, "settings")  # "This device"
    page.click("#logout")
    page.wait("#login-form")
    page.wait_for(f"{KEPT_TOKEN}.then((t) => t === null)")


@pytest.mark.slow
def test_a_relay_workstation_pushes_signed_with_the_browsers_key_and_the_worker_answers_it(
    relay: Any,  # first: it stops after the page, which keeps reaching it until then
    page: Page,
    daemon: DaemonProcess,
    push_service: FakePushService,
    project: Path,
    tmp_path: Path,
) -> None:
    """A second workstation, paired through the relay: the browser's one subscription reaches
    it sealed with the browser's own VAPID key; its push (a permission) is signed with that
    key, decrypts at the push service, and Allow in the notification is answered through the
    relay by the service worker itself (no page asked to open or answer)."""
    from tests.relaykit import linked_daemon, relay_pairing_link
    from tests.web.pages import add_workstation_link

    remote_home = tmp_path / "remote"
    more = 'name = "studio"\n[notify]\nmin_turn_s = 0\n'
    remote_fixture = linked_daemon(remote_home, relay.rdir.account_file("ws-b"), more)
    remote = next(remote_fixture)
    try:
        link = relay_pairing_link(remote)
        add_workstation_link(page, link)
        page.wait(
            '#sessions li.ws-group[data-ws="relay:ws-b"][data-state="online"]', timeout_ms=30_000
        )
        page._call("grant", permissions=["notifications"], origin=origin(daemon))
        stub_push_manager(page, push_service.subscription("chromium-relay"))
        open_view(page, "settings")
        page.click("#notify-toggle")
        page.wait("text=Notifications are on for this device (2 workstations).")
        push_service.server_keys["chromium-relay"] = page.eval(BROWSER_KEY)
        payload = permission_pushed(
            remote, push_service, project, "chromium-relay", subscribe=False
        )
        assert payload["ws"] == "relay:ws-b" and payload["workstation"] == "studio"
        assert payload["url"].endswith(f"#session={payload['session']}&ws=relay:ws-b")
        # the push service's delivery to the worker (DevTools stands in for it): once more if
        # a loaded machine's worker missed the first
        shown_one = f"{NOTIFICATIONS}.then((n) => n.length === 1)"
        for attempt in range(2):
            page._call("push", origin=origin(daemon) + "/", data=json.dumps(payload))
            try:
                page.wait_for(shown_one, timeout_ms=15_000)
                break
            except Exception:
                if attempt:
                    raise
        (shown,) = page.eval(NOTIFICATIONS)
        assert shown["title"].startswith("studio · demo asks permission"), shown
        allow = next(o for o in payload["options"] if o["kind"] == "allow_once")
        # what the worker asks of an open page (to show a session, or to answer for it)
        page.eval(
            "navigator.serviceWorker.addEventListener('message', (ev) =>"
            " { (window.__asked ||= []).push(ev.data); }) || true"
        )
        click(page, allow["id"])
        deadline = time.monotonic() + 30
        ends: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not ends:
            events = session_events(remote, payload["session"])
            ends = [b for b in events if b["type"] == "session_end"]
        assert ends and ends[-1]["reason"] == "completed", ends
        # answered through the relay by the worker itself: it asked no page to do it
        assert page.eval("window.__asked || []") == []
        assert "answer=" not in page.url()
    finally:
        open_view(page, "settings")
        page.click("#notify-toggle")  # off: both workstations forget this device
        page.wait("text=Notifications are off for this device.")
        remote_fixture.close()
