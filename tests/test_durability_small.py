"""Small promises: the session limit counts live sessions; bad input gets a clear 4xx."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.wsclient import Client, RequestFailed

CONFIG = '[server]\nunix_socket = "off"\n[limits]\nmax_sessions = 2\n'


async def test_max_sessions_counts_sessions_not_ended_also_after_a_restart(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    c = await Client.open(d.url, d.token)
    for _ in range(5):  # more ended sessions than the limit
        created = await c.request("session.create", agent="demo", cwd=str(project))
        await c.request("session.close", session=created["session"]["session"])
    await c.request("session.create", agent="demo", cwd=str(project))
    await c.request("session.create", agent="demo", cwd=str(project))
    with pytest.raises(RequestFailed) as info:
        await c.request("session.create", agent="demo", cwd=str(project))
    assert info.value.code == "conflict"
    await c.close()
    assert d.stop() == 0
    d.start()
    c = await Client.open(d.url, d.token)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    live = [s for s in listed if s["state"] != "ended"]
    await c.request("session.close", session=live[0]["session"])
    await c.request("session.create", agent="demo", cwd=str(project))
    await c.close()


async def test_cwd_of_an_unknown_users_home_is_bad_request(daemon: DaemonProcess) -> None:
    c = await Client.open(daemon.url, daemon.token)
    for cwd in ("~nosuchuser", "~nosuchuser/x"):
        with pytest.raises(RequestFailed) as info:
            await c.request("session.create", agent="demo", cwd=cwd)
        assert info.value.code == "bad_request", info.value.frame
    await c.close()
    assert "Traceback" not in daemon.log_text()


async def _raw_http(port: int, head: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("header", ["Host", "Origin"])
async def test_repeated_host_or_origin_is_400_and_logged(
    daemon: DaemonProcess, header: str
) -> None:
    port = daemon.port
    lines = [
        "GET /v1/ws HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        "Origin: http://127.0.0.1",
        f"{header}: http://evil.example",
    ]
    status, body = await _raw_http(port, "\r\n".join(lines) + "\r\n\r\n")
    assert status == 400, body
    assert b"repeated" in body
    await asyncio.sleep(0.2)
    log = daemon.log_text()
    assert "http_bad_request" in log
    assert "Traceback" not in log
