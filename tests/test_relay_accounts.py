"""Each workstation in its own NATS account on `agent-bridge relay serve` (docs/security.md, "The
relay's accounts and logins"): a real `relay serve` with two workstations, ws1 and ws2, and the
attacks found against a relay where they shared one account. The daemons' and phones' logins
are used as an attacker holding them would; each workstation's client set is given to the relay
as its daemon gives it (the admin request, with that daemon's login)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as Nats
from nats.js import api
from nats.js.errors import NotFoundError

from bridge.relay import queued
from tests.daemonkit import run_bridge
from tests.relaykit import ServedRelay

pytestmark = pytest.mark.slow

MiB = 1024 * 1024


class Two:
    """`relay serve` with ws1 (its first workstation) and ws2 (`relay add`)."""

    def __init__(self, served: ServedRelay) -> None:
        self.served = served
        self.url = f"nats://127.0.0.1:{served.port}"
        self.open: list[Nats] = []

    def account(self, host: str) -> dict[str, Any]:
        return json.loads(self.served.account_file(host).read_text())  # type: ignore[no-any-return]

    async def nc(self, user: str, password: str, host: str, inbox: str = "", **kw: Any) -> Nats:
        prefix = f"agent-bridge.{host}._INBOX" + (f".{inbox}" if inbox else "")
        nc = await nats.connect(
            self.url,
            user=user,
            password=password,
            inbox_prefix=prefix,
            allow_reconnect=False,
            error_cb=_quiet,
            **kw,
        )
        self.open.append(nc)
        return nc

    async def daemon(self, host: str, **kw: Any) -> Nats:
        login = self.account(host)["daemon"]
        return await self.nc(login["user"], login["password"], host, **kw)

    async def set_clients(self, host: str, clients: dict[str, str]) -> dict[str, Any]:
        """What the daemon of ``host`` does when a phone pairs or is revoked."""
        nc = await self.daemon(host)
        body = json.dumps({"v": 1, "clients": clients}).encode()
        # a workstation just added: the relay's own connection in its account comes once the
        # relay has read relay.json again; until then nothing answers (a daemon retries)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            try:
                msg = await nc.request(f"agent-bridge-relay.{host}.clients", body, timeout=30)
                break
            except nats.errors.NoRespondersError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        await nc.close()
        return json.loads(msg.data)  # type: ignore[no-any-return]

    async def phone(self, host: str, client_id: str, password: str, **kw: Any) -> Nats:
        return await self.nc(f"{host}-{client_id}", password, host, client_id, **kw)

    async def close(self) -> None:
        for nc in self.open:
            with contextlib.suppress(Exception):
                await nc.close()


async def _quiet(_exc: Exception) -> None:
    return None


def phone_login() -> tuple[str, str]:
    return f"c-{secrets.token_hex(4)}", secrets.token_urlsafe(24)


def queue_subject(host: str, client_id: str, password: str) -> str:
    """Where a phone with its own user queues: with its token where the relay has them."""
    try:
        from bridge.relay.permissions import queue_subject, queue_token
    except ImportError:  # a relay where a phone's subject is its id alone
        return queued.subject(host, client_id)
    return queue_subject(host, client_id, queue_token(password))


async def stream_of(daemon: Nats, host: str) -> Any:
    """The workstation's queue stream as its daemon finds it; made as the daemon makes it
    where the daemon makes it (bridge/relay/workqueue.py), when it is not there yet."""
    js = daemon.jetstream(timeout=5)
    name = queued.queue_stream(host)
    try:
        return await js.stream_info(name, subjects_filter=">")
    except NotFoundError:
        pass
    await js.add_stream(
        api.StreamConfig(
            name=name,
            subjects=[f"agent-bridge.{host}.q.*"],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            max_bytes=64 * MiB,
            max_msgs_per_subject=100,
            max_msg_size=queued.MAX_QUEUED_BYTES,
            discard=api.DiscardPolicy.NEW,
            discard_new_per_subject=True,
        )
    )
    return await js.stream_info(name, subjects_filter=">")


async def wait_login(two: Two, host: str) -> None:
    """Until ``host``'s daemon login works (a workstation just added)."""
    for _ in range(200):
        with contextlib.suppress(Exception):
            await (await two.daemon(host)).close()
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host}'s daemon never logged in: {two.served.printed()[-2000:]}")


def add_workstation(served: ServedRelay, name: str) -> None:
    run_bridge("relay", "add", name, "--dir", str(served.rdir), env=served.env, check=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedRelay]:
    s = ServedRelay(tmp_path / "relayhost", "ws1").start()
    try:
        add_workstation(s, "ws2")
        yield s
    finally:
        s.stop()


