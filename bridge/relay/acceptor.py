"""Listening sockets accepted one connection at a time, by the front door itself.

asyncio's own servers accept up to a backlog's worth of connections at each wake-up before
any of them reaches the code that could refuse it, so a crowd of silent sockets takes every
descriptor first; out of descriptors, asyncio reports each failed accept to the loop's error
handler. Here each accepted socket is handed to ``take`` at once (the front door closes it
there when it is past its bounds), and a failed accept is said once in a while and waited
out, a little longer each time, instead of being tried again at once.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Any

from bridge.logs import get_logger
from bridge.util.logthrottle import Throttle

log = get_logger("bridge.relay.door")

#: the kernel's queue of connections not yet accepted
BACKLOG = 1024
#: after a failed accept: the first pause, doubled at each failure up to the last
PAUSE_FIRST_S = 0.05
PAUSE_MOST_S = 1.0

#: what a process out of descriptors (its own, the system's) or buffers gets
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

Take = Callable[[socket.socket, Any], None]


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Non-blocking sockets listening on every address ``host`` names ("" or "0.0.0.0": all
    IPv4 ones), as asyncio's create_server makes them."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            made.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in made:
            sock.close()
        raise
    return made


async def accept_forever(listener: socket.socket, take: Take, throttle: Throttle) -> None:
    """Each connection on ``listener`` to ``take(socket, peer)``, until cancelled."""
    loop = asyncio.get_running_loop()
    pause = 0.0
    while True:
        try:
            conn, peer = await loop.sock_accept(listener)
        except (ConnectionAbortedError, InterruptedError):
            continue  # gone before it was accepted
        except OSError as exc:
            # out of descriptors (EMFILE, ENFILE) or buffers: the connection waits in the
            # kernel's queue while others close
            pause = min(PAUSE_MOST_S, max(PAUSE_FIRST_S, pause * 2))
            left_out = throttle.take(("accept", exc.errno))
            if left_out is not None:
                log.error(
                    "relay_door_accept_failed",
                    port=listener.getsockname()[1],
                    error=f"{errno.errorcode.get(exc.errno or 0, '')} {exc.strerror}".strip(),
                    pause_s=pause,
                    left_out=max(left_out, 0),
                )
            await asyncio.sleep(pause)
            continue
        pause = 0.0
        take(conn, peer)
