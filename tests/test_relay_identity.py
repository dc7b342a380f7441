"""One NATS identity per paired client on `agent-bridge relay serve` (docs/security.md, "One
NATS identity per client"), with a real relay serve, nats-server and daemon: a phone paired
through it gets its own user, whose permissions name only its own subjects; the pairing login in
the link can only pair; a revoked phone's user is gone and its live connection dropped; a
phone paired before gets its own user on asking; `relay rotate` ends old pairing links."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as Nats

from bridge.relay import queued
from bridge.relay.clients import ClientRegistry
from bridge.relay.sealing import KeyPair, unb64
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, user_texts
from tests.relaykit import (
    RelayClient,
    ServedRelay,
    decode_link,
    events_until,
    nats_as,
    relayed_daemon,
)
from tests.wsclient import Client

pytestmark = pytest.mark.slow

HOST = "test-box"
P = f"agent-bridge.{HOST}"


class Watched:
    """A NATS connection that records the server's errors and whether it was closed."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.closed = asyncio.Event()

    def options(self) -> dict[str, Any]:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        async def on_closed() -> None:
            self.closed.set()

        return {"error_cb": on_error, "closed_cb": on_closed, "allow_reconnect": False}

    async def violation(self, what: str, subject: str, timeout: float = 10.0) -> None:
        """Until nats-server has said ``what`` (publish / subscription) to ``subject`` is not
        permitted."""
        wanted = f'permissions violation for {what} to "{subject}"'
        for _ in range(int(timeout / 0.05)):
            if any(wanted.lower() in e.lower() for e in self.errors):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {wanted!r}: {self.errors}")


class Setup:
    def __init__(self, served: ServedRelay, daemon: DaemonProcess) -> None:
        self.served = served
        self.daemon = daemon
        self.url = f"nats://127.0.0.1:{served.port}"

    def link(self) -> dict[str, Any]:
        out = run_bridge("pair", "--relay", "--json", env=self.daemon.env, check=True).stdout
        return decode_link(json.loads(out)["link"])

    async def paired(self, name: str) -> tuple[RelayClient, Nats]:
        """A phone paired from a fresh link: its client, connected with its own user."""
        info = self.link()
        nc = await nats_as(self.url, info, HOST, "pair")
        client = RelayClient(nc, HOST, unb64(info["pk"]))
        reply = await client.pair(info["secret"], name)
        await nc.close()
        assert reply["ok"], reply
        return client, await self.own(client)

    async def own(self, client: RelayClient, **kw: Any) -> Nats:
        """The client connected with its own login, using its own subjects from now on."""
        assert client.login is not None and client.client_id is not None
        client.nc = await nats_as(self.url, client.login, HOST, client.client_id, **kw)
        client.scoped = True
        return client.nc

    def daemon_login(self) -> dict[str, str]:
        daemon = json.loads(self.served.account_file(HOST).read_text())["daemon"]
        return {"user": daemon["user"], "pass": daemon["password"]}


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    served = ServedRelay(tmp_path / "relayhost", HOST).start()
    d: DaemonProcess | None = None
    try:
        config = f'[relay]\naccount = "{served.account_file(HOST)}"\n'
        d = relayed_daemon(tmp_path / "home", config)
        yield Setup(served, d)
    finally:
        if d is not None:
            d.stop()
        served.stop()


async def turn(client: RelayClient, cwd: Path, text: str) -> None:
    vc = await client.open()
    await vc.hello()
    created = await vc.request("session.create", agent="demo", cwd=str(cwd))
    session = created["session"]["session"]
    await vc.request("session.subscribe", session=session)
    await vc.request("session.send", session=session, text=f"echo {text}")
    frames = await events_until(vc, lambda b: b["type"] == "session_end", session=session)
    assert text in "".join(f["block"].get("text", "") for f in frames)
    await vc.close()


