"""The relay's work queue (docs/protocol.md, "The relay's work queue"), with a real daemon and
a real nats-server with JetStream: what a phone sends while the workstation is away waits on
the relay, sealed to the daemon's key, and reaches the agent once, in order, when the daemon is
back; the relay reads none of it and can forge none; a revoked phone's, a stale one and a
replayed one do nothing; the queue's bounds refuse a message to the phone that sends it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.relay import queued
from bridge.relay.sealing import KeyPair
from tests.daemon import DaemonProcess
from tests.daemonkit import history, run_bridge, user_texts
from tests.relaykit import Relay, RelayClient, decode_link, linked_daemon, wait_relay
from tests.wsclient import Client

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).parent / "artifacts"
SECRET = "kumquat-lighthouse-2231"
STREAM = queued.queue_stream("ws-a")


@pytest.fixture
def daemon(relay: Relay, tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from linked_daemon(tmp_path / "home", relay.rdir.account_file("ws-a"))


async def paired(relay: Relay, d: DaemonProcess) -> RelayClient:
    out = run_bridge("pair", "--relay", "--json", env=d.env, check=True)
    info = decode_link(json.loads(out.stdout)["link"])
    from bridge.relay.sealing import unb64

    client = RelayClient(await relay.connect("ws-a"), "ws-a", unb64(info["pk"]))
    reply = await client.pair(info["secret"], name="queue phone")
    assert reply["ok"], reply
    return client


async def demo_session(d: DaemonProcess, cwd: Path) -> str:
    c = await Client.open(d.url, d.token)
    try:
        created = await c.request("session.create", agent="demo", cwd=str(cwd))
    finally:
        await c.close()
    return str(created["session"]["session"])


def send(session: str, text: str, msg_id: str) -> dict[str, Any]:
    return {"session": session, "text": text, "client_msg_id": msg_id}


async def stream_messages(relay: Relay) -> int:
    monitor = await relay.monitor()
    try:
        info = await monitor.jetstream().stream_info(STREAM)
        return int(info.state.messages)
    finally:
        await monitor.close()


async def wait_drained(relay: Relay, d: DaemonProcess) -> None:
    for _ in range(150):
        if d.healthz().get("relay_queue") == "on" and await stream_messages(relay) == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the queue never drained: {d.healthz()}\n{d.log_text()[-3000:]}")


async def test_sent_while_the_daemon_is_down_reaches_the_agent_once_in_order_sealed(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    log: list[str] = []
    session = await demo_session(daemon, tmp_path)
    client = await paired(relay, daemon)
    await wait_drained(relay, daemon)  # the daemon made its stream and consumer
    daemon.stop()
    log.append(f"workstation ws-a paired one phone ({client.client_id}); its daemon stopped")

    monitor, captured = await relay.overhear()

    texts = [f"echo {SECRET} {n}" for n in ("one", "two", "three")]
    for n, text in enumerate(texts):
        ack = await client.queue(send(session, text, f"m-{n}"))
        assert ack.get("stream") == STREAM and "error" not in ack, ack
    await client.nc.close()  # the phone closes
    log.append(f"the phone queued {len(texts)} messages on the relay and closed")
    await monitor.flush()
    # the relay replays what it holds: the same sealed message twice more
    first = next(m for m in captured if m.subject == queued.subject("ws-a", str(client.client_id)))
    for _ in range(2):
        await monitor.request(first.subject, first.data, timeout=5)
    assert await stream_messages(relay) == 5
    log.append("the relay published the first sealed message again, twice (a replay)")

    daemon.start()
    wait_relay(daemon, "connected")
    await wait_drained(relay, daemon)
    got = await user_texts(daemon, session, 3)
    log.append("daemon started: it took the queue, stored each message, then acknowledged it")
    log.append(f"the agent got: {got}")
    assert got == texts
    frames = await history(daemon, session)
    assert sum(f["block"]["type"] == "session_end" for f in frames) == 3
    said = "".join(f["block"]["text"] for f in frames if f["block"]["type"] == "text")
    assert said.count(f"You said: {SECRET} three") == 1

    await monitor.flush()
    blob = b"\n".join(m.data + m.subject.encode() for m in captured)
    subjects = sorted({m.subject.split(".")[0] + "." + m.subject.split(".")[1] for m in captured})
    found = [w for w in (SECRET, session, "m-0", "echo") if w.encode() in blob]
    log.append(
        f"a monitor on '>' saw {len(captured)} messages ({len(blob)} bytes) on {subjects}; "
        f"the text, the session id or a message id in them: {found or 'none'}"
    )
    assert len(captured) >= 5
    assert SECRET.encode() not in blob and b"echo" not in blob
    assert session.encode() not in blob
    assert b'"m-0"' not in blob and b"client_msg_id" not in blob
    await monitor.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "relay-queue-transcript.txt").write_text("\n".join(log) + "\n")


async def test_forged_revoked_stale_and_foreign_messages_change_nothing(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    session = await demo_session(daemon, tmp_path)
    client = await paired(relay, daemon)
    other = await paired(relay, daemon)
    assert client.client_id and other.client_id
    await wait_drained(relay, daemon)
    # sealed with a key that is not the paired phone's, though it claims its public key
    impostor = RelayClient(client.nc, "ws-a", client.daemon_pk, KeyPair.generate())
    impostor.client_id = client.client_id
    forged = json.loads(impostor.sealed(send(session, "echo forged", "f-1")))
    forged["pk"] = json.loads(client.sealed(send(session, "x", "x")))["pk"]
    subject = queued.subject("ws-a", client.client_id)
    await client.nc.request(subject, json.dumps(forged).encode(), timeout=5)
    # a message sealed long ago (older than the queue keeps any)
    assert "error" not in await client.queue(send(session, "echo stale", "s-1"), ts=1)
    # one phone's message moved onto another's subject by the relay
    moved = client.sealed(send(session, "echo moved", "mv-1"))
    await other.nc.request(queued.subject("ws-a", other.client_id), moved, timeout=5)
    # junk
    await client.nc.request(subject, b"\x00not json", timeout=5)
    for _ in range(100):
        if daemon.healthz()["relay_dropped"]["queued"] >= 4:
            break
        await asyncio.sleep(0.1)
    assert daemon.healthz()["relay_dropped"]["queued"] == 4
    # revoked while its message waited: the daemon is down, then takes nothing of it
    daemon.stop()
    assert "error" not in await other.queue(send(session, "echo after revoke", "r-1"))
    run_bridge("clients", "revoke", other.client_id, env=daemon.env, check=True)
    daemon.start()
    wait_relay(daemon, "connected")
    await wait_drained(relay, daemon)
    assert await user_texts(daemon, session, 0) == []
    log = daemon.log_text()
    assert "relay_queued_dropped" in log
    for why in ("bad_box", "stale", "wrong_subject", "bad_request"):
        assert why in log, why
    # the phone that is still paired is heard
    assert "error" not in await client.queue(send(session, "echo still here", "ok-1"))
    assert await user_texts(daemon, session, 1) == ["echo still here"]
    assert daemon.healthz()["relay_dropped"]["queued"] == 1  # the revoked one, since the start
    await client.nc.close()
    await other.nc.close()


async def test_a_refused_message_leaves_the_queue_and_the_next_one_goes(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    session = await demo_session(daemon, tmp_path)
    client = await paired(relay, daemon)
    await wait_drained(relay, daemon)
    daemon.stop()
    assert "error" not in await client.queue(send("s_nosuchsession", "echo lost", "n-1"))
    assert "error" not in await client.queue(send(session, "echo after it", "n-2"))
    daemon.start()
    wait_relay(daemon, "connected")
    await wait_drained(relay, daemon)
    assert await user_texts(daemon, session, 1) == ["echo after it"]
    assert "relay_queued_refused" in daemon.log_text()
    await client.nc.close()


async def test_the_bounds_refuse_a_message_to_the_phone_that_sends_it(
    relay: Relay, tmp_path: Path
) -> None:
    more = "queue_max_per_client = 2\n"
    fixture = linked_daemon(tmp_path / "home", relay.rdir.account_file("ws-a"), more)
    d = next(fixture)
    try:
        session = await demo_session(d, tmp_path)
        client = await paired(relay, d)
        await wait_drained(relay, d)
        d.stop()
        acks = [await client.queue(send(session, f"echo {n}", f"b-{n}")) for n in range(3)]
        assert ["error" in a for a in acks] == [False, False, True]
        assert "maximum messages per subject" in acks[2]["error"]["description"]
        d.start()
        wait_relay(d, "connected")
        await wait_drained(relay, d)
        assert await user_texts(d, session, 2) == ["echo 0", "echo 1"]
        await client.nc.close()
    finally:
        fixture.close()


async def test_a_relay_without_jetstream_says_so_and_everything_else_works(
    tmp_path: Path,
) -> None:
    r = Relay(tmp_path / "relay")
    r.state.queue_max_bytes = 0  # an older relay: no JetStream
    r.rdir.save(r.state)
    from tests.relaykit import hosted_login

    hosted_login(r.rdir)
    r.start()
    fixture = linked_daemon(tmp_path / "home", r.rdir.account_file("ws-a"))
    d = next(fixture)
    try:
        for _ in range(100):
            if d.healthz().get("relay_queue") == "unavailable":
                break
            await asyncio.sleep(0.1)
        assert d.healthz()["relay_queue"] == "unavailable"
        assert "relay_queue_unavailable" in d.log_text()
        doctor = json.loads(run_bridge("doctor", "--json", env=d.env).stdout)
        assert "relay_queue_unavailable" in json.dumps(doctor)
        client = await paired(r, d)
        vc = await client.open()
        await vc.hello()
        await client.nc.close()
    finally:
        fixture.close()
        r.stop()


def test_the_relay_serves_jetstream_with_bounds_in_its_directory(tmp_path: Path) -> None:
    r = Relay(tmp_path / "relay")
    conf = json.loads(r.rdir.conf_file.read_text())
    assert conf["jetstream"]["store_dir"] == str(tmp_path / "relay" / "jetstream")
    assert conf["jetstream"]["max_file_store"] == 1024**3
    # a hosted NATS's daemon user makes its own stream, in its own account
    users = {u["user"]: u for u in conf["accounts"]["ws-a"]["users"]}
    daemon_allows = users["ws-a-daemon"]["permissions"]["publish"]["allow"]
    assert f"$JS.API.STREAM.CREATE.{STREAM}" in daemon_allows
    assert not any("ws-b" in a for a in daemon_allows if a.startswith("$JS"))


async def test_a_message_stored_but_not_acknowledged_comes_again_and_is_kept_once(
    relay: Relay, tmp_path: Path
) -> None:
    """The worst moment: the daemon stored a message and died before its ack reached the relay.
    Its next connection is given the message again at once (not after ack_wait), and the store,
    which knows the client_msg_id, keeps it once."""
    from bridge.config import RelayConfig
    from bridge.relay import account
    from bridge.relay.clients import ClientRegistry
    from bridge.relay.link import RelayLink
    from tests.relaykit import echo, paired, until_connected

    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    stored: dict[str, str] = {}  # client_msg_id -> text: what the hub keeps
    dying = asyncio.Event()

    async def store_then_die(message: queued.Queued) -> None:
        stored.setdefault(message.send.client_msg_id, message.send.text)
        if not dying.is_set():
            dying.set()
            await asyncio.sleep(3600)  # the daemon is killed here, before its ack

    registry = ClientRegistry(tmp_path / "state")
    first = RelayLink(settings, registry, echo, max_frame=1 << 20, deliver=store_then_die)
    first.start()
    await until_connected(first, tries=100)
    client = await paired(relay, first)
    for _ in range(100):
        if first.queue is not None and first.queue.status == "on":
            break
        await asyncio.sleep(0.05)
    assert "error" not in await client.queue(send("s_1", "echo once", "k-1"))
    assert "error" not in await client.queue(send("s_1", "echo twice", "k-2"))
    await asyncio.wait_for(dying.wait(), 10)
    await first.close()  # gone without acknowledging "echo once"
    assert await stream_messages(relay) == 2

    second = RelayLink(settings, registry, echo, max_frame=1 << 20, deliver=store_then_die)
    second.start()
    try:
        for _ in range(100):  # well within ack_wait (60 s)
            if await stream_messages(relay) == 0:
                break
            await asyncio.sleep(0.1)
        assert await stream_messages(relay) == 0
        assert stored == {"k-1": "echo once", "k-2": "echo twice"}
        assert second.queue is not None and second.queue.taken == 2
    finally:
        await second.close()
        await client.nc.close()


async def test_a_message_the_daemon_cannot_store_now_waits_and_keeps_its_place(
    relay: Relay, tmp_path: Path
) -> None:
    """Storing fails for a while (the store busy, the session's queue full): the message goes
    back to the relay and comes again, and the one after it does not pass it."""
    from bridge.config import RelayConfig
    from bridge.relay import account
    from bridge.relay.clients import ClientRegistry
    from bridge.relay.link import RelayLink
    from tests.relaykit import echo, paired, until_connected

    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    stored: list[str] = []
    refusals = [RuntimeError("the store is busy")]

    async def busy_once(message: queued.Queued) -> None:
        if refusals:
            raise refusals.pop()
        stored.append(message.send.text)

    link = RelayLink(
        settings, ClientRegistry(tmp_path / "state"), echo, max_frame=1 << 20, deliver=busy_once
    )
    link.start()
    try:
        await until_connected(link, tries=100)
        client = await paired(relay, link)
        for n in range(3):
            assert "error" not in await client.queue(send("s_1", f"echo {n}", f"o-{n}"))
        for _ in range(200):
            if len(stored) == 3:
                break
            await asyncio.sleep(0.1)
        assert stored == ["echo 0", "echo 1", "echo 2"]
        assert await stream_messages(relay) == 0
        await client.nc.close()
    finally:
        await link.close()


async def test_an_unreadable_clients_file_holds_the_queue_without_losing_a_message(
    relay: Relay, tmp_path: Path
) -> None:
    """clients.json made readable by others (so refused) while a message waits: the message
    stays on the relay and the consumer goes on; fixed, the message is taken."""
    from bridge.config import RelayConfig
    from bridge.relay import account
    from bridge.relay.clients import ClientRegistry
    from bridge.relay.link import RelayLink
    from tests.relaykit import echo, paired, until_connected

    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    stored: list[str] = []

    async def keep(message: queued.Queued) -> None:
        stored.append(message.send.text)

    registry = ClientRegistry(tmp_path / "state")
    link = RelayLink(settings, registry, echo, max_frame=1 << 20, deliver=keep)
    link.start()
    try:
        await until_connected(link, tries=100)
        client = await paired(relay, link)
        registry.clients_file.chmod(0o644)
        registry.clients_file.touch()  # seen as changed: read again, and refused
        assert "error" not in await client.queue(send("s_1", "echo held", "u-1"))
        await asyncio.sleep(2)
        assert stored == [] and await stream_messages(relay) == 1
        assert link.queue is not None and link.queue.status == "on"
        registry.clients_file.chmod(0o600)
        for _ in range(150):
            if stored:
                break
            await asyncio.sleep(0.1)
        assert stored == ["echo held"]
        await client.nc.close()
    finally:
        await link.close()


#: JSON nested deeper than any parser here recurses, needing no key to make
DEEP = b"[" * 3000 + b"]" * 3000


async def test_deep_json_on_a_phones_subject_is_dropped_and_the_queue_goes_on(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    """Anyone with the relay's client login may publish on a phone's queue subject: JSON nested
    3,000 deep is dropped (counted, logged), and what other phones sent after it arrives."""
    session = await demo_session(daemon, tmp_path)
    victim = await paired(relay, daemon)
    other = await paired(relay, daemon)
    assert victim.client_id and other.client_id
    await wait_drained(relay, daemon)
    intruder = await relay.connect("ws-a")
    ack = json.loads(
        (await intruder.request(queued.subject("ws-a", victim.client_id), DEEP, timeout=5)).data
    )
    assert ack.get("stream") == STREAM, ack
    texts = [f"echo after the deep one {n}" for n in range(3)]
    for n, text in enumerate(texts):
        assert "error" not in await other.queue(send(session, text, f"d-{n}"))
    assert await user_texts(daemon, session, 3) == texts
    health = daemon.healthz()
    assert health["relay_dropped"]["queued"] == 1
    assert health["relay_queue_set_aside"] == {"count": 0, "last": []}
    [line] = daemon.log_events("relay_queued_dropped")
    assert line["why"] == "bad_request", line
    assert "Traceback" not in daemon.log_text()
    await wait_drained(relay, daemon)
    for nc in (intruder, victim.nc, other.nc):
        await nc.close()


async def test_a_lone_surrogate_in_a_queued_text_never_stops_the_queue(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    """A paired phone's text with a lone UTF-16 surrogate ("\\ud800", which JSON may carry but
    UTF-8 cannot) is refused as unreadable, counted, and the messages after it arrive; sent on
    a direct WebSocket or a relay virtual connection it is refused with bad_request, and the
    session goes on."""
    session = await demo_session(daemon, tmp_path)
    client = await paired(relay, daemon)
    await wait_drained(relay, daemon)
    assert "error" not in await client.queue(send(session, "echo half \ud800 an emoji", "h-1"))
    texts = [f"echo whole {n}" for n in range(3)]
    for n, text in enumerate(texts):
        assert "error" not in await client.queue(send(session, text, f"w-{n}"))
    assert await user_texts(daemon, session, 3) == texts
    assert daemon.healthz()["relay_dropped"]["queued"] == 1
    await wait_drained(relay, daemon)

    # json.dumps writes a lone surrogate as the escape "\\ud800", as a browser's JSON does
    half = {"session": session, "text": "echo \ud800"}
    ws = await Client.open(daemon.url, daemon.token)
    try:
        answer = await ws.call("session.send", **half, client_msg_id="s-ws")
        assert answer["t"] == "err" and answer["code"] == "bad_request", answer
    finally:
        await ws.close()
    vc = await client.open()
    await vc.hello()
    answer = await vc.call("session.send", **half, client_msg_id="s-vc")
    assert answer["t"] == "err" and answer["code"] == "bad_request", answer
    await vc.request("session.send", session=session, text="echo still fine", client_msg_id="s-ok")
    assert (await user_texts(daemon, session, 4))[-1] == "echo still fine"
    await client.nc.close()


async def test_a_message_that_keeps_failing_is_set_aside_and_the_next_ones_go(
    relay: Relay, tmp_path: Path
) -> None:
    """A message the hub fails to store every time (an error, or no answer at all) is tried
    the consumer's max_deliver times, the pause growing, then set aside: terminated, counted,
    its reason kept; the messages after it are taken, in order, and the stream is empty."""
    from bridge.config import RelayConfig
    from bridge.relay import account
    from bridge.relay.clients import ClientRegistry
    from bridge.relay.link import RelayLink
    from tests.relaykit import echo, paired, until_connected

    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    stored: list[str] = []
    attempts: dict[str, int] = {}

    async def deliver(message: queued.Queued) -> None:
        text = message.send.text
        attempts[text] = attempts.get(text, 0) + 1
        if text == "echo failing":
            raise RuntimeError("the store is broken for this one")
        if text == "echo unanswered":
            await asyncio.Event().wait()  # the hub never answers
        stored.append(text)

    link = RelayLink(
        settings, ClientRegistry(tmp_path / "state"), echo, max_frame=1 << 20, deliver=deliver
    )
    assert link.queue is not None
    link.queue.max_deliver, link.queue.retry_s, link.queue.deliver_timeout_s = 3, 0.1, 1.0
    link.start()
    try:
        await until_connected(link, tries=100)
        client = await paired(relay, link)
        texts = ["echo first", "echo failing", "echo between", "echo unanswered", "echo last"]
        for n, text in enumerate(texts):
            assert "error" not in await client.queue(send("s_1", text, f"x-{n}"))
        for _ in range(300):
            if len(stored) == 3:
                break
            await asyncio.sleep(0.1)
        assert stored == ["echo first", "echo between", "echo last"]
        assert attempts["echo failing"] == 3 and attempts["echo unanswered"] == 3
        report = link.queue.set_aside_report()
        assert report["count"] == 2
        whys = [entry["why"] for entry in report["last"]]
        assert whys == ["RuntimeError: the store is broken for this one", "not stored within 1 s"]
        assert all(entry["session"] == "s_1" and entry["attempt"] == 3 for entry in report["last"])
        assert await stream_messages(relay) == 0
        # what `agent-bridge doctor` makes of it, from /healthz
        from bridge.cli.doctor import _relay_status_checks

        health = {"relay": "connected", "relay_queue": "on", "relay_queue_set_aside": report}
        [warning] = [c for c in _relay_status_checks(health) if c.level == "warn"]
        assert warning.code == "relay_queue_set_aside"
        assert "2 queued messages set aside" in warning.message
        assert "not stored within 1 s" in warning.message
        await client.nc.close()
    finally:
        await link.close()
