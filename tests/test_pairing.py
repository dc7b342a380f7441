"""`agent-bridge pair`: the URL a phone connects with (token, ws/wss, LAN address), its QR code,
and `--rotate`, which makes a new token and disconnects clients holding the old one."""

from __future__ import annotations

import ipaddress
import json
import ssl
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from bridge.server.pairing import lan_address, qr_text
from tests.daemon import DaemonProcess
from tests.daemonkit import make_certificate, run_bridge
from tests.wsclient import Client


def pair(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_bridge("pair", *args, env=env)


def pair_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = pair(env, "--json", *args)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


async def connect_like_a_phone(url: str, **kw: Any) -> Client:
    """What an app does with the scanned URL: connect to it, send the token in hello."""
    parts = urlsplit(url)
    return await Client.open(f"{parts.scheme}://{parts.netloc}{parts.path}", token_of(url), **kw)


def test_pair_without_a_daemon_shows_the_configured_address(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home", config="[server]\nport = 9911\n")
    data = pair_json(d.env)
    token = (d.config_dir / "token").read_text().strip()
    assert stat.S_IMODE((d.config_dir / "token").stat().st_mode) == 0o600
    assert len(token) >= 43  # 256 bits, URL-safe base64
    assert data["url"] == f"ws://127.0.0.1:9911/v1/ws?token={token}"
    assert data["web"] == f"http://127.0.0.1:9911/#token={token}"
    assert (data["tls"], data["rotated"]) == (False, False)

    text = pair(d.env)
    assert text.returncode == 0
    out = text.stdout
    assert "the daemon is not running" in out
    assert data["url"] in out.splitlines()
    assert qr_text(data["url"]) in out  # the QR code encodes exactly the URL
    # ... and says plainly that a phone cannot reach a loopback address, and what to do
    assert data["loopback"] is True
    assert "127.0.0.1 is this computer only" in out and "a phone cannot" in out
    assert "tls_cert" in out and "Tailscale, WireGuard" in out and "docs/remote-access.md" in out
    # --host: the name the phone uses (the one on a certificate, a VPN address)
    named = pair_json(d.env, "--host", "box.tail1234.ts.net")
    assert named["url"] == f"ws://box.tail1234.ts.net:9911/v1/ws?token={token}"
    assert named["loopback"] is False
    assert qr_text(data["url"]) not in pair(d.env, "--no-qr").stdout


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


async def test_lan_listener_with_tls_pairs_over_wss_on_the_lan_address(
    daemon_factory: Any, tls_files: tuple[Path, Path]
) -> None:
    cert, key = tls_files
    config = f'[server]\nhost = "0.0.0.0"\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    d: DaemonProcess = daemon_factory(config=config).start()
    data = pair_json(d.env)
    parts = urlsplit(data["url"])
    assert parts.scheme == "wss" and data["tls"] is True
    assert parts.port == d.port and parts.path == "/v1/ws"
    assert data["web"].startswith(f"https://{parts.hostname}:{d.port}/#token=")
    host = ipaddress.ip_address(parts.hostname or "")
    if lan_address() is not None:
        assert not host.is_loopback and not host.is_unspecified, data
        assert data["loopback"] is False
        assert "this computer only" not in pair(d.env, "--no-qr").stdout
    # The URL works as printed, and the certificate matches the host in it.
    ctx = ssl.create_default_context(cafile=str(cert))
    c = await connect_like_a_phone(data["url"], ssl=ctx)
    assert (await c.request("ping")) == {}
    await c.close()


async def test_rotate_disconnects_old_clients(daemon: DaemonProcess) -> None:
    before = pair_json(daemon.env)
    assert urlsplit(before["url"]).port == daemon.port  # the running daemon's real port
    old = await connect_like_a_phone(before["url"])

    after = pair_json(daemon.env, "--rotate", "--no-qr")
    assert after["rotated"] is True
    new_token = token_of(after["url"])
    assert new_token != token_of(before["url"])
    token_file = daemon.config_dir / "token"
    assert token_file.read_text().strip() == new_token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    closed = await old.next_push(timeout=10)
    assert closed == {"t": "_closed", "code": 4401}

    with pytest.raises(ConnectionError, match="4401"):
        await connect_like_a_phone(before["url"])
    fresh = await connect_like_a_phone(after["url"])
    assert (await fresh.request("ping")) == {}
    await fresh.close()


def test_rotate_text_output(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")
    first = pair_json(d.env)
    out = pair(d.env, "--rotate", "--no-qr").stdout
    assert "A new token was made" in out
    assert token_of(first["url"]) not in out


async def test_lan_without_tls_needs_insecure_and_pairs_over_ws(
    daemon_factory: Any, tmp_path: Path
) -> None:
    refused = DaemonProcess(tmp_path / "refused", args=["--host", "0.0.0.0"])
    with pytest.raises(RuntimeError):
        refused.start(timeout=30)
    assert refused.proc is not None and refused.proc.returncode == 2
    assert "refusing to listen on 0.0.0.0 without TLS" in refused.log_text()

    d: DaemonProcess = daemon_factory(args=["--host", "0.0.0.0", "--insecure"]).start()
    assert "insecure_bind" in d.log_text()
    data = pair_json(d.env)
    parts = urlsplit(data["url"])
    assert (parts.scheme, data["tls"], parts.port) == ("ws", False, d.port)
    if lan_address() is not None:
        assert parts.hostname == lan_address()
    c = await connect_like_a_phone(data["url"])
    assert (await c.request("ping")) == {}
    await c.close()
