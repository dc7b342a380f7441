"""A fixed kernel send buffer for accepted connections.

Linux grows a TCP socket's send buffer by itself (autotuning, up to ``net.ipv4.tcp_wmem``'s
maximum, 4 MiB by default) while the peer's window allows it; on loopback a client that has
stopped reading still lets the daemon write megabytes into the kernel before its socket takes
nothing more, and the daemon frames and writes every one of those events as for a reader.
Setting ``SO_SNDBUF`` fixes the size (and turns autotuning off for that socket), so a
non-reader's socket is full after ``limits.socket_send_buffer`` (doubled by the kernel for its
bookkeeping): from then on its events only wait in the connection's outbox, which is cheap,
until the outbox overflows and the connection is closed with 4408.
"""

from __future__ import annotations

import socket
from typing import Any

from bridge.logs import get_logger

log = get_logger("bridge.sockbuf")


def fix_send_buffer(transport: Any, size: int) -> None:
    """Give the transport's socket a send buffer of ``size`` bytes; harmless where the
    platform or the socket refuses (the buffer then stays as the kernel sizes it)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError as exc:
        log.debug("send_buffer_not_set", error=str(exc))
