"""The loop that drives one agent process through a sans-I/O parser, written once.

Claude's, Codex's, the per-turn (Pi, Droid, Cursor) and the ACP adapters all run their agent
the same way: spawn it (``bridge/process.py``: own process group, capped lines, stderr tail),
read its stdout line by line, feed each line to a parser, write back what the parser queued
for the agent, note the agent's session id when the parser learns it, and reap the process
once its stdout ends. :class:`Pump` is that loop; an adapter reads it one line at a time::

    pump = Pump(parser, event="x_parse_failed")
    child = await pump.spawn(argv, cwd=cwd, env=env)
    while (blocks := await pump.read()) is not None:
        ...  # yield them; decide to stop early
    ...  # the output ended: pump.exit_code, child.stderr_tail()

Where the adapters differ they pass hooks: where the parser keeps the session id and what to
do with a new one (``session_id``/``on_session_id``: remember it, report it, warn that the agent
started a fresh session instead of resuming), how to complete a ``diff`` block from the file
on disk (``complete_diff``, run in a thread), and how patiently to reap (``exit_wait``/``grace``).
What happens after the output ended (resume again, start a fresh session, report a failure)
stays with the adapter: ``read()`` returning None is where it decides.

A parser that raises costs that line, never the session (``event`` is logged). A parser with
an ``outbox`` (Claude, Codex) has it emptied into the agent's stdin after every line and on
:meth:`Pump.flush`, one JSON line a message; a closed pipe drops them, and the exit is noticed
at the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from bridge.blocks import DiffBlock, ErrorBlock
from bridge.logs import get_logger
from bridge.parsers.failures import FailureReport, failure_block
from bridge.process import ChildProcess

log = get_logger("bridge.adapters.pump")

#: Seconds to wait for the exit status once stdout ended, and the grace of a termination.
EXIT_WAIT_S = 5.0
STOP_GRACE_S = 3.0

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class LineParser(Protocol[T_co]):
    """A sans-I/O parser: one line of the agent's stdout in, what it means out."""

    def feed(self, line: bytes) -> Sequence[T_co]: ...


@dataclass(eq=False)
class Pump(Generic[T]):
    """One agent process at a time, read through ``parser`` (see the module's docstring)."""

    parser: LineParser[T]
    _: KW_ONLY
    #: logged, with the line's head, when the parser raises on a line
    event: str
    #: where the parser keeps the agent's session id, and what to do with a new one (what it
    #: returns is shown after the line's blocks)
    session_id: Callable[[], str | None] | None = None
    on_session_id: Callable[[str], T | None] | None = None
    #: the session id ``on_session_id`` last had (or that was resumed): not passed again
    reported: str | None = None
    #: completes a ``diff`` block from the file on disk (run in a worker thread)
    complete_diff: Callable[[DiffBlock], DiffBlock] | None = None
    #: seconds to wait for the exit status once stdout ended, and then the grace of ending
    #: the process (None: a process that lingers is left to ``stop()``)
    exit_wait: float | None = EXIT_WAIT_S
    grace: float | None = STOP_GRACE_S
    #: the agent while it runs (None before ``spawn()`` and once its output ended)
    child: ChildProcess | None = field(default=None, init=False)
    #: the exit status ``read()`` reaped when the output ended (None: not known)
    exit_code: int | None = field(default=None, init=False)

    async def spawn(
        self, argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str]
    ) -> ChildProcess:
        """Start the agent in place of any previous one (``SpawnError``, and no child, when
        it cannot start)."""
        self.child = None
        self.exit_code = None
        self.child = await ChildProcess.spawn(argv, cwd=cwd, env=env)
        return self.child

    def running(self) -> bool:
        return self.child is not None and self.child.returncode is None

    async def read(self) -> list[T] | None:
        """What the next line of output means, or None once the output ended: then the
        process has been reaped (``exit_code``) and ``child`` is empty until the next spawn."""
        child = self.child
        assert child is not None, "read() before spawn()"
        line = await child.read_line()
        if line is None:
            try:
                self.exit_code = await self.reap(child)
            finally:
                if self.child is child:
                    self.child = None
            return None
        items = list(self._feed(line))
        await self.flush()
        if self.session_id is not None and (sid := self.session_id()) and sid != self.reported:
            self.reported = sid
            if self.on_session_id is not None and (notice := self.on_session_id(sid)):
                items.append(notice)
        if self.complete_diff is not None:
            for i, item in enumerate(items):
                if isinstance(item, DiffBlock):  # so T is a Block type, and so is the result
                    items[i] = cast(T, await asyncio.to_thread(self.complete_diff, item))
        return items

    def _feed(self, line: bytes) -> Sequence[T]:
        try:
            return self.parser.feed(line)
        except Exception as exc:  # a parser bug must not end the session
            log.warning(self.event, error=repr(exc), line=line[:200])
            return []

    async def reap(self, child: ChildProcess) -> int | None:
        """The exit status of a child whose stdout ended. One that lingers past ``exit_wait``
        is ended with ``grace`` (with ``grace`` None it is left to ``stop()``: None)."""
        try:
            return await child.wait(self.exit_wait)
        except TimeoutError:
            if self.grace is None:
                return None
            return await child.terminate(self.grace)

    async def send(self, message: dict[str, Any]) -> None:
        """Write one JSON message to the agent; an agent that is gone needs none."""
        if self.child is None:
            return
        with contextlib.suppress(BrokenPipeError):
            await self.child.write_line(json.dumps(message, ensure_ascii=False))

    async def flush(self) -> None:
        """Write what the parser queued for the agent (its ``outbox``), one line a message."""
        outbox: list[dict[str, Any]] | None = getattr(self.parser, "outbox", None)
        if not outbox:
            return
        self.parser.outbox = []  # type: ignore[attr-defined]
        for message in outbox:
            await self.send(message)

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """End the running agent's whole process group (``grace`` seconds after SIGTERM)."""
        child, self.child = self.child, None
        if child is not None:
            await child.terminate(grace)


def exit_failure(agent_id: str, name: str, code: int | None, stderr: str) -> ErrorBlock:
    """The ``error`` block for an agent (``name``) whose output ended before its turn did.

    An exit with status 0 here is output that stopped before the turn's result (a line cut
    short, no result line): ``malformed_output``, worth trying again, as for the per-turn CLIs.
    A signal still means a crash, and any other status is the agent's own error."""
    message = f"{name} exited with code {code}" if code is not None else f"{name} stopped"
    if code == 0:
        message = f"{name} exited before finishing its turn"
    return failure_block(
        agent_id,
        FailureReport(message=message, stderr=stderr, exit_code=code, malformed=code == 0),
        detail=stderr or None,
    )
