"""The daemon's relay link against a real nats-server, with a stand-in for the server that
echoes frames: pairing, opening, sealed frames both ways, and what the link refuses."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path

import nats
import pytest

from bridge.config import RelayConfig
from bridge.process import TaskOwner
from bridge.relay import account, pieces, sealing
from bridge.relay.clients import ClientRegistry
from bridge.relay.link import RelayLink
from bridge.relay.sealing import KeyPair, b64
from bridge.server.transport import TransportClosed
from tests.relaykit import (
    Relay,
    RelayClient,
    echo,
    lone_connection,
    opened,
    paired,
    until_connected,
)


async def test_status_pair_open_and_echo(relay: Relay, link: RelayLink) -> None:
    client = await paired(relay, link)
    assert await client.status() == {"v": 1}
    assert [c.id for c in link.registry.clients()] == [client.client_id]
    vc = await client.open()
    answer = await vc.request("ping", n=1)
    assert answer == {"t": "ping", "id": 1, "n": 1}
    big = "x" * (600 * 1024)  # fragmented both ways
    assert (await vc.request("ping", big=big))["big"] == big
    await client.nc.close()


async def test_a_burst_reaches_a_client_that_takes_batches_in_a_few_messages(
    relay: Relay, link: RelayLink
) -> None:
    client = await paired(relay, link)
    plain, batched = await client.open(), await client.open(batch=True)
    frame = b'{"t":"event","n":%d,"pad":"' + b"x" * 64 + b'"}'
    burst = [frame % i for i in range(1000)]
    burst.insert(500, b'{"t":"event","n":"big","pad":"' + b"y" * 400_000 + b'"}')
    for vc in (plain, batched):
        await vc.request("ping")
        before = len(vc.raw_down)
        link.vcs[vc.conn].write(burst)
        got = [(await asyncio.wait_for(vc.pushes.get(), 10))["n"] for _ in burst]
        assert got == [json.loads(f)["n"] for f in burst]  # all of them, in order
        vc.messages = len(vc.raw_down) - before  # type: ignore[attr-defined]
    assert plain.messages == 1002  # type: ignore[attr-defined]  # the big one in two pieces
    assert batched.messages <= 6  # type: ignore[attr-defined]
    await client.nc.close()


async def test_the_daemon_takes_a_batch_and_closes_on_one_that_does_not_add_up(
    relay: Relay, link: RelayLink
) -> None:
    client, vc = await opened(relay, link)
    _, body = next(pieces.pack([b'{"t":"ping","id":"a"}', b'{"t":"ping","id":"b"}'], True))
    await vc.send_sealed(sealing.BATCH, body)
    got = [await asyncio.wait_for(vc.pushes.get(), 5) for _ in range(2)]
    assert [g["id"] for g in got] == ["a", "b"]
    await vc.send_sealed(sealing.BATCH, b"\x00\x00\x01\x00{}")  # says 256 bytes, has 2
    await asyncio.wait_for(vc.closed_event.wait(), 5)
    assert vc.closed == {"code": 4400, "reason": "rejected frame"}
    await client.nc.close()


async def test_pairing_secret_is_single_use(relay: Relay, link: RelayLink) -> None:
    nc = await relay.connect("ws-a")
    secret = b64(link.registry.new_pairing_secret())
    first = RelayClient(nc, "ws-a", link.keys.public)
    assert (await first.pair(secret))["ok"]
    second = RelayClient(nc, "ws-a", link.keys.public)
    assert await second.pair(secret) == {"ok": False, "error": "unknown_secret"}
    assert await second.pair(b64(secrets.token_bytes(32))) == {
        "ok": False,
        "error": "unknown_secret",
    }
    assert (await second.ask("pair", {"v": 1, "pk": "nope"}))["error"] == "bad_request"
    await nc.close()


async def test_open_is_refused_unless_paired_fresh_and_new(relay: Relay, link: RelayLink) -> None:
    client = await paired(relay, link)
    stranger = RelayClient(client.nc, "ws-a", link.keys.public)
    eph = KeyPair.generate()
    assert (await stranger.open_raw(secrets.token_hex(16), eph))["error"] == "unknown_client"
    assert (await client.open_raw(secrets.token_hex(16), eph, ts=time.time() - 3600))[
        "error"
    ] == "stale"
    # a box made with another key than the client's own
    forged = RelayClient(client.nc, "ws-a", link.keys.public, KeyPair.generate())
    body = {**forged._boxed({"conn": "a" * 32, "eph": b64(eph.public), "ts": int(time.time())})}
    body.update(pk=b64(client.keys.public), conn="a" * 32, eph=b64(eph.public))
    assert (await client.ask("open", body))["error"] == "bad_box"
    conn = secrets.token_hex(16)
    assert (await client.open_raw(conn, eph))["ok"]
    assert (await client.open_raw(conn, eph))["error"] == "conn_in_use"
    await client.nc.close()


async def test_revoked_client_is_closed_and_refused(relay: Relay, link: RelayLink) -> None:
    client, vc = await opened(relay, link)
    assert client.client_id is not None
    # as `agent-bridge clients revoke` does, from another process
    ClientRegistry(link.registry.dir).revoke(client.client_id)
    await asyncio.wait_for(vc.closed_event.wait(), 5)
    assert vc.closed == {"code": 4401, "reason": "revoked"}
    with pytest.raises(RuntimeError, match="revoked"):
        await client.open()
    await client.nc.close()


async def test_client_users_are_confined_to_their_workstation(relay: Relay) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await relay.connect("ws-a", error_cb=on_error)
    await nc.subscribe("agent-bridge.ws-b.vc.*.down")
    await nc.publish("agent-bridge.ws-b.open", b"{}")
    await nc.subscribe("agent-bridge.ws-a.vc.*.up")  # only the daemon hears what goes up
    await nc.flush()
    await asyncio.sleep(0.3)
    texts = [str(e).lower() for e in errors]
    assert sum("permissions violation" in t for t in texts) == 3, texts
    await nc.close()
    with pytest.raises(nats.errors.Error):
        await nats.connect(relay.url, user="ws-a-client", password="wrong", allow_reconnect=False)


async def test_keepalive_after_20_s_quiet_and_close_after_60_s_silent() -> None:
    """The liveness rules, with the clock moved by hand (no waiting)."""
    owner = TaskOwner("test")
    vc, key, sent = lone_connection(owner)
    opener = sealing.Opener(key, sealing.DAEMON_TO_CLIENT)
    now = vc.last_sent + 21
    vc.last_recv = now - 1
    vc.tick(now)
    await asyncio.sleep(0.05)
    assert [opener.open(p).kind for p in sent] == [sealing.KEEPALIVE]
    vc.tick(vc.last_recv + 61)
    await vc.stopped()
    await owner.close()  # the idle close it started has ended
    last = opener.open(sent[-1])
    assert last.kind == sealing.CLOSE and json.loads(last.body)["code"] == 4408
    assert vc.closed
    with pytest.raises(TransportClosed):
        await vc.recv()
    with pytest.raises(TransportClosed):
        vc.write([b"{}"])


async def test_the_link_waits_for_a_relay_that_is_not_up_yet(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay")  # configured, not started
    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    lk = RelayLink(settings, ClientRegistry(tmp_path / "state"), echo, max_frame=1 << 20)
    lk.start()
    try:
        await asyncio.sleep(0.5)
        assert lk.status == "disconnected"
        relay.start()
        await until_connected(lk, tries=200)
        client = await paired(relay, lk)
        assert await client.status() == {"v": 1}
        await client.nc.close()
    finally:
        await lk.close()
        relay.stop()


async def test_a_request_that_fails_inside_is_answered(relay: Relay, link: RelayLink) -> None:
    client = await paired(relay, link)
    link.registry.pairing_file.chmod(0o644)  # unsafe now: the registry refuses to read it
    reply = await client.pair(b64(secrets.token_bytes(32)))
    assert reply == {"ok": False, "error": "internal"}
    assert await client.status() == {"v": 1}  # the link goes on
    await client.nc.close()
