"""Automatic retry of a turn that failed for a transient reason (docs/protocol.md, "Failure codes").

The hub runs a turn; a :class:`RetryWatch` sees every block the turn produced. When the turn
ended with a retryable ``error`` block, :func:`next_delay` says whether and after how long to try
again: at most ``adapters.retry_max`` times, after the provider's ``retry_after_s`` or a backoff
of 2 s, 8 s, 32 s, …; never after the turn produced a tool call or a permission request (the work
may not be repeatable), never when the user interrupted, and never when the agent already
retried the model call itself (``BaseAdapter.agent_retried``). Before each retry the hub records
:func:`retrying_block`. The user's message is recorded once; whether it is sent again is the
adapter's :meth:`~bridge.adapters.base.BaseAdapter.retry_prompt`: an agent whose session already
holds the failed message is asked to go on instead of being given it twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bridge.adapters.base import BaseAdapter
from bridge.blocks import (
    Block,
    DiffBlock,
    ErrorBlock,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.logs import get_logger
from bridge.parsers.failures import MAX_RETRY_AFTER_S

log = get_logger("bridge.retry")

#: First backoff; each further one is four times longer (2 s, 8 s, 32 s, …).
BACKOFF_FIRST_S = 2.0
BACKOFF_FACTOR = 4.0


class RetryWatch:
    """What one attempt of a turn produced, as far as retrying it is concerned."""

    __slots__ = ("acted", "end_reason", "error")

    def __init__(self) -> None:
        #: the agent called a tool or asked a permission: the attempt may have changed things
        self.acted = False
        #: the last ``error`` block of the attempt
        self.error: ErrorBlock | None = None
        self.end_reason: str | None = None

    def see(self, block: Block) -> None:
        if isinstance(block, ToolCallBlock | PermissionRequestBlock | ToolResultBlock | DiffBlock):
            self.acted = True
        elif isinstance(block, ErrorBlock):
            self.error = block
        elif isinstance(block, SessionEndBlock):
            self.end_reason = block.reason


def backoff(attempt: int) -> float:
    """The wait before retry number ``attempt`` (1-based) when the provider named none."""
    return float(min(BACKOFF_FIRST_S * BACKOFF_FACTOR ** max(attempt - 1, 0), MAX_RETRY_AFTER_S))


def next_delay(
    watch: RetryWatch,
    retries_done: int,
    retry_max: int,
    adapter: BaseAdapter | None,
    interrupted: bool = False,
) -> float | None:
    """Seconds to wait before retrying the turn ``watch`` saw, or None not to retry."""
    error = watch.error
    if interrupted or retries_done >= retry_max or error is None or not error.retryable:
        return None
    if watch.acted or watch.end_reason not in (None, "error"):
        return None
    if adapter is not None:
        try:
            if adapter.agent_retried(error):
                log.info("retry_skipped_agent_retried", code=error.code)
                return None
        except Exception as exc:  # an adapter's hook must not break the turn
            log.warning("agent_retried_failed", error=repr(exc))
    after = error.retry_after_s
    if after is not None and 0 < after <= MAX_RETRY_AFTER_S:
        return float(after)
    return backoff(retries_done + 1)


def retrying_block(error: ErrorBlock, attempt: int, retry_max: int, delay: float) -> SystemBlock:
    """The ``system`` block recorded before retry number ``attempt`` (1-based)."""
    return SystemBlock(
        level="warn",
        code="retrying",
        text=f"{error.code.replace('_', ' ')}: retrying in {delay:g} s "
        f"(retry {attempt} of {retry_max})",
        data={
            "attempt": attempt,
            "retry_max": retry_max,
            "delay_s": delay,
            "error_code": error.code,
        },
    )


async def wait(delay: float, stopped: Callable[[], bool], step: float = 0.1) -> bool:
    """Sleep ``delay`` seconds; False as soon as ``stopped()`` (the user interrupted)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + delay
    while True:
        if stopped():
            return False
        left = end - loop.time()
        if left <= 0:
            return True
        await asyncio.sleep(min(step, left))


def prompt_for(adapter: BaseAdapter, text: str) -> str:
    """What to send on a retry: the adapter's ``retry_prompt(text)``, or ``text`` if it fails."""
    try:
        prompt = adapter.retry_prompt(text)
    except Exception as exc:  # an adapter's hook must not break the turn
        log.warning("retry_prompt_failed", error=repr(exc))
        return text
    return prompt if isinstance(prompt, str) and prompt else text
