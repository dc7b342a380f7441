"""The web client's views and its one navigation, in headless Chromium against real daemons: a
newcomer's tour on a phone (pair, start a session, answer a permission, find Settings, add a
workstation) recorded as a transcript; back and forward and deep links in every view; a
notification's tap landing in its session from another view; landmarks, and the focus on the
view's heading for keyboard and screen-reader users."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    add_workstation_link,
    base,
    login,
    new_session,
    open_view,
    page_errors,
    send,
    shot,
    wait_turns,
)

pytestmark = BROWSER_TESTS

SHOWN = "document.querySelector('#main > .view:not([hidden])').dataset.view"
FOCUSED = "document.activeElement.textContent.trim()"
CURRENT = "document.querySelector('#nav [aria-current=page]').dataset.view"
SHELL_CACHE = "caches.open('agent-bridge-shell-1')"
CACHED_TOAST = f"{SHELL_CACHE}.then((c) => c.match('/js/ui/toast.js')).then((r) => r.text())"
MARK_CACHED = f"""(async () => {{
  const cache = await {SHELL_CACHE};
  const kept = await cache.match('/js/ui/toast.js');
  const text = (await kept.text()) + '\\nwindow.__fromCache = 1;\\n';
  await cache.put('/js/ui/toast.js', new Response(text, {{ headers: kept.headers }}));
}})()"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(DaemonProcess(tmp_path_factory.mktemp("web-views") / "home"))


def shown(p: Page) -> str:
    return str(p.eval(SHOWN))


def back(p: Page, screen: str) -> None:
    """The browser's own back, then wait for the screen it lands on."""
    p.eval("history.back()")
    p.wait(f"body[data-screen={screen}]", state="attached")


