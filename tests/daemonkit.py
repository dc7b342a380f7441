"""What the tests of a real daemon share beyond tests/daemon.py: a daemon for a fixture, a
``bridge`` command run as a user runs it, a drop-in adapter installed in a daemon's home, a
session opened and subscribed, an attachment, a hello over the Unix socket, and one visit of a
client on a bad network."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import unix_connect

from tests.daemon import ROOT, DaemonProcess
from tests.rawws import RawWebSocket
from tests.wsclient import Client


def running(d: DaemonProcess) -> Iterator[DaemonProcess]:
    """``d`` started, for a fixture to ``yield from``; stopped afterwards."""
    d.start()
    try:
        yield d
    finally:
        d.stop()


def bridge_argv(*args: str) -> list[str]:
    """The command line of ``agent-bridge ARGS`` from this tree."""
    return [sys.executable, "-m", "bridge", *args]


def run_bridge(*args: str, timeout: float = 60, **run: Any) -> subprocess.CompletedProcess[str]:
    """``agent-bridge ARGS`` run from the repository root, its output captured as text; ``run``:
    more of ``subprocess.run``'s options (``env``, ``check``)."""
    return subprocess.run(
        bridge_argv(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, **run
    )


def dropin_dir(home: Path) -> Path:
    """The drop-in adapters directory of a daemon home (``DaemonProcess(home)``), made 0700."""
    path = home / "config" / "agent-bridge" / "adapters"
    path.mkdir(parents=True, mode=0o700, exist_ok=True)
    return path


def install_dropin(home: Path, filename: str, source: str) -> Path:
    """``source`` as a drop-in adapter of the daemon home, 0600 whatever the umask (the loader
    checks modes)."""
    path = dropin_dir(home) / filename
    path.write_text(source)
    path.chmod(0o600)
    return path


async def subscribed_session(c: Client, cwd: Path, agent: str = "demo") -> str:
    """A new session of ``agent`` in ``cwd``, subscribed from its start; its id."""
    result = await c.request("session.create", agent=agent, cwd=str(cwd))
    session = str(result["session"]["session"])
    await c.request("session.subscribe", session=session)
    return session


async def unix_hello(d: DaemonProcess) -> None:
    """A hello over the daemon's Unix socket (no token needed there) is answered ``ok``."""
    sock = d.home / "run" / "agent-bridge" / "bridge.sock"
    async with unix_connect(
        str(sock),
        uri="ws://localhost/v1/ws",
        subprotocols=["bridge.v1.json"],  # type: ignore[list-item]
    ) as ws:
        await ws.send(json.dumps({"t": "hello", "id": 1, "protocol": 1}))
        assert json.loads(await ws.recv())["t"] == "ok"


def free_port() -> int:
    """A port nothing listens on (the kernel's pick of a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flap_once(port: int, token: str, session: str, after_seq: int, reads: int) -> None:
    """A client on a bad network: hello, subscribe from ``after_seq``, read up to ``reads``
    frames, then drop the TCP connection with data still unread (no close frame)."""
    raw = RawWebSocket(port)
    raw.send_json({"t": "hello", "id": 1, "protocol": 1, "token": token})
    raw.recv_json()
    raw.send_json({"t": "session.subscribe", "id": 2, "session": session, "after_seq": after_seq})
    for _ in range(reads):
        try:
            raw.recv_json()
        except (ConnectionError, OSError):
            break
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raw.close()


def text_attachment(name: str, data: bytes) -> dict[str, str]:
    """A ``text/plain`` attachment of ``session.send``, as a client sends it."""
    return {"name": name, "mime": "text/plain", "data": base64.b64encode(data).decode()}


async def seed_history(d: DaemonProcess, cwd: Path, total: int, block: int = 64 * 1024) -> str:
    """A session of the demo agent in ``d``'s store (before ``d`` starts) whose history holds
    ``total`` bytes of text blocks of ``block`` bytes each, written straight to the store: a
    long past in a second, where a turn would take minutes. Its id."""
    import asyncio
    import time

    from bridge.store.records import SessionRecord, StoredEvent
    from bridge.store.store import SqliteStore

    session = "s_seeded"
    count = max(1, total // block)
    text = "x" * block

    d.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = SqliteStore(d.state_dir / "bridge.sqlite3")
    store.open(asyncio.get_running_loop())
    try:
        now = time.time()
        store.save_session(
            SessionRecord(
                id=session,
                agent="demo",
                cwd=str(cwd),
                title="seeded",
                created_at=now,
                updated_at=now,
                last_seq=count,
            )
        )
        for seq in range(1, count + 1):
            body = json.dumps({"type": "text", "id": f"m{seq}", "text": text, "done": True})
            ts = "2026-01-01T00:00:00.000Z"
            store.append_event(StoredEvent(session, seq, ts, body.encode(), now))
            if seq % 256 == 0:
                await store.flush()
        await store.flush()
    finally:
        await store.close()
    return session


def make_certificate(where: Path, more: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and the LAN address, and the ``more``
    subjectAltName entries such as ``IP:127.0.0.2``) and its key (0600); the calling test is
    skipped without openssl."""
    from bridge.server.pairing import lan_address

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = where / "cert.pem", where / "key.pem"
    names = ["IP:127.0.0.1"] + ([f"IP:{lan_address()}"] if lan_address() else []) + list(more)
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=agent-bridge-test",
            "-addext",
            "subjectAltName=" + ",".join(names),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    key.chmod(0o600)
    return cert, key


async def history(d: DaemonProcess, session: str) -> list[dict[str, Any]]:
    """Every event of ``session`` so far, from a subscription of its own."""
    c = await Client.open(d.url, d.token)
    try:
        sub = await c.request("session.subscribe", session=session)
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["seq"] < sub["last_seq"]:
            frame = await c.next_push(15)
            if frame.get("t") == "event" and frame.get("session") == session:
                frames.append(frame)
    finally:
        await c.close()
    return frames


async def user_texts(d: DaemonProcess, session: str, count: int) -> list[str]:
    """The session's user messages once ``count`` turns have ended (30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        frames = await history(d, session)
        ends = [f for f in frames if f["block"]["type"] == "session_end"]
        if len(ends) >= count or time.monotonic() > deadline:
            return [f["block"]["text"] for f in frames if f["block"]["type"] == "user"]
        await asyncio.sleep(0.2)
