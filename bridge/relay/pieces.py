"""Fragmentation of protocol frames into sealed messages of at most 256 KiB of plaintext, and
their reassembly (docs/protocol.md, "Relay"), sans I/O.

A frame is sent as zero or more MORE pieces and one FRAME piece. NATS core may drop a message:
a gap inside a fragmented frame drops that frame: its pieces up to and including the next FRAME
piece are discarded. (A gap that swallowed a frame's first pieces cannot be told apart: the tail
arrives as a frame that does not parse, which the receiver ignores.)
"""

from __future__ import annotations

from bridge.relay.sealing import FRAME, MAX_PLAINTEXT, MORE, Opened

#: the largest body of one piece (the plaintext also holds the kind byte)
MAX_PIECE = MAX_PLAINTEXT - 1


def split(frame: bytes, max_piece: int = MAX_PIECE) -> list[tuple[int, bytes]]:
    """The (kind, body) pieces of one frame, in order."""
    if len(frame) <= max_piece:
        return [(FRAME, frame)]
    pieces = [(MORE, frame[i : i + max_piece]) for i in range(0, len(frame), max_piece)]
    pieces[-1] = (FRAME, pieces[-1][1])
    return pieces


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

    def _reset(self) -> None:
        self._parts.clear()
        self._size = 0
        self._oversized = False
