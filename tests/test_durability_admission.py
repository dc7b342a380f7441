"""Nobody locks the owner out: silent handshakes and wrong tokens never cost the right token.

Real daemon, real sockets: unauthenticated connections that never say hello, and a peer
guessing tokens one after another and in parallel.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.daemon import DaemonProcess
from tests.daemonkit import unix_hello
from tests.rawws import RawWebSocket
from tests.wsclient import Client


async def test_silent_handshakes_never_take_the_owners_slots(daemon_factory: Any) -> None:
    d: DaemonProcess = daemon_factory(
        config="[server]\nhello_timeout = 30.0\n"
        "[limits]\nmax_connections = 4\nmax_unauthenticated = 3\n"
    ).start()
    silent = [RawWebSocket(d.port) for _ in range(12)]  # far more than every limit
    assert sum(s.status == 101 for s in silent) >= 3
    await asyncio.sleep(1.2)  # silent past admission.SILENT_S: their slots go to newcomers
    owners: list[Client] = []
    try:
        # Hello-token clients, a header client and the Unix socket: all get in.
        for _ in range(2):
            owners.append(await Client.open(d.url, d.token))
        owners.append(await Client.open(d.url, d.token, header=True))
        await unix_hello(d)
        for c in owners:
            assert await c.request("ping") == {}
    finally:
        for c in owners:
            await c.close()
        for s in silent:
            s.close()


def _guess(port: int) -> tuple[int, float | None]:
    """(HTTP status, seconds until the 4401 answer or None)."""
    try:
        ws = RawWebSocket(port)
    except ConnectionError:
        return 0, None
    if ws.status != 101:
        ws.close()
        return ws.status, None
    t0 = time.monotonic()
    ws.send_json({"t": "hello", "id": 1, "protocol": 1, "token": "wrong-guess"})
    ws.sock.settimeout(4.0)
    reason = b""
    try:
        while True:
            op, payload = ws.recv_frame()
            if op == 8:
                reason = payload[2:]
                break
    except OSError:
        pass
    ws.close()
    # A handshake that lost its slot before its hello was read got no answer to a guess.
    if reason == b"too many unauthenticated connections":
        return 0, None
    return 101, (time.monotonic() - t0) if reason == b"unauthorized" else None


async def test_wrong_tokens_are_slowed_never_the_right_one(daemon_factory: Any) -> None:
    d: DaemonProcess = daemon_factory(
        config="[limits]\nauth_failures_per_minute = 3\nmax_unauthenticated = 4\n"
    ).start()
    loop = asyncio.get_running_loop()
    for _ in range(4):  # the free ones, and one more
        status, answered = await loop.run_in_executor(None, _guess, d.port)
        assert status == 101
    assert answered is None, "past the limit, a wrong token is not answered at once"
    # The right token in a hello, from the same address, right after: taken at once.
    t0 = time.monotonic()
    c = await Client.open(d.url, d.token)
    assert await c.request("ping") == {}
    assert time.monotonic() - t0 < 2.0
    await c.close()
    # Then 20 in parallel: no more answers than the limit allows, whatever the parallelism.
    with ThreadPoolExecutor(20) as pool:
        started = time.monotonic()
        results = await asyncio.gather(
            *(loop.run_in_executor(pool, _guess, d.port) for _ in range(20))
        )
        # The right token, meanwhile, from the same address: never refused, not slowed.
        t0 = time.monotonic()
        c = await Client.open(d.url, d.token, header=True)
        assert await c.request("ping") == {}
        assert time.monotonic() - t0 < 2.0
        await c.close()
        await unix_hello(d)
    answered_fast = [a for _, a in results if a is not None and a < 3.5]
    assert len(answered_fast) == 0, f"{len(answered_fast)} wrong guesses answered within 3.5 s"
    assert time.monotonic() - started < 30
    checked = [status for status, _ in results if status == 101]
    assert len(checked) <= 4, "parallel connections got more guesses than their slots"
