"""The shared shape of agents that run one CLI process per turn (Pi, Droid, Cursor).

Each turn spawns the CLI with the prompt on stdin, feeds its stdout lines to a sans-I/O parser
and yields the parser's blocks, then one ``session_end``. The next turn resumes the session id
the previous one reported. When a resume fails because the agent no longer knows the session
(it exits non-zero before printing anything, or says so on stderr), the turn is retried once
with a fresh session and the client is told with a ``system`` block of code ``session_reset``.

A subclass says how to build the command line (:meth:`PerTurnAdapter.argv`), which parser
reads the output (:meth:`PerTurnAdapter.new_parser`) and, optionally, which resume modes to
try before starting fresh (:attr:`PerTurnAdapter.resume_modes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Protocol

from bridge.adapters.base import (
    CliAdapter,
    DetectedAgent,
    FailureReport,
    failure_block,
    session_reset,
)
from bridge.adapters.diffs import complete_diff
from bridge.adapters.pump import Pump
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    EndReason,
    ErrorBlock,
    SessionEndBlock,
    UsageBlock,
)
from bridge.handoff import procscan
from bridge.logs import get_logger
from bridge.process import ChildProcess, SpawnError, build_env

log = get_logger("bridge.adapters")

#: Seconds between SIGTERM and SIGKILL when a turn is interrupted.
KILL_GRACE_S = 3.0


class TurnParser(Protocol):
    """What the per-turn adapters need from a parser (see bridge/parsers/)."""

    session_id: str | None
    saw_output: bool
    failed: bool
    error_message: str | None
    usage: UsageBlock

    def feed(self, line: bytes | str) -> list[Block]: ...

    def close_open(self) -> list[Block]: ...


def add_usage(total: UsageBlock, turn: UsageBlock) -> UsageBlock:
    """Running totals for the bridge session: tokens and cost add up, context is the latest."""

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    cost = None
    if total.cost_usd is not None or turn.cost_usd is not None:
        cost = round((total.cost_usd or 0.0) + (turn.cost_usd or 0.0), 10)
    return UsageBlock(
        input_tokens=plus(total.input_tokens, turn.input_tokens),
        output_tokens=plus(total.output_tokens, turn.output_tokens),
        cached_input_tokens=plus(total.cached_input_tokens, turn.cached_input_tokens),
        cost_usd=cost,
        context_used=turn.context_used or total.context_used,
        context_size=turn.context_size or total.context_size,
    )


def has_usage(usage: UsageBlock) -> bool:
    return any(
        v is not None
        for v in (usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.context_used)
    )


def cli_running_in(cwd: str, names: tuple[str, ...]) -> bool:
    """Whether a process of this CLI that the daemon did not start runs in ``cwd``.

    The CLIs here keep no lock or registry saying which session a terminal has open, so any
    such process in the session's directory counts as the terminal owning it: the bridge
    waits rather than risk two writers on one session.
    """
    try:
        want = os.path.realpath(cwd)
    except OSError:
        return False
    for proc in procscan.scan(procscan.argv_names(*names)):
        if proc.cwd and os.path.realpath(proc.cwd) == want:
            return True
    return False


class PerTurnAdapter(CliAdapter, abstract=True):
    """One process per turn; resume by session id between turns."""

    handoff = "per_turn"
    cap_interrupt = True
    # Pi, Droid and Cursor all stream thinking and list their models.
    cap_thinking = True
    provides_models = True
    provides_usage = True
    detect_timeout = 20.0

    #: How to continue a known session, tried in order before starting fresh (e.g. "resume").
    resume_modes: ClassVar[tuple[str, ...]] = ("resume",)
    #: Resume modes that continue under a new session id (a fork) rather than the same one.
    forking_modes: ClassVar[frozenset[str]] = frozenset()

    def setup(self) -> None:
        self._prompt: str | None = None
        self._pump: Pump[Block] | None = None
        self._parser: TurnParser | None = None
        self._interrupted = False
        self._killer: asyncio.Task[None] | None = None
        self._total = UsageBlock()
        self._version: str | None = None

    # ---- what a subclass provides ---------------------------------------------------------------

    def argv(self, binary: str, resume_mode: str | None) -> list[str]:
        """The command line of one turn; ``resume_mode`` None means a fresh session."""
        raise NotImplementedError

    def new_parser(self) -> TurnParser:
        raise NotImplementedError

    def resume_failed(self, exit_code: int, stderr: str, parser: TurnParser) -> bool:
        """Whether a failed resumed run means the agent does not know the session."""
        return exit_code != 0 and not parser.saw_output

    def resume_plan(self) -> list[str]:
        """The resume modes to try this turn, in order, before a fresh session."""
        return list(self.resume_modes)

    def resume_result(self, mode: str, ok: bool) -> None:
        """Told after each resumed run whether ``mode`` worked (to skip it next time)."""

    def child_env(self) -> dict[str, str]:
        return build_env(self.env)

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        return cli_running_in(cwd, cls.process_names())

    @classmethod
    def process_names(cls) -> tuple[str, ...]:
        """The program names a terminal's process of this CLI shows in ``/proc``."""
        return (cls.cli_binary,) if cls.cli_binary else ()

    # ---- the contract ---------------------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        found = await asyncio.to_thread(self.detect, self.binary or None)
        self._version = found.version if isinstance(found, DetectedAgent) else None
        return self.make_agent_info(version=self._version, model=self.model)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        self._prompt = text
        self._interrupted = False

    async def interrupt(self) -> None:
        self._interrupted = True
        self._kill_child()

    async def stop(self) -> None:
        self._interrupted = True
        child = self._running()
        if child is not None:
            await child.terminate(KILL_GRACE_S)

    async def get_usage(self) -> UsageBlock | None:
        return self._total if has_usage(self._total) else None

    def _kill_child(self) -> None:
        """SIGTERM the turn's process group now, SIGKILL it after a grace period."""
        child = self._running()
        if child is None:
            return
        child.signal_group(signal.SIGTERM)

        async def later() -> None:
            await asyncio.sleep(KILL_GRACE_S)
            if child.returncode is None:
                child.signal_group(signal.SIGKILL)

        self._killer = asyncio.create_task(later())

    def _running(self) -> ChildProcess | None:
        """The turn's process while it runs."""
        child = self._pump.child if self._pump is not None else None
        return child if child is not None and child.returncode is None else None

    def _pump_for(self, parser: TurnParser, wanted: str | None, mode: str | None) -> Pump[Block]:
        """The pump of one run that resumes ``wanted`` in ``mode`` (None: a fresh session)."""
        return Pump(
            parser,
            event=f"{self.agent_id}_parse_failed",
            session_id=lambda: parser.session_id,
            on_session_id=lambda sid: self._session_started(sid, wanted, mode),
            complete_diff=lambda block: complete_diff(block, self.cwd),
            exit_wait=None,
        )

    def _session_started(self, sid: str, wanted: str | None, mode: str | None) -> Block | None:
        """The run reported its session ``sid``: kept for the next turn, and a warning when
        the agent started a new session instead of resuming ``wanted``."""
        notice = None
        if wanted and sid != wanted and mode not in self.forking_modes:
            notice = session_reset(
                f"{self.display_name} no longer knew session {wanted}; "
                f"it started a new one ({sid})",
                old=wanted,
                new=sid,
            )
        self.remember_session_id(sid)
        return notice

    # ---- one turn -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[Block]:
        prompt, self._prompt = self._prompt or "", None
        modes: list[str | None] = list(self.resume_plan()) if self.session_id else []
        modes.append(None)
        while modes:
            mode = modes.pop(0)
            wanted = self.session_id if mode is not None else None
            parser = self._parser = self.new_parser()
            pump = self._pump = self._pump_for(parser, wanted, mode)
            try:
                child = await pump.spawn(
                    self.argv(self.binary, mode), cwd=self.cwd, env=self.child_env()
                )
            except SpawnError as exc:
                self._pump = None
                yield ErrorBlock(code=exc.code, message=str(exc))
                yield SessionEndBlock(reason="error")
                return
            if self._interrupted:  # interrupted while it was starting
                self._kill_child()
            try:
                with contextlib.suppress(BrokenPipeError):
                    await child.write(prompt)
                child.close_stdin()
                while (blocks := await pump.read()) is not None:
                    for block in blocks:
                        yield block
                code = pump.exit_code
                assert code is not None  # reaped without a time limit
            finally:
                if child.returncode is None:
                    await child.terminate(KILL_GRACE_S)
                if self._killer is not None:
                    self._killer.cancel()
                    self._killer = None
                self._pump = None
            if self._interrupted:
                async for block in self._end(parser, "interrupted", code):
                    yield block
                return
            resumed_badly = mode is not None and self.resume_failed(
                code, child.stderr_tail(), parser
            )
            if mode is not None:
                self.resume_result(mode, not resumed_badly)
            if resumed_badly:
                log.info("resume_failed", agent=self.agent_id, mode=mode, exit_code=code)
                if modes[0] is None:
                    yield session_reset(
                        f"{self.display_name} could not resume session {wanted}; "
                        "continuing in a new session",
                        old=wanted,
                    )
                continue
            failed = code != 0 or parser.failed
            if not failed and getattr(parser, "finished", True) is False:
                # Exit 0 without the CLI's closing event: its output was cut short.
                failed = True
                yield failure_block(
                    self.agent_id,
                    FailureReport(
                        message=f"{self.display_name} exited without finishing its output",
                        stderr=child.stderr_tail().strip(),
                        exit_code=code,
                        malformed=True,
                    ),
                )
            elif failed and not parser.failed:
                tail = child.stderr_tail().strip()
                yield failure_block(
                    self.agent_id,
                    FailureReport(
                        message=f"{self.display_name} exited with code {code}",
                        stderr=tail,
                        exit_code=code,
                    ),
                    detail=tail[-2000:] or None,
                )
            async for block in self._end(parser, "error" if failed else "completed", code):
                yield block
            return

    def agent_retried(self, block: ErrorBlock) -> bool:
        # A parser that saw the CLI retry the model call itself says so (Pi: auto_retry_start).
        return bool(getattr(self._parser, "agent_retried", False))

    async def _end(
        self, parser: TurnParser, reason: EndReason, code: int | None
    ) -> AsyncIterator[Block]:
        for block in parser.close_open():
            yield block
        if has_usage(parser.usage):
            self._total = add_usage(self._total, parser.usage)
            yield self._total
        yield SessionEndBlock(reason=reason, exit_code=code, agent_session_id=self.session_id)
