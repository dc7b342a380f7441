"""Wait for changes in one directory through Linux inotify on the event loop: no thread, no
polling step, so a directory where nothing happens costs no wakeup at all.

``watchfiles`` (used where inotify is unavailable) runs a thread that wakes every ``step``
milliseconds to look for events and the stop flag; for a daemon that should cost nothing while
idle that was most of its wakeups (docs/benchmarks.md, T8).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: Anything that can change what a directory's files hold or which files it has.
CHANGES = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
)
_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_HEADER = struct.Struct("iIII")


class WatchUnavailable(OSError):
    """inotify cannot be used here (not Linux, no watches left, a filesystem without it)."""


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if not sys.platform.startswith("linux"):
        raise WatchUnavailable("inotify is Linux only")
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError as exc:
            raise WatchUnavailable(f"no libc: {exc}") from None
    return _libc


class DirWatch:
    """One inotify watch on ``path`` (a directory), read through the running loop."""

    def __init__(self, path: Path, mask: int = CHANGES) -> None:
        libc = _lib()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise WatchUnavailable(err, f"inotify_init1: {os.strerror(err)}")
        wd = libc.inotify_add_watch(fd, os.fsencode(path), mask | IN_ONLYDIR | _GONE)
        if wd < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise WatchUnavailable(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        self.path = path
        self._fd = fd
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._ready.set)
        #: the directory itself was deleted or moved: the watch has ended
        self.gone = False

    def drain(self) -> bool:
        """Read every pending event; True if there was one."""
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            except OSError:
                self.gone = True
                return True
            if not data:
                return seen
            seen = True
            offset = 0
            while offset + _HEADER.size <= len(data):
                _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                if mask & _GONE:
                    self.gone = True
                offset += _HEADER.size + length

    async def changed(self, timeout: float | None = None) -> bool:
        """Wait for the next change (True), or ``timeout`` seconds without one (False)."""
        while not self.gone:
            if self.drain():
                return True
            self._ready.clear()
            if timeout is None:
                await self._ready.wait()
            else:
                try:
                    await asyncio.wait_for(self._ready.wait(), timeout)
                except TimeoutError:
                    return self.drain()
        return True

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DirWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def nearest_existing(path: Path) -> Path:
    """``path`` or the closest ancestor that exists as a directory."""
    here = path
    while not here.is_dir() and here.parent != here:
        here = here.parent
    return here
