"""What someone holding the relay's client login (a revoked phone's) can do to a workstation's
relay traffic, against a real nats-server: junk on the virtual connections' ``.up`` subjects
and requests whose reply subject names a victim's stream change nothing; they are dropped,
counted and logged throttled. And a relay that hangs (SIGSTOP) is noticed within seconds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.bindings
import pytest
from nats.aio.msg import Msg

from bridge.process import TaskOwner
from bridge.relay import sealing
from bridge.relay.link import RelayLink
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.relaykit import (
    Attacker,
    Relay,
    RelayClient,
    decode_link,
    events_until,
    linked_daemon,
    lone_connection,
    opened,
    paired,
    wait_relay,
)

#: what docs/operations.md promises for a hung relay: /healthz says so within this
HUNG_RELAY_BOUND_S = 10.0


async def settle(nc: Any) -> None:
    """What was published has reached the daemon and its answers are back."""
    await nc.flush()
    await asyncio.sleep(0.3)


async def test_unauthenticated_frames_are_dropped_counted_and_change_nothing(
    relay: Relay, link: RelayLink
) -> None:
    client = await paired(relay, link)
    vc = await client.open()
    assert (await vc.request("ping", n=1))["n"] == 1
    intruder = await relay.connect("ws-a")
    replayed = await vc.send_sealed(sealing.KEEPALIVE)
    await intruder.publish(vc.up, replayed)  # the relay (or anyone) sends it again
    forged = bytearray(vc.sealer.seal(sealing.FRAME, b"{}"))  # type: ignore[union-attr]
    forged[-1] ^= 1
    await intruder.publish(vc.up, bytes(forged))
    # a forged message with a counter far ahead must not move the counter either
    await intruder.publish(vc.up, (1 << 40).to_bytes(8, "big") + bytes(40))
    await intruder.publish(vc.up, b"short")
    await settle(intruder)
    [daemon_vc] = link.vcs.values()
    assert daemon_vc.dropped_unauthenticated == 4
    assert link.dropped == {"frames": 4, "requests": 0, "queued": 0}
    # the connection goes on, counters and all: the next genuine frames are taken
    assert (await vc.request("ping", n=2))["n"] == 2
    assert vc.closed is None and not daemon_vc.closed
    await intruder.close()
    await client.nc.close()


async def test_junk_does_not_keep_a_silent_connection_alive() -> None:
    """A connection whose client went quiet is still closed after 60 s, junk or not."""
    owner = TaskOwner("test")
    vc, key, sent = lone_connection(owner)
    heard = vc.last_recv
    for junk in (b"short", bytes(8) + bytes(40), (7).to_bytes(8, "big") + bytes(40)):
        vc.deliver(junk)
    assert vc.last_recv == heard and not vc.closed and vc.dropped_unauthenticated == 3
    vc.tick(heard + 61)
    await vc.stopped()
    await owner.close()  # the idle close it started has ended
    opened = sealing.Opener(key, sealing.DAEMON_TO_CLIENT).open(sent[-1])
    assert json.loads(opened.body)["code"] == 4408


async def test_an_authentic_frame_of_no_known_kind_closes_the_connection(
    relay: Relay, link: RelayLink
) -> None:
    """Only what the peer itself sealed may close: an unknown kind under its key does."""
    client, vc = await opened(relay, link)
    assert vc.sealer is not None
    vc.sealer.counter += 1
    counter = vc.sealer.counter.to_bytes(8, "big")
    nonce = bytes([sealing.CLIENT_TO_DAEMON]) + bytes(15) + counter
    sealed = nacl.bindings.crypto_secretbox(b"\x09body", nonce, vc.key)
    await client.nc.publish(vc.up, counter + sealed)
    await asyncio.wait_for(vc.closed_event.wait(), 5)
    assert vc.closed == {"code": 4400, "reason": "rejected frame"}
    assert link.dropped["frames"] == 0
    await client.nc.close()


async def test_requests_are_answered_only_on_the_workstations_inbox(
    relay: Relay, link: RelayLink
) -> None:
    client, vc = await opened(relay, link)
    monitor = await relay.monitor()
    on_victim: list[Msg] = []

    async def keep(msg: Msg) -> None:
        on_victim.append(msg)

    await monitor.subscribe(f"agent-bridge.ws-a.vc.{vc.conn}.*", cb=keep)
    await monitor.subscribe("agent-bridge.ws-b.>", cb=keep)
    await monitor.flush()
    intruder = await relay.connect("ws-a")
    p = "agent-bridge.ws-a"
    hostile = [
        ("status", f"{p}.vc.{vc.conn}.down"),
        ("status", f"{p}.vc.{vc.conn}.up"),
        ("open", f"{p}.vc.{vc.conn}.down"),
        ("pair", f"{p}.vc.{vc.conn}.up"),
        ("status", "agent-bridge.ws-b.vc.x.down"),  # another workstation's subject
        ("status", f"{p}._INBOX.>"),  # a wildcard is no inbox
        ("open", ""),  # no reply subject at all: read nothing
    ]
    for what, reply in hostile:
        await intruder.publish(f"{p}.{what}", b'{"v":1}', reply=reply)
    await settle(intruder)
    await monitor.flush()
    assert [m.subject for m in on_victim] == [], "the daemon published where it was told"
    assert link.dropped == {"frames": 0, "requests": len(hostile), "queued": 0}
    assert vc.closed is None and vc.dropped == []
    assert (await vc.request("ping", n=3))["n"] == 3
    assert await client.status() == {"v": 1}  # a request from an inbox is answered
    await monitor.close()
    await intruder.close()
    await client.nc.close()


# ---- a real daemon under attack -----------------------------------------------------------------


@pytest.fixture
def daemon(relay: Relay, tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from linked_daemon(tmp_path / "home", relay.rdir.account_file("ws-a"))


@pytest.mark.slow
async def test_a_paired_phone_completes_its_turns_while_a_revoked_one_floods_junk(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    # the phone that will be revoked pairs first, then the one that stays
    links = []
    for _ in range(2):
        out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
        links.append(decode_link(json.loads(out.stdout)["link"]))
    revoked = RelayClient(await relay.connect("ws-a"), "ws-a", sealing.unb64(links[0]["pk"]))
    assert (await revoked.pair(links[0]["secret"], name="lost phone"))["ok"]
    assert revoked.client_id is not None
    run_bridge("clients", "revoke", revoked.client_id, env=daemon.env, check=True)
    with pytest.raises(RuntimeError, match="revoked"):
        await revoked.open()
    # it still holds the relay's client login: it floods every connection it sees
    attacker = await Attacker(revoked.nc, "ws-a").start()
    phone = RelayClient(await relay.connect("ws-a"), "ws-a", sealing.unb64(links[1]["pk"]))
    assert (await phone.pair(links[1]["secret"], name="phone"))["ok"]
    started = time.monotonic()
    vc = await phone.open()
    await vc.hello()
    session = (await vc.request("session.create", agent="demo", cwd=str(tmp_path)))["session"]
    await vc.request("session.subscribe", session=session["session"])
    # the attack is under way on this very connection before the turns start
    for _ in range(300):
        if attacker.junk_sent >= 300:
            break
        await asyncio.sleep(0.05)
    turns = 0
    for i in range(10):
        await vc.request("session.send", session=session["session"], text=f"echo turn {i}")
        await events_until(vc, lambda b: b["type"] == "session_end", session=session["session"])
        turns += 1
    elapsed = time.monotonic() - started
    await attacker.stop()
    assert turns == 10
    assert attacker.junk_sent >= 300 and attacker.requests_sent >= 300, attacker.junk_sent
    assert vc.closed is None and vc.dropped == []  # no forged answer reached the phone
    for _ in range(100):  # what the attacker sent last may still be on its way
        health = daemon.healthz()
        if min(health["relay_dropped"][k] for k in ("frames", "requests")) > 100:
            break
        await asyncio.sleep(0.05)
    assert health["relay"] == "connected"
    assert health["relay_dropped"]["frames"] > 100
    assert health["relay_dropped"]["requests"] > 100
    doctor = json.loads(run_bridge("doctor", "--json", env=daemon.env).stdout)
    assert "relay_dropped" in json.dumps(doctor), doctor  # where a user sees the counts
    # nothing was closed for junk, and the log says so in a bounded number of lines
    assert not [c for c in daemon.log_events("relay_vc_closed") if c.get("code") == 4400]
    assert daemon.log_events("relay_frame_rejected") == []
    dropped = daemon.log_events("relay_frame_dropped") + daemon.log_events("relay_request_dropped")
    # one line per kind (3 frame kinds, 3 requests) at once, then one a kind per 10 s
    assert dropped and len(dropped) <= 6 * (1 + int(elapsed / 10) + 1), len(dropped)
    assert any(line.get("left_out", 0) > 0 for line in dropped) or elapsed < 10
    await phone.nc.close()


@pytest.mark.slow
async def test_refused_requests_are_logged_throttled(relay: Relay, daemon: DaemonProcess) -> None:
    out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
    pk = sealing.unb64(decode_link(json.loads(out.stdout)["link"])["pk"])
    stranger = RelayClient(await relay.connect("ws-a"), "ws-a", pk)
    for _ in range(200):
        assert (await stranger.ask("pair", {"v": 2}))["error"] == "bad_request"
        assert (await stranger.ask("open", {"v": 2}))["error"] == "bad_request"
    assert len(daemon.log_events("relay_pair_refused")) <= 2
    assert len(daemon.log_events("relay_open_refused")) <= 2
    await stranger.nc.close()


@pytest.mark.slow
async def test_malformed_requests_are_refused_and_logged_throttled(
    relay: Relay, daemon: DaemonProcess
) -> None:
    """A revoked phone's pairing-link login sends 1,000 ``P.pair`` requests of JSON nested
    3,000 deep (and a few other malformed shapes on each request subject): each is refused
    with bad_request, no traceback is written, and the log stays a few lines long."""
    out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
    pk = sealing.unb64(decode_link(json.loads(out.stdout)["link"])["pk"])
    stranger = RelayClient(await relay.connect("ws-a"), "ws-a", pk)
    deep = b"[" * 3000 + b"]" * 3000
    for _ in range(1000):
        reply = await stranger.nc.request("agent-bridge.ws-a.pair", deep, timeout=5)
        assert json.loads(reply.data) == {"ok": False, "error": "bad_request"}
    zero_key = {"v": 1, "pk": sealing.b64(bytes(32)), "n": sealing.b64(bytes(24)), "box": "AAAA"}
    shapes = [deep, b'{"v":1,"pk":"\\ud800"}', b"\xff\xfe", b"[1]", b'"v"', b"1e999", b"{}" * 3]
    shapes.append(json.dumps(zero_key).encode())  # a key of low order: no shared secret
    for what in ("pair", "open"):
        for data in shapes:
            reply = await stranger.nc.request(f"agent-bridge.ws-a.{what}", data, timeout=5)
            assert json.loads(reply.data) == {"ok": False, "error": "bad_request"}, (what, data)
    text = daemon.log_text()
    assert "Traceback" not in text and "relay_request_failed" not in text
    lines = [line for line in text.splitlines() if "relay_" in line and "refused" in line]
    assert 1 <= len(lines) <= 4, lines[:10]  # one a kind: pair, open
    assert len(text) < 100_000, len(text)
    await stranger.nc.close()


@pytest.mark.slow
async def test_requests_the_daemon_fails_to_handle_are_logged_throttled_without_a_traceback(
    relay: Relay, daemon: DaemonProcess
) -> None:
    """Its pairing file made readable by others, the daemon refuses to read it: each pairing
    request is answered ``internal``; 300 of them write one line, not 300 tracebacks."""
    out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
    pk = sealing.unb64(decode_link(json.loads(out.stdout)["link"])["pk"])
    (daemon.state_dir / "relay" / "pairing.json").chmod(0o644)
    stranger = RelayClient(await relay.connect("ws-a"), "ws-a", pk)
    for _ in range(300):
        reply = await stranger.pair(sealing.b64(os.urandom(32)))
        assert reply == {"ok": False, "error": "internal"}
    [line] = daemon.log_events("relay_request_failed")
    assert line["request"] == "pair" and "PrivateFileError" in line["error"], line
    assert "Traceback" not in daemon.log_text()
    assert await stranger.status() == {"v": 1}  # the link goes on
    await stranger.nc.close()


@pytest.mark.slow
async def test_a_hung_relay_is_noticed_within_seconds(relay: Relay, daemon: DaemonProcess) -> None:
    assert relay.proc is not None
    os.kill(relay.proc.pid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        await asyncio.to_thread(wait_relay, daemon, "disconnected", HUNG_RELAY_BOUND_S)
        assert time.monotonic() - stopped < HUNG_RELAY_BOUND_S
        doctor = run_bridge("doctor", "--json", env=daemon.env)
        assert "relay_disconnected" in doctor.stdout
    finally:
        os.kill(relay.proc.pid, signal.SIGCONT)
    await asyncio.to_thread(wait_relay, daemon, "connected", 30)
