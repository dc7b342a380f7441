"""`relay serve`'s front door holds: a silent connection (TLS or not) is closed within the head
timeout, and sockets that never send a request, from one address or past the descriptors the
relay has, do not keep a phone from the page, ``/healthz`` and ``/nats``."""

from __future__ import annotations

import contextlib
import errno
import json
import select
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from bridge.relay.frontdoor import HEAD_TIMEOUT_S
from tests.daemonkit import make_certificate
from tests.relaykit import ServedRelay

pytestmark = pytest.mark.slow

#: the address the idle sockets come from; the phone comes from 127.0.0.1 (Linux answers the
#: whole of 127/8 on loopback)
CROWD = "127.0.0.2"


def tls_relay(tmp_path: Path, fd_limit: tuple[int, int] | None = None) -> tuple[ServedRelay, Path]:
    cert, key = make_certificate(tmp_path)
    served = ServedRelay(tmp_path, "door box", "--tls-cert", str(cert), "--tls-key", str(key))
    served.fd_limit = fd_limit
    return served.start(), cert


@contextlib.contextmanager
def idle_sockets(port: int, count: int, source: str = CROWD) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``port`` that never send a byte, opened at once (non-blocking);
    yielded once each has connected or been turned away, so the relay has had them all."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((source, 0))
            code = sock.connect_ex(("127.0.0.1", port))
            assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code, code)
            held.append(sock)
        waiting = {s.fileno(): s for s in held}
        poller = select.poll()
        for fd in waiting:
            poller.register(fd, select.POLLOUT)
        deadline = time.monotonic() + 20
        while waiting and time.monotonic() < deadline:
            for fd, _event in poller.poll(200):
                poller.unregister(fd)
                waiting.pop(fd)
        yield held
    finally:
        for sock in held:
            sock.close()


