"""Every workstation in one web client, in headless Chromium: a daemon reached directly (the
page's own, with its token) and one reached only through a real nats-server relay, paired from
the link `agent-bridge pair --relay` prints, in a fresh browser profile.

What a person sees is asserted: one session list grouped by workstation with each group's
state, a session created and answered through the relay (with a permission prompt answered
there), both workstations back after a reload, "relay down" when the relay stops, "not paired"
once revoked on the workstation. A transcript
of the pairing (what was run, what the page showed) and screenshots land in
tests/artifacts/web/.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.relaykit import Relay, decode_link, linked_daemon
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    base,
    open_view,
    page_errors,
    send,
    shot,
)

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "ws-b"
RELAY_WS = f"relay:{HOST}"
RELAY_GROUP = f'#sessions li.ws-group[data-ws="{RELAY_WS}"]'
LOCAL_GROUP = '#sessions li.ws-group[data-ws="local"]'
#: The relay's WebSocket listener is gone when the test stops it: expected console noise.
NOISE = ("WebSocket connection to", "ERR_CONNECTION_REFUSED", "agent-bridge relay:")


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    r = Relay(tmp_path_factory.mktemp("relay"), names=(HOST,)).start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("direct") / "home").start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def remote(
    relay: Relay, direct: DaemonProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    # Its pairing links open the web client the direct daemon serves: the same page code,
    # wherever it is served from.
    more = f'name = "studio"\nweb_url = "{base(direct)}"\n[server]\nserve_web = false\n'
    home = tmp_path_factory.mktemp("remote") / "home"
    yield from linked_daemon(home, relay.rdir.account_file(HOST), more)


async def publish(relay: Relay, subject: str, data: bytes) -> None:
    nc = await relay.monitor()
    try:
        await nc.publish(subject, data)
        await nc.flush()
    finally:
        await nc.close()


def relay_errors(p: Page) -> list[str]:
    return [e for e in page_errors(p) if not any(n in e for n in NOISE)]


def group_sessions(p: Page, group: str) -> int:
    return p.count(f"{group} li[data-session]")


def wait_listed(p: Page, group: str, n: int) -> None:
    p.wait_for(f"document.querySelectorAll('{group} li[data-session]').length === {n}")


def wait_text(p: Page, text: str) -> None:
    p.wait_for(
        f"document.querySelector('.session .transcript').textContent.includes({json.dumps(text)})"
    )


def assert_away(p: Page, waits: bool) -> None:
    """Nothing in the open session offers what would fail: Stop and End are off; Send is on
    only when what is sent can wait for the workstation (``waits``: the outbox), not when this
    browser was revoked."""
    off = p.eval(
        "['button.send', '.head-actions .danger', '.head-actions [title=\"End session\"]']"
        ".map((s) => document.querySelector('.session ' + s).disabled)"
    )
    assert off == [not waits, True, True], off


def test_two_workstations_one_direct_one_paired_through_the_relay(
    browser: Browser, relay: Relay, direct: DaemonProcess, remote: DaemonProcess, tmp_path: Path
) -> None:
    transcript: list[str] = []
    argv = ["agent-bridge", "pair", "--relay", "--no-qr"]
    printed = run_bridge(*argv[1:], env=remote.env, check=True).stdout
    link = next(line for line in printed.splitlines() if "#relay=" in line)
    info = decode_link(link)
    assert info["name"] == "studio" and info["host"] == HOST and info["url"] == relay.ws_url
    transcript += [f"$ {' '.join(argv)}", printed.rstrip(), ""]

    p = browser.page(*DESKTOP)  # a fresh context: a fresh profile, nothing stored
    try:
        p.goto(link)
        transcript.append("browser (fresh profile): opened the link")
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait("#conn[data-state=open]")
        # The one-time secret is out of the address bar; the pairing is kept in this browser.
        assert "relay=" not in p.url()
        [record] = json.loads(p.eval("localStorage.getItem('agent-bridge.workstations')"))
        assert record["kind"] == "relay" and record["host"] == HOST and record["client_id"]
        assert "sk" in record["keys"]
        shown = {"top bar": p.text("#conn"), "group": p.text(f"{RELAY_GROUP} .ws-head")}
        open_view(p, "settings")  # the workstations and the pairing note are in Settings
        shown |= {"workstations": p.texts("#stations li"), "pairing": p.text("#pair-status")}
        transcript += [f"page: {k}: {v!r}" for k, v in shown.items()]
        assert shown["top bar"] == "Connected"
        assert "studio" in shown["group"] and "online" in shown["group"]
        assert shown["pairing"] == "Paired with studio."
        listed = json.loads(run_bridge("clients", "--json", env=remote.env, check=True).stdout)
        assert [c["id"] for c in listed] == [record["client_id"]]
        transcript += ["", "$ agent-bridge clients --json", json.dumps(listed, indent=1), ""]

        # "Paired with …" gets out of the way (it stayed for good)
        p.wait("#pair-status", state="hidden", timeout_ms=20_000)
        # The same link again: the secret was used up, but by this browser: nothing is wrong.
        p.goto(link)
        p.wait_for(
            "document.querySelector('#pair-status').textContent"
            " === 'This browser is already paired with studio.'"
        )
        assert "error" not in p.eval("document.querySelector('#pair-status').className")
        transcript.append(f"page, the same link again: {p.text('#pair-status')!r}")
        assert len(json.loads(run_bridge("clients", "--json", env=remote.env).stdout)) == 1

        # The page's own daemon, directly with its token (the single-daemon flow).
        p.goto(base(direct) + "#token=" + direct.token)
        p.wait(f'{LOCAL_GROUP}[data-state="online"]')
        p.wait("#ns-agent option[value=demo]", state="attached")
        assert p.texts("#sessions li.ws-group .ws-name") == ["This computer", "studio"]
        assert not p.eval("document.querySelector('#ns-ws-row').hidden")

        # A session on each: the direct one, then one on the relay's workstation.
        cwd_direct = tmp_path / "direct-project"
        cwd_remote = tmp_path / "remote-project"
        cwd_direct.mkdir()
        cwd_remote.mkdir()
        p.select("#ns-ws", "local")
        p.fill("#ns-cwd", str(cwd_direct))
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea")
        send(p, "echo hello directly")
        wait_text(p, "You said: hello directly")

        p.select("#ns-ws", RELAY_WS)
        p.wait_for(f"window.agentBridge.app.active.id === {json.dumps(RELAY_WS)}")
        p.wait("#ns-agent option[value=demo]", state="attached")
        p.fill("#ns-cwd", str(cwd_remote))
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea")
        assert "ws=" in p.url()
        assert p.eval("document.querySelector('#agents-title').textContent") == "Agents on studio"
        send(p, "hello through the relay")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
        p.click(".blk-permission .perm-opt.kind-allow_once")
        p.wait(".session .blk-end", timeout_ms=30_000)
        assert "Done. You said: hello through the relay" in p.text(".session .transcript")
        assert (cwd_remote / "demo.txt").exists()  # written on the relay's workstation
        assert not (cwd_direct / "demo.txt").exists()
        wait_listed(p, RELAY_GROUP, 1)
        assert group_sessions(p, LOCAL_GROUP) == 1
        shot(p, "relay-desktop-two-workstations")
        # a preview through the relay shows in relay serve's previews' origin; this page is a
        # daemon's, which has none: it says where to open it, and opens no frame
        p.click(".session .preview-btn")
        p.wait(".preview-port")
        p.fill(".preview-port", "5173")
        p.click(".preview-form button[type=submit]")
        p.wait(".preview-relay-note")
        assert p.count(".preview-overlay") == 0
        p.click(".preview-sheet .link-btn")  # Cancel

        # Phone width, another fresh profile: the token link, then a second pairing link.
        link2 = next(
            line
            for line in run_bridge(*argv[1:], env=remote.env, check=True).stdout.splitlines()
            if "#relay=" in line
        )
        phone = browser.page(*PHONE)
        try:
            phone.goto(base(direct) + "#token=" + direct.token)
            phone.wait(f'{LOCAL_GROUP}[data-state="online"]')
            # Only the page's own daemon: the relay code and its libraries are not even loaded.
            loaded = "performance.getEntriesByType('resource').map((e) => e.name).join(' ')"
            assert "nats.js" not in phone.eval(loaded) and "relay.js" not in phone.eval(loaded)
            phone.goto(link2)
            phone.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
            wait_listed(phone, RELAY_GROUP, 1)
            wait_listed(phone, LOCAL_GROUP, 1)
            shot(phone, "relay-phone-two-workstations")
            assert "vendor/nats.ws/nats.js" in phone.eval(loaded)
            open_view(phone, "settings")
            shot(phone, "relay-phone-workstations-section")
            assert phone.texts("#stations .station-name") == ["This computer", "studio"]
            open_view(phone, "sessions")
            phone.click(f"{RELAY_GROUP} li[data-session] button")
            phone.wait(".session .blk-end", timeout_ms=30_000)
            assert "Done. You said: hello through the relay" in phone.text(".session .transcript")
            shot(phone, "relay-phone-session")
            assert relay_errors(phone) == [], relay_errors(phone)
        finally:
            phone.close()
        assert len(json.loads(run_bridge("clients", "--json", env=remote.env).stdout)) == 2

        # A reload: both come back from this browser's storage, sessions listed again.
        p.reload()
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait(f'{LOCAL_GROUP}[data-state="online"]')
        wait_listed(p, RELAY_GROUP, 1)
        wait_listed(p, LOCAL_GROUP, 1)
        # The session shown before the reload (on the relay's workstation) is shown again.
        p.wait_for(f"window.agentBridge.app.active?.id === {json.dumps(RELAY_WS)}")
        p.wait(".session .blk-end", timeout_ms=30_000)
        assert p.text(".session .title") == "hello through the relay"
        assert p.count(".toast.error") == 0, p.texts(".toast")

        # A replayed counter and a forged frame on the connection's down subject (anyone on
        # the relay could publish them): the page drops and counts them, keeps the connection,
        # and carries on without a duplicate or a hole.
        state = "window.agentBridge.app.stations.get('relay:ws-b')"
        before = p.eval(f"{state}.client.stats.connects")
        conn = p.eval(f"{state}.station.sockets[0].stats.conn")
        for forged in (bytes(7) + b"\x01" + bytes(40), (1 << 40).to_bytes(8, "big") + bytes(40)):
            asyncio.run(publish(relay, f"agent-bridge.{HOST}.vc.{conn}.down", forged))
        p.wait_for(f"{state}.station.dropped === 2", timeout_ms=30_000)
        assert p.eval(f"{state}.station.sockets[0].stats.dropped") == 2
        assert p.eval(f"{state}.station.sockets[0].stats.conn") == conn
        assert p.eval(f"{state}.client.stats.connects") == before
        send(p, "echo after the forged frames")
        wait_text(p, "You said: after the forged frames")
        seqs = p.eval("window.agentBridge.app.current.transcript.seqs")
        assert seqs == list(range(1, len(seqs) + 1))

        # The relay stops: the group says so; the direct workstation is unaffected.
        relay.stop()
        p.wait(f'{RELAY_GROUP}[data-state="relay_down"]', timeout_ms=30_000)
        assert "relay down" in p.text(f"{RELAY_GROUP} .ws-head")
        assert p.eval(f"document.querySelector('{LOCAL_GROUP}').dataset.state") == "online"
        # the open session says why, in words, and offers nothing that would fail
        p.wait(".session .reach-note[data-state=relay_down]")
        assert "The relay is down: studio cannot be reached" in p.text(".session .reach-note")
        assert_away(p, waits=True)
        p.wait_for("document.querySelector('#conn span').textContent.startsWith('Relay down')")
        shot(p, "relay-desktop-relay-down")
        p.resize(*PHONE)  # the same page on a phone's screen
        p.wait_for("document.querySelector('#conn span').textContent === 'Relay down'")
        shot(p, "relay-phone-relay-down")
        p.resize(*DESKTOP)
        transcript.append(f"page, relay stopped: {p.text(f'{RELAY_GROUP} .ws-head')!r}")
        transcript.append(f"page, the session: {p.text('.session .reach-note')!r}")

        # The relay is back: so is the workstation. Revoked on the workstation: "not paired".
        relay.start()
        back = time.monotonic()
        p.wait(f'{RELAY_GROUP}[data-state="online"]', timeout_ms=60_000)
        transcript.append(
            f"relay back: the workstation online again {time.monotonic() - back:.1f} s later"
        )
        p.wait(".session .reach-note", state="hidden")
        assert p.eval("document.querySelector('.session button.send').disabled") is False
        revoke = ["clients", "revoke", record["client_id"]]
        run_bridge(*revoke, env=remote.env, check=True)
        p.wait(f'{RELAY_GROUP}[data-state="unauthorized"]', timeout_ms=30_000)
        assert "not paired" in p.text(f"{RELAY_GROUP} .ws-head")
        assert p.eval(f"document.querySelector('{LOCAL_GROUP}').dataset.state") == "online"
        p.wait(".session .reach-note[data-state=unauthorized]")
        note = p.text(".session .reach-note")
        assert note.startswith("This browser was revoked on studio: pair again with"), note
        assert p.text(".session .reach-note code") == "agent-bridge pair --relay"
        assert_away(p, waits=False)
        shot(p, "relay-desktop-revoked")
        p.resize(*PHONE)
        shot(p, "relay-phone-revoked")
        p.resize(*DESKTOP)
        transcript.append(f"page, the session after the revocation: {note!r}")
        transcript.append(f"$ agent-bridge {' '.join(revoke)}")
        transcript.append(f"page: {p.text(f'{RELAY_GROUP} .ws-head')!r}")

        # Removed from this browser: its group and its keys are gone, the direct one stays.
        p.eval("window.confirm = () => true")
        open_view(p, "settings")
        p.click(f'#stations li[data-ws="{RELAY_WS}"] button')
        p.wait_for(f"!document.querySelector('{RELAY_GROUP}')")
        assert p.eval("localStorage.getItem('agent-bridge.workstations')") == "[]"
        assert p.texts("#stations .station-name") == ["This computer"]
        open_view(p, "sessions")
        p.wait(f'{LOCAL_GROUP}[data-state="online"]')
        p.wait("#conn[data-state=open]")
        assert relay_errors(p) == [], relay_errors(p)
    finally:
        p.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "relay-pairing-transcript.txt").write_text("\n".join(transcript) + "\n")
