"""Errors the event loop reports, logged through structlog at a bounded rate.

Out of file descriptors (a low ``ulimit -n`` and many half-open connections), asyncio reports
every failed ``accept()`` with a traceback, and re-arms the listening socket so often that
one daemon wrote thousands of tracebacks a second. The loop's exception handler logs each kind
of error (message and exception type) once per ``EVERY_S``, the first time with its traceback,
then with the count of those it left out.

``Throttle`` is the same rule for any log line that someone outside can provoke at will (the
relay's refused requests and dropped frames, a queued message that fails): the first of a kind
at once, then at most one a ``EVERY_S`` with the count left out in between (``left_out``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from bridge.logs import get_logger

log = get_logger("bridge.loop")

EVERY_S = 10.0


class Throttle:
    """Which lines of each kind to log: the first, then one a ``every_s``."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        #: kind -> (monotonic time last logged, left out since)
        self._seen: dict[Any, tuple[float, int]] = {}

    def take(self, kind: Any) -> int | None:
        """None: leave this line out; else log it, with this many left out before it (-1:
        the first of its kind)."""
        now = time.monotonic()
        last = self._seen.get(kind)
        if last is not None and now - last[0] < self.every_s:
            self._seen[kind] = (last[0], last[1] + 1)
            return None
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[kind] = (now, 0)
        return -1 if last is None else last[1]

    def log(self, emit: Callable[..., Any], event: str, kind: Any, **fields: Any) -> None:
        """``emit(event, **fields)`` (a logger's ``info``, ``warning``...) when this line of
        its kind is taken, with ``left_out`` after the first; else nothing."""
        left_out = self.take((event, kind))
        if left_out is None:
            return
        if left_out >= 0:
            fields["left_out"] = left_out
        emit(event, **fields)


class LoopErrorLog:
    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._throttle = Throttle(every_s)

    def __call__(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "unhandled error in the event loop")
        exc = context.get("exception")
        left_out = self._throttle.take((message, type(exc).__name__ if exc is not None else ""))
        if left_out is None:
            return
        fields: dict[str, Any] = {"message": message}
        if left_out >= 0:
            fields["left_out"] = left_out
            fields["per_s"] = round(1 / self.every_s, 3)
        if exc is not None:
            fields["error"] = f"{type(exc).__name__}: {exc}"
        if left_out < 0 and isinstance(exc, BaseException):
            log.error("event_loop_error", exc_info=exc, **fields)
        else:
            log.error("event_loop_error", **fields)


#: asyncio's warning when a stream upgraded to TLS after it was opened ends: nats-py dials
#: tls:// that way (NATS sends its INFO in the clear first), which leaves asyncio's stream
#: protocol believing it is plain, and the TLS layer ignores its answer to the end of the
#: stream with this line. Nothing is wrong, so nothing is said.
STREAM_UPGRADE_EOF = "returning true from eof_received() has no effect when using ssl"


def _not_stream_upgrade_eof(record: logging.LogRecord) -> bool:
    return record.getMessage() != STREAM_UPGRADE_EOF


def install(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_exception_handler(LoopErrorLog())
    logging.getLogger("asyncio").addFilter(_not_stream_upgrade_eof)
