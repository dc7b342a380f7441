"""The baseline: a bare ``websockets`` server pushing pre-encoded event frames.

It speaks just enough of the bridge protocol for the benchmark clients (``hello``,
``session.subscribe``, and its own ``bench.run``), and pushes frames shaped exactly like the
daemon's ``event`` frames for the synthetic adapter, built before the clock starts; only the
20-digit send stamp is spliced in per frame. Fan-out uses ``websockets.broadcast`` with a wait
on the write buffers, the fastest way this stack has to put one frame on many sockets. It is
the ceiling the daemon is compared with.

Run as ``python -m bench.baseline``; it prints ``listening PORT``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve

WRITE_HIGH = 256 * 1024

subscribers: dict[str, list[ServerConnection]] = defaultdict(list)
changed = asyncio.Condition()


def _frame_parts(session: str, size: int) -> tuple[bytes, bytes]:
    pad = "x" * max(0, size - 21)
    ts = "2025-01-01T00:00:00.000Z"
    head = ('{"t":"event","session":' + json.dumps(session) + ',"seq":').encode()
    tail = (
        ',"ts":"' + ts + '","block":{"type":"text","id":"0123456789abcdef0123456789abcdef","text":"'
    ).encode()
    return head, tail + b"%s " + pad.encode() + b'","done":false}}'


async def _wait_writable(conns: list[ServerConnection]) -> None:
    for ws in conns:
        if ws.transport.get_write_buffer_size() > WRITE_HIGH:
            await ws.drain()


async def _run(session: str, n: int, rate: float, size: int, wanted: int) -> None:
    async with changed:
        await changed.wait_for(lambda: len(subscribers[session]) >= wanted)
    conns = list(subscribers[session])
    head, tail = _frame_parts(session, size)
    # Pre-encode: everything but the stamp (seq digits included) is built before the clock.
    frames = [head + str(i + 2).encode() + tail for i in range(n)]
    clock = time.monotonic_ns
    start = clock()
    interval = int(1e9 / rate) if rate > 0 else 0
    for i, frame in enumerate(frames):
        if interval:
            wait = start + i * interval - clock()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
        broadcast(conns, frame % (b"%020d" % clock()), text=True)
        if i % 64 == 63 or interval:
            await _wait_writable(conns)
    end = (
        head
        + str(n + 2).encode()
        + (
            b',"ts":"2025-01-01T00:00:00.000Z","block":{"type":"session_end","reason":"completed",'
            b'"exit_code":null,"agent_session_id":null}}'
        )
    )
    broadcast(conns, end, text=True)


def _ok(rid: Any, result: dict[str, Any]) -> str:
    return json.dumps({"t": "ok", "id": rid, "result": result}, separators=(",", ":"))


async def handler(ws: ServerConnection) -> None:
    mine: list[str] = []
    try:
        async for raw in ws:
            req: dict[str, Any] = json.loads(raw)
            method = req.get("t")
            rid = req.get("id")
            if method == "session.subscribe":
                session = str(req["session"])
                async with changed:
                    subscribers[session].append(ws)
                    mine.append(session)
                    changed.notify_all()
                await ws.send(_ok(rid, {"last_seq": 0}))
            elif method == "bench.run":
                await ws.send(_ok(rid, {}))
                asyncio.get_running_loop().create_task(
                    _run(
                        str(req["session"]),
                        int(req["n"]),
                        float(req.get("rate", 0)),
                        int(req.get("size", 64)),
                        int(req.get("subscribers", 1)),
                    )
                )
            else:
                await ws.send(_ok(rid, {}))
    except Exception:
        pass
    finally:
        for session in mine:
            if ws in subscribers[session]:
                subscribers[session].remove(ws)


async def main() -> None:
    async with serve(
        handler,
        "127.0.0.1",
        0,
        subprotocols=["bridge.v1.json"],  # type: ignore[list-item]
        max_queue=64,
        write_limit=WRITE_HIGH,
        ping_interval=None,
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"listening {port}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
