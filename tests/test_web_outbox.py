"""The web client's outbox, in headless Chromium at phone size against a real daemon that is
stopped and started again: messages sent while the workstation cannot be reached wait in
IndexedDB ("waiting for NAME"), survive the page being closed, and reach the agent exactly
once each, in order, when it is back; a cancelled one never does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.daemon import DaemonProcess
from tests.daemonkit import user_texts
from tests.relaykit import Relay, linked_daemon, relay_pairing_link
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    ARTIFACTS,
    PHONE,
    add_workstation_link,
    assert_history_exact,
    base,
    login,
    new_session,
    send,
    shot,
    wait_turns,
)
from tests.wsclient import Client

pytestmark = BROWSER_TESTS

GROUP = '#sessions li.ws-group[data-ws="relay:ws-b"]'

KEPT = (
    "new Promise((ok) => { const r = indexedDB.open('agent-bridge', 1);"
    " r.onsuccess = () => { const k = r.result.transaction('kv').objectStore('kv').getAllKeys();"
    " k.onsuccess = () => ok(k.result.filter((x) => String(x).startsWith('outbox:')).length); };"
    " })"
)


def test_what_is_sent_while_away_waits_survives_a_closed_page_and_goes_once(
    browser: Browser, tmp_path: Path, project: Path
) -> None:
    d = DaemonProcess(tmp_path / "home").start()
    p = browser.page(*PHONE, mobile=True)
    log: list[str] = []
    try:
        login(p, d)
        session = new_session(p, project)
        send(p, "echo before")
        wait_turns(p, 1)
        d.stop()
        p.wait(".session .reach-note[data-state=offline]", timeout_ms=30_000)
        assert not p.eval("document.querySelector('.session button.send').disabled")
        for text in ("echo first while away", "echo second while away", "echo never mind"):
            send(p, text)
        p.wait_for("document.querySelectorAll('.blk-user.is-waiting').length === 3")
        assert (
            p.texts(".blk-user.is-waiting .pending-note")
            == ["waiting for This computer · Cancel"] * 3
        )
        p.click(".blk-user.is-waiting:last-child .outbox-cancel")  # the third: cancelled
        p.wait_for("document.querySelectorAll('.blk-user.is-waiting').length === 2")
        shot(p, "outbox-phone-waiting")
        assert p.eval(KEPT) == 2
        log.append("daemon stopped; sent 3, cancelled 1: 2 waiting in IndexedDB")

        p.reopen()  # the page closed; the daemon, which served it, is down: nothing to open
        log.append("page closed while the daemon is down")
        d.start()
        p.goto(base(d) + "#session=" + session)  # opened again once it is back
        p.wait("#conn[data-state=open]", timeout_ms=30_000)
        p.wait_for("document.querySelectorAll('.blk-user.is-waiting').length === 0", 30_000)
        wait_turns(p, 3)
        log.append("daemon started: the page sent what waited")
        assert p.eval(KEPT) == 0
        assert p.texts(".blk-user .user-text") == [
            "echo before",
            "echo first while away",
            "echo second while away",
        ]
        assert p.texts(".blk-text")[-2:] == [
            "You said: first while away",
            "You said: second while away",
        ]
        assert_history_exact(p, d, session)
        log.append(f"the agent got: {p.texts('.blk-user .user-text')}")
    finally:
        p.close()
        d.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "outbox-transcript.txt").write_text("\n".join(log) + "\n")


@contextlib.contextmanager
def studio_through_the_relay(
    relay: Relay, browser: Browser, tmp_path: Path, project: Path
) -> Iterator[tuple[Page, DaemonProcess, DaemonProcess]]:
    """A phone-size page signed in to its own daemon (``direct``) with a second workstation,
    ``studio`` (``ws-b``), paired through the relay, online and chosen for new sessions; the
    page, ``direct`` and ``studio`` are stopped after."""
    direct = DaemonProcess(tmp_path / "direct").start()
    more = f'name = "studio"\nweb_url = "{base(direct)}"\n[server]\nserve_web = false\n'
    remote_fixture = linked_daemon(tmp_path / "remote", relay.rdir.account_file("ws-b"), more)
    remote = next(remote_fixture)
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, direct)
        add_workstation_link(p, relay_pairing_link(remote))
        p.wait(f'{GROUP}[data-state="online"]', timeout_ms=30_000)
        p.eval("window.agentBridge.app.showNewSession()")
        p.select("#ns-ws", "relay:ws-b")
        yield p, direct, remote
    finally:
        p.close()
        remote_fixture.close()
        direct.stop()


def test_through_the_relay_with_everything_down_and_back_in_another_order(
    relay: Relay, browser: Browser, tmp_path: Path, project: Path
) -> None:
    """The page's own daemon stays up; the workstation behind the relay and the relay go down
    (workstation first), messages wait, the page is closed and opened again, then the
    workstation comes back before the relay: each message reaches its agent once, in order."""
    with studio_through_the_relay(relay, browser, tmp_path, project) as (p, direct, remote):
        session = new_session(p, project)
        send(p, "echo one")
        wait_turns(p, 1)
        remote.stop()
        relay.stop()
        p.wait(".session .reach-note[data-state=relay_down]", timeout_ms=30_000)
        send(p, "echo two")
        send(p, "echo three")
        p.wait_for("document.querySelectorAll('.blk-user.is-waiting').length === 2")
        p.reopen()
        p.goto(base(direct) + f"#session={session}&ws=relay:ws-b")
        p.wait(f"{GROUP} .ws-waiting", state="attached")
        assert p.text(f"{GROUP} .ws-waiting") == "2 waiting to send"
        # the session opens from what the outbox knows, its messages shown waiting
        p.wait_for("document.querySelectorAll('.blk-user.is-waiting').length === 2")
        shot(p, "outbox-phone-waiting-relay")
        remote.start()  # the workstation first, the relay after it
        relay.start()
        p.wait(f'{GROUP}[data-state="online"]', state="attached", timeout_ms=60_000)
        p.wait(".session textarea", timeout_ms=30_000)
        wait_turns(p, 3, timeout_ms=60_000)
        assert p.texts(".blk-user .user-text") == ["echo one", "echo two", "echo three"]
        assert_history_exact(p, remote, session)
        assert p.count(f"{GROUP} .ws-waiting") == 0


def test_a_waiting_message_the_daemon_refuses_for_good_leaves_the_outbox_shown_not_sent(
    browser: Browser, tmp_path: Path, project: Path
) -> None:
    d = DaemonProcess(tmp_path / "home", config="[limits]\nmax_attachment_bytes = 16\n").start()
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, d)
        new_session(p, project)
        d.stop()
        p.wait(".session .reach-note[data-state=offline]", timeout_ms=30_000)
        p.set_files(".session input[type=file]", [("big.txt", "text/plain", b"x" * 64)])
        send(p, "echo too big")
        p.wait(".blk-user.is-waiting")
        d.start()
        p.wait(".blk-user.is-failed", timeout_ms=30_000)  # refused for good: not tried again
        note = p.text(".blk-user.is-failed .pending-note")
        assert note.startswith("not sent: "), note
        assert p.eval("document.querySelector('.session textarea').value") == "echo too big"
        assert p.eval(KEPT) == 0
    finally:
        p.close()
        d.stop()


def test_left_on_the_relays_queue_it_reaches_the_agent_with_the_page_closed(
    relay: Relay, browser: Browser, tmp_path: Path, project: Path
) -> None:
    """The workstation behind the relay is down while the relay is up: what the page sends goes
    onto the relay's work queue, sealed; the page is closed; the workstation starts with no page
    open and its agent gets each message once, in order; the page opened again sends nothing
    twice."""
    log: list[str] = []
    try:
        with studio_through_the_relay(relay, browser, tmp_path, project) as (p, direct, remote):
            session = new_session(p, project)
            send(p, "echo one")
            wait_turns(p, 1)
            remote.stop()
            p.wait(".session .reach-note[data-state=offline]", timeout_ms=30_000)
            assert "waits on the relay" in p.text(".session .reach-note")
            # a daemon that cannot reach the relay looks the same from here: where to look
            assert "agent-bridge doctor" in p.text(".session .reach-note")
            send(p, "echo two")
            send(p, "echo three")
            p.wait_for("document.querySelectorAll('.blk-user.is-relayed').length === 2", 30_000)
            assert (
                p.texts(".blk-user.is-relayed .pending-note")
                == ["waiting on the relay for studio"] * 2
            )
            assert p.eval(KEPT) == 2  # still kept here until the workstation answers
            shot(p, "outbox-phone-relayed")
            log.append(
                "workstation studio stopped, relay up: the page sent 2, both left on the relay"
            )
            p.reopen()  # the page closed
            log.append("page closed")
            remote.start()
            got = asyncio.run(user_texts(remote, session, 3))
            log.append(f"workstation started with no page open: the agent got {got}")
            assert got == ["echo one", "echo two", "echo three"]
            p.goto(base(direct) + f"#session={session}&ws=relay:ws-b")
            p.wait(f'{GROUP}[data-state="online"]', state="attached", timeout_ms=60_000)
            p.wait_for(f"({KEPT}).then((n) => n === 0)", 30_000)
            wait_turns(p, 3, timeout_ms=60_000)
            assert p.texts(".blk-user .user-text") == ["echo one", "echo two", "echo three"]
            assert_history_exact(p, remote, session)
            log.append("page opened again: nothing waiting, each message once in the transcript")
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "outbox-relay-queue-transcript.txt").write_text("\n".join(log) + "\n")


async def waiting_at_the_daemon(d: DaemonProcess, session: str) -> dict[str, object]:
    """The session's list entry once the daemon holds its first message's turn on a permission
    and one more message behind it (30 s at most)."""
    deadline = asyncio.get_running_loop().time() + 30
    c = await Client.open(d.url, d.token)
    try:
        while True:
            listed = await c.request("sessions.list", include_external=False)
            entry: dict[str, object] = next(
                s for s in listed["sessions"] if s["session"] == session
            )
            if entry.get("queued") == 1 and entry.get("needs"):
                return entry
            assert asyncio.get_running_loop().time() < deadline, entry
            await asyncio.sleep(0.2)
    finally:
        await c.ws.close()


def test_reopened_a_message_the_daemon_took_from_the_relay_and_holds_queued_is_shown(
    relay: Relay, browser: Browser, tmp_path: Path, project: Path
) -> None:
    """Two messages left on the relay's queue; the workstation takes both with the page closed:
    the first starts a turn that waits on a permission, the second waits behind it at the
    daemon. The page opened again shows both: the first in the log, the second as queued."""
    with studio_through_the_relay(relay, browser, tmp_path, project) as (p, direct, remote):
        session = new_session(p, project)
        remote.stop()
        p.wait(".session .reach-note[data-state=offline]", timeout_ms=30_000)
        send(p, "show me the tour")
        send(p, "echo after the tour")
        p.wait_for("document.querySelectorAll('.blk-user.is-relayed').length === 2", 30_000)
        p.reopen()
        remote.start()
        asyncio.run(waiting_at_the_daemon(remote, session))
        p.goto(base(direct))  # the list, as a person opens it again
        p.wait(f'{GROUP}[data-state="online"]', state="attached", timeout_ms=60_000)
        item = f'{GROUP} li[data-session="{session}"] .session-item'
        badge = f"document.querySelector('{item} .badge.state')?.textContent"
        p.wait_for(f"{badge} === 'needs you · 1 queued'", 30_000)
        p.click(item)
        p.wait(".blk-permission[data-state=open]", timeout_ms=30_000)
        shot(p, "outbox-phone-reopened-queued")
        assert p.texts(".session .blk-user .user-text") == [
            "show me the tour",
            "echo after the tour",
        ]
        assert "queued" in p.text(".session .blk-user.is-pending .pending-note")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        wait_turns(p, 2, timeout_ms=60_000)
        assert p.texts(".session .blk-user .user-text") == [
            "show me the tour",
            "echo after the tour",
        ]
        assert_history_exact(p, remote, session)
        p.wait_for(f"({KEPT}).then((n) => n === 0)", 30_000)  # queued no more: gone from here
