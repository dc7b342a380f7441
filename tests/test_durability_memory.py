"""Memory is bounded in bytes; a client that stopped reading is cut off, never waited for.

Real daemon, real sockets: a subscriber that never reads its socket while a turn streams
large blocks. It is closed with 4408 once its queue holds ``limits.send_queue_bytes``, or once
its socket has taken nothing for ``limits.write_stall_s``; the client that reads gets the whole
turn either way.
"""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from bench.procstats import rss_kib
from tests.daemon import DaemonProcess
from tests.daemonkit import seed_history
from tests.rawws import RawWebSocket
from tests.wsclient import Client

MiB = 1024 * 1024


async def _turn_with_a_non_reader(
    d: DaemonProcess, project: Path, text: str
) -> asyncio.Future[int | None]:
    """Run a turn that a second subscriber does not read; the close code that subscriber
    reads once the daemon has cut it off."""
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="demo", cwd=str(project)))["session"][
        "session"
    ]
    stuck = RawWebSocket(d.port)
    stuck.send_json({"t": "hello", "id": 1, "protocol": 1, "token": d.token})
    stuck.send_json({"t": "session.subscribe", "id": 2, "session": session})
    await asyncio.sleep(0.3)
    await c.request("session.send", session=session, text=text)
    # It reads again only once it was cut off (reading earlier is progress), and at once then:
    # the close frame waits behind what its buffers hold for a bounded time only.
    code = asyncio.get_running_loop().run_in_executor(None, _close_code_once_cut_off, d, stuck)
    for _ in range(600):  # the turn runs to its end, the non-reader notwithstanding
        listed = (await c.request("sessions.list", include_external=False))["sessions"]
        if listed[0]["state"] == "idle" and listed[0]["queued"] == 0:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the turn never ended")
    await asyncio.sleep(1.0)  # its last events reach the disk (idle is set before they do)
    # A reader replaying the turn (replays wait for the reader, they are never cut off).
    await c.request("session.subscribe", session=session)
    frames = await c.turn(session, timeout=120)
    said = "".join(f["block"].get("text") or "" for f in frames if f["block"]["type"] == "text")
    assert len(said) >= len(text) - 5, "the turn is not whole"
    await c.close()
    return code


def _close_code(ws: RawWebSocket) -> int | None:
    ws.sock.settimeout(30)
    return ws.close_code(limit=10_000_000)


def _close_code_once_cut_off(d: DaemonProcess, ws: RawWebSocket) -> int | None:
    deadline = time.monotonic() + 120
    while not _cut_off(d.log_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        return _close_code(ws)
    finally:
        ws.close()


def _cut_off(log: str) -> bool:
    return "client_too_slow" in log or "client_stalled" in log


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        ("send_queue_bytes = 1048576\nwrite_stall_s = 600", "bytes"),
        ("write_stall_s = 2", "stall"),
    ],
)
async def test_a_client_that_stops_reading_is_cut_off(
    daemon_factory: Any, project: Path, limits: str, why: str
) -> None:
    d: DaemonProcess = daemon_factory(
        config="[agents.demo]\noptions = { delay = 0.0, chunk = 65536 }\n"
        f'[server]\nunix_socket = "off"\n[limits]\n{limits}\n'
    ).start()
    started = time.monotonic()
    # 12 MiB in 64 KiB blocks: under 200 frames, far under send_queue_frames.
    code = await _turn_with_a_non_reader(d, project, "echo " + "x" * (12 * MiB))
    assert await code == 4408, f"{why}: closed with {await code}"
    assert time.monotonic() - started < 120
    assert ("client_stalled" if why == "stall" else "client_too_slow") in d.log_text()


async def test_history_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    import tracemalloc

    from bridge.store.records import StoredEvent
    from bridge.store.store import SqliteStore

    store = SqliteStore(tmp_path / "bridge.sqlite3")
    store.open(asyncio.get_running_loop())
    try:
        big = b'{"type":"text","id":"m","text":"' + b"x" * MiB + b'","done":false}'
        for seq in range(1, 41):  # 40 MiB of history, committed in one batch
            store.append_event(StoredEvent("s1", seq, "2026-01-01T00:00:00.000Z", big))
        await store.flush()
        tracemalloc.start()
        first = await store.read_events("s1", 0, 1000)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert 1 <= len(first) <= 8, f"one read returned {len(first)} MiB of history"
        assert peak < 16 * MiB, f"one read held {peak / MiB:.0f} MiB"
        seen = [e.seq for e in first]
        while batch := await store.read_events("s1", seen[-1], 1000):
            seen += [e.seq for e in batch]
        assert seen == list(range(1, 41))
    finally:
        await store.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_queued_message_bodies_wait_on_disk(daemon_factory: Any, project: Path) -> None:
    d: DaemonProcess = daemon_factory(config='[server]\nunix_socket = "off"\n').start()
    assert d.proc is not None
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="demo", cwd=str(project)))["session"][
        "session"
    ]
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="tour")  # waits for a permission
    frames = await c.events_until(lambda b: b["type"] == "permission_request", session=session)
    request_id = frames[-1]["block"]["id"]
    await asyncio.sleep(0.5)
    before = _rss_mib(d.proc.pid)
    for i in range(10):  # 40 MiB waiting behind the turn
        got = await c.request("session.send", session=session, text=f"fail {i} " + "q" * 4 * MiB)
        assert got == {"queued": True}
    await c.request("session.send", session=session, text="echo the last one")
    await asyncio.sleep(1.0)
    grown = _rss_mib(d.proc.pid) - before
    assert grown < 20, f"RSS grew {grown:.0f} MiB for 40 MiB of queued messages"
    # They run, in order, with their whole text, once the turn goes on.
    await c.request("session.permission", session=session, request_id=request_id, option_id="allow")
    said = await c.events_until(
        lambda b: b["type"] == "user" and b["text"] == "echo the last one",
        timeout=120,
        session=session,
    )
    said += await c.turn(session)
    assert "You said: the last one" in "".join(
        f["block"].get("text") or "" for f in said if f["block"]["type"] == "text"
    )
    users = [f["block"]["text"] for f in said if f["block"]["type"] == "user"]
    assert [u[:7] for u in users] == [f"fail {i} "[:7] for i in range(10)] + ["echo th"]
    assert all(len(u) == len(f"fail {i} ") + 4 * MiB for i, u in enumerate(users[:10]))
    await c.close()


