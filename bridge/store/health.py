"""Whether the store's writes succeed, told to whoever must act on it.

The store's writer thread reports each change (``failing`` with the error, then ``ok``) on the
event loop; listeners push the ``daemon`` frame to clients and make ``/healthz`` answer 503.
When writes keep failing for ``fail_after_s``, the ``on_expired`` callbacks run (the daemon
interrupts running turns), and again every ``REPEAT_S`` while the failure lasts, so a turn
started meanwhile is stopped too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from bridge.logs import get_logger

log = get_logger("bridge.store")

REPEAT_S = 5.0

Listener = Callable[[bool, str], None]


class StoreHealth:
    def __init__(self, fail_after_s: float = 30.0) -> None:
        self.fail_after_s = fail_after_s
        self.failing = False
        self.message = ""
        self.since: float | None = None
        self._listeners: list[Listener] = []
        self._expired: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None

    def subscribe(self, listener: Listener) -> None:
        """``listener(failing, message)`` on every change."""
        self._listeners.append(listener)

    def on_expired(self, callback: Callable[[], None]) -> None:
        self._expired.append(callback)

    def set_failing(self, message: str) -> None:
        if self.failing:
            self.message = message
            return
        self.failing = True
        self.message = message
        self.since = time.time()
        log.error("store_failing", error=message, interrupt_after_s=self.fail_after_s)
        self._arm(self.fail_after_s)
        self._tell()

    def set_ok(self) -> None:
        if not self.failing:
            return
        lasted = time.time() - (self.since or time.time())
        self.failing = False
        self.message = ""
        self.since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        log.warning("store_recovered", failed_for_s=round(lasted, 3))
        self._tell()

    def _arm(self, delay: float) -> None:
        with contextlib.suppress(RuntimeError):
            self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if not self.failing:
            return
        for callback in list(self._expired):
            try:
                callback()
            except Exception:
                log.exception("store_expiry_callback_failed")
        self._arm(REPEAT_S)

    def _tell(self) -> None:
        for listener in list(self._listeners):
            try:
                listener(self.failing, self.message)
            except Exception:
                log.exception("store_health_listener_failed")
