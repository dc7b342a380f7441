"""Who is looking at which session: what clients report with ``client.presence``.

A session counts as watched while a connection reports it visible, and for ``WATCH_GRACE_S``
after the last one stopped (hid the page, switched session, or disconnected): a person who just
glanced away does not need a notification for what they have just seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

WATCH_GRACE_S = 30.0


class Presence:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: connection -> the session it shows while visible
        self._showing: dict[Hashable, str] = {}
        #: session -> when a connection last stopped showing it
        self._left: dict[str, float] = {}

    def report(self, conn: Hashable, visible: bool, session: str | None) -> None:
        """``client.presence`` from ``conn``; it lasts until the next report or ``drop``."""
        before = self._showing.pop(conn, None)
        if visible and session:
            self._showing[conn] = session
        if before is not None and before != self._showing.get(conn):
            self._left[before] = self._clock()
        self._trim()

    def drop(self, conn: Hashable) -> None:
        """The connection closed."""
        before = self._showing.pop(conn, None)
        if before is not None:
            self._left[before] = self._clock()

    def watched(self, session: str) -> bool:
        if session in self._showing.values():
            return True
        left = self._left.get(session)
        return left is not None and self._clock() - left < WATCH_GRACE_S

    def _trim(self) -> None:
        if len(self._left) > 1000:
            cutoff = self._clock() - WATCH_GRACE_S
            self._left = {s: t for s, t in self._left.items() if t >= cutoff}
