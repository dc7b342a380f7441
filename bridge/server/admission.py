"""Who gets in: unauthenticated handshakes have their own small budget, wrong tokens are slowed.

- Connections that have not authenticated (TCP, before a valid hello) count against
  ``limits.max_unauthenticated``, not against ``limits.max_connections``, which counts only
  authenticated and Unix-socket connections. So silent or guessing peers can never take the
  owner's slots: the Unix socket and a client presenting the right token in the
  ``Authorization`` header are never refused because of them. When the budget is full, a new
  handshake takes the place of the oldest one that has been silent (no hello) for ``SILENT_S``;
  only when there is none (the slots hold penalised wrong guesses, or handshakes younger than
  that) is the new one refused (503).
- A token is always checked at once, and the right one is accepted at once. Wrong tokens are
  counted per peer address: the first ``limits.auth_failures_per_minute`` in a minute are
  answered after a short growing delay; beyond that each answer is scheduled one
  ``60 / auth_failures_per_minute`` seconds after the previous one of that peer, and the
  connection holds its unauthenticated slot meanwhile. Parallel connections therefore do not
  buy more guesses: a peer gets at most that many answers a minute, plus what its slots hold.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Protocol

#: A silent handshake is given up for a newer one only once it has been silent this long: a
#: client sends its hello within milliseconds, so a burst of real clients never evicts itself.
SILENT_S = 1.0


class Handshake(Protocol):
    #: a hello has been received (it is then not evicted for silence)
    said_hello: bool
    #: time.monotonic() when it connected
    opened_at: float

    def evict(self) -> None:
        """Close it: it gave its slot to a newer handshake."""


class Admission:
    def __init__(self, max_unauthenticated: int, failures_per_minute: int) -> None:
        self.max_unauthenticated = max_unauthenticated
        self.failures_per_minute = failures_per_minute
        self._pending: dict[Handshake, None] = {}
        self._failures: dict[str, deque[float]] = {}
        self._next_answer: dict[str, float] = {}

    # ---- the unauthenticated budget ----------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    def room_for_one(self) -> bool:
        """Make room for a new unauthenticated handshake; False if there is none to make."""
        if len(self._pending) < self.max_unauthenticated:
            return True
        quiet_since = time.monotonic() - SILENT_S
        for old in self._pending:
            if not old.said_hello and old.opened_at <= quiet_since:
                del self._pending[old]
                old.evict()
                return True
        return False

    def enter(self, handshake: Handshake) -> None:
        self._pending[handshake] = None

    def leave(self, handshake: Handshake) -> None:
        self._pending.pop(handshake, None)

    # ---- wrong tokens -------------------------------------------------------------------------

    def _window(self, peer: str, now: float) -> deque[float]:
        window = self._failures.setdefault(peer, deque())
        while window and window[0] < now - 60:
            window.popleft()
        return window

    def failed(self, peer: str) -> float:
        """Record a wrong token from ``peer``; the seconds to wait before answering it."""
        now = time.monotonic()
        if len(self._failures) > 10_000:
            self._failures.clear()
            self._next_answer.clear()
        window = self._window(peer, now)
        window.append(now)
        if len(window) <= self.failures_per_minute:
            return min(2.0, 0.1 * len(window))
        interval = 60.0 / self.failures_per_minute
        at = max(now, self._next_answer.get(peer, 0.0)) + interval
        self._next_answer[peer] = at
        return at - now

    def recent_failures(self, peer: str) -> int:
        return len(self._window(peer, time.monotonic()))

    async def penalty(self, peer: str) -> None:
        await asyncio.sleep(self.failed(peer))
