"""What is queued for one connection, and how long it has waited: no I/O, no clock of its own.

The connection (bridge/server/connection.py) owns one ``Outbox``, pushes every frame for its client
into it, and its sender takes bursts out and reports what the transport did with them
(``wrote``, ``observe``); every decision is made here, from those reports and the ``now`` the
caller passes:

- overflow: more than ``frames_cap`` frames or ``bytes_cap`` bytes queued cuts the client off
  (4408). A frame counts at most a quarter of ``bytes_cap`` there, so one large message (up to
  ``max_frame_bytes``) does not cut a reader off alone.
- pacing: ``behind`` (half full, in frames or in real bytes) makes a replay wait and a turn
  slow down; ``relieved`` (below a quarter) lets them go on. Real bytes, not the capped count:
  a replay of large blocks must not hold more than half of ``bytes_cap`` plus one frame.
- stall: ``stalled_for`` is how long data has waited (queued here, or buffered by the
  transport) without the transport taking a byte. The sender checks it whenever data waits,
  whichever path queued it (a live event, a replay, an answer), and cuts off past
  ``limits.write_stall_s``.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from bridge.wire.protocol import EncodedEvent, Outgoing

#: Bytes an event frame adds around its block (session id, seq, time stamp).
EVENT_OVERHEAD = 96


def frame_size(item: Outgoing, binary: bool) -> int:
    """Bytes a queued frame holds: a stored event's block plus its frame, or the encoded frame
    (encoded once and shared by every connection)."""
    if isinstance(item, EncodedEvent) and not binary:
        return len(item.block_json) + EVENT_OVERHEAD
    return len(item.encoded(binary))


class Sized(NamedTuple):
    """Frames measured: each one's size, their sum, and their sum as overflow counts it."""

    sizes: list[int]
    total: int
    counted: int


def measure(items: list[Outgoing], binary: bool, bytes_cap: int) -> Sized:
    quarter = bytes_cap // 4
    sizes = [frame_size(item, binary) for item in items]
    return Sized(sizes, sum(sizes), sum(min(size, quarter) for size in sizes))


#: The last run measured, per encoding: (run, cap, sized). The run is held, so ``is`` is exact.
_RUNS: dict[bool, tuple[list[Outgoing], int, Sized]] = {}


def measure_run(items: list[Outgoing], binary: bool, bytes_cap: int) -> Sized:
    """``measure`` a committed run: every subscriber of it gets the same list, so it is
    measured once per encoding, not once per connection."""
    hit = _RUNS.get(binary)
    if hit is not None and hit[0] is items and hit[1] == bytes_cap:
        return hit[2]
    sized = measure(items, binary, bytes_cap)
    _RUNS[binary] = (items, bytes_cap, sized)
    return sized


class Outbox:
    def __init__(self, frames_cap: int, bytes_cap: int, *, binary: bool, now: float) -> None:
        self.frames_cap = frames_cap
        self.bytes_cap = bytes_cap
        self.binary = binary
        self._items: deque[Outgoing] = deque()
        self._sizes: deque[int] = deque()
        #: real bytes queued (pacing)
        self.bytes = 0
        #: bytes queued with each frame counted at most ``bytes_cap // 4`` (overflow)
        self.counted = 0
        #: what the transport held, unsent, when last told (``observe``, ``wrote``)
        self.buffered = 0
        #: since when data has waited without the transport taking any of it
        self.since = now

    def __len__(self) -> int:
        return len(self._items)

    @property
    def waiting(self) -> bool:
        """Data waits for the client: queued here, or in the transport's buffer."""
        return bool(self._items) or self.buffered > 0

    # ---- queueing ------------------------------------------------------------------------------

    def offer(self, items: list[Outgoing], sized: Sized, now: float) -> bool:
        """Queue ``items`` (``measure``d), or False, queueing none, when they would overflow
        the outbox: the client is too far behind and is cut off."""
        if len(self._items) + len(items) > self.frames_cap or (
            self.counted + sized.counted > self.bytes_cap
        ):
            return False
        if not self.waiting:
            self.since = now  # the clock of a stall starts when data starts waiting
        self._items.extend(items)
        self._sizes.extend(sized.sizes)
        self.bytes += sized.total
        self.counted += sized.counted
        return True

    def pop(self) -> Outgoing:
        size = self._sizes.popleft()
        self.bytes -= size
        self.counted -= min(size, self.bytes_cap // 4)
        return self._items.popleft()

    def burst(self, frames: int, size: int) -> list[bytes]:
        """The encoded frames of up to ``frames`` queued frames, stopping once they reach
        ``size`` bytes (at least one)."""
        out: list[bytes] = []
        total = 0
        while self._items and len(out) < frames and total < size:
            data = self.pop().encoded(self.binary)
            total += len(data)
            out.append(data)
        return out

    def clear(self) -> None:
        self._items.clear()
        self._sizes.clear()
        self.bytes = self.counted = 0

    @property
    def behind(self) -> bool:
        """Half full, in frames or bytes: a replay waits, a turn slows down."""
        return len(self._items) >= self.frames_cap // 2 or self.bytes >= self.bytes_cap // 2

    @property
    def relieved(self) -> bool:
        """Down to a quarter, in frames and bytes: what waited for room goes on."""
        return len(self._items) < self.frames_cap // 4 and self.bytes < self.bytes_cap // 4

    # ---- the transport's progress ----------------------------------------------------------------

    def wrote(self, now: float, buffered: int) -> None:
        """The transport accepted a write (it had room, so the client took bytes)."""
        self.buffered = buffered
        self.since = now

    def observe(self, now: float, buffered: int) -> None:
        """The transport holds ``buffered`` bytes now; fewer than before is progress."""
        if buffered < self.buffered or not self.waiting:
            self.since = now
        self.buffered = buffered

    def stalled_for(self, now: float) -> float:
        """Seconds data has waited without the transport taking a byte (0 if none waits)."""
        return now - self.since if self.waiting else 0.0