@pytest.fixture
async def two(served: ServedRelay) -> AsyncIterator[Two]:
    t = Two(served)
    await wait_login(t, "ws2")
    try:
        yield t
    finally:
        await t.close()


async def test_a_daemon_login_cannot_widen_its_stream_nor_reserve_anothers_share(
    two: Two,
) -> None:
    """Finding 1: with ws1's daemon login, its stream widened over ws2's `open` and admin
    subjects (ws2's phones' opens and client passwords captured), ws2's queue copied in as a
    source, and the relay's store reserved so that another workstation's queue could not be
    made."""
    ws2_phone, ws2_pass = phone_login()
    assert (await two.set_clients("ws2", {ws2_phone: ws2_pass}))["ok"]
    ws1 = await two.daemon("ws1")
    js = ws1.jetstream(timeout=3)
    mine = queued.queue_stream("ws1")
    wide = api.StreamConfig(
        name=mine,
        subjects=[
            "agent-bridge.ws1.q.*",
            "agent-bridge.ws2.open",
            "agent-bridge.ws2.status",
            "agent-bridge-relay.ws2.clients",
        ],
        sources=[api.StreamSource(name=queued.queue_stream("ws2"))],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_bytes=1000 * MiB,
    )
    for attempt in (js.add_stream, js.update_stream):
        with contextlib.suppress(Exception):
            await attempt(wide)
    hoard = api.StreamConfig(name="hoard", subjects=["agent-bridge.ws1.hoard"], max_bytes=900 * MiB)
    with contextlib.suppress(Exception):
        await js.add_stream(hoard)
    in_memory = api.StreamConfig(
        name="ram", subjects=["agent-bridge.ws1.ram"], storage=api.StorageType.MEMORY
    )
    with contextlib.suppress(Exception):
        await js.add_stream(in_memory)

    # what ws2's phone and daemon then send is not captured by ws1's stream
    ws2_nc = await two.phone("ws2", ws2_phone, ws2_pass)
    await ws2_nc.publish("agent-bridge.ws2.open", b"an open request")
    await ws2_nc.publish("agent-bridge.ws2.status", b"{}")
    await ws2_nc.flush()
    # (answered by the relay, not acknowledged by a stream that took it)
    answer = await two.set_clients("ws2", {ws2_phone: ws2_pass})
    assert answer.get("ok"), answer
    info = await stream_of(ws1, "ws1")
    captured = {s: n for s, n in (info.state.subjects or {}).items() if "ws2" in s}
    assert captured == {} and not info.config.sources, (captured, info.config)
    assert all(s.startswith("agent-bridge.ws1.q.") for s in info.config.subjects)
    assert (info.config.max_bytes or 0) <= 64 * MiB

    # and a workstation added after has its queue, with its whole share
    add_workstation(two.served, "ws3")
    await wait_login(two, "ws3")
    ws3 = await two.daemon("ws3")
    for _ in range(100):
        with contextlib.suppress(Exception):
            info3 = await stream_of(ws3, "ws3")
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("ws3 has no queue")
    assert info3.config.max_bytes == 64 * MiB


async def test_a_phone_cannot_put_anything_into_another_phones_queue_through_its_reply(
    two: Two,
) -> None:
    """Finding 2: JetStream acknowledges a publish on whatever reply subject the publisher
    named. Neither another workstation's phone nor a phone of the same workstation can use
    that to put something into a phone's share of the queue."""
    a, a_pass = phone_login()
    b, b_pass = phone_login()
    w, w_pass = phone_login()
    assert (await two.set_clients("ws1", {a: a_pass}))["ok"]
    assert (await two.set_clients("ws2", {b: b_pass, w: w_pass}))["ok"]
    ws2 = await two.daemon("ws2")
    await stream_of(ws2, "ws2")
    await stream_of(await two.daemon("ws1"), "ws1")
    b_subject = queue_subject("ws2", b, b_pass)

    attacker = await two.phone("ws1", a, a_pass)
    own = queue_subject("ws1", a, a_pass)
    for _ in range(30):
        await attacker.publish(own, b"x", reply=b_subject)
    # ws2's phone w knows b's id, not b's token
    neighbour = await two.phone("ws2", w, w_pass)
    w_own = queue_subject("ws2", w, w_pass)
    w_token = w_own.split(".")[3]
    for reply in (queued.subject("ws2", b), f"agent-bridge.ws2.q.{w_token}.{b}"):
        for _ in range(10):
            await neighbour.publish(w_own, b"y", reply=reply)
    for nc in (attacker, neighbour):
        await nc.flush()
    # the acknowledgements have been sent once the phones' own messages are stored
    ack = await neighbour.request(w_own, b"z", timeout=5)
    assert json.loads(ack.data)["stream"] == queued.queue_stream("ws2")
    info = await stream_of(ws2, "ws2")
    kept = info.state.subjects or {}
    assert not any(s.endswith(f".{b}") for s in kept), kept


