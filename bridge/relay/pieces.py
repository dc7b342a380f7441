"""How protocol frames become sealed messages of at most 256 KiB of plaintext, and back
(docs/protocol.md, "Relay"), sans I/O.

A frame is sent as zero or more MORE pieces and one FRAME piece; to a peer that takes them,
a burst of small frames goes as BATCH messages, each holding as many whole frames as fit (one
seal and one NATS message for many frames: per message, not per byte, is what costs).

NATS core may drop a message: a gap inside a fragmented frame drops that frame: its pieces up to
and including the next FRAME piece are discarded. (A gap that swallowed a frame's first pieces
cannot be told apart: the tail arrives as a frame that does not parse, which the receiver
ignores.)
"""

from __future__ import annotations

from collections.abc import Iterator

from bridge.relay.sealing import BATCH, FRAME, MAX_PLAINTEXT, MORE, Opened, Rejected

#: the largest body of one piece (the plaintext also holds the kind byte)
MAX_PIECE = MAX_PLAINTEXT - 1
#: the big-endian length before each frame of a BATCH body
LENGTH_BYTES = 4


def split(frame: bytes, max_piece: int = MAX_PIECE) -> list[tuple[int, bytes]]:
    """The (kind, body) pieces of one frame, in order."""
    if len(frame) <= max_piece:
        return [(FRAME, frame)]
    pieces = [(MORE, frame[i : i + max_piece]) for i in range(0, len(frame), max_piece)]
    pieces[-1] = (FRAME, pieces[-1][1])
    return pieces


def pack(
    frames: list[bytes], batch: bool, max_piece: int = MAX_PIECE
) -> Iterator[tuple[int, bytes]]:
    """The (kind, body) messages that carry ``frames`` in order. With ``batch``, consecutive
    frames that fit share a BATCH message (a lone one goes as FRAME, as without)."""
    if not batch:
        for frame in frames:
            yield from split(frame, max_piece)
        return
    group: list[bytes] = []
    size = 0
    for frame in frames:
        need = LENGTH_BYTES + len(frame)
        if group and size + need > max_piece:
            yield _batch(group)
            group, size = [], 0
        if need > max_piece:
            yield from split(frame, max_piece)
        else:
            group.append(frame)
            size += need
    if group:
        yield _batch(group)


def _batch(group: list[bytes]) -> tuple[int, bytes]:
    if len(group) == 1:
        return FRAME, group[0]
    return BATCH, b"".join(b"%b%b" % (len(f).to_bytes(LENGTH_BYTES, "big"), f) for f in group)


def unpack(body: bytes) -> list[bytes]:
    """The frames of a BATCH body; Rejected("malformed") if its lengths do not add up (the
    peer authenticated it, so the peer is broken)."""
    frames: list[bytes] = []
    at, end = 0, len(body)
    while at < end:
        if end - at < LENGTH_BYTES:
            raise Rejected("malformed")
        size = int.from_bytes(body[at : at + LENGTH_BYTES], "big")
        at += LENGTH_BYTES
        if size > end - at:
            raise Rejected("malformed")
        frames.append(body[at : at + size])
        at += size
    if not frames:
        raise Rejected("malformed")
    return frames


class Joiner:
    """Joins the FRAME/MORE pieces of one direction back into frames, up to ``max_frame``
    bytes (a longer frame is dropped whole, so a peer cannot grow memory without bound)."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._parts: list[bytes] = []
        self._size = 0
        self._oversized = False
        self._skipping = False
        #: frames dropped, for logs and tests
        self.dropped = 0

    def feed(self, opened: Opened) -> bytes | None:
        """A whole frame when ``opened`` completes one, else None."""
        if opened.kind not in (FRAME, MORE):
            return None
        if opened.gap and (self._parts or self._oversized):
            self._reset()
            self.dropped += 1
            self._skipping = True
        if self._skipping:
            self._skipping = opened.kind == MORE
            return None
        self._size += len(opened.body)
        if self._size > self.max_frame:
            self._parts.clear()
            self._oversized = True
        else:
            self._parts.append(opened.body)
        if opened.kind == MORE:
            return None
        if self._oversized:
            self._reset()
            self.dropped += 1
            return None
        frame = b"".join(self._parts)
        self._reset()
        return frame

    def feed_batch(self, opened: Opened) -> list[bytes]:
        """The frames of a BATCH message, but those over ``max_frame``. A frame being joined
        when it arrives lost its end to a gap (a sender never puts a batch inside a frame):
        it is dropped."""
        frames = unpack(opened.body)
        if self._parts or self._oversized:
            self._reset()
            self.dropped += 1
        self._skipping = False
        kept = [f for f in frames if len(f) <= self.max_frame]
        self.dropped += len(frames) - len(kept)
        return kept

    def _reset(self) -> None:
        self._parts.clear()
        self._size = 0
        self._oversized = False