def closed_within(port: int, timeout: float, wrap: ssl.SSLContext | None = None) -> float:
    """Seconds until the relay closes a connection on ``port`` that sends nothing (with
    ``wrap``: after its TLS handshake); fails if it is still open after ``timeout``."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        sock: socket.socket = raw
        if wrap is not None:
            sock = wrap.wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            assert sock.recv(1) == b""
        except TimeoutError:
            pytest.fail(f"a silent connection to {port} was still open after {timeout} s")
        except (ConnectionResetError, ssl.SSLError):
            pass
    return time.monotonic() - start


def phone_gets_in(served: ServedRelay, cert: Path, timeout: float = 30.0) -> None:
    """What a phone does first: the page's /healthz over https, then nats-server's WebSocket on
    the page's port with the workstation's pairing login (nats-py, as over wss://)."""
    import asyncio

    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{served.web_port}/healthz"
    with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
        said = {"ok": True, "relay": True, "preview_port": served.preview_port}
        assert json.loads(r.read()) == said
    login = json.loads(served.account_file("door-box").read_text())["client"]

    async def nats_over_wss() -> None:
        nc = await nats.connect(
            f"wss://127.0.0.1:{served.web_port}/nats",
            user=login["user"],
            password=login["password"],
            inbox_prefix="agent-bridge.door-box._INBOX.pair",
            tls=ctx,
            connect_timeout=timeout,
            allow_reconnect=False,
        )
        try:
            await nc.flush(timeout=timeout)
        finally:
            await nc.close()

    asyncio.run(nats_over_wss())


def test_a_silent_connection_is_closed_within_the_head_timeout(tmp_path: Path) -> None:
    """Before its TLS handshake, after it, on the web port and on the WebSocket port."""
    served, cert = tls_relay(tmp_path)
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        limit = HEAD_TIMEOUT_S * 2  # a loaded machine's margin; the old door waited 60 s
        for port in (served.web_port, served.ws_port):
            closed_within(port, limit)
            closed_within(port, limit, trusting)
        phone_gets_in(served, cert)
    finally:
        assert served.stop() == 0
    assert "Traceback" not in served.printed()


def test_idle_sockets_from_one_address_do_not_keep_a_phone_out(tmp_path: Path) -> None:
    """1,100 silent sockets from one address under a service's default 1,024 descriptors
    (soft; the hard limit above it, as systemd sets them): the phone still gets in."""
    served, cert = tls_relay(tmp_path, fd_limit=(1024, 4096))
    try:
        assert served.proc is not None  # it raised its soft limit to the hard one
        limits = Path(f"/proc/{served.proc.pid}/limits").read_text()
        assert "Max open files            4096                 4096" in limits, limits
        with idle_sockets(served.web_port, 900), idle_sockets(served.ws_port, 200):
            phone_gets_in(served, cert)
    finally:
        assert served.stop() == 0
    printed = served.printed()
    assert "Traceback" not in printed
    assert "relay_door_refused" in printed  # counted and said, once in a while


def test_more_idle_sockets_than_descriptors_leave_room_for_a_phone_and_a_small_log(
    tmp_path: Path,
) -> None:
    """The relay's descriptors cut to 160 (soft and hard): 600 silent sockets, and the phone
    still gets in; the log says so in a few lines, with no traceback."""
    served, cert = tls_relay(tmp_path, fd_limit=(160, 160))
    try:
        with idle_sockets(served.web_port, 400), idle_sockets(served.ws_port, 200):
            phone_gets_in(served, cert)
            with idle_sockets(served.web_port, 300, source="127.0.0.3"):
                phone_gets_in(served, cert)
    finally:
        assert served.stop() == 0
    printed = served.printed()
    assert "Traceback" not in printed
    assert len(printed) < 64 * 1024, f"{len(printed)} bytes of log"


def test_the_bounds_count_an_address_and_all_and_follow_the_descriptors() -> None:
    from bridge.relay.doorcap import PendingCap, address_key

    assert address_key(("2001:db8:1:2:3::9", 443, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("::ffff:192.0.2.7", 443, 0, 0)) == "192.0.2.7"
    assert address_key(("192.0.2.7", 443)) == "192.0.2.7"
    cap = PendingCap(most=3, per_address=2)
    a1, _ = cap.admit(("192.0.2.1", 1))
    assert cap.admit(("192.0.2.1", 2))[0] == "192.0.2.1"
    assert cap.admit(("192.0.2.1", 3)) == (None, "address")
    b1, _ = cap.admit(("192.0.2.2", 1))
    assert cap.admit(("192.0.2.3", 1)) == (None, "all")
    assert cap.refused == {"address": 1, "all": 1}
    assert a1 is not None and b1 is not None
    cap.release(a1)
    cap.release(b1)
    assert cap.admit(("192.0.2.3", 1))[0] == "192.0.2.3"
    assert cap.waiting == 2
    low = PendingCap.for_descriptors(160)
    assert (low.most, low.per_address) == (40, 10)
    high = PendingCap.for_descriptors(65536)
    assert (high.most, high.per_address) == (1024, 32)


def test_out_of_descriptors_the_door_says_so_once_in_a_while_and_takes_a_phone_when_some_close(
    tmp_path: Path,
) -> None:
    """Phones that did send their request (NATS clients on /nats, two descriptors each in
    the relay) take every descriptor of a relay cut to 48: the next connection cannot be
    accepted. The relay says so in a line or two, with no traceback, and takes the waiting
    phone once a few of the others leave."""
    import asyncio

    served = ServedRelay(tmp_path, "door box")
    served.fd_limit = (48, 48)
    served.start()
    login = json.loads(served.account_file("door-box").read_text())["client"]
    url = f"ws://127.0.0.1:{served.web_port}/nats"

    async def phone(timeout: float) -> nats.NATS:
        # bounded as a whole: nats-py tries a failed first connection again by itself
        return await asyncio.wait_for(connect(timeout), timeout * 2)

    async def connect(timeout: float) -> nats.NATS:
        nc = await nats.connect(
            url,
            user=login["user"],
            password=login["password"],
            inbox_prefix="agent-bridge.door-box._INBOX.pair",
            connect_timeout=timeout,
            allow_reconnect=False,
        )
        await nc.flush(timeout=timeout)
        return nc

    async def crowd() -> None:
        held: list[nats.NATS] = []
        try:
            for _ in range(100):  # until the relay has no descriptor for one more
                try:
                    held.append(await phone(3.0))
                except Exception:
                    break
            else:
                pytest.fail("100 phones in on 48 descriptors: the limit did not hold")
            deadline = time.monotonic() + 20
            while "relay_door_accept_failed" not in served.printed():
                assert time.monotonic() < deadline, served.printed()[-3000:]
                await asyncio.sleep(0.1)
            waiting = asyncio.ensure_future(phone(30.0))
            for nc in held[:6]:
                await asyncio.wait_for(nc.close(), 10)
            await asyncio.wait_for((await waiting).close(), 10)
        finally:
            for nc in held:
                if not nc.is_closed:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(nc.close(), 10)

    try:
        asyncio.run(crowd())
    finally:
        assert served.stop() == 0
    printed = served.printed()
    assert "Traceback" not in printed
    assert 1 <= printed.count("relay_door_accept_failed") <= 3, printed[-3000:]
    assert "Too many open files" in printed or "EMFILE" in printed