async def test_one_phone_cannot_fill_the_queue_the_next_phones_message_is_kept(
    two: Two,
) -> None:
    """Finding 3: one phone's share of its workstation's queue is bounded in bytes: filling it
    with the largest messages the relay takes leaves room for the next phone."""
    a, a_pass = phone_login()
    b, b_pass = phone_login()
    assert (await two.set_clients("ws1", {a: a_pass, b: b_pass}))["ok"]
    await stream_of(await two.daemon("ws1"), "ws1")
    hog = await two.phone("ws1", a, a_pass)
    subject = queue_subject("ws1", a, a_pass)
    size, kept = 1000 * 1024, 0
    for _ in range(200):
        reply = json.loads((await hog.request(subject, b"h" * size, timeout=10)).data)
        if "error" not in reply:
            kept += size
        elif "size" in reply["error"].get("description", "") and size > 256 * 1024:
            size //= 2  # the relay takes smaller messages: the largest it takes, then
        else:
            break
    other = await two.phone("ws1", b, b_pass)
    reply = json.loads(
        (await other.request(queue_subject("ws1", b, b_pass), b"m", timeout=10)).data
    )
    assert "error" not in reply, (reply, kept)
    assert 0 < kept <= 8 * MiB  # one phone's share: an eighth of its workstation's 64 MiB


async def test_one_workstations_admin_storm_stalls_no_other_and_reloads_nothing(
    two: Two,
) -> None:
    """Finding 4: 100 admin requests of ws1 (two alternating sets of 256 clients) while ws2's
    phone logs in and asks its daemon's status through the relay's WebSocket front door."""
    served = two.served
    ws2_phone, ws2_pass = phone_login()
    assert (await two.set_clients("ws2", {ws2_phone: ws2_pass}))["ok"]
    conf = served.rdir / "nats.conf"
    before = conf.stat().st_mtime_ns
    reloads = served.printed().count("Reloaded")

    ws2 = await two.daemon("ws2")

    async def status(msg: Any) -> None:
        await msg.respond(b'{"v":1}')

    await ws2.subscribe("agent-bridge.ws2.status", cb=status)
    await ws2.flush()

    sets = [
        {f"c-{n:08x}": secrets.token_urlsafe(24) for n in range(base, base + 256)}
        for base in (0, 256)
    ]
    storm_nc = await two.daemon("ws1")
    bodies = [json.dumps({"v": 1, "clients": sets[n % 2]}).encode() for n in range(100)]

    async def one(body: bytes) -> Any:
        with contextlib.suppress(Exception):
            return json.loads(
                (await storm_nc.request("agent-bridge-relay.ws1.clients", body, timeout=30)).data
            )
        return None

    storm = asyncio.gather(*(one(b) for b in bodies))
    # meanwhile ws2's new phone logs in through the front door and asks, as the web client does
    ws_url = f"ws://127.0.0.1:{served.web_port}/nats"
    phone = await nats.connect(
        ws_url,
        user=f"ws2-{ws2_phone}",
        password=ws2_pass,
        inbox_prefix=f"agent-bridge.ws2._INBOX.{ws2_phone}",
        allow_reconnect=False,
        connect_timeout=5,
        error_cb=_quiet,
    )
    two.open.append(phone)
    for _ in range(20):
        assert json.loads(
            (await phone.request("agent-bridge.ws2.status", b"{}", timeout=5)).data
        ) == {"v": 1}
    answers = await storm
    # the storm is paced: some of it applied, the rest refused at once, nothing else waited
    assert any(a and a.get("ok") for a in answers), answers[:3]
    assert any(a and a.get("error") == "busy" for a in answers), answers[:3]
    # pairing changes one workstation's file: nats.conf is not written, nats-server not reloaded
    assert conf.stat().st_mtime_ns == before
    assert served.printed().count("Reloaded") == reloads
    # ws2's own admin request is answered
    assert (await two.set_clients("ws2", {ws2_phone: ws2_pass}))["ok"]


