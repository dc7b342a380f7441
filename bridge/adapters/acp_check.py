"""The ACP conformance kit's runner: the agent's process and the clock around the exchanges.

:func:`run_exchanges` starts the agent (``bridge/process.py``: its own process group, capped
lines, stderr tail), runs each exchange of ``bridge/parsers/acp_conformance.py`` with a bound
on its time, starts the agent afresh where a step asks for it (``session/load``), and ends the
whole process group at the end, whatever happened. A step that gets no verdict in time
fails; an agent that exits fails the step it was in (and the next ones find it gone); nothing
an agent sends or does not send makes it raise or wait without end.

:func:`check_adapter` runs it for a configured ACP agent (built-in, ``[acp.<name>]``, or a
drop-in ``AcpBase`` subclass) with that adapter's command line, environment and its
``before_load`` workaround (Gemini's), in a fresh temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from bridge.adapters.acp import AcpBase
from bridge.adapters.base import instantiate
from bridge.parsers.acp_conformance import Context, Exchange, Outcome, plan
from bridge.parsers.jsonrpc import decode
from bridge.process import ChildProcess, SpawnError

#: seconds a step may take (a prompt waits for a model) unless the caller says otherwise
STEP_TIMEOUT = 60.0
#: seconds of silence after which an exchange is told the agent is quiet
QUIET = 2.0
#: seconds between SIGTERM and SIGKILL of the agent's process group
GRACE = 3.0


async def _write(child: ChildProcess, lines: Sequence[bytes]) -> None:
    for line in lines:
        await child.write_line(line)


async def _exit_code(child: ChildProcess) -> int | None:
    try:
        return await child.wait(2.0)
    except TimeoutError:
        return None


async def _end(child: ChildProcess) -> None:
    """The agent's whole process group ended, and its stdin closed even when it had exited by
    itself (its pipe transport is then done, not left to the garbage collector)."""
    await child.terminate(GRACE)
    child.close_stdin()


async def run_step(
    child: ChildProcess, exchange: Exchange, timeout: float, quiet: float = QUIET
) -> Outcome:
    """One exchange against a running agent, in at most ``timeout`` seconds (plus the write
    of the lines it had in hand when the time ran out)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        async with asyncio.timeout(timeout):
            await _write(child, exchange.begin())
            while exchange.outcome is None:
                try:
                    line = await child.read_line(timeout=min(quiet, deadline - loop.time()))
                except TimeoutError:
                    if child.returncode is not None:
                        # Gone, though a child it left holds its stdout open.
                        exchange.exited(child.returncode, child.stderr_tail(2000))
                        break
                    await _write(child, exchange.quiet())
                    continue
                if line is None:
                    exchange.exited(await _exit_code(child), child.stderr_tail(2000))
                    break
                await _write(child, exchange.feed(decode(line)))
    except TimeoutError:
        if exchange.outcome is None:
            exchange.expire(timeout)
    except BrokenPipeError:
        exchange.exited(await _exit_code(child), child.stderr_tail(2000))
    except Exception as exc:  # a bug of the kit must cost one step, never the report
        exchange.fail(f"the kit could not go on: {exc!r}"[:300])
    return exchange.outcome or Outcome(exchange.name, "failed", "no verdict")


async def run_exchanges(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    step_timeout: float = STEP_TIMEOUT,
    quiet: float = QUIET,
    before_load: Callable[[str], Awaitable[None]] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every step of the kit against the agent ``argv`` starts; see the module's docstring."""
    ctx = Context(cwd=cwd)
    outcomes: list[Outcome] = []
    child: ChildProcess | None = None
    try:
        for item in plan(ctx):
            if isinstance(item, Exchange):
                if item.fresh_process and child is not None:
                    await _end(child)
                    child = None
                if item.fresh_process and before_load is not None and ctx.session_id:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(before_load(ctx.session_id), step_timeout)
                if child is None:
                    try:
                        child = await ChildProcess.spawn(argv, cwd=cwd, env=env)
                    except SpawnError as exc:
                        item.fail(f"could not start the agent: {exc}")
                if item.outcome is None:
                    assert child is not None
                    item = await run_step(child, item, step_timeout, quiet)
                else:
                    item = item.outcome
            outcomes.append(item)
            if on_outcome is not None:
                on_outcome(item)
    finally:
        if child is not None:
            await _end(child)
    return outcomes


def not_started(reason: str, on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """The report of an agent that could not even be started: ``initialize`` failed with
    ``reason``, every other step skipped."""
    outcomes: list[Outcome] = []
    for item in plan(Context(cwd="")):
        if isinstance(item, Exchange):
            item.fail(reason)
            item = item.outcome or Outcome(item.name, "failed", reason)
        outcomes.append(item)
        if on_outcome is not None:
            on_outcome(item)
    return outcomes


async def check_adapter(
    cls: type[AcpBase],
    values: Mapping[str, Any],
    *,
    step_timeout: float = STEP_TIMEOUT,
    on_outcome: Callable[[Outcome], None] | None = None,
    cwd: str | None = None,
) -> list[Outcome]:
    """The kit against the ACP agent ``cls``, made with the daemon's keywords ``values`` (its
    ``binary``, ``env``, ``options``, ``model``), in ``cwd``, else in a temporary directory
    removed after."""
    temporary = cwd is None
    cwd = cwd or tempfile.mkdtemp(prefix="acp-check-")
    try:
        try:
            adapter = instantiate(cls, {**values, "cwd": cwd})
            assert isinstance(adapter, AcpBase)
            argv = adapter.command_line()
        except Exception as exc:  # no command configured, or a drop-in class that raises
            return not_started(f"could not start the agent: {exc}", on_outcome)
        return await run_exchanges(
            argv,
            env=adapter.child_env(),
            cwd=adapter.cwd,
            step_timeout=step_timeout,
            before_load=adapter.before_load,
            on_outcome=on_outcome,
        )
    finally:
        if temporary:
            shutil.rmtree(cwd, ignore_errors=True)
