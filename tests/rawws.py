"""A deliberately bad WebSocket client on a raw socket: it can stop reading, or vanish.

The ``websockets`` client reads ahead into memory however slowly the test consumes frames,
so it cannot play a phone on a stalled network; this one only reads when told to.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any


class RawWebSocket:
    def __init__(self, port: int, *, path: str = "/v1/ws") -> None:
        # The default receive buffer (no autotuning while nothing is read) holds ~128 kB.
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: bridge.v1.json\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        self.status = int(head.split()[1])
        self._buf = b""

    def send_json(self, obj: dict[str, Any]) -> None:
        payload = json.dumps(obj).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def recv_frame(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next frame (unfragmented frames only)."""
        b1, b2 = self._read_exact(2)
        n = b2 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read_exact(8))[0]
        return b1 & 0x0F, self._read_exact(n)

    def recv_json(self) -> dict[str, Any]:
        while True:
            op, payload = self.recv_frame()
            if op == 1:
                return json.loads(payload)  # type: ignore[no-any-return]
            if op == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"close {code}")

    def close_code(self, limit: int = 200_000) -> int | None:
        """Read until the close frame (or EOF) and return its code."""
        for _ in range(limit):
            try:
                op, payload = self.recv_frame()
            except (ConnectionError, OSError):
                return None
            if op == 8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
        return None

    def close(self) -> None:
        self.sock.close()

    def server_holds_it(self) -> bool:
        """The server's end of this connection is still open (ESTABLISHED in /proc/net/tcp),
        read without reading the socket: what ``ss`` shows for the daemon."""
        client = self.sock.getsockname()
        server = self.sock.getpeername()

        def hexaddr(addr: tuple[str, int]) -> str:
            return f"{socket.inet_aton(addr[0])[::-1].hex().upper()}:{addr[1]:04X}"

        local, remote = hexaddr(server), hexaddr(client)
        with open("/proc/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if fields[1] == local and fields[2] == remote:
                    return fields[3] == "01"
        return False