async def test_adding_a_workstation_reloads_nothing_and_disconnects_no_one(two: Two) -> None:
    """Another household's workstation added to a running relay: nats.conf stays as it was, so
    ws1's daemon and its phone (at the front door) keep their connections, and the new
    workstation's daemon logs in to an account of its own, with its queue, at once."""
    served = two.served
    conf = (served.rdir / "nats.conf").read_bytes()
    reloads = served.printed().count("Reloaded")
    phone_id, phone_pass = phone_login()
    assert (await two.set_clients("ws1", {phone_id: phone_pass}))["ok"]
    drops: list[str] = []

    async def dropped() -> None:
        drops.append("dropped")

    daemon = await two.daemon("ws1", disconnected_cb=dropped)
    phone = await nats.connect(
        f"ws://127.0.0.1:{served.web_port}/nats",
        user=f"ws1-{phone_id}",
        password=phone_pass,
        inbox_prefix=f"agent-bridge.ws1._INBOX.{phone_id}",
        disconnected_cb=dropped,
        error_cb=_quiet,
    )
    two.open.append(phone)

    async def status(msg: Any) -> None:
        await msg.respond(b'{"v":1}')

    await daemon.subscribe("agent-bridge.ws1.status", cb=status)
    await daemon.flush()

    add_workstation(served, "ws3")
    await wait_login(two, "ws3")
    new_phone, new_pass = phone_login()
    assert (await two.set_clients("ws3", {new_phone: new_pass}))["ok"]
    ws3 = await two.daemon("ws3")
    assert (await stream_of(ws3, "ws3")).config.subjects == [
        queue_subject("ws3", new_phone, new_pass)
    ]

    assert (served.rdir / "nats.conf").read_bytes() == conf
    assert served.printed().count("Reloaded") == reloads
    reply = await phone.request("agent-bridge.ws1.status", b"{}", timeout=5)
    assert json.loads(reply.data) == {"v": 1}
    assert drops == []


async def test_a_revoked_phone_is_dropped_before_its_daemon_hears_it_is_done(two: Two) -> None:
    """Revoking takes the phone's login out of the relay's store and closes its connections at
    once: by the time the daemon's request is answered (nothing reloaded)."""
    a, a_pass = phone_login()
    b, b_pass = phone_login()
    assert (await two.set_clients("ws1", {a: a_pass, b: b_pass}))["ok"]
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    await two.phone("ws1", a, a_pass, closed_cb=on_closed)
    kept = await two.phone("ws1", b, b_pass)
    assert (await two.set_clients("ws1", {b: b_pass}))["ok"]
    await asyncio.wait_for(closed.wait(), 2.0)
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await two.phone("ws1", a, a_pass)
    await kept.flush()
    assert kept.is_connected


#: a relay.json as relay serve wrote it before workstations had their own accounts: the
#: clients' own passwords in it (the format of bridge/relay/natsserver.py before the change)
OLD_RELAY_JSON: dict[str, Any] = {
    "host": "127.0.0.1",
    "public_host": "",
    "tls_cert": "",
    "tls_key": "",
    "ws_internal_port": 0,
    "workstations": {
        "ws1": {
            "daemon_password": "old-daemon-password-0123456789",
            "client_password": "old-pairing-password-012345678",
            "clients": {"c-0123abcd": "old-phone-password-0123456789"},
        }
    },
    "monitor": None,
    "admin_password": "old-admin-password-0123456789",
    "queue_max_bytes": 1024**3,
    "queue_dir": "",
}


async def test_a_relay_directory_of_the_old_format_loads_and_its_phone_logs_in(
    tmp_path: Path,
) -> None:
    served = ServedRelay(tmp_path / "relayhost", "ws1")
    served.rdir.mkdir(parents=True, mode=0o700)
    old = dict(OLD_RELAY_JSON, port=served.port, ws_port=served.ws_port, web_port=served.web_port)
    state_file = served.rdir / "relay.json"
    state_file.write_text(json.dumps(old))
    state_file.chmod(0o600)
    served.start()
    try:
        two = Two(served)
        phone = await two.phone("ws1", "c-0123abcd", "old-phone-password-0123456789")
        await phone.flush()
        daemon = await two.nc("ws1-daemon", "old-daemon-password-0123456789", "ws1")
        await daemon.flush()
        with pytest.raises(Exception, match=r"[Aa]uthorization"):
            await two.phone("ws1", "c-0123abcd", "not-the-phone-password-01234")
        # its password is no longer kept in the relay's files, only its hash
        assert "old-phone-password" not in state_file.read_text()
        assert "old-phone-password" not in (served.rdir / "nats.conf").read_text()
        await two.close()
    finally:
        served.stop()


async def test_a_healthy_start_and_stop_logs_no_error(tmp_path: Path) -> None:
    """No connection error of the relay's own services before nats-server listens or after it
    stops, no refused internal login, and no warning about nats-server's plain WebSocket
    listener, which is on loopback behind the front door that ends TLS."""
    served = ServedRelay(tmp_path / "relayhost", "ws1").start()
    try:
        two = Two(served)
        await (await two.daemon("ws1")).flush()
        await two.close()
    finally:
        assert served.stop() == 0
    printed = served.printed()
    assert "relay stopped" in printed
    for unwanted in (
        "relay_admin_error",
        "authentication error",
        "Authorization Violation",
        "Websocket not configured with TLS",
        "[ERR]",
        "Traceback",
    ):
        assert unwanted not in printed, (unwanted, printed[-3000:])
