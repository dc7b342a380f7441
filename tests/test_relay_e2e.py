"""A real daemon (demo adapter) reached through a real nats-server relay by a Python relay
client: pairing with the printed link, sessions, permissions, loss and recovery, and what the
relay carries (ciphertext only: no token, no message text)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from bridge.relay.sealing import KeyPair, b64, unb64
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.relaykit import (
    Relay,
    RelayClient,
    VirtualClient,
    decode_link,
    events_until,
    linked_daemon,
    wait_relay,
)
from tests.wsclient import Client

pytestmark = pytest.mark.slow

SECRET_TEXT = "pineapple-harbour-4711"


@pytest.fixture
def daemon(relay: Relay, tmp_path: Path) -> Iterator[DaemonProcess]:
    more = 'web_url = "https://app.example/"\n'
    yield from linked_daemon(tmp_path / "home", relay.rdir.account_file("ws-a"), more)


def pairing_link(d: DaemonProcess) -> dict[str, Any]:
    out = run_bridge("pair", "--relay", "--json", env=d.env, check=True)
    link = json.loads(out.stdout)["link"]
    assert link.startswith("https://app.example/#relay=")
    return decode_link(link)


async def paired_client(relay: Relay, d: DaemonProcess) -> RelayClient:
    info = pairing_link(d)
    assert info["host"] == "ws-a" and info["url"] == relay.ws_url
    nc = await relay.connect("ws-a")
    client = RelayClient(nc, "ws-a", unb64(info["pk"]))
    reply = await client.pair(info["secret"], name="e2e phone")
    assert reply["ok"], reply
    return client


async def opened_client(relay: Relay, d: DaemonProcess) -> tuple[RelayClient, VirtualClient]:
    """A paired client with a virtual connection open and said hello on."""
    client = await paired_client(relay, d)
    vc = await client.open()
    await vc.hello()
    return client, vc


async def reconnect(relay: Relay, client: RelayClient) -> VirtualClient:
    """A new NATS connection and virtual connection for the same paired client."""
    nc = await relay.connect("ws-a")
    again = RelayClient(nc, client.host_id, client.daemon_pk, client.keys)
    vc = await again.open()
    await vc.hello()
    return vc


async def demo_session(vc: VirtualClient, cwd: Path) -> str:
    result = await vc.request("session.create", agent="demo", cwd=str(cwd))
    session = str(result["session"]["session"])
    await vc.request("session.subscribe", session=session)
    return session


async def turn_until(
    relay: Relay, d: DaemonProcess, cwd: Path, text: str, kind: str
) -> tuple[RelayClient, VirtualClient, str, list[dict[str, Any]]]:
    """A demo session through the relay whose first turn (``text``) has got to a ``kind``
    block: the client, its connection, the session and the frames so far."""
    client, vc = await opened_client(relay, d)
    session = await demo_session(vc, cwd)
    await vc.request("session.send", session=session, text=text)
    frames = await events_until(vc, lambda b: b["type"] == kind, session=session)
    return client, vc, session, frames


def seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seq"] for f in frames if f["t"] == "event"]


async def test_pair_create_send_and_answer_a_permission(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    client = await paired_client(relay, daemon)
    vc = await client.open()
    hello = await vc.hello()
    assert hello["protocol"] == 1
    session = await demo_session(vc, tmp_path)
    await vc.request("session.send", session=session, text="hello through the relay")
    frames = await events_until(vc, lambda b: b["type"] == "permission_request", session=session)
    req = [f["block"] for f in frames if f["block"]["type"] == "permission_request"][-1]
    await vc.request("session.permission", session=session, request_id=req["id"], option_id="allow")
    frames += await events_until(vc, lambda b: b["type"] == "session_end", session=session)
    types = {f["block"]["type"] for f in frames}
    assert {"user", "text", "tool_call", "permission_request", "session_end"} <= types
    assert seqs(frames) == list(range(1, len(frames) + 1))
    assert (tmp_path / "demo.txt").exists()  # the permission allowed the write
    listed = run_bridge("clients", "--json", env=daemon.env, check=True)
    [entry] = json.loads(listed.stdout)
    assert entry["id"] == client.client_id and entry["name"] == "e2e phone"
    assert entry["last_seen"] and not entry["revoked"]
    await client.nc.close()


async def test_replay_after_the_client_connection_is_cut_mid_stream(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    client, _vc, session, frames = await turn_until(
        relay, daemon, tmp_path, "slow tour with pauses", "tool_call"
    )
    await client.nc.close()  # cut mid-stream: the daemon's vc goes on into the void
    await asyncio.sleep(0.7)
    vc2 = await reconnect(relay, client)
    last = seqs(frames)[-1]
    await vc2.request("session.subscribe", session=session, after_seq=last)
    rest = await events_until(
        vc2, lambda b: b["type"] == "permission_request", session=session, timeout=30
    )
    req = [f["block"] for f in rest if f["block"]["type"] == "permission_request"][-1]
    await vc2.request(
        "session.permission", session=session, request_id=req["id"], option_id="allow"
    )
    rest += await events_until(vc2, lambda b: b["type"] == "session_end", session=session)
    shown = seqs(frames) + seqs(rest)
    assert shown == list(range(1, len(shown) + 1)), shown  # none lost, none twice
    await vc2.client.nc.close()


async def test_relay_killed_and_restarted_mid_turn(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    client, _vc, session, frames = await turn_until(
        relay, daemon, tmp_path, "slow tour while the relay dies", "thinking"
    )
    relay.kill9()
    wait_relay(daemon, "disconnected")
    # the turn goes on locally: a direct client answers its permission and sees it end
    local = await Client.open(daemon.url, daemon.token)
    await local.request("session.subscribe", session=session)
    here = await local.events_until(lambda b: b["type"] == "permission_request", session=session)
    req = [f["block"] for f in here if f["block"]["type"] == "permission_request"][-1]
    await local.request(
        "session.permission", session=session, request_id=req["id"], option_id="allow"
    )
    await local.turn(session)
    assert daemon.healthz()["relay"] == "disconnected"
    await local.close()
    relay.start()
    wait_relay(daemon, "connected")
    # the client catches up from the last seq it showed
    vc2 = await reconnect(relay, client)
    await vc2.request("session.subscribe", session=session, after_seq=seqs(frames)[-1])
    rest = await events_until(vc2, lambda b: b["type"] == "session_end", session=session)
    shown = seqs(frames) + seqs(rest)
    assert shown == list(range(1, len(shown) + 1)), shown
    await vc2.client.nc.close()
    await client.nc.close()


async def test_the_relay_sees_only_ciphertext_and_cannot_drive_the_daemon(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    monitor, captured = await relay.overhear()
    client, vc, _session, _ = await turn_until(
        relay, daemon, tmp_path, f"echo {SECRET_TEXT}", "session_end"
    )

    # a second NATS client with valid relay credentials but no pairing key
    intruder_nc = await relay.connect("ws-a")
    seen: list[bytes] = []

    async def overhear(msg: Msg) -> None:
        seen.append(msg.data)

    await intruder_nc.subscribe("agent-bridge.ws-a.vc.*.down", cb=overhear)
    await intruder_nc.flush()
    await vc.request("ping")
    await asyncio.sleep(0.3)
    assert seen and all(b"ping" not in data and b'"t"' not in data for data in seen)
    intruder = RelayClient(intruder_nc, "ws-a", client.daemon_pk)
    assert (await intruder.pair(b64(b"\0" * 32)))["error"] == "unknown_secret"
    with pytest.raises(RuntimeError, match="unknown_client"):
        await intruder.open()
    # it claims the paired client's key, without its secret half: the box does not open
    impostor = RelayClient(intruder_nc, "ws-a", client.daemon_pk, KeyPair.generate())
    body = impostor._boxed({"conn": "b" * 32, "eph": b64(b"\1" * 32), "ts": int(time.time())})
    body.update(pk=b64(client.keys.public), conn="b" * 32, eph=b64(b"\1" * 32))
    assert (await impostor.ask("open", body))["error"] == "bad_box"
    # a forged frame on the paired client's connection is dropped: it goes on
    forged = (10).to_bytes(8, "big") + bytes(40)
    await intruder_nc.publish(vc.up, forged)
    # and so is a frame the relay replays
    ups = [m for m in captured if m.subject == vc.up]
    assert ups
    await monitor.publish(vc.up, ups[-1].data)
    await monitor.flush()
    await intruder_nc.flush()
    for _ in range(50):
        if daemon.healthz()["relay_dropped"]["frames"] == 2:
            break
        await asyncio.sleep(0.1)
    assert daemon.healthz()["relay_dropped"] == {"frames": 2, "requests": 0, "queued": 0}
    await vc.request("ping")
    assert vc.closed is None
    assert "relay_frame_dropped" in daemon.log_text()

    # nothing the relay carried holds the token or the message's text
    await monitor.flush()
    blob = b"\n".join(m.data + m.subject.encode() for m in captured)
    assert len(captured) > 20
    assert daemon.token.encode() not in blob
    assert SECRET_TEXT.encode() not in blob
    assert b"session.send" not in blob and b"hello" not in blob
    await intruder_nc.close()
    await monitor.close()
    await client.nc.close()


async def test_a_revoked_client_is_closed_and_refused(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    client, vc = await opened_client(relay, daemon)
    assert client.client_id is not None
    out = run_bridge("clients", "revoke", client.client_id, env=daemon.env, check=True)
    assert "revoked" in out.stdout
    await asyncio.wait_for(vc.closed_event.wait(), 5)
    assert vc.closed == {"code": 4401, "reason": "revoked"}
    with pytest.raises(RuntimeError, match="revoked"):
        await client.open()
    listed = run_bridge("clients", env=daemon.env, check=True).stdout
    assert client.client_id in listed and "e2e phone" in listed
    await client.nc.close()


async def test_a_client_over_the_websocket_listener(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    info = pairing_link(daemon)
    assert info["url"].startswith("ws://")
    nc = await relay.connect("ws-a", websocket=True)
    client = RelayClient(nc, "ws-a", unb64(info["pk"]))
    assert (await client.pair(info["secret"], name="browser"))["ok"]
    vc = await client.open()
    await vc.hello()
    session = await demo_session(vc, tmp_path)
    await vc.request("session.send", session=session, text="echo over websocket")
    frames = await events_until(vc, lambda b: b["type"] == "session_end", session=session)
    assert "over websocket" in "".join(f["block"].get("text", "") for f in frames)
    await nc.close()


async def test_a_stopping_daemon_closes_its_virtual_connections(
    relay: Relay, daemon: DaemonProcess
) -> None:
    client, vc = await opened_client(relay, daemon)
    await asyncio.to_thread(daemon.stop)
    await asyncio.wait_for(vc.closed_event.wait(), 5)
    assert vc.closed is not None and vc.closed["code"] == 1001
    with pytest.raises(nats.errors.NoRespondersError):  # how a client tells it is offline
        await client.nc.request("agent-bridge.ws-a.status", b"{}", timeout=2)
    await client.nc.close()
