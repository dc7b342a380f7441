"""`agent-bridge relay serve` starts a working relay in one command: a daemon pointed at the
account file it writes connects, and a client pairs and talks to the daemon through it, from a
pairing link on the web client the relay serves itself; `relay add` adds a workstation to the
running relay. Without [relay] the daemon says "off"."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest
import websockets

from bridge.relay.sealing import unb64
from tests.daemon import DaemonProcess
from tests.daemonkit import make_certificate, run_bridge
from tests.relaykit import (
    RelayClient,
    ServedRelay,
    decode_link,
    events_until,
    nats_as,
    relayed_daemon,
    wait_relay,
)

pytestmark = pytest.mark.slow


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def raw_http(port: int, request: bytes) -> bytes:
    """What the web port answers to bytes that may not be HTTP at all (a path sent as is)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def check_web_client(web_port: int, preview_port: int) -> None:
    """The relay's web port serves the web client, with the daemon's headers, and nothing else."""
    base = f"http://127.0.0.1:{web_port}"
    status, headers, body = get(base + "/")
    assert status == 200 and b"<!doctype html>" in body.lower()
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
    for path, kind in (("/js/app.js", "text/javascript"), ("/app.css", "text/css")):
        status, headers, body = get(base + path)
        assert (status, headers["Content-Type"].split(";")[0]) == (200, kind), path
        assert "default-src 'none'" in headers["Content-Security-Policy"] and body
    healthz = json.loads(get(base + "/healthz")[2])
    assert healthz == {"ok": True, "relay": True, "preview_port": preview_port}
    assert get(base + "/v1/ws")[0] == 404  # no daemon API, no WebSocket
    assert get(base + "/nope.js")[0] == 404
    for path in (b"/../pyproject.toml", b"/js/../../web.py", b"/%2e%2e/web.py"):
        answer = raw_http(web_port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 404 "), (path, answer[:80])
    posted = raw_http(web_port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert posted.startswith(b"HTTP/1.1 405 ")
    # not HTTP: the connection is closed unanswered (websockets' parser, as on the daemon's port)
    assert raw_http(web_port, b"\x16\x03garbage\r\n\r\n") == b""
    huge = b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    assert raw_http(web_port, huge).startswith(b"HTTP/1.1 4")
    assert get(base + "/")[0] == 200  # still serving


async def test_relay_serve_starts_a_working_relay(tmp_path: Path) -> None:
    served = ServedRelay(tmp_path)
    env, rdir = served.env, served.rdir
    port, ws_port, web_port = served.port, served.ws_port, served.web_port
    d: DaemonProcess | None = None
    try:
        served.start()
        printed = served.printed()
        account_file = served.account_file("test-box")
        assert f"its account file: {account_file}" in printed
        assert f":{account_file} ~/.config/agent-bridge/relay-account.json" in printed  # scp
        assert stat.S_IMODE(account_file.stat().st_mode) == 0o600
        account = json.loads(account_file.read_text())
        assert account["url"] == f"nats://127.0.0.1:{port}"
        # one port for a phone: nats-server's WebSocket is the web port's /nats
        assert account["client_url"] == f"ws://127.0.0.1:{web_port}/nats"
        assert account["web_url"] == f"http://127.0.0.1:{web_port}/"
        assert f"web client on http://127.0.0.1:{web_port}/" in printed
        check_web_client(web_port, served.preview_port)

        d = relayed_daemon(tmp_path / "home", f'[relay]\naccount = "{account_file}"\n')
        doctor = run_bridge("doctor", env=d.env)
        assert "relay: connected" in doctor.stdout

        link = json.loads(run_bridge("pair", "--relay", "--json", env=d.env, check=True).stdout)
        info = decode_link(link["link"])
        # the link opens the page the relay serves, not the daemon's (a phone away from home
        # cannot reach the daemon)
        assert link["link"].startswith(f"http://127.0.0.1:{web_port}/#relay=")
        assert info["url"] == f"ws://127.0.0.1:{web_port}/nats"
        # nats-server answers there, and on the WebSocket port links made before name
        for ws_url in (info["url"], f"ws://127.0.0.1:{ws_port}"):
            async with websockets.connect(ws_url) as ws:
                assert (await asyncio.wait_for(ws.recv(), 10))[:5] in ("INFO ", b"INFO ")
        url = f"nats://127.0.0.1:{port}"
        nc = await nats_as(url, info, info["host"], "pair")
        client = RelayClient(nc, info["host"], unb64(info["pk"]))
        assert (await client.pair(info["secret"]))["ok"]
        await nc.close()
        # the phone's own user, in the sealed pair reply (tests/test_relay_identity.py)
        assert client.login is not None
        nc = client.nc = await nats_as(url, client.login, info["host"], str(client.client_id))
        client.scoped = True
        vc = await client.open()
        await vc.hello()
        created = await vc.request("session.create", agent="demo", cwd=str(tmp_path))
        session = created["session"]["session"]
        await vc.request("session.subscribe", session=session)
        await vc.request("session.send", session=session, text="echo over the relay")
        frames = await events_until(vc, lambda b: b["type"] == "session_end", session=session)
        assert "over the relay" in "".join(f["block"].get("text", "") for f in frames)
        await nc.close()

        added = run_bridge("relay", "add", "second", "--dir", str(rdir), env=env, check=True)
        assert "the running relay has read the new configuration" in added.stdout
        second = json.loads((rdir / "accounts" / "second.json").read_text())
        deadline = time.monotonic() + 10
        while True:  # the reload is asynchronous
            try:
                nc2 = await nats.connect(
                    f"nats://127.0.0.1:{port}",
                    user=second["daemon"]["user"],
                    password=second["daemon"]["password"],
                    allow_reconnect=False,
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        await nc2.close()

        assert served.stop() == 0
        # nats-server and the web client went with it
        assert not port_open(port) and not port_open(ws_port) and not port_open(web_port)
        assert "Traceback" not in served.printed()
        wait_relay(d, "disconnected")
        doctor = run_bridge("doctor", env=d.env)
        assert "relay: disconnected" in doctor.stdout
    finally:
        served.stop()
        if d is not None:
            d.stop()


def test_relay_serve_without_nats_server_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bridge.cli.cli import main
    from bridge.relay import natsserver

    monkeypatch.setattr(natsserver.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(natsserver.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["relay", "serve", "--dir", str(tmp_path / "r")]) == 1
    assert "pipx install '/path/to/agent-bridge[relay]'" in capsys.readouterr().err


def test_without_relay_config_healthz_says_off(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")
    d.start()
    try:
        assert d.healthz()["relay"] == "off"
    finally:
        d.stop()


def test_the_account_names_the_relays_web_client_over_tls_and_none_when_off() -> None:
    from bridge.relay.natsserver import RelayState, Workstation, account_of
    from bridge.relay.plainwarn import plain_web_warning

    w = Workstation("box", "d", "c")
    state = RelayState(host="0.0.0.0", public_host="relay.example", tls_cert="c", tls_key="k")
    assert account_of(state, w)["web_url"] == "https://relay.example:4281/"
    assert plain_web_warning(state) is None
    state.tls_cert = state.tls_key = ""
    assert account_of(state, w)["web_url"] == "http://relay.example:4281/"
    warning = plain_web_warning(state)
    assert warning is not None and "plain HTTP" in warning and "0.0.0.0:4281" in warning
    assert "service worker" in warning  # previews through the relay need TLS too
    state.web_port = 0
    assert "web_url" not in account_of(state, w) and plain_web_warning(state) is None
    assert plain_web_warning(RelayState()) is None  # loopback


def test_pair_link_prefers_config_web_url_then_the_accounts_then_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.config import RelayConfig
    from bridge.relay import account, pairlink

    monkeypatch.setattr("bridge.cli.client.read_runtime_info", lambda: {"port": 9999})
    file = tmp_path / "box.json"
    body = {"url": "nats://r:4222", "client_url": "ws://r:4280", "host_id": "box"}
    file.write_text(json.dumps({**body, "web_url": "https://r:4281/"}))
    file.chmod(0o600)

    def base(**kw: str) -> str:
        settings = account.resolve(RelayConfig(account=str(file), **kw))
        return pairlink._web_base(settings)

    assert base(web_url="https://mine.example/") == "https://mine.example/"
    assert base() == "https://r:4281/"
    file.write_text(json.dumps(body))
    assert base().endswith(":9999/")


def test_relay_serve_with_tls_serves_the_web_client_over_https(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    served = ServedRelay(tmp_path, "tls box", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        served.start()
        account = json.loads(served.account_file("tls-box").read_text())
        assert account["web_url"] == f"https://127.0.0.1:{served.web_port}/"
        assert account["client_url"] == f"wss://127.0.0.1:{served.web_port}/nats"
        ctx = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(account["web_url"], context=ctx, timeout=10) as r:
            assert r.status == 200 and "script-src 'self'" in r.headers["Content-Security-Policy"]
        with pytest.raises(OSError):  # no plain HTTP beside it: refused, not served
            urllib.request.urlopen(f"http://127.0.0.1:{served.web_port}/", timeout=10)
        assert "WARNING" not in served.printed()  # TLS, and loopback anyway
        assert served.stop() == 0
    finally:
        served.stop()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_killed_relay_serve_leaves_no_nats_server_and_a_second_one_is_refused(
    tmp_path: Path,
) -> None:
    first = ServedRelay(tmp_path / "first").start()
    try:
        assert first.proc is not None
        nats_pid = int((first.rdir / "nats-server.pid").read_text())
        # a second `relay serve` on the same directory would fight over its ports and pid file
        second = run_bridge("relay", "serve", "--dir", str(first.rdir), env=first.env)
        assert second.returncode == 1
        assert f"already running (pid {nats_pid})" in second.stderr
        assert _alive(nats_pid), "the refused second one must leave the first relay alone"

        os.kill(first.proc.pid, signal.SIGKILL)  # `relay serve` alone, not its child's group
        first.proc.wait(5)
        deadline = time.monotonic() + 10
        while _alive(nats_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(nats_pid), "nats-server outlived the relay serve that started it"
    finally:
        first.stop()
    # its ports are free again: the same relay starts anew
    again = ServedRelay(tmp_path / "first")
    again.port, again.ws_port, again.web_port = first.port, first.ws_port, first.web_port
    try:
        again.start()
    finally:
        again.stop()
