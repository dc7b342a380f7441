"""Search and Usage on a phone, in headless Chromium at 390x844, through `agent-bridge relay
serve`: two workstations paired through the relay, one search field asks both, a hit opens its
session on its workstation scrolled to the text; the Usage view draws the spend per day and per
agent and an agent's limits as bars. Screenshots go to docs/images."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import install_dropin, run_bridge, subscribed_session
from tests.relaykit import ServedRelay, linked_daemon, relay_pairing_link
from tests.test_limits import LIMITED_AGENT
from tests.test_web_phone_walk import assert_nothing_cut_off
from tests.web.browser import BROWSER_TESTS, Browser, BrowserError, Page
from tests.web.pages import PHONE, open_view, page_errors
from tests.wsclient import Client

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

FIRST, SECOND = "test-box", "second"
IMAGES = ROOT / "docs" / "images"


@pytest.fixture
def studio(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    home = tmp_path / "studio"
    install_dropin(home, "limited.py", LIMITED_AGENT)
    more = 'name = "studio"\n[server]\nserve_web = false\n'
    yield from linked_daemon(home, served.account_file(FIRST), more)


@pytest.fixture
def laptop(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    run_bridge("relay", "add", SECOND, "--dir", str(served.rdir), env=served.env, check=True)
    more = 'name = "laptop"\n[server]\nserve_web = false\n'
    yield from linked_daemon(tmp_path / "laptop", served.account_file(SECOND), more)


async def _turn(d: DaemonProcess, cwd: Path, agent: str, text: str) -> str:
    c = await Client.open(d.url, d.token)
    try:
        session = await subscribed_session(c, cwd, agent=agent)
        await c.request("session.send", session=session, text=text, client_msg_id="m1")
        await c.turn(session)
        return session
    finally:
        await c.close()


def _pair(p: Page, d: DaemonProcess, host: str, *, first: bool) -> None:
    link = relay_pairing_link(d)
    if first:
        p.goto(link)
    else:
        open_view(p, "settings")  # Workstations and pairing
        p.fill("#ws-link", link)
        p.click("#ws-add button[type=submit]")
        open_view(p, "sessions")
    online = f'#sessions li.ws-group[data-ws="relay:{host}"][data-state="online"]'
    try:
        p.wait(online, timeout_ms=30_000)
    except BrowserError as exc:  # what each side saw, so that a failure says why
        logs = "\n".join(f"{e['type']}: {e['text']}" for e in p.logs()[-30:])
        raise AssertionError(f"{exc}\npage:\n{logs}\ndaemon:\n{d.log_text()[-3000:]}") from exc


async def test_search_two_workstations_open_a_hit_at_its_place_and_see_usage(
    browser: Browser, studio: DaemonProcess, laptop: DaemonProcess, project: Path
) -> None:
    await _turn(studio, project, "demo", "echo the quokka login bug is fixed")
    await _turn(studio, project, "limited", "a turn that reports limits")
    far = await _turn(laptop, project, "demo", "echo a quokka on the laptop")
    p = browser.page(*PHONE, mobile=True)
    try:
        _pair(p, studio, FIRST, first=True)
        _pair(p, laptop, SECOND, first=False)
        open_view(p, "search")
        p.fill("#search-input", "quokka")
        p.click("#search-form button[type=submit]")
        p.wait_for("document.querySelectorAll('#search-hits li').length >= 4")
        on = p.eval(
            "[...document.querySelectorAll('#search-hits .search-hit-btn')].map(b => b.dataset.ws)"
        )
        assert {f"relay:{FIRST}", f"relay:{SECOND}"} <= set(on), on
        assert "4 matches" in p.text("#search-status")
        assert p.count("#search-hits mark") >= 4  # the word is marked in each snippet
        p.eval("document.querySelector('#search-mount').scrollIntoView()")
        p.screenshot(IMAGES / "search-phone-hits.png")
        assert_nothing_cut_off(p)

        # the laptop's agent answer: its session opens on the laptop, at that event
        target = f'#search-hits .search-hit-btn[data-ws="relay:{SECOND}"][data-session="{far}"]'
        seqs = p.eval(f"[...document.querySelectorAll('{target}')].map(b => +b.dataset.seq)")
        last = f'{target}[data-seq="{max(seqs)}"]'
        p.eval(f"document.querySelector('{last}').click()")
        p.wait(".session .search-hit", timeout_ms=30_000)
        assert p.eval("window.agentBridge.app.current.id") == far
        assert p.eval("window.agentBridge.app.active.id") == f"relay:{SECOND}"
        marked = p.eval("+document.querySelector('.session .search-hit').dataset.seq")
        assert marked == max(seqs)
        assert "quokka" in p.text(".session .search-hit")
        assert "seq=" not in p.url()  # the link's place is used once
        p.screenshot(IMAGES / "search-phone-opened-hit.png")

        p.click("#back")  # back to the hits
        p.wait("#search-hits li")
        open_view(p, "usage")
        p.click("#usage-refresh")
        p.wait("#usage-body .usage-chart")
        p.wait("#usage-body .limit-item")
        totals = p.texts("#usage-body .usage-total strong")
        assert len(totals) == 3 and all(t.startswith("$") for t in totals), totals
        assert p.count("#usage-body .usage-chart rect") >= 30  # a column per day
        limits = p.texts("#usage-body .limit-item .limit-head strong")
        assert "Limited · 5h" in limits and "Limited · week" in limits, limits
        p.eval("document.querySelector('#usage-mount').scrollIntoView()")
        p.screenshot(IMAGES / "usage-phone.png")
        assert_nothing_cut_off(p)
        assert page_errors(p) == [], page_errors(p)

        # a workstation that is away is named, and the others answer without waiting for it
        assert laptop.stop() == 0
        group = f'#sessions li.ws-group[data-ws="relay:{SECOND}"]'
        p.wait_for(f"document.querySelector('{group}').dataset.state !== 'online'", 60_000)
        open_view(p, "search")
        p.fill("#search-input", "quokka")
        p.click("#search-form button[type=submit]")
        p.wait_for("document.querySelector('#search-status').textContent.includes('laptop')")
        status = p.text("#search-status")
        assert status.startswith("2 matches") and "laptop:" in status, status
        on = p.eval(
            "[...document.querySelectorAll('#search-hits .search-hit-btn')].map(b => b.dataset.ws)"
        )
        assert set(on) == {f"relay:{FIRST}"}, on
    finally:
        p.close()
