"""A phone on a hosted NATS, in headless Chromium at phone size: a nats-server in operator mode
(accounts and users as JWTs, as Synadia Cloud and any `operator:` server give them; made in
tests/natslogins.py) with a WebSocket listener; the daemon logs in with a `.creds` file, and
every phone with one bearer user JWT from `client_auth` (a browser keeps no seed to sign
with), whose rights are exactly those docs/remote-access.md lists. The phone opens the
pairing link on the daemon's page, pairs, and runs a session with a permission answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.natslogins import HostedNats, phone_bearer_jwt, private
from tests.relaykit import decode_link, relay_pairing_link, relayed_daemon
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, demo_turn_in_a_new_session, page_errors, shot

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[HostedNats]:
    server = HostedNats(tmp_path / "nats", "operator", websocket=True).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_phone_pairs_and_works_through_a_hosted_nats_with_a_bearer_jwt(
    browser: Browser, hosted: HostedNats, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    creds = hosted.login_file(hosted.daemon_user, home / "secrets" / "daemon.creds")
    jwt = phone_bearer_jwt(hosted.account, "ws-a")
    client_auth = private(home / "secrets" / "phones.json", json.dumps({"jwt": jwt}))
    config = (
        f'[relay]\nurl = "{hosted.url}"\nhost_id = "ws-a"\ncreds = "{creds}"\n'
        f'client_url = "ws://127.0.0.1:{hosted.ws_port}"\nclient_auth = "{client_auth}"\n'
        'name = "studio"\n'
    )
    d = relayed_daemon(home, config)
    p = None
    try:
        link = relay_pairing_link(d)
        info = decode_link(link)
        assert info["jwt"] == jwt and info["user"] is None and info["pass"] is None
        assert jwt not in d.log_text()  # a login: masked like a password
        p = browser.page(*PHONE, mobile=True)
        p.goto(link)
        group = '#sessions li.ws-group[data-ws="relay:ws-a"]'
        p.wait(f'{group}[data-state="online"]', timeout_ms=30_000)
        [record] = p.eval("JSON.parse(localStorage.getItem('agent-bridge.workstations'))")
        assert record["jwt"] == jwt and record["login"] is None  # no user per phone here
        demo_turn_in_a_new_session(p, tmp_path / "project", "hello through a hosted NATS")
        assert page_errors(p) == [], page_errors(p)
        shot(p, "hosted-nats-phone-session")
    finally:
        if p is not None:
            p.close()
        d.stop()