def test_a_newcomers_tour_on_a_phone(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    origin = base(daemon).rstrip("/")
    other = DaemonProcess(
        tmp_path / "other", config=f'[server]\nallowed_origins = ["{origin}"]\n'
    ).start()
    project = tmp_path / "project"
    project.mkdir()
    said: list[str] = []
    p = browser.page(*PHONE, mobile=True)
    try:
        p.goto(base(daemon))
        p.wait("#login-form")
        said.append(f"opened the page: {p.text('#login-form h2')!r}")
        shot(p, "tour-1-sign-in")

        login(p, daemon)  # the link `agent-bridge pair` prints
        said.append(f"opened the pairing link: top bar {p.text('#conn')!r}")
        assert shown(p) == "sessions" and p.eval(CURRENT) == "sessions"
        assert p.texts("#nav a") == ["Sessions", "Search", "Usage", "Settings"]
        said.append(f"first screen: {shown(p)}; navigation: {p.texts('#nav a')}")
        assert p.eval("document.querySelector('#nav').getBoundingClientRect().bottom") == 844

        new_session(p, project)
        said.append(f"started a session in {project.name}: {p.text('.session-head .title')!r}")
        assert not p.eval("document.querySelector('#nav').checkVisibility()")  # whole screen
        send(p, "hello from the tour")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
        said.append(f"asked: {p.text('.blk-permission .perm-title')!r}")
        shot(p, "tour-2-permission")
        back(p, "list")  # the phone's back: from the session to the list, not off the page
        p.wait("#needs li .badge.state[data-state=needs]")
        said.append(f"browser back: the list; Needs you: {p.texts('#needs .item-title')}")
        assert p.eval("document.querySelector('#needs-box').getBoundingClientRect().top") < 200
        shot(p, "tour-3-needs-you")
        p.click("#needs li button")
        p.wait(".blk-permission[data-state=open] .perm-opt")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        wait_turns(p, 1)
        said.append("answered Allow once; the turn ended")

        back(p, "list")
        assert shown(p) == "sessions" and base(daemon) in p.url()
        assert p.eval("document.querySelector('#needs-box').hidden")  # answered: not any more
        said.append(f"browser back: the list, {p.count('#sessions .session-item')} session(s)")
        p.eval("history.forward()")
        p.wait(".session textarea")
        said.append("browser forward: the session again")
        back(p, "list")
        shot(p, "tour-4-list")

        open_view(p, "settings")
        assert p.eval(FOCUSED) == "Settings"  # the view's heading has the focus
        said.append(f"Settings: {p.texts('#view-settings h2')}")
        add_workstation_link(p, f"http://127.0.0.1:{other.port}/#token={other.token}")
        p.wait("#stations li:nth-child(2)[data-state=online]", timeout_ms=30_000)
        stations = p.texts("#stations .station-name")
        said.append(f"pasted another daemon's link under Workstations: {stations}")
        assert len(stations) == 2
        shot(p, "tour-5-settings")

        back(p, "list")  # from Settings, back is the Sessions view
        assert shown(p) == "sessions"
        groups = p.texts("#sessions .ws-head .ws-name")
        said.append(f"browser back: Sessions, grouped by workstation: {groups}")
        assert len(groups) == 2
        assert page_errors(p) == []
    finally:
        (ARTIFACTS / "tour-transcript.txt").write_text("\n".join(said) + "\n")
        p.close()
        other.stop()


def test_deep_links_back_and_forward_land_in_every_view(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    p = browser.page(*DESKTOP)
    try:
        login(p, daemon)
        session = new_session(p, tmp_path)
        for view in ("search", "usage", "settings"):
            p.goto(base(daemon) + f"#view={view}")
            p.wait(f"#view-{view}")
            assert shown(p) == view and p.eval(CURRENT) == view
        p.goto(base(daemon) + f"#session={session}")
        p.wait(f".session[data-session='{session}'] textarea")
        assert shown(p) == "sessions"
        # each view chosen is a history entry: back walks them in reverse, forward again
        for view in ("search", "usage", "settings"):
            open_view(p, view)
        for view in ("usage", "search"):
            p.eval("history.back()")
            p.wait_for(f"{SHOWN} === {json.dumps(view)}")
            assert p.eval(FOCUSED) == view.capitalize()  # back moves the focus too
        p.eval("history.back()")  # to the session, its message box ready
        p.wait_for(f"{SHOWN} === 'sessions'")
        p.wait(f".session[data-session='{session}'] textarea")
        assert p.eval("document.activeElement.matches('.session textarea')")
        p.eval("history.forward()")
        p.wait_for(f"{SHOWN} === 'search'")
        assert page_errors(p) == []
    finally:
        p.close()


def test_a_notification_tap_from_another_view_lands_in_its_session(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, daemon)
        session = new_session(p, tmp_path)
        back(p, "list")
        open_view(p, "settings")
        # what the service worker posts to an open page when its notification is tapped
        p.eval(f"window.agentBridge.app.attention.openSession({json.dumps(session)})")
        p.wait(f".session[data-session='{session}'] textarea")
        assert shown(p) == "sessions" and f"session={session}" in p.url()
        back(p, "list")  # and back is where the person was
        p.wait_for(f"{SHOWN} === 'settings'")
    finally:
        p.close()


def test_landmarks_and_the_keyboard_reach_every_view(
    browser: Browser, daemon: DaemonProcess
) -> None:
    p = browser.page(*DESKTOP)
    try:
        login(p, daemon)
        landmarks = p.eval(
            "[...document.querySelectorAll('header, nav, main')].filter((e) => e.checkVisibility())"
            ".map((e) => e.tagName.toLowerCase() + (e.ariaLabel ? ':' + e.ariaLabel : ''))"
        )
        assert landmarks == ["header", "nav:Views", "main"], landmarks
        p.press("#nav a[data-view=settings]", "Enter")
        p.wait("#view-settings")
        assert p.eval(FOCUSED) == "Settings"
        assert p.eval("document.activeElement.tagName") == "H2"
        p.press("#nav a[data-view=usage]", "Enter")
        p.wait("#view-usage")
        assert p.eval(FOCUSED) == "Usage"
        assert p.eval("document.querySelectorAll('main:not([hidden])').length") == 1
    finally:
        p.close()


def test_the_service_worker_keeps_the_shell_and_a_reload_is_answered_from_it(
    browser: Browser, daemon: DaemonProcess
) -> None:
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, daemon)
        p.wait_for("navigator.serviceWorker.controller !== null")
        shell = p.eval("fetch('/sw-core.js').then((r) => r.text())")
        listed = shell.split("const SHELL = [", 1)[1].split("];", 1)[0].count("'/")
        kept = f"{SHELL_CACHE}.then((c) => c.keys()).then((k) => k.length)"
        p.wait_for(f"{kept}.then((n) => n === {listed})")
        # a reload is answered from the cache: a mark put in the cached copy of a module runs
        p.eval(MARK_CACHED)
        p.reload()
        p.wait("#conn[data-state=open]")
        assert p.eval("window.__fromCache ?? null") == 1
        # and the worker fetched the file again behind it: the next page has the server's
        p.wait_for(f"{CACHED_TOAST}.then((t) => !t.includes('__fromCache'))")
        p.reload()
        p.wait("#conn[data-state=open]")
        assert p.eval("window.__fromCache ?? null") is None
        assert page_errors(p) == []
    finally:
        p.close()
