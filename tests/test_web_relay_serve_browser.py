"""A phone anywhere, in headless Chromium: `agent-bridge relay serve` (one command) serves the
web client itself, `agent-bridge pair --relay` prints a link to that page, and a fresh browser
profile opens it, pairs, creates a session on the workstation and sees its answer, with
nothing loaded from the daemon (which serves no page at all here). The page connects with the
phone's own NATS user (docs/security.md, "One NATS identity per client"), asks for it when it
was paired before it had one, and says "not paired" once revoked."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, user_texts
from tests.relaykit import ServedRelay, decode_link, linked_daemon, relay_pairing_link
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import (
    PHONE,
    demo_turn_in_a_new_session,
    loaded,
    new_session,
    page_errors,
    send,
    shot,
)

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "test-box"
RELAY_GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'


@pytest.fixture
def workstation(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    # The daemon serves no web client: the phone cannot reach it anyway.
    more = 'name = "studio"\n[server]\nserve_web = false\n'
    yield from linked_daemon(tmp_path / "home", served.account_file(HOST), more)


def test_a_phone_pairs_from_the_page_the_relay_serves(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    relay_page = f"http://127.0.0.1:{served.web_port}/"
    link = relay_pairing_link(workstation)
    assert link.startswith(relay_page + "#relay=")
    assert decode_link(link)["url"] == f"ws://127.0.0.1:{served.web_port}/nats"  # one port

    p = browser.page(*PHONE)  # a fresh context: a fresh profile, nothing stored
    try:
        # The bare page: no daemon to sign in to here, only pairing through the relay.
        p.goto(relay_page)
        p.wait("#login-link-input")
        p.wait_for("document.querySelector('#login-form').hidden")
        assert p.text("#login-link h2") == "Pair through a relay"
        p.goto(link)
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait_for("document.querySelector('#pair-status').textContent === 'Paired with studio.'")
        assert "relay=" not in p.url()
        demo_turn_in_a_new_session(p, tmp_path / "project", "hello from anywhere")
        shot(p, "relay-serve-phone-session")

        # Everything the page loaded came from the relay's web port: nothing from the daemon.
        urls = loaded(p)
        assert urls and all(u.startswith(relay_page) for u in urls), urls
        assert f"127.0.0.1:{workstation.port}" not in " ".join(urls)
        # and the page never looked for a daemon at its own origin
        assert not [e for e in p.logs() if "/v1/ws" in e["text"]], p.logs()
        assert page_errors(p) == [], page_errors(p)

        # The phone's own NATS user came in the sealed pair reply and is kept with its record.
        records = "JSON.parse(localStorage.getItem('agent-bridge.workstations'))"
        [record] = p.eval(records)
        assert record["login"]["user"] == f"{HOST}-{record['client_id']}"
        assert record["login"]["pass"] != record["pass"]  # not the pairing login of the link

        # A phone paired before the relay gave users (no login in its record) asks for one.
        p.eval(
            f"(() => {{ const [r] = {records}; delete r.login;"
            " localStorage.setItem('agent-bridge.workstations', JSON.stringify([r])); })()"
        )
        p.reload()
        p.wait(f'{RELAY_GROUP}[data-state="online"]', state="attached", timeout_ms=30_000)
        p.wait_for(f"{records}[0].login?.user === {json.dumps(record['login']['user'])}")
        p.wait(".session .blk-end", timeout_ms=30_000)
        send(p, "echo after asking for a login")
        p.wait_for(
            "document.querySelector('.session .transcript').textContent"
            ".includes('You said: after asking for a login')"
        )

        # Revoked on the workstation: "not paired", and the relay no longer takes its login.
        run_bridge("clients", "revoke", record["client_id"], env=workstation.env, check=True)
        unauthorized = f'{RELAY_GROUP}[data-state="unauthorized"]'
        p.wait(unauthorized, state="attached", timeout_ms=30_000)
        assert "not paired" in p.eval(
            f"document.querySelector('{RELAY_GROUP} .ws-head').textContent"
        )
        p.reload()  # its login refused, the pairing login's P.login says revoked
        p.wait(unauthorized, state="attached", timeout_ms=30_000)
        shot(p, "relay-serve-phone-revoked")
    finally:
        p.close()


def test_a_phone_with_its_own_user_leaves_a_message_on_its_own_queue_subject(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    """On `relay serve` the page queues on the subject only it can name (its token, from its
    own NATS password: bridge/relay/permissions.py): what it sends while the workstation is away
    waits on the relay, and reaches the agent when the workstation is back."""
    link = relay_pairing_link(workstation)
    p = browser.page(*PHONE)
    try:
        p.goto(link)
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait("#ns-agent option[value=demo]", state="attached")
        project = tmp_path / "project"
        project.mkdir()
        session = new_session(p, project)
        for _ in range(300):
            if workstation.healthz().get("relay_queue") == "on":
                break
            time.sleep(0.1)
        assert workstation.healthz()["relay_queue"] == "on", workstation.healthz()
        workstation.stop()
        p.wait(".session .reach-note[data-state=offline]", timeout_ms=30_000)
        send(p, "echo waited on the relay")
        p.wait_for("document.querySelectorAll('.blk-user.is-relayed').length === 1", 30_000)
        assert page_errors(p) == [], page_errors(p)
        workstation.start()
        assert asyncio.run(user_texts(workstation, session, 1)) == ["echo waited on the relay"]
    finally:
        p.close()
