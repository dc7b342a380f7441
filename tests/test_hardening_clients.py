"""Slow and vanished clients: a phone on a bad network must not hurt the agent or anyone else.

Clients that stop reading, that vanish without a close, and that reconnect in a loop share a
daemon with a well-behaved client while a fast session streams. The well-behaved client gets
every event in order, the agent finishes every turn, dead connections are reaped by ping/pong
timeouts, and the daemon's memory and open files come back to where they were.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path
from typing import Any

from bench.procstats import open_fds, rss_kib
from tests.daemon import DaemonProcess
from tests.daemonkit import flap_once, subscribed_session
from tests.rawws import RawWebSocket
from tests.wsclient import Client, blocks

#: pings often, so vanished clients are found soon; a pong may take 5 s, so the healthy client
#: is not cut off when a loaded machine keeps the test's event loop from answering at once
CONFIG = """
[server]
ping_interval = 0.5
ping_timeout = 5.0
unix_socket = "off"
[limits]
send_queue_frames = 300
[agents.demo]
options = { delay = 0.0002, chunk = 400 }
"""


def _pid(d: DaemonProcess) -> int:
    assert d.proc is not None
    return d.proc.pid


async def _wait_fds(d: DaemonProcess, at_most: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        now = open_fds(_pid(d))
        if now <= at_most or time.monotonic() > deadline:
            return now
        await asyncio.sleep(0.1)


def _silent_client(port: int, token: str, session: str | None) -> RawWebSocket:
    """Says hello (and subscribes), then never reads again and never answers a ping."""
    raw = RawWebSocket(port)
    raw.send_json({"t": "hello", "id": 1, "protocol": 1, "token": token})
    assert raw.recv_json()["t"] == "ok"
    if session is not None:
        raw.send_json({"t": "session.subscribe", "id": 2, "session": session})
    return raw


def _flapping_client(port: int, token: str, session: str, stop: threading.Event, seed: int) -> int:
    """Reconnects in a loop, each time reading a little, then drops the TCP connection."""
    rng = random.Random(seed)
    done = 0
    while not stop.is_set():
        flap_once(port, token, session, rng.randrange(0, 50), rng.randrange(0, 5))
        done += 1
    return done


async def test_vanished_clients_are_reaped_by_ping_timeout(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="demo", cwd=str(project)))["session"][
        "session"
    ]
    await asyncio.sleep(0.5)
    before = open_fds(_pid(d))
    ghosts = [_silent_client(d.port, d.token, session if i % 2 else None) for i in range(20)]
    assert open_fds(_pid(d)) >= before + 20
    # Nobody closed anything: only the keepalive can notice they are gone.
    left = await _wait_fds(d, before)
    assert left <= before, f"{left - before} dead connections still open"
    # The healthy client, which answers pings, is still connected and served.
    assert await c.request("ping") == {}
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="echo still served")
    frames = await c.turn(session)
    assert "still served" in "".join(b.get("text", "") for b in blocks(frames, "text"))
    for g in ghosts:
        g.close()
    await c.close()


async def test_slow_vanished_and_flapping_clients_leave_the_rest_unaffected(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    good = await Client.open(d.url, d.token)
    session = await subscribed_session(good, project)
    # Warm-up turn, then the reference point for memory and files.
    await good.request("session.send", session=session, text="echo " + "w" * 200_000)
    await good.turn(session)
    await asyncio.sleep(0.5)
    rss_before = rss_kib(_pid(d))
    fds_before = open_fds(_pid(d))

    stop = threading.Event()
    flappers = [
        asyncio.create_task(asyncio.to_thread(_flapping_client, d.port, d.token, session, stop, i))
        for i in range(2)
    ]
    stalled: list[RawWebSocket] = []
    frames: list[dict[str, Any]] = []
    turns = 20
    rss_mid = 0
    for i in range(turns):
        # A new client stalls during every turn; the keepalive or the queue limit cuts it.
        stalled.append(_silent_client(d.port, d.token, session))
        # 500 events and 0.2 MB of text per turn.
        await good.request("session.send", session=session, text=f"echo {i} " + "x" * 200_000)
        frames += await good.turn(session, timeout=120)
        if i == turns // 2:
            rss_mid = rss_kib(_pid(d))
    rss_end = rss_kib(_pid(d))
    stop.set()
    assert min(await asyncio.gather(*flappers)) > 10

    # The well-behaved client got every event, gapless, and every turn completed.
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    ends = blocks(frames, "session_end")
    assert len(ends) == turns and all(e["reason"] == "completed" for e in ends)
    # The stalled ones were cut off (4408 after their queue filled, or by the keepalive),
    # and writing to dead sockets did not flood the log.
    assert "socket.send() raised exception" not in d.log_text()
    for raw in stalled:
        code = await asyncio.to_thread(raw.close_code)
        assert code in (4408, 1011, None), code
        raw.close()

    # Nothing of the dead and flapping connections is left behind.
    left = await _wait_fds(d, fds_before)
    assert left <= fds_before, f"{left - fds_before} connections leaked"
    print(f"RSS KiB before {rss_before}, mid {rss_mid}, end {rss_end}")
    # Memory grew once (buffers of the dead and replays of the flapping), then stayed put.
    assert rss_end - rss_mid < 10 * 1024, (rss_before, rss_mid, rss_end)
    assert await good.request("ping") == {}
    await good.close()


async def test_subscribing_mid_stream_never_duplicates_or_skips(
    daemon_factory: Any, project: Path
) -> None:
    """Replay hands over to live delivery while the store commits concurrently."""
    d: DaemonProcess = daemon_factory(
        config='[agents.demo]\noptions = { delay = 0, chunk = 3 }\n[server]\nunix_socket = "off"\n'
    ).start()
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="demo", cwd=str(project)))["session"][
        "session"
    ]
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="echo " + "y" * 60_000)
    rng = random.Random(7)
    checked = 0
    last = 1
    while True:
        # Join at a random recent point while the turn streams ~20,000 events.
        late = await Client.open(d.url, d.token)
        after = max(0, last - rng.randrange(0, 2000))
        got = await late.request("session.subscribe", session=session, after_seq=after)
        frames = await late.events_until(lambda b: True, session=session) + await late.events_until(
            lambda b: b["type"] == "session_end" or rng.random() < 0.002, session=session
        )
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(after + 1, after + 1 + len(seqs))), (after, seqs[:20])
        last = max(last, got["last_seq"], seqs[-1])
        checked += 1
        await late.close()
        if frames[-1]["block"]["type"] == "session_end":
            break
    assert checked >= 3
    await c.close()
