"""The web client's outbox, in headless Chromium at phone size against a real daemon that is
stopped and started again: messages sent while the workstation cannot be reached wait in
IndexedDB ("waiting for NAME"), survive the page being closed, and reach the agent exactly
once each, in order, when it is back; a cancelled one never does."""

from __future__ import annotations

from pathlib import Path

from tests.daemon import DaemonProcess
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import (
    ARTIFACTS,
    PHONE,
    assert_history_exact,
    base,
    login,
    new_session,
    send,
    shot,
    wait_turns,
)

pytestmark = BROWSER_TESTS

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
