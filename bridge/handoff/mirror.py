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
from collections.abc import AsyncGenerator, AsyncIterator, Callable
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
    """What both mirrors share: the ``AsyncIterator[Block]`` protocol, ``aclose``,
    ``close_at_eof``, and the loop that reads what changed at each wake-up (a change of the
    watched file, or a tick) until it is told to close. A subclass says what a wake-up reads
    (``_changes``), what closes the mirror (``_last``), and which file to watch (``_watch``)."""

    def __init__(self, tick: float) -> None:
        self._tick = tick
        self._stop = asyncio.Event()
        self._closing = False
        self._wake = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
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

    async def _run(self) -> AsyncGenerator[Block, None]:
        try:
            while True:
                closing = self._closing
                async for block in self._changes():
                    yield block
                if closing:
                    for block in self._last():
                        yield block
                    return
                await self._wake.wait()
                self._wake.clear()
        finally:
            self._stop.set()
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(BaseException):
                    await self._watcher
            self._end()

    def _changes(self) -> AsyncIterator[Block]:
        """The blocks for what changed since the last wake-up."""
        raise NotImplementedError

    def _last(self) -> list[Block]:
        """The blocks that close what is still open, after the last read."""
        raise NotImplementedError

    def _end(self) -> None:
        """Release what the mirror holds open (it has stopped)."""

    def _watch(self, path: Path | None) -> None:
        """Wake at each change of ``path`` from now on (without a file: at every tick)."""
        if self._watcher is not None:
            self._watcher.cancel()
        self._watcher = asyncio.create_task(self._watch_file(path))

    async def _watch_file(self, path: Path | None) -> None:
        if path is None:
            while not self._stop.is_set():
                await asyncio.sleep(self._tick)
                self._wake.set()
            return
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
        self._watched: Path | None = None
        # Resolve now, so "from the end" means the end when the mirror was made.
        self._current()

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

    async def _changes(self) -> AsyncIterator[Block]:
        tail = self._current()
        path = tail.path if tail is not None else None
        if self._watcher is None or path != self._watched:
            self._watched = path
            self._watch(path)
        if self._pending_switch and tail is not None:
            self._pending_switch = False
            for block in self._parser.switched(tail.path):
                yield block
        if tail is None:
            return
        while True:
            lines = tail.read()
            for line in lines:
                for block in self._feed(line):
                    yield block
            if not lines or tail.at_eof():
                break
            await asyncio.sleep(0)

    def _last(self) -> list[Block]:
        blocks: list[Block] = []
        if self._tail is not None:
            rest = self._tail.splitter.pending()
            if rest.strip():
                blocks += self._feed(rest)
        return blocks + self._parser.close()

    def _end(self) -> None:
        if self._tail is not None:
            self._tail.close()

    def _feed(self, line: bytes) -> list[Block]:
        # A line is untrusted data: one the parser chokes on costs that line, not the mirror.
        try:
            return self._parser.feed(line)
        except Exception as exc:
            log.warning("mirror_line_skipped", error=repr(exc), size=len(line))
            return []


class PollSource(Protocol):
    """Where a ``PollingMirror`` reads from (an SQLite database and its read position)."""

    def poll(self) -> list[Block]:
        """Blocks for whatever changed since the last call (run in a worker thread)."""

    def finish(self) -> list[Block]:
        """Blocks that close whatever is still open when the mirror ends."""


class PollingMirror(_Mirror):
    """``AsyncIterator[Block]`` over a store that is not a file to tail (an SQLite database).

    ``source.poll()`` runs when a file under ``watch`` changes (an SQLite writer touches the
    ``-wal`` file next to the database) and at least every ``tick`` seconds;
    ``source.finish()`` closes what is still open once ``close_at_eof()`` asked for a last poll.
    """

    def __init__(self, source: PollSource, watch: Path, *, tick: float = 2.0) -> None:
        super().__init__(tick)
        self._source = source
        self._watch_path = watch

    async def _changes(self) -> AsyncIterator[Block]:
        if self._watcher is None:
            self._watch(self._watch_path)
        try:
            blocks = await asyncio.to_thread(self._source.poll)
        except Exception as exc:
            log.warning("mirror_poll_failed", error=repr(exc))
            blocks = []
        for block in blocks:
            yield block

    def _last(self) -> list[Block]:
        return self._source.finish()