async def test_each_phone_has_its_own_user_and_a_revoked_one_has_no_power_on_the_relay(
    setup: Setup, tmp_path: Path
) -> None:
    alice, alice_nc = await setup.paired("alice's phone")
    bob, bob_nc = await setup.paired("bob's phone")
    assert alice.login is not None and bob.login is not None
    assert alice.login["user"] == f"{HOST}-{alice.client_id}" != bob.login["user"]
    # the daemon keeps the passwords; listing the clients shows none of them
    listed = run_bridge("clients", "--json", env=setup.daemon.env, check=True).stdout
    assert alice.client_id in listed and alice.login["pass"] not in listed
    assert "nats_pass" not in listed
    await turn(alice, tmp_path, "alice over her own user")
    bob_vc = await bob.open()
    await bob_vc.hello()

    # The pairing login in every link may pair, not listen to anyone's connections.
    info = setup.link()
    watch = Watched()
    pairing = await nats_as(setup.url, info, HOST, "pair", **watch.options())
    await pairing.subscribe(f"{P}.vc.*.down")
    await watch.violation("subscription", f"{P}.vc.*.down")
    await pairing.subscribe(f"{P}.vc.>")
    await watch.violation("subscription", f"{P}.vc.>")
    await pairing.publish(f"{P}.vc.{bob.client_id}.{bob_vc.conn}.up", b"x")
    await watch.violation("publish", f"{P}.vc.{bob.client_id}.{bob_vc.conn}.up")

    # Alice is revoked: her connection is dropped and her login no longer works.
    alice_watch = Watched()
    alice_nc2 = await setup.own(alice, **alice_watch.options())
    alice_vc = await alice.open()
    await alice_vc.hello()
    # even before: her user may not touch Bob's subjects
    down, up = f"{P}.vc.{bob.client_id}.{bob_vc.conn}.down", bob_vc.up
    await alice_nc2.subscribe(down)
    await alice_watch.violation("subscription", down)
    await alice_nc2.publish(up, b"\x00" * 64)
    await alice_watch.violation("publish", up)
    await alice_nc2.subscribe(f"{P}._INBOX.{bob.client_id}.>")
    await alice_watch.violation("subscription", f"{P}._INBOX.{bob.client_id}.>")
    assert alice_nc2.is_connected  # a violation is refused, the connection stays

    run_bridge("clients", "revoke", str(alice.client_id), env=setup.daemon.env, check=True)
    await asyncio.wait_for(alice_vc.closed_event.wait(), 15)
    assert alice_vc.closed == {"code": 4401, "reason": "revoked"}
    await asyncio.wait_for(alice_watch.closed.wait(), 15)  # the relay dropped her
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats_as(setup.url, alice.login, HOST, str(alice.client_id), allow_reconnect=False)
    # what she kept, the pairing login from a link, gets her no login of her own again
    pairing_client = RelayClient(pairing, HOST, alice.daemon_pk, alice.keys)
    assert await pairing_client.ask_login() == {"ok": False, "error": "revoked"}

    # Bob carries on, untouched, on his connection opened before.
    await bob_vc.request("agents.list")
    for nc in (pairing, alice_nc, bob_nc, bob.nc):
        await nc.close()


async def test_a_phone_paired_before_asks_for_its_own_user(setup: Setup, tmp_path: Path) -> None:
    # Paired by a daemon that gave no login (an earlier version): in its clients.json alone.
    keys = KeyPair.generate()
    old = ClientRegistry(setup.daemon.state_dir / "relay").add("old phone", keys.public)
    info = setup.link()
    nc = await nats_as(setup.url, info, HOST, "pair")
    client = RelayClient(nc, HOST, unb64(info["pk"]), keys)
    # with the pairing login it can no longer open a connection ...
    with pytest.raises(Exception, match=r"[Pp]ermissions|[Tt]imeout"):
        await client.open_raw("0" * 32, KeyPair.generate())
    # ... but it may ask for its own user, and then it can
    reply = await client.ask_login()
    assert reply["ok"] and client.client_id == old.id, reply
    assert client.login == {"user": f"{HOST}-{old.id}", "pass": client.login["pass"]}
    await nc.close()
    await setup.own(client)
    await turn(client, tmp_path, "an upgraded phone")
    await client.nc.close()


