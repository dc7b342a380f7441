"""systemd's notify protocol: a few datagrams on ``$NOTIFY_SOCKET``, no dependency needed.

``READY=1`` once the daemon listens and its store is open, ``STATUS=`` with session counts,
``WATCHDOG=1`` at half of ``WATCHDOG_USEC``, and ``STOPPING=1`` at shutdown. Outside systemd
(no ``NOTIFY_SOCKET``) every call does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Mapping


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        if raw and raw.isdigit() and (not pid or pid == str(os.getpid())):
            usec = int(raw) or None
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        if self.address is None:
            return False
        target = self.address
        if target.startswith("@"):
            target = "\0" + target[1:]
        payload = "\n".join(fields).encode()
        with (
            contextlib.suppress(OSError),
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock,
        ):
            sock.sendto(payload, target)
            return True
        return False

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    async def run_watchdog(self, status: Callable[[], str]) -> None:
        """Ping the watchdog at half its interval; refresh STATUS along the way."""
        if self.address is None:
            return
        interval = self.watchdog_usec / 2_000_000 if self.watchdog_usec else 10.0
        last = ""
        while True:
            await asyncio.sleep(interval)
            text = status()
            fields = ["WATCHDOG=1"] if self.watchdog_usec else []
            if text != last:
                fields.append(f"STATUS={text}")
                last = text
            if fields:
                self.send(*fields)
