"""Previews against a real daemon and a real dev server (tests/devserver.py): the page through
the preview's own listener, Host and Origin as the dev server expects, the live-reload
WebSocket spliced through, nothing without the preview's secret, no service worker script,
nothing once closed, the daemon's own port refused, the session's listening ports found; the
idle close with a clock of the test's own."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from bridge.server.httpproxy import Bounds
from bridge.server.listening import listeners_under
from bridge.server.preview import Previews
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, running
from tests.previewkit import dev_server, make_site
from tests.shipkit import ship_daemon
from tests.wsclient import Client, RequestFailed


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from running(ship_daemon(tmp_path))


def cookie_of(client: httpx.AsyncClient) -> str:
    return "; ".join(f"{k}={v}" for k, v in client.cookies.items())


async def test_a_dev_server_through_its_preview(daemon: DaemonProcess, tmp_path: Path) -> None:
    site = make_site(tmp_path / "shop")
    c = await Client.open(daemon.url, daemon.token)
    try:
        with dev_server(site) as port:
            made = await c.request("session.create", agent="demo", cwd=str(site))
            sid = made["session"]["session"]
            found = await c.request("preview.ports", session=sid)
            assert port in [p["port"] for p in found["ports"]], found
            got = (await c.request("preview.open", session=sid, port=port, path="/"))["preview"]
            assert got["port"] == port and got["url"].startswith("http://127.0.0.1:")
            listed = await c.request("preview.list")
            assert [p["id"] for p in listed["previews"]] == [got["id"]]
            base = got["url"].split("/__preview/")[0]
            async with httpx.AsyncClient(follow_redirects=True, timeout=10) as web:
                # without the preview's secret: nothing
                refused = await web.get(f"{base}/")
                assert refused.status_code == 403
                # said to close, as it does after a refusal: no next request is sent into it
                assert refused.headers.get("connection") == "close"
                bad = got["url"].replace("/__preview/", "/__preview/x")
                assert (await web.get(bad)).status_code == 403
                page = await web.get(got["url"])
                assert page.status_code == 200 and "Hello from the dev server" in page.text
                echo = (await web.get(f"{base}/__echo", headers={"Origin": base})).json()
                assert echo["host"] == f"localhost:{port}"
                assert echo["origin"] == f"http://localhost:{port}"
                assert "abpv_" not in echo.get("cookie", "")  # the secret stays with us
                sw = await web.get(f"{base}/index.html", headers={"Service-Worker": "script"})
                assert sw.status_code == 403
                # the live reload's WebSocket, through the preview
                ws_url = base.replace("http://", "ws://") + "/__livereload"
                async with connect(
                    ws_url, additional_headers={"Cookie": cookie_of(web)}, open_timeout=10
                ) as ws:
                    (site / "index.html").write_text("<h1>edited</h1>")
                    assert await asyncio.wait_for(ws.recv(), 10) == "reload"
                assert "edited" in (await web.get(f"{base}/")).text
                # the same from a terminal
                opened = run_bridge("preview", sid, str(port), "--path=/__echo", env=daemon.env)
                assert opened.returncode == 0, opened.stderr
                second = opened.stdout.strip()
                assert second.startswith("http://127.0.0.1:") and second.endswith("to=/__echo")
                assert (await web.get(second)).json()["host"] == f"localhost:{port}"
                listed = run_bridge("preview", env=daemon.env).stdout
                assert got["id"] in listed and second in listed
                other = second.split("/__preview/")[0]
                closed = run_bridge("preview", "--close", got["id"], env=daemon.env)
                assert closed.stdout.strip() == f"closed {got['id']}", closed.stderr
                with pytest.raises(httpx.ConnectError):
                    await web.get(f"{base}/")
                assert (await web.get(f"{other}/__echo")).status_code == 200
                await c.request(
                    "preview.close", preview=(await c.request("preview.list"))["previews"][0]["id"]
                )
                with pytest.raises(httpx.ConnectError):
                    await web.get(f"{base}/")
            assert (await c.request("preview.list"))["previews"] == []
            own = int(daemon.url.rsplit(":", 1)[1].split("/")[0])
            for bad_port in (own, 0, 70000):
                with pytest.raises(RequestFailed) as refused:
                    await c.request("preview.open", port=bad_port)
                assert refused.value.frame["code"] == "bad_request"
            with pytest.raises(RequestFailed) as outside:
                await c.request("preview.open", cwd="/etc", port=port)
            assert outside.value.frame["code"] == "not_found"
    finally:
        await c.close()


async def test_a_preview_without_a_request_closes_and_nothing_else_is_reached() -> None:
    now = [0.0]

    async def where(_cwd: str | None, _session: str | None) -> str:
        return "/"

    previews = Previews(lambda: ("127.0.0.1", 1), lambda: None, where, clock=lambda: now[0])
    try:
        # a port nothing listens on: the browser gets 502, and no other host or port is tried
        p = await previews.open(9, None, None, "/")
        base = p.url.split("/__preview/")[0]
        async with httpx.AsyncClient(follow_redirects=True, timeout=10) as web:
            assert (await web.get(p.url)).status_code == 502
            now[0] += 29 * 60
            await web.get(f"{base}/")  # a request: the idle time starts again
            now[0] += 29 * 60
            assert await previews.expire() == []
            now[0] += 60
            assert await previews.expire() == [p.id]
            with pytest.raises(httpx.ConnectError):
                await web.get(f"{base}/")
        assert previews.open_previews == {}
    finally:
        await previews.close()


async def test_the_proxy_bounds_what_it_takes_and_gives(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    (site / "big.bin").write_bytes(b"x" * 300_000)

    async def where(_cwd: str | None, _session: str | None) -> str:
        return "/"

    bounds = Bounds(head=4096, request_body=1000, response_body=100_000, answer_s=5, read_s=5)
    previews = Previews(lambda: ("127.0.0.1", 1), lambda: None, where, bounds=bounds)
    try:
        with dev_server(site) as port:
            p = await previews.open(port, None, None, "/")
            base = p.url.split("/__preview/")[0]
            async with httpx.AsyncClient(follow_redirects=True, timeout=10) as web:
                assert (await web.get(p.url)).status_code == 200
                big_head = await web.get(f"{base}/", headers={"X-Big": "y" * 5000})
                assert big_head.status_code == 431
                body = await web.post(f"{base}/", content=b"z" * 2000)
                assert body.status_code == 413
                with pytest.raises(httpx.RemoteProtocolError):  # cut, never whole
                    await web.get(f"{base}/big.bin")
                # a Host naming another server changes nothing: still only the dev server
                echo = await web.get(f"{base}/__echo", headers={"Host": "example.com:80"})
                assert echo.json()["host"] == f"localhost:{port}"
    finally:
        await previews.close()


def test_the_ports_a_directory_s_processes_listen_on(tmp_path: Path) -> None:
    """``/proc`` as the kernel writes it (a tree of the test's own): LISTEN sockets on the
    loopback or every address, matched by inode to the processes working under the
    directory; an established one, another address, another directory are not listed."""
    proc, project = tmp_path / "proc", tmp_path / "shop"
    (project / "web").mkdir(parents=True)
    (proc / "net").mkdir(parents=True)
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
    head += "   uid  timeout inode\n"
    rows = [
        "0: 0100007F:1435 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 111 1",
        "1: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 222 1",
        "2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000 1000 0 333 1",
        "3: 0A00000A:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 444 1",
    ]
    (proc / "net" / "tcp").write_text(head + "\n".join(rows) + "\n")
    tcp6 = "0: 00000000000000000000000001000000:1F41 00000000000000000000000000000000:0000 0A"
    tcp6 += " 00000000:00000000 00:00000000 00000000 1000 0 555 1\n"
    (proc / "net" / "tcp6").write_text(head + tcp6)
    for pid, cwd, inodes in (
        ("10", project / "web", [111, 333, 444]),
        ("11", project, [555]),
        ("12", tmp_path, [222]),
    ):
        (proc / pid / "fd").mkdir(parents=True)
        os.symlink(cwd, proc / pid / "cwd")
        (proc / pid / "cmdline").write_bytes(b"npm\0run\0dev\0")
        for n, inode in enumerate(inodes):
            os.symlink(f"socket:[{inode}]", proc / pid / "fd" / str(n + 3))
    found = listeners_under(str(project), proc=str(proc))
    assert [(x.port, x.pid, x.command) for x in found] == [
        (0x1435, 10, "npm run dev"),
        (0x1F41, 11, "npm run dev"),
    ]


async def raw_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A dev server of one request: what it got (its head's lines, its body) as JSON."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")[1:-2]
    headers = dict(line.lower().split(": ", 1) for line in lines)
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    out = json.dumps({"headers": headers, "body": body.decode()}).encode()
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(out) + out)
    await writer.drain()
    writer.close()


async def test_a_chunked_body_reaches_the_dev_server_whole_and_no_redirect_leaves() -> None:
    async def where(_cwd: str | None, _session: str | None) -> str:
        return "/"

    server = await asyncio.start_server(raw_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    previews = Previews(lambda: ("127.0.0.1", 1), lambda: None, where)
    try:
        p = await previews.open(port, None, None, "/")
        base, key = p.url.split("/__preview/")[0], p.key
        async with httpx.AsyncClient(timeout=10) as web:
            for to in ("//evil.example/", "/%0d%0aSet-Cookie:%20x=1", "https://evil.example/"):
                entered = await web.get(f"{base}/__preview/{key}?to={to}")
                assert entered.status_code == 303 and entered.headers["location"] == "/"

            async def chunks() -> AsyncIterator[bytes]:
                yield b"hello "
                yield b"dev server"

            got = (await web.post(f"{base}/form", content=chunks())).json()
            assert got["body"] == "hello dev server"
            assert got["headers"]["content-length"] == "16"
            assert "transfer-encoding" not in got["headers"]
            assert got["headers"]["host"] == f"localhost:{port}"
    finally:
        await previews.close()
        server.close()
