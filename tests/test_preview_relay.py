"""A preview through the relay: a real daemon linked to a real nats-server, a real dev server
(tests/devserver.py), and a Python relay client whose streams carry HTTP/1.1 and the live
reload's WebSocket to the preview's proxy, sealed: a monitor on `>` sees no byte of the page.
A STREAM for a preview that is not open ends at once; one that is not a stream message
closes the connection (4400)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.relay import sealing, tunnel
from tests import relay_vectors
from tests.daemon import DaemonProcess
from tests.previewkit import dev_server, make_site
from tests.relaykit import Relay, linked_daemon
from tests.test_relay_e2e import opened_client
from tests.tunnelkit import Tunnel

pytestmark = pytest.mark.slow

#: a page no relay may see, and an asset of 1 MiB of it
PAGE_MARK = "tangerine-lighthouse-3301"


@pytest.fixture
def daemon(relay: Relay, tmp_path: Path) -> Iterator[DaemonProcess]:
    more = 'web_url = "https://app.example/"\n'
    yield from linked_daemon(tmp_path / "home", relay.rdir.account_file("ws-a"), more)


async def test_a_preview_through_the_relay_is_sealed(
    relay: Relay, daemon: DaemonProcess, tmp_path: Path
) -> None:
    page = f"<!doctype html><h1>{PAGE_MARK}</h1>"
    site = make_site(tmp_path / "shop", page)
    asset = base64.b64encode(os.urandom(768 * 1024)).decode()  # 1 MiB of text
    (site / "big.txt").write_text(asset)
    monitor, captured = await relay.overhear()
    client, vc = await opened_client(relay, daemon)
    try:
        with dev_server(site) as port:
            made = await vc.request("session.create", agent="demo", cwd=str(site))
            sid = made["session"]["session"]
            got = (await vc.request("preview.open", session=sid, port=port))["preview"]
            key_path = "/" + got["url"].split("/", 3)[3]
            t = Tunnel(vc)
            status, headers, _ = await t.get(got["id"], key_path)
            assert status == 303 and headers["location"] == "/"
            cookie = headers["set-cookie"].split(";")[0]
            status, _, body = await t.get(got["id"], "/", [("Cookie", cookie)])
            assert status == 200 and PAGE_MARK.encode() in body
            status, _, body = await t.get(got["id"], "/big.txt", [("Cookie", cookie)])
            assert status == 200 and body.decode() == asset
            status, _, _ = await t.get(got["id"], "/")  # no cookie: nothing
            assert status == 403

            # the live reload's WebSocket over a stream, byte for byte
            stream = await t.open(got["id"])
            upgrade = (
                "GET /__livereload HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nCookie: {cookie}\r\n\r\n"
            )
            await t.send(stream, upgrade.encode())
            head = await t.recv(stream)
            assert head is not None and head.startswith(b"HTTP/1.1 101 "), head
            (site / "index.html").write_text(page + "<p>edited</p>")
            frame = head.split(b"\r\n\r\n", 1)[1] or await t.recv(stream)
            assert frame is not None and frame.endswith(b"reload")  # a text frame, unmasked
            await t.end(stream)

            # a preview that is not open: the stream ends at once, the connection goes on
            gone = await t.open("pv_nothere")
            assert await t.recv(gone) is None and t.ended[gone] == {"error": "not_found"}
            await vc.request("ping")
            await vc.request("preview.close", preview=got["id"])

        await monitor.flush()
        blob = b"\n".join(m.data for m in captured)
        assert len(captured) > 20
        assert PAGE_MARK.encode() not in blob and asset[:64].encode() not in blob
        assert b"__livereload" not in blob and b"HTTP/1.1" not in blob

        # an authentic STREAM message that is not one: the daemon closes the connection
        await vc.send_sealed(sealing.STREAM, b"\0\0")
        await asyncio.wait_for(vc.closed_event.wait(), 10)
        assert vc.closed is not None and vc.closed["code"] == 4400
    finally:
        await monitor.close()
        await client.nc.close()


def test_stream_messages_are_read_strictly() -> None:
    assert tunnel.decode(tunnel.encode(7, tunnel.DATA, b"x")) == (7, tunnel.DATA, b"x")
    for bad in (b"", b"\0\0\0\1", tunnel.encode(0, tunnel.DATA), b"\0\0\0\1\x09"):
        with pytest.raises(sealing.Rejected):
            tunnel.decode(bad)


def test_the_stream_vectors_open_and_read_back() -> None:
    v = json.loads(relay_vectors.FILE.read_text())
    key = sealing.unb64(v["connection_key"])
    for name, direction in (
        ("stream_up", sealing.CLIENT_TO_DAEMON),
        ("stream_down", sealing.DAEMON_TO_CLIENT),
    ):
        opener = sealing.Opener(key, direction)
        for case in v[name]:
            opened = opener.open(sealing.unb64(case["payload"]))
            assert opened.kind == sealing.STREAM == case["kind"]
            stream, op, data = tunnel.decode(opened.body)
            assert (stream, op, sealing.b64(data)) == (case["stream"], case["op"], case["data_b64"])
