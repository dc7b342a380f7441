"""Delivery lanes: one per destination (a channel, a Web Push subscription), each one task.

A lane makes one attempt at a time, in order. A failed delivery worth retrying comes back after
its next delay without holding up the ones behind it (a retry is a time it becomes due, not a
sleep), and at most ``MAX_WAITING`` deliveries wait: beyond that the oldest is dropped. So a
destination that never answers holds its own lane only, never another's: a permission prompt's
push to a working phone does not wait on someone else's dead push service.

:class:`Lanes` owns the lanes' tasks: it starts one per lane; a lane dropped ends at once
(cancelled) or, finishing, once it made one attempt at each delivery it holds (no retries);
``close`` cancels and awaits them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bridge.attention.channels import Answer
from bridge.logs import get_logger
from bridge.process import TaskOwner

log = get_logger("bridge.attention")

#: Deliveries waiting in one lane (retries included); beyond that the oldest is dropped.
MAX_WAITING = 16


@dataclass(eq=False)
class Delivery:
    attempt: Callable[[], Awaitable[Answer]]
    #: Delays before each further attempt (consumed as they are used).
    retries: tuple[float, ...] = ()
    #: Someone waits for the first answer (``notify.test``): no retry, the answer is theirs.
    answer: asyncio.Future[Answer] | None = None
    due: float = field(default_factory=time.monotonic)


class Lane:
    def __init__(self, name: str, on_gone: Callable[[Answer], None] | None = None) -> None:
        self.name = name
        self.on_gone = on_gone
        self.dropped = 0
        self._waiting: list[Delivery] = []
        self._current: Delivery | None = None
        self._finishing = False
        self._wake = asyncio.Event()

    def put(self, delivery: Delivery, *, first: bool = False) -> None:
        if len(self._waiting) >= MAX_WAITING:
            old = self._waiting.pop(0)
            self.dropped += 1
            self._settle(old, Answer(False, "dropped: too many deliveries waiting", retry=False))
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("notify_dropped", to=self.name, dropped=self.dropped)
        self._waiting.insert(0 if first else len(self._waiting), delivery)
        self._wake.set()

    def finish(self) -> None:
        """Make one attempt at each delivery waiting for its first, then end: no retries."""
        self._finishing = True
        now = time.monotonic()
        for delivery in self._waiting:
            delivery.retries = ()
            delivery.due = min(delivery.due, now)
        self._wake.set()

    @staticmethod
    def _settle(delivery: Delivery, answer: Answer) -> None:
        if delivery.answer is not None and not delivery.answer.done():
            delivery.answer.set_result(answer)

    def _take(self) -> Delivery | float | None:
        """The first delivery due, else how long until one is (None: none waits)."""
        now = time.monotonic()
        for i, delivery in enumerate(self._waiting):
            if delivery.due <= now:
                return self._waiting.pop(i)
        if not self._waiting:
            return None
        return min(d.due for d in self._waiting) - now

    async def run(self) -> None:
        """The lane's task (started and cancelled by its :class:`Lanes`)."""
        try:
            while True:
                taken = self._take()
                if taken is None and self._finishing:
                    return
                if not isinstance(taken, Delivery):
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(taken):
                            await self._wake.wait()
                    continue
                self._current = taken
                await self._deliver(taken)
                self._current = None
        finally:
            if self._current is not None:
                self._settle(self._current, Answer(False, "not sent: the delivery was cancelled"))
            for delivery in self._waiting:
                self._settle(delivery, Answer(False, "not sent: the daemon is stopping"))
            self._waiting.clear()

    async def _deliver(self, delivery: Delivery) -> None:
        try:
            answer = await delivery.attempt()
        except Exception as exc:  # an attempt answers, it does not raise; if one does anyway
            log.exception("notify_attempt_failed", to=self.name)
            answer = Answer(False, f"{type(exc).__name__}", retry=False)
        if answer.gone and self.on_gone is not None:
            self.on_gone(answer)
        if delivery.answer is not None:
            self._settle(delivery, answer)
            return
        if answer.ok:
            log.debug("notify_delivered", to=self.name)
        elif answer.retry and not answer.gone and delivery.retries and not self._finishing:
            delay, delivery.retries = delivery.retries[0], delivery.retries[1:]
            log.warning("notify_failed", to=self.name, answer=answer.text, retry_in_s=delay)
            delivery.due = time.monotonic() + delay
            self._waiting.append(delivery)
        elif not answer.gone:
            log.warning("notify_gave_up", to=self.name, answer=answer.text)


class Lanes:
    """The lanes by key, each with its task: this object starts and cancels them all."""

    def __init__(self) -> None:
        self._lanes: dict[str, Lane] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: owns every lane's task, a dropped lane's making its last attempts included
        self._owner = TaskOwner("notify lanes")
        self._closed = False

    def get(self, key: str) -> Lane | None:
        return self._lanes.get(key)

    def open(self, key: str, lane: Lane) -> Lane:
        """``lane`` under ``key`` with its task started (an open lane of that key stays); once
        closed, a lane that never runs (what is put there is never sent)."""
        if key in self._lanes:
            return self._lanes[key]
        if self._closed:
            return lane
        self._lanes[key] = lane
        self._tasks[key] = self._owner.spawn(lane.run(), name=f"notify-lane {lane.name}")
        return lane

    def drop(self, key: str, *, finish: bool = False) -> None:
        """The lane under ``key`` ends: at once, or (``finish``) after one attempt at each
        delivery it holds; a lane opened under ``key`` meanwhile is another."""
        lane = self._lanes.pop(key, None)
        task = self._tasks.pop(key, None)
        if task is None or lane is None:
            return
        if finish:
            lane.finish()  # its task stays the owner's until it ends
        else:
            task.cancel()

    async def close(self) -> None:
        self._closed = True
        self._lanes.clear()
        self._tasks.clear()
        await self._owner.close()
