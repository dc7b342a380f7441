"""Soak: about a minute of mixed load, then the daemon must hold what it held mid-way.

Many sessions stream at once while clients reconnect with ``after_seq``, interrupt turns,
and drop their connections without a close. Every turn a client waited for ends exactly once
and arrives gapless; at the end the daemon's RSS and open file descriptors are within a small
margin of the middle of the run (a leak per turn or per connection would show as growth).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench.procstats import open_fds, rss_kib
from tests.daemon import DaemonProcess
from tests.daemonkit import flap_once, subscribed_session
from tests.wsclient import Client, blocks

pytestmark = pytest.mark.slow

SESSIONS = 12
CHATTERS = 8
INTERRUPTERS = 2
FLAPPERS = 2
WARMUP_S = 15.0
HALF_S = 25.0
#: a pong may take 5 s: a loaded machine does not cut off the soak's own clients
CONFIG = """
[server]
ping_interval = 1.0
ping_timeout = 5.0
unix_socket = "off"
[agents.demo]
options = { delay = 0.001, chunk = 30 }
"""


class Load:
    def __init__(self, d: DaemonProcess, sessions: list[str], stop: threading.Event) -> None:
        self.d = d
        self.sessions = sessions
        self.stop = stop
        self.turns = 0
        self.interrupts = 0
        self.reconnects = 0
        self.drops = 0

    async def chatter(self, seed: int) -> None:
        """Sends in one session at a time, reconnecting now and then with after_seq."""
        rng = random.Random(seed)
        session = self.sessions[seed % len(self.sessions)]
        c = await Client.open(self.d.url, self.d.token)
        last = (await c.request("session.subscribe", session=session))["last_seq"]
        # The replay of what was there before: skip it.
        while last:
            frame = await c.next_push()
            if frame["t"] == "event" and frame["seq"] >= last:
                break
        while not self.stop.is_set():
            text = "echo " + "".join(rng.choice("abcdef ") for _ in range(rng.randrange(50, 3000)))
            answer = await c.call(
                "session.send",
                session=session,
                text=text,
                client_msg_id=f"m{seed}-{self.turns}-{rng.random()}",
            )
            if answer["t"] == "err":  # the session's queue is full: back off
                assert answer["code"] == "rate_limited", answer
                await asyncio.sleep(0.2)
                continue
            frames = await c.events_until(
                lambda b, t=text: b["type"] == "user" and b["text"] == t, session=session
            )
            frames += await c.turn(session)
            seqs = [f["seq"] for f in frames]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
            last = seqs[-1]
            self.turns += 1
            if rng.random() < 0.3:
                # Reconnect: a new connection picks up right after the last event seen.
                await c.close()
                c = await Client.open(self.d.url, self.d.token)
                await c.request("session.subscribe", session=session, after_seq=last)
                self.reconnects += 1
        await c.close()

    async def interrupter(self, seed: int) -> None:
        rng = random.Random(seed)
        c = await Client.open(self.d.url, self.d.token)
        session = await subscribed_session(c, self.cwd)
        while not self.stop.is_set():
            await c.request("session.send", session=session, text="slow tour")
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            await c.request("session.interrupt", session=session)
            frames = await c.turn(session)
            ends = blocks(frames, "session_end")
            assert len(ends) == 1 and ends[0]["reason"] in ("interrupted", "completed"), ends
            self.interrupts += 1
        await c.close()

    def flapper(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            session = rng.choice(self.sessions)
            flap_once(self.d.port, self.d.token, session, 0, rng.randrange(0, 20))
            self.drops += 1
            time.sleep(rng.uniform(0, 0.05))

    cwd: Path = Path("/")


async def test_soak_mixed_load_keeps_memory_and_files_flat(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    assert d.proc is not None
    pid = d.proc.pid
    c = await Client.open(d.url, d.token)
    sessions = [
        (await c.request("session.create", agent="demo", cwd=str(project)))["session"]["session"]
        for _ in range(SESSIONS)
    ]
    stop = threading.Event()
    load = Load(d, sessions, stop)
    load.cwd = project
    tasks = [asyncio.create_task(load.chatter(i)) for i in range(CHATTERS)]
    tasks += [asyncio.create_task(load.interrupter(100 + i)) for i in range(INTERRUPTERS)]
    tasks += [
        asyncio.create_task(asyncio.to_thread(load.flapper, 200 + i)) for i in range(FLAPPERS)
    ]

    async def watch(seconds: float) -> None:
        # Fail fast if a worker died instead of waiting out the clock.
        done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            t.result()

    try:
        await watch(WARMUP_S + HALF_S)
        mid = (rss_kib(pid), open_fds(pid), load.turns)
        await watch(HALF_S)
        end = (rss_kib(pid), open_fds(pid), load.turns)
    finally:
        stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)

    counts = {k: getattr(load, k) for k in ("turns", "interrupts", "reconnects", "drops")}
    why = f"mid {mid}, end {end} (RSS KiB, fds, turns); {counts}"
    print(why)
    assert end[2] - mid[2] > 50 and load.interrupts > 10 and load.drops > 50, why
    assert load.reconnects > 10, why
    assert end[0] <= mid[0] * 1.10 + 4096, f"memory grew: {why}"
    assert end[1] <= mid[1] + 8, f"file descriptors grew: {why}"
    # Once the load stops, every connection's descriptor is released (a vanished flapper's
    # once the keep-alive finds it gone).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while open_fds(pid) > mid[1] and loop.time() < deadline:
        await asyncio.sleep(0.2)
    assert open_fds(pid) <= mid[1], why
    assert await c.request("ping") == {}
    await c.close()