def _bytes_until_close(ws: RawWebSocket) -> tuple[int, int | None]:
    """Payload bytes the daemon wrote to this socket before its close frame, and the code."""
    ws.sock.settimeout(30)
    got = 0
    while True:
        try:
            op, payload = ws.recv_frame()
        except (ConnectionError, OSError):
            return got, None
        if op == 8:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
            return got, code
        got += len(payload)


async def test_a_non_reader_is_not_written_megabytes() -> None:
    """The kernel's send buffer is fixed (limits.socket_send_buffer): a client that stopped
    reading stops taking bytes after a few hundred KiB, so the daemon stops framing and
    writing events for it early; they wait in its outbox until that overflows (4408). With the
    kernel's autotuning the same client took 4 MiB and more on loopback first, every event of
    them framed and written as for a reader (20 such clients paced a turn, issue 15 item 8)."""
    from bench.targets import DaemonTarget

    target = await DaemonTarget(
        store="memory",
        config='[server]\nunix_socket = "off"\n'
        "[limits]\nsend_queue_bytes = 1048576\nwrite_stall_s = 600\n",
    ).start()
    try:
        c = await target.client()
        session = await target.new_session(c)
        stuck = RawWebSocket(target.port)
        stuck.send_json({"t": "hello", "id": 1, "protocol": 1, "token": target.token})
        stuck.send_json({"t": "session.subscribe", "id": 2, "session": session})
        await asyncio.sleep(0.3)
        # 20,000 blocks of 1,000 bytes (20 MB), as fast as the daemon takes them.
        await target.stream(c, session, 20_000, 0, 1000, 1)
        for _ in range(600):
            listed = (await c.request("sessions.list", include_external=False))["sessions"]
            if listed[0]["state"] == "idle":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the turn never ended")
        await c.close()
        loop = asyncio.get_running_loop()
        got, code = await loop.run_in_executor(None, _bytes_until_close, stuck)
        stuck.close()
    finally:
        target.stop()
    assert code == 4408, f"closed with {code}"
    # 2 x 256 KiB in the daemon's kernel buffer, ~128 KiB in the client's (it never read),
    # up to 256 KiB in the daemon's transport buffer, one frame in flight.
    assert got < 1.5 * MiB, f"the daemon wrote {got / MiB:.1f} MiB to a client that never read"


async def test_a_replay_to_clients_that_never_read_is_cut_off(
    daemon_factory: Any, project: Path
) -> None:
    """Issue 25, item 1: five clients subscribe from the start of a long history and read
    nothing. Each is closed with 4408 once its socket has taken nothing for write_stall_s, and
    its connection is gone a few seconds later even though it never reads the close frame;
    the replays meanwhile hold a bounded amount of memory. (They stayed connected for as long
    as one cared to wait: the close waited for room in a socket nobody read.)"""
    stall_s = 3
    d: DaemonProcess = daemon_factory(
        config=f'[server]\nunix_socket = "off"\n[limits]\nwrite_stall_s = {stall_s}\n'
    )
    session = await seed_history(d, project, 40 * MiB)
    d.start()
    assert d.proc is not None
    started = time.monotonic()
    clients = []
    for _ in range(6):
        raw = RawWebSocket(d.port)
        raw.send_json({"t": "hello", "id": 1, "protocol": 1, "token": d.token})
        raw.send_json({"t": "session.subscribe", "id": 2, "session": session, "after_seq": 0})
        clients.append(raw)
    never, late = clients[:5], clients[5]
    peak = 0
    # Until the daemon has given up on all six (reading before that would be progress).
    while d.log_text().count("client_stalled") < 6 and time.monotonic() - started < stall_s + 8:
        peak = max(peak, rss_kib(d.proc.pid))
        await asyncio.sleep(0.1)
    # One of them reads again: what was queued before, then 4408.
    code = await asyncio.get_running_loop().run_in_executor(None, _close_code, late)
    assert code == 4408, f"closed with {code}"
    assert time.monotonic() - started < stall_s + 10
    while any(c.server_holds_it() for c in never) and time.monotonic() - started < stall_s + 10:
        peak = max(peak, rss_kib(d.proc.pid))
        await asyncio.sleep(0.2)
    held = sum(c.server_holds_it() for c in never)
    for c in clients:
        c.close()
    assert held == 0, f"{held} connections that read nothing still open {stall_s + 10} s on"
    assert "client_stalled" in d.log_text()
    assert peak / 1024 < 200, f"the daemon's RSS reached {peak / 1024:.0f} MiB"
