"""Following an append-only JSONL file that another process writes.

``LineSplitter`` and ``Dedupe`` are sans-I/O. ``FileTail`` is the thin I/O part: it reads what
was appended since the last call and notices when the file was truncated (offset past the
end) or replaced (another inode at the path: rotation, or an editor's atomic rename), draining
the old file first so nothing written before the switch is lost. ``changes()`` is the wake-up
signal: ``watchfiles`` (inotify) on the file's directory, with a slow safety tick, instead of
busy polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable
from pathlib import Path

import structlog

from bridge.util.dirwatch import DirWatch, WatchUnavailable

log = structlog.get_logger("bridge.handoff.tail")

#: A line longer than this is dropped whole (Claude's request snapshots can be megabytes; the
#: lines a mirror needs are far smaller).
MAX_LINE = 32 * 1024 * 1024
#: At most this much is read per ``FileTail.read`` call, so one call never stalls the loop long.
READ_CHUNK = 4 * 1024 * 1024


class LineSplitter:
    """Bytes in, complete lines out (without the newline); the partial last line is kept."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buf = bytearray()
        self._max = max_line
        self._dropping = False

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self._dropping:
                self._dropping = False
            else:
                self._buf += data[start:nl]
                if len(self._buf) <= self._max:
                    line = bytes(self._buf).rstrip(b"\r")
                    if line.strip():
                        lines.append(line)
            self._buf.clear()
            start = nl + 1
        rest = data[start:]
        if not self._dropping:
            self._buf += rest
            if len(self._buf) > self._max:
                self._buf.clear()
                self._dropping = True
        return lines

    def pending(self) -> bytes:
        """The partial last line (no newline yet); empty while dropping an oversized line."""
        return bytes(self._buf)

    def reset(self) -> None:
        self._buf.clear()
        self._dropping = False


class Dedupe:
    """Remembers the last ``limit`` keys; ``first(key)`` is True only the first time."""

    def __init__(self, limit: int = 50_000) -> None:
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._limit = limit

    def first(self, key: Hashable) -> bool:
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        return True

    def __contains__(self, key: Hashable) -> bool:
        return key in self._seen


class FileTail:
    """Reads what gets appended to ``path``.

    ``from_end``: skip what the file holds now (a mirror shows new activity only). A file that
    does not exist yet, or that replaces this one later, is read from its start.
    """

    def __init__(self, path: Path, *, from_end: bool = True, max_line: int = MAX_LINE) -> None:
        self.path = path
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self.offset = 0
        self.splitter = LineSplitter(max_line)
        self.rotations = 0
        self.truncations = 0
        if from_end:
            with contextlib.suppress(OSError):
                st = path.stat()
                self._ident = (st.st_dev, st.st_ino)
                self.offset = st.st_size

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        if ident != self._ident:
            if self._ident is not None:
                self.rotations += 1
            self._ident = ident
            self.offset = 0
            self.splitter.reset()
        self._fd = fd
        return True

    def _drain(self, limit: int) -> tuple[list[bytes], int]:
        assert self._fd is not None
        lines: list[bytes] = []
        total = 0
        while total < limit:
            chunk = os.pread(self._fd, min(1024 * 1024, limit - total), self.offset)
            if not chunk:
                break
            self.offset += len(chunk)
            total += len(chunk)
            lines.extend(self.splitter.feed(chunk))
        return lines, total

    def read(self, limit: int = READ_CHUNK) -> list[bytes]:
        """Complete lines appended since the last call (up to about ``limit`` bytes)."""
        if self._fd is None and not self._open():
            return []
        assert self._fd is not None
        st = os.fstat(self._fd)
        if st.st_size < self.offset:
            # Truncated in place: whatever is there now is new.
            self.truncations += 1
            self.offset = 0
            self.splitter.reset()
        lines, n = self._drain(limit)
        if n >= limit:
            return lines
        try:
            now = self.path.stat()
            replaced = (now.st_dev, now.st_ino) != self._ident
        except OSError:
            replaced = False  # gone for now: keep the old file until a new one appears
        if replaced:
            # The old file is drained; a partial line in it will never be finished.
            self.close()
            self.splitter.reset()
            if self._open():
                more, _ = self._drain(limit - n)
                lines.extend(more)
        return lines

    def at_eof(self) -> bool:
        try:
            return self._fd is None or os.fstat(self._fd).st_size <= self.offset
        except OSError:
            return True


def nearest_dir(path: Path) -> Path | None:
    """The closest existing directory at or above ``path``'s parent."""
    here = path.parent
    while True:
        if here.is_dir():
            return here
        if here.parent == here:
            return None
        here = here.parent


async def changes(
    target: Path,
    stop: asyncio.Event,
    *,
    tick: float = 2.0,
    debounce_ms: int = 30,
) -> AsyncIterator[None]:
    """Yields whenever ``target`` (a file) may have changed, and at least every ``tick`` s.

    Watches the nearest existing directory non-recursively (inotify on the event loop, so
    nothing wakes between changes but the ``tick``); when a deeper directory appears (the
    transcript's folder is created late) it moves the watch there. Falls back to
    ``watchfiles``, then to a ``tick`` poll, where inotify is unavailable.
    """
    while not stop.is_set():
        where = nearest_dir(target)
        if where is None:
            await _sleep_or_stop(stop, tick)
            yield None
            continue
        try:
            watch = DirWatch(where)
        except WatchUnavailable:
            async for _ in _changes_watchfiles(target, where, stop, tick, debounce_ms):
                yield None
            continue
        with watch:
            stopping = asyncio.ensure_future(stop.wait())
            try:
                while not stop.is_set() and not watch.gone:
                    waiting = asyncio.ensure_future(watch.changed(tick))
                    await asyncio.wait([waiting, stopping], return_when=asyncio.FIRST_COMPLETED)
                    if not waiting.done():
                        waiting.cancel()
                        with contextlib.suppress(BaseException):
                            await waiting
                        return
                    if waiting.result() and debounce_ms:
                        await asyncio.sleep(debounce_ms / 1000)
                        watch.drain()  # what came in meanwhile is part of this change
                    yield None
                    if nearest_dir(target) != where:
                        break
            finally:
                stopping.cancel()


async def _changes_watchfiles(
    target: Path, where: Path, stop: asyncio.Event, tick: float, debounce_ms: int
) -> AsyncIterator[None]:
    from watchfiles import awatch

    try:
        async for _ in awatch(
            where,
            watch_filter=None,
            debounce=debounce_ms,
            step=10,
            stop_event=stop,
            rust_timeout=int(tick * 1000),
            yield_on_timeout=True,
            recursive=False,
        ):
            yield None
            if nearest_dir(target) != where:
                break
    except (OSError, RuntimeError) as exc:
        log.warning("watch_failed", path=str(where), error=repr(exc))
        await _sleep_or_stop(stop, tick)
        yield None


async def _sleep_or_stop(stop: asyncio.Event, delay: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)
