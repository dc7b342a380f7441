"""A synthetic agent for benchmarks: emits text blocks as fast as it is asked to.

This file is an ordinary external adapter: the benchmark copies it into the daemon's adapters
directory (``$XDG_CONFIG_HOME/agent-bridge/adapters/``), where the loader picks it up like any
drop-in adapter. It imports nothing but the public adapter API and the standard library.

A message is a JSON object (anything else streams 10 blocks):
``{"n": 10000, "rate": 0, "size": 64}`` streams ``n`` text deltas of ``size`` bytes,
``rate`` per second (0 = as fast as the daemon takes them), then ``done`` and ``session_end``.
Every delta starts with the system-wide monotonic clock in nanoseconds at the moment it is
yielded (20 digits and a space), so a client on the same machine can measure the latency from
adapter yield to client receive.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from bridge.adapters.base import BaseAdapter, DetectedAgent
from bridge.blocks import AgentInfoBlock, Block, SessionEndBlock, TextBlock

STAMP_DIGITS = 20


class SyntheticAdapter(BaseAdapter):
    agent_id = "synthetic"
    display_name = "Synthetic load (benchmarks)"
    cli_binary = None
    doc = (
        "# Synthetic load\n\n**Use when** benchmarking the daemon: it streams as many text "
        "blocks as asked, as fast as asked.\n\n**Don't use when** you want an answer."
    )
    cap_interrupt = True
    provides_models = False
    provides_usage = False
    handoff = "none"

    def __init__(self, cwd: str | None = None) -> None:
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._stop = False

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        return DetectedAgent(available=True, version="1")

    async def start(self, session_id: str) -> AgentInfoBlock:
        return self.make_agent_info(name=self.display_name, version="1")

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        self._stop = False
        await self._inbox.put(text)

    async def interrupt(self) -> None:
        self._stop = True

    async def stop(self) -> None:
        self._stop = True

    async def stream(self) -> AsyncIterator[Block]:
        text = await self._inbox.get()
        try:
            spec = json.loads(text)
        except ValueError:
            spec = {}
        if not isinstance(spec, dict):
            spec = {}
        n = int(spec.get("n", 10))
        rate = float(spec.get("rate", 0))
        pad = "x" * max(0, int(spec.get("size", 64)) - STAMP_DIGITS - 1)
        msg_id = uuid.uuid4().hex
        clock = time.monotonic_ns
        start = clock()
        interval = int(1e9 / rate) if rate > 0 else 0
        for i in range(n):
            if self._stop:
                yield TextBlock(id=msg_id, done=True)
                yield SessionEndBlock(reason="interrupted")
                return
            if interval:
                wait = start + i * interval - clock()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
            yield TextBlock(id=msg_id, text=f"{clock():020d} {pad}")
        yield TextBlock(id=msg_id, done=True)
        yield SessionEndBlock(reason="completed")
