"""Which batches the SQLite store commits on the event loop's thread, and when (sans-I/O).

A commit without fsync (``synchronous=NORMAL``) is a write into the page cache: for a rare
small batch, less CPU than handing it to the writer thread and back (two wake-ups, the GIL
twice). Under a steady load the writer thread, on the other core, takes whatever accumulated
meanwhile, and the loop is spared the commits (docs/benchmarks.md, T3b and T12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bridge.store.records import StoredEvent

#: A batch of at most this many operations and bytes, of one session's events, is committed on
#: the event loop's thread when the writer thread has nothing in hand and the last commit ended
#: at least GAP_S before: commits that rare (an agent streaming at its own pace) each cost a
#: hand-over to the writer thread and back, more CPU than the commit itself.
OPS = 512
BYTES = 256 * 1024
GAP_S = 0.005

#: Operations a commit on the event loop's thread may carry. Retention may take long, a reset
#: of the WAL or a stop is the writer thread's, and a message's row holds its body (megabytes,
#: rewritten by a change of its state): committed on the loop's thread, 40 MiB of queued
#: messages grew the daemon by 36 MiB (tests/test_durability_memory.py).
KINDS = frozenset({"session", "flush"})


class Op(Protocol):
    """An operation other than an event (bridge/store/store.py ``_Op``)."""

    kind: str


def fits(ops: Sequence[StoredEvent | Op]) -> bool:
    """Small enough, one session's events (one row) and only quick operations, to commit on
    the event loop's thread. Many sessions' events in one pass is a busy daemon, whose loop
    is better spared the commit (a row, and a page, per session): the writer thread takes it."""
    if len(ops) > OPS:
        return False
    size = 0
    session: str | None = None
    for op in ops:
        if isinstance(op, StoredEvent):
            if session is None:
                session = op.session
            elif op.session != session:
                return False
            size += len(op.block_json)
        elif op.kind not in KINDS:
            return False
    return size <= BYTES
