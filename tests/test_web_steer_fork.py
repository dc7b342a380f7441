"""Steer and fork from a phone, in headless Chromium at 390x844, through `agent-bridge relay
serve` (the relay carries the same frames sealed): steer a running demo turn from the
composer, then fork from the first message and run a turn in the fork."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.relaykit import ServedRelay, linked_daemon, relay_pairing_link
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import PHONE, new_session, page_errors, send, shot

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "test-box"
RELAY_GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'
TRANSCRIPT = "document.querySelector('.session .transcript').textContent"


def shot_at(p: Page, selector: str, name: str) -> None:
    """A screenshot with the last ``selector`` in view (a toast tapped away, as a person would)."""
    p.eval("document.querySelectorAll('.toast').forEach((t) => t.click())")
    p.eval(
        f"[...document.querySelectorAll({selector!r})].at(-1).scrollIntoView({{block: 'start'}})"
    )
    shot(p, name)


@pytest.fixture
def workstation(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    more = 'name = "studio"\n[server]\nserve_web = false\n'
    yield from linked_daemon(tmp_path / "home", served.account_file(HOST), more)


def test_a_phone_steers_a_running_turn_then_forks_from_the_first_message(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    link = relay_pairing_link(workstation)
    p = browser.page(*PHONE)
    try:
        p.goto(link)
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait("#ns-agent option[value=demo]", state="attached")
        project = tmp_path / "project"
        project.mkdir()
        parent = new_session(p, project)
        # no turn runs: no choice, the button sends
        assert p.eval("document.querySelector('.steer-choice').hidden")
        assert p.text(".composer .send") == "Send"

        send(p, "slow write a haiku")
        p.wait(".steer-choice", timeout_ms=30_000)  # shown while the turn runs
        assert p.text(".composer .send") == "Steer"  # the default on a fresh device
        assert p.eval("document.querySelector('.seg[data-choice=steer]').ariaPressed") == "true"
        send(p, "make it about the sea")
        p.wait(".blk-user.is-steer", timeout_ms=30_000)
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
        shot_at(p, ".blk-user.is-steer", "steer-phone-running")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        p.wait(".session .blk-end", timeout_ms=30_000)
        p.wait_for(f"{TRANSCRIPT}.includes('(and then: make it about the sea)')")
        assert p.count(".session .blk-end") == 1  # one turn: the message went into it
        assert "into the turn" in p.text(".blk-user.is-steer")
        p.wait_for("document.querySelector('.steer-choice').hidden")

        # the choice is remembered on this device
        p.eval("localStorage.setItem('agent-bridge.steer', 'queue')")

        # Fork from the first message: a new session with that turn, which runs a turn of its own.
        p.click(".blk-user:not(.is-steer) .fork-here")
        p.wait_for(f"window.agentBridge.app.current?.id !== {parent!r}", timeout_ms=30_000)
        fork = str(p.eval("window.agentBridge.app.current.id"))
        p.wait(".session .blk-system.code-forked", timeout_ms=30_000)
        assert f"forked from session {parent}" in p.text(".session .blk-system.code-forked")
        shot_at(p, ".session .blk-system.code-forked", "fork-phone-history")
        p.wait_for(f"{TRANSCRIPT}.includes('slow write a haiku')")
        send(p, "echo hello from the fork")
        p.wait_for(f"{TRANSCRIPT}.includes('You said: hello from the fork')", timeout_ms=30_000)
        assert "I was given the earlier conversation" in p.eval(TRANSCRIPT)
        assert p.eval("window.agentBridge.app.current.id") == fork
        shot_at(p, ".session .blk-user", "fork-phone-forked")
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()
