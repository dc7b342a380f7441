"""A read-only mirror: follow one transcript file and turn its new lines into blocks.

The per-agent knowledge lives in a sans-I/O ``LineParser`` (line in, blocks out). This module
only wires a ``FileTail`` to the ``changes()`` signal. ``resolve`` is asked for the file at
every wake-up, so a mirror can follow an agent to a new transcript (Claude's ``/clear`` in the
terminal starts one) without the hub knowing.

``close_at_eof()`` is how the hub ends a mirror without losing the terminal's last words: the
mirror reads to the end of the file once more, closes any open turn, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Protocol

import structlog

from bridge.blocks import Block
from bridge.handoff.tail import FileTail, changes

log = structlog.get_logger("bridge.handoff.mirror")


class LineParser(Protocol):
    def feed(self, line: bytes) -> list[Block]:
        """Blocks for one complete line (often none)."""

    def switched(self, path: Path) -> list[Block]:
        """Blocks to emit when the mirror moves to another file (e.g. a system note)."""

    def close(self) -> list[Block]:
        """Blocks that close whatever is still open when the mirror ends."""


def found_once(find: Callable[[], Path | None]) -> Callable[[], Path | None]:
    """``find``, asked until it finds the file, then never again (for a transcript that never
    moves once written, so a directory walk per tick would be wasted)."""
    found: list[Path] = []

    def resolve() -> Path | None:
        if not found:
            path = find()
            if path is not None:
                found.append(path)
        return found[0] if found else None

    return resolve


class _Mirror:
    """What both mirrors share: the ``AsyncIterator[Block]`` protocol over the generator
    ``_run`` of a subclass, ``aclose``, ``close_at_eof``, and waking on a file's changes."""

    def __init__(self, tick: float) -> None:
        self._tick = tick
        self._stop = asyncio.Event()
        self._closing = False
        self._wake = asyncio.Event()
        # Made now, run at the first ``__anext__`` (after the subclass's ``__init__``).
        self._gen = self._run()

    def __aiter__(self) -> _Mirror:
        return self

    async def __anext__(self) -> Block:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        self._stop.set()
        await self._gen.aclose()

    def close_at_eof(self) -> None:
        """Read what is left, close the open turn, then end the iteration."""
        self._closing = True
        self._wake.set()

    def _run(self) -> AsyncGenerator[Block, None]:
        raise NotImplementedError

    async def _watch_file(self, path: Path) -> None:
        """Wake the loop at each change of ``path`` (and at least every tick)."""
        # Its own stop event: watchfiles sets the event of a watch that is cancelled, and a
        # shared one would silence the watch that replaces it.
        stop = asyncio.Event()
        try:
            async for _ in changes(path, stop, tick=self._tick):
                if self._stop.is_set():
                    return
                self._wake.set()
        finally:
            stop.set()


class TranscriptMirror(_Mirror):
    """``AsyncIterator[Block]`` over what a terminal appends to its transcript."""

    def __init__(
        self,
        resolve: Callable[[], Path | None],
        parser: LineParser,
        *,
        from_end: bool = True,
        tick: float = 2.0,
    ) -> None:
        super().__init__(tick)
        self._resolve = resolve
        self._parser = parser
        self._from_end = from_end
        self._tail: FileTail | None = None
        self._pending_switch = False
        self._resolved_once = False
        # Resolve now, so "from the end" means the end when the mirror was made.
        self._current()

    # -- the loop -------------------------------------------------------------------------------

    def _current(self) -> FileTail | None:
        path = self._resolve()
        first_call = not self._resolved_once
        self._resolved_once = True
        if path is None:
            return self._tail
        tail = self._tail
        if tail is None or tail.path != path:
            switching = tail is not None
            if tail is not None:
                tail.close()
            # Only a file that existed when the mirror was made has old content to skip.
            tail = FileTail(path, from_end=self._from_end and first_call)
            self._tail = tail
            self._pending_switch = self._pending_switch or switching
        return tail

    async def _run(self) -> AsyncGenerator[Block, None]:
        watcher: asyncio.Task[None] | None = None
        try:
            tail = self._current()
            watched = tail.path if tail is not None else None
            watcher = asyncio.create_task(self._watch(watched))
            while True:
                closing = self._closing
                tail = self._current()
                if tail is not None and tail.path != watched:
                    watched = tail.path
                    watcher.cancel()
                    watcher = asyncio.create_task(self._watch(watched))
                if self._pending_switch and tail is not None:
                    self._pending_switch = False
                    for block in self._parser.switched(tail.path):
                        yield block
                if tail is not None:
                    while True:
                        lines = tail.read()
                        for line in lines:
                            for block in self._feed(line):
                                yield block
                        if not lines or tail.at_eof():
                            break
                        await asyncio.sleep(0)
                if closing:
                    if tail is not None:
                        rest = tail.splitter.pending()
                        if rest.strip():
                            for block in self._feed(rest):
                                yield block
                    for block in self._parser.close():
                        yield block
                    return
                await self._wake.wait()
                self._wake.clear()
        finally:
            self._stop.set()
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(BaseException):
                    await watcher
            if self._tail is not None:
                self._tail.close()

    def _feed(self, line: bytes) -> list[Block]:
        # A line is untrusted data: one the parser chokes on costs that line, not the mirror.
        try:
            return self._parser.feed(line)
        except Exception as exc:
            log.warning("mirror_line_skipped", error=repr(exc), size=len(line))
            return []

    async def _watch(self, path: Path | None) -> None:
        if path is None:
            while not self._stop.is_set():
                await asyncio.sleep(self._tick)
                self._wake.set()
            return
        await self._watch_file(path)


class PollingMirror(_Mirror):
    """``AsyncIterator[Block]`` over a store that is not a file to tail (an SQLite database).

    ``poll()`` (run in a worker thread) returns the blocks for whatever changed since its last
    call; it runs when a file under ``watch`` changes (an SQLite writer touches the ``-wal``
    file next to the database) and at least every ``tick`` seconds. ``finish()`` closes what
    is still open once ``close_at_eof()`` asked for a last poll.
    """

    def __init__(
        self,
        poll: Callable[[], list[Block]],
        finish: Callable[[], list[Block]],
        watch: Path,
        *,
        tick: float = 2.0,
    ) -> None:
        super().__init__(tick)
        self._poll = poll
        self._finish = finish
        self._watch_path = watch

    async def _run(self) -> AsyncGenerator[Block, None]:
        watcher = asyncio.create_task(self._watch_file(self._watch_path))
        try:
            while True:
                closing = self._closing
                try:
                    blocks = await asyncio.to_thread(self._poll)
                except Exception as exc:
                    log.warning("mirror_poll_failed", error=repr(exc))
                    blocks = []
                for block in blocks:
                    yield block
                if closing:
                    for block in self._finish():
                        yield block
                    return
                await self._wake.wait()
                self._wake.clear()
        finally:
            self._stop.set()
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