async def test_the_relay_takes_from_a_workstation_only_its_own_bounded_set(setup: Setup) -> None:
    watch = Watched()
    login = setup.daemon_login()
    nc = await nats_as(setup.url, login, HOST, "admin-test", **watch.options())
    conf = setup.served.rdir / "nats.conf"
    before = conf.read_bytes()

    async def ask(body: Any) -> dict[str, Any]:
        msg = await nc.request("agent-bridge-relay.test-box.clients", json.dumps(body).encode())
        return json.loads(msg.data)  # type: ignore[no-any-return]

    assert await ask({"v": 1, "clients": {"not-a-client": "x" * 24}}) == {
        "ok": False,
        "error": "bad_request",
    }
    assert (await ask({"v": 1, "clients": {"c-00000001": "short"}}))["error"] == "bad_request"
    many = {f"c-{i:08x}": "p" * 24 for i in range(257)}
    assert (await ask({"v": 1, "clients": many}))["error"] == "too_many"
    assert conf.read_bytes() == before  # nothing changed
    # another workstation's set is not this one's to ask for
    await nc.publish("agent-bridge-relay.other-box.clients", b"{}")
    await watch.violation("publish", "agent-bridge-relay.other-box.clients")
    await nc.close()


async def test_rotating_the_pairing_login_ends_old_links(setup: Setup) -> None:
    phone, phone_nc = await setup.paired("kept phone")
    vc = await phone.open()
    await vc.hello()
    old = setup.link()
    watch = Watched()
    old_nc = await nats_as(setup.url, old, HOST, "pair", **watch.options())

    rotated = run_bridge(
        "relay", "rotate", HOST, "--dir", str(setup.served.rdir), env=setup.served.env, check=True
    )
    assert "every pairing link made before no longer works" in rotated.stdout
    await asyncio.wait_for(watch.closed.wait(), 15)  # connected with it: dropped
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats_as(setup.url, old, HOST, "pair", allow_reconnect=False)

    # a new link (the daemon's pair --relay reads the rewritten account file) pairs
    new = setup.link()
    assert new["pass"] != old["pass"]
    nc = await nats_as(setup.url, new, HOST, "pair")
    client = RelayClient(nc, HOST, unb64(new["pk"]))
    assert (await client.pair(new["secret"]))["ok"]
    await nc.close()
    # the phone with its own user did not notice
    await vc.request("agents.list")
    for nc in (phone_nc, phone.nc, old_nc):
        await nc.close()


async def test_on_relay_serve_a_phone_queues_on_its_own_subject_only_and_a_revoked_one_not(
    setup: Setup, tmp_path: Path
) -> None:
    """The relay's work queue on `relay serve` (JetStream in its directory): each phone's own
    user may leave messages on its own queue subject, not on another's, nor the daemon's
    stream API; revoked, it may leave none."""
    alice, alice_nc = await setup.paired("alice's phone")
    bob, bob_nc = await setup.paired("bob's phone")
    assert alice.client_id and bob.client_id
    c = await Client.open(setup.daemon.url, setup.daemon.token)
    session = (await c.request("session.create", agent="demo", cwd=str(tmp_path)))["session"]
    await c.close()
    for _ in range(100):
        if setup.daemon.healthz()["relay_queue"] == "on":
            break
        await asyncio.sleep(0.1)
    send = {"session": session["session"], "text": "echo queued by alice", "client_msg_id": "a1"}
    ack = await alice.queue(send)
    assert "error" not in ack and ack["stream"] == queued.queue_stream(HOST), ack
    assert await user_texts(setup.daemon, session["session"], 1) == ["echo queued by alice"]
    assert (setup.served.rdir / "jetstream").is_dir()  # kept in the relay's directory

    watch = Watched()
    alice_nc2 = await setup.own(alice, **watch.options())
    bob_subject = queued.subject(HOST, bob.client_id)
    await alice_nc2.publish(bob_subject, alice.sealed(send))
    await watch.violation("publish", bob_subject)
    stream_api = f"$JS.API.STREAM.INFO.{queued.queue_stream(HOST)}"
    await alice_nc2.publish(stream_api, b"")
    await watch.violation("publish", stream_api)

    run_bridge("clients", "revoke", alice.client_id, env=setup.daemon.env, check=True)
    await asyncio.wait_for(watch.closed.wait(), 15)  # her user is gone from the relay
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats_as(setup.url, alice.login or {}, HOST, alice.client_id, allow_reconnect=False)
    for nc in (alice_nc, bob_nc):
        await nc.close()
