"""Limits answer with clear errors, and an unauthenticated client reaches none of them.

tests/test_e2e_core.py already covers the frame size (1009), attachment size, queued messages
and the slow-reader cut-off (4408); these are the other limits of ``[limits]``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import unix_connect

from tests.daemon import DaemonProcess
from tests.rawws import RawWebSocket
from tests.wsclient import Client


async def _create(c: Client, cwd: Path) -> dict[str, Any]:
    return await c.call("session.create", agent="demo", cwd=str(cwd))


async def test_session_subscriber_and_attachment_limits(daemon_factory: Any, project: Path) -> None:
    d: DaemonProcess = daemon_factory(
        config="[limits]\nmax_sessions = 2\nmax_subscribers_per_session = 2\nmax_attachments = 2\n"
    ).start()
    c = await Client.open(d.url, d.token)
    first = await _create(c, project)
    assert first["t"] == "ok"
    assert (await _create(c, project))["t"] == "ok"
    third = await _create(c, project)
    assert third["t"] == "err" and third["code"] == "conflict"
    assert "2 sessions" in third["message"] and "limit" in third["message"]
    # The connection and the existing sessions are fine.
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    assert len(listed) == 2

    session = first["result"]["session"]["session"]
    others = [await Client.open(d.url, d.token) for _ in range(2)]
    await others[0].request("session.subscribe", session=session)
    await others[1].request("session.subscribe", session=session)
    refused = await c.call("session.subscribe", session=session)
    assert refused["t"] == "err", refused
    assert refused["code"] == "conflict" and "subscribers" in refused["message"]
    # Subscribing again on a connection that already is does not count twice.
    await others[0].request("session.subscribe", session=session, after_seq=1)
    # A subscriber that leaves frees its place.
    await others[1].close()
    await asyncio.sleep(0.3)
    await c.request("session.subscribe", session=session)

    att = {"name": "a.txt", "mime": "text/plain", "data": base64.b64encode(b"x").decode()}
    many = await c.call("session.send", session=session, text="echo hi", attachments=[att] * 3)
    assert many["code"] == "too_large" and "2 attachments" in many["message"]
    ok = await c.call("session.send", session=session, text="echo hi", attachments=[att] * 2)
    assert ok["t"] == "ok"
    await c.turn(session)
    await others[0].close()
    await c.close()


async def test_requests_per_second_per_connection(daemon_factory: Any) -> None:
    d: DaemonProcess = daemon_factory(
        config="[limits]\nrequests_per_second = 5\nrequest_burst = 5\n"
    ).start()
    c = await Client.open(d.url, d.token)
    other = await Client.open(d.url, d.token)
    answers = await asyncio.gather(*(c.call("ping") for _ in range(20)))
    codes = [a.get("code") for a in answers]
    assert codes.count(None) <= 8, codes  # the burst, plus what refilled meanwhile
    limited = [a for a in answers if a["t"] == "err"]
    assert len(limited) >= 12
    assert all(a["code"] == "rate_limited" and a["id"] is not None for a in limited)
    # Per connection: another client is not slowed down, and this one recovers.
    assert await other.request("ping") == {}
    await asyncio.sleep(1.2)
    assert await c.request("ping") == {}
    await c.close()
    await other.close()


async def test_failed_logins_are_slowed_never_the_right_token(daemon_factory: Any) -> None:
    d: DaemonProcess = daemon_factory(config="[limits]\nauth_failures_per_minute = 3\n").start()
    waits = []
    for _ in range(3):
        bad = RawWebSocket(d.port)
        assert bad.status == 101
        t0 = time.monotonic()
        bad.send_json({"t": "hello", "id": 1, "protocol": 1, "token": "guess"})
        assert bad.close_code() == 4401
        waits.append(time.monotonic() - t0)
        bad.close()
    # Every failure makes the next answer slower.
    assert waits[-1] >= 0.25, waits
    # The right token from the same address is still taken at once, in a hello or a header
    # (wrong guesses past the limit are slowed further: tests/test_durability_admission.py).
    for header in (False, True):
        c = await Client.open(d.url, d.token, header=header)
        assert await c.request("ping") == {}
        await c.close()
    # The local Unix socket (trusted by file permissions) works too.
    sock = d.home / "run" / "agent-bridge" / "bridge.sock"
    async with unix_connect(
        str(sock), uri="ws://localhost/v1/ws", subprotocols=["bridge.v1.json"]
    ) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"t": "hello", "id": 1, "protocol": 1}))
        assert json.loads(await ws.recv())["t"] == "ok"


async def test_unauthenticated_clients_get_no_further_than_the_handshake(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(
        config="[server]\nhello_timeout = 1.0\n[limits]\nmax_connections = 3\n"
        "auth_failures_per_minute = 1000\n"
    ).start()
    # Requests before hello: an error and 4400, nothing done.
    pushy = RawWebSocket(d.port)
    pushy.send_json({"t": "session.create", "id": 1, "agent": "demo", "cwd": str(project)})
    answer = pushy.recv_json()
    assert answer["t"] == "err" and answer["code"] == "bad_request"
    assert pushy.close_code() == 4400
    pushy.close()
    # A wrong token, then requests anyway: 4401 and not a single frame back.
    liar = RawWebSocket(d.port)
    liar.send_json({"t": "hello", "id": 1, "protocol": 1, "token": "nope"})
    for i in range(50):
        liar.send_json({"t": "session.create", "id": i + 2, "agent": "demo", "cwd": str(project)})
    assert liar.close_code() == 4401
    liar.close()
    # Silent connections take no slot of the authenticated clients', and last only until
    # the hello timeout.
    silent = [RawWebSocket(d.port) for _ in range(3)]
    owner = await Client.open(d.url, d.token)
    await owner.close()
    for s in silent:
        assert s.close_code() == 4401
        s.close()
    await asyncio.sleep(0.3)
    c = await Client.open(d.url, d.token)
    # None of it created a session or cost the authenticated client anything.
    assert (await c.request("sessions.list", include_external=False))["sessions"] == []
    answers = await asyncio.gather(*(c.call("ping") for _ in range(50)))
    assert all(a["t"] == "ok" for a in answers)
    await c.close()


async def test_frames_before_authentication_are_capped(daemon: DaemonProcess) -> None:
    # An unauthenticated peer cannot make the daemon buffer a 16 MiB frame: before the token
    # is checked, a frame (a hello) may be 64 KiB at most.
    big = RawWebSocket(daemon.port)
    big.send_json({"t": "hello", "id": 1, "protocol": 1, "token": "x" * 100_000})
    assert big.close_code() == 1009
    big.close()
    # Once authenticated, the configured frame size applies again.
    c = await Client.open(daemon.url, daemon.token)
    assert await c.request("ping", pad="y" * 2_000_000) == {}
    # A client authenticated by the header is not capped at all.
    h = await Client.open(daemon.url, daemon.token, header=True, hello=False)
    answer = await h.call("hello", protocol=1, client={"name": "x" * 100_000})
    assert answer["t"] == "ok"
    await h.close()
    await c.close()
