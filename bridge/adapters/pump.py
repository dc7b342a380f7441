"""The steps the adapters that drive one child process through a sans-I/O parser share.

Claude's and Codex's adapters read the child's stdout line by line, feed each line to their
parser (:func:`feed_contained`: a parser bug costs that line, never the session), write what the
parser queued for the agent (:func:`flush_outbox`: one JSON line per message; a closed pipe
drops them, the exit is noticed at the next read), and reap the child once its stdout ends
(:func:`reap`: a short wait for the exit status, then the process group is ended with grace).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Protocol

from bridge.blocks import Block
from bridge.process import ChildProcess


class OutboxParser(Protocol):
    """A parser that also queues messages to write back to the agent."""

    outbox: list[dict[str, Any]]

    def feed(self, line: bytes) -> list[Block]: ...


def feed_contained(parser: OutboxParser, line: bytes, log: Any, event: str) -> list[Block]:
    """The parser's blocks for ``line``; a parser that raises is logged as ``event``."""
    try:
        return parser.feed(line)
    except Exception as exc:  # a parser bug must not end the session
        log.warning(event, error=repr(exc), line=line[:200])
        return []


async def flush_outbox(parser: OutboxParser, child: ChildProcess | None) -> None:
    """Empty the parser's outbox into the child's stdin, one JSON line a message (without a
    child, the messages are dropped: they were for the process that is gone)."""
    outbox, parser.outbox = parser.outbox, []
    if child is None:
        return
    for message in outbox:
        with contextlib.suppress(BrokenPipeError):
            await child.write_line(json.dumps(message, ensure_ascii=False))


async def reap(child: ChildProcess, wait_s: float, grace_s: float) -> int | None:
    """The exit status of a child whose stdout ended; ended with grace if it lingers."""
    try:
        return await child.wait(wait_s)
    except TimeoutError:
        return await child.terminate(grace_s)
