"""Claude Code: one long-lived ``claude -p`` process per session, spoken to in stream-json.

The process reads user messages and control answers on stdin and writes stream-json on
stdout (``bridge.parsers.claude`` turns it into blocks). It starts with the session's first
message and stays up across turns, so later turns cost no start-up; it is started again (with
``--resume``) when it died, the model changed, or the daemon stopped it after
``adapters.idle_stop_s`` without a turn (``bridge/hub/resident.py``).
Tools that need approval arrive as ``control_request`` ``can_use_tool`` because of
``--permission-prompt-tool stdio``; interrupt is a ``control_request`` too, and the process
survives it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    CliAdapter,
    ForkPoint,
    ModeInfo,
    ModelInfo,
    session_reset,
)
from bridge.adapters.handoff_hooks import HandoffModule, ModuleHandoff
from bridge.adapters.pump import Pump, exit_failure
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    ErrorBlock,
    SessionEndBlock,
    SystemBlock,
    UsageBlock,
)
from bridge.handoff import claude as handoff_claude
from bridge.logs import get_logger
from bridge.parsers.claude import ClaudeParser, is_unknown_session, user_message
from bridge.process import SpawnError, binary_version, build_env, check_cwd, resolve_binary

log = get_logger("bridge.adapters.claude")

MODELS = (
    ModelInfo(id="sonnet", label="Sonnet (latest)"),
    ModelInfo(id="opus", label="Opus (latest)"),
    ModelInfo(id="haiku", label="Haiku (latest)"),
)
STOP_GRACE_S = 3.0
#: One persistent ``claude -p`` process per session, speaking stream-json both ways, token
#: deltas included, permission prompts asked on stdio (the test suites run Claude with these too)
PRINT_FLAGS = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--permission-prompt-tool",
    "stdio",
    # each message taken from stdin is echoed when Claude takes it: a message steered into a
    # turn is known to be taken by that turn, or to start Claude's next one (docs/adapters.md)
    "--replay-user-messages",
)
#: Claude Code's permission modes (``--permission-mode``; ``set_permission_mode`` live)
MODES = (
    ModeInfo(
        id="default",
        label="Ask",
        description="Asks before edits and commands that are not pre-approved",
    ),
    ModeInfo(
        id="acceptEdits",
        label="Accept edits",
        description="Edits files without asking; still asks before other commands",
    ),
    ModeInfo(
        id="plan",
        label="Plan",
        description="Reads and plans: file edits are refused, commands still ask",
    ),
    ModeInfo(
        id="dontAsk",
        label="Don't ask",
        description="Never asks: what is not pre-approved is refused",
    ),
    ModeInfo(
        id="bypassPermissions",
        label="Bypass permissions",
        description="Runs everything without asking (Claude Code refuses this as root)",
    ),
)


class ClaudeAdapter(ModuleHandoff, CliAdapter):
    agent_id = "claude"
    handoff_module: ClassVar[HandoffModule] = handoff_claude
    display_name = "Claude Code"
    cli_binary = "claude"
    doc = (
        "# Claude Code\n\n"
        "**Use when** you want Anthropic's coding agent to read, run and change code in a "
        "project, with every risky tool call (shell commands, edits) sent to you for "
        "approval, live token streaming, thinking, plans and sub-agents.\n\n"
        "**Don't use when** Claude Code is not installed or not logged in on the daemon's "
        "machine (`claude` then `/login`, or an `ANTHROPIC_API_KEY`), or the session is "
        "open in a terminal right now.\n\n"
        "One `claude` process serves the session across turns; its session id is kept so a "
        "daemon restart resumes the same conversation. `/model sonnet|opus|haiku` switches "
        "model from the next turn. Modes are Claude Code's permission modes (`default`, "
        "`acceptEdits`, `plan`, `dontAsk`, `bypassPermissions`), switched live; "
        "`[agents.claude] options` `permission_mode` sets the default."
    )
    cap_thinking = True
    cap_permissions = True
    cap_subagents = True
    cap_interrupt = True
    cap_images = True
    cap_documents = True
    #: a message written to stdin during a turn joins it (docs/adapters.md, "Steer and fork")
    cap_input_during_turn = True
    cap_fork = "native"
    provides_models = True
    provides_usage = True
    handoff = "persistent"
    modes = MODES
    persistent_process = True

    def setup(self) -> None:
        self._parser = ClaudeParser(cwd=self.cwd)
        self._parser.refuse_edits = self._effective_mode() == "plan"
        # One pump for the adapter's life: its child is replaced when Claude is started again.
        self._pump: Pump[Block] = Pump(
            self._parser,
            event="claude_parse_failed",
            session_id=lambda: self._parser.session_id,
            on_session_id=self.remember_session_id,
            reported=self.session_id,
        )
        self._resumed: str | None = None
        self._pending: dict[str, Any] | None = None
        self._spawn_error: SpawnError | None = None
        #: user messages written to the running process (its first and any steered ones)
        self._written = 0
        #: a turn is being streamed; ``_ending``: its last blocks are on their way out
        self._in_turn = False
        self._ending = False

    # ---- life cycle --------------------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        path = resolve_binary(self.binary, build_env(self.env))
        check_cwd(self.cwd)
        self.binary = path
        version = await asyncio.to_thread(binary_version, path)
        # The process starts with the first message: Claude waits for one before it even
        # initializes, and a session nobody writes to should not hold a process.
        return self.make_agent_info(version=version, model=self.model)

    async def stop(self) -> None:
        await self._pump.stop(STOP_GRACE_S)

    def _argv(self, resume: str | None) -> list[str]:
        argv = [self.binary, *PRINT_FLAGS]
        if resume:
            argv += ["--resume", resume]
        elif self.fork_point is not None:
            argv += self._fork_args(self.fork_point)
        if self.model:
            argv += ["--model", self.model]
        if self.effort:
            argv += ["--effort", self.effort]
        mode = self._effective_mode()
        if mode:
            argv += ["--permission-mode", mode]
        return argv

    def _fork_args(self, fork: ForkPoint) -> list[str]:
        """Claude's own fork of the parent's session, cut after its first ``turns`` turns."""
        args = ["--resume", fork.agent_session_id, "--fork-session"]
        path = handoff_claude.transcript_path(fork.agent_session_id, self.cwd)
        if path is not None:
            try:
                with path.open("rb") as lines:
                    cut = handoff_claude.turn_end_uuid(iter(lines), fork.turns)
            except OSError as exc:
                log.warning("claude_fork_transcript_unreadable", error=repr(exc))
                cut = None
            if cut is not None:
                args += ["--resume-session-at", cut]
        return args

    async def _spawn(self, resume: str | None) -> None:
        child = await self._pump.spawn(self._argv(resume), cwd=self.cwd, env=build_env(self.env))
        self._written = 0
        self._resumed = resume
        self._parser.new_process()
        log.info("claude_started", pid=child.pid, resume=resume)

    def process_running(self) -> bool:
        return self._pump.running()

    async def warm_up(self) -> None:
        # Claude then waits for the first message; its own start-up (Node, its modules) is done.
        if not self._pump.running():
            await self._spawn(self.session_id)

    @property
    def pid(self) -> int | None:
        """The pid of the ``claude`` process this adapter runs (also in ``OWN_PIDS``)."""
        return self._pump.child.pid if self._pump.child is not None else None

    # ---- a turn ------------------------------------------------------------------------------

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        files = [(a.name, a.mime, a.data) for a in attachments or []]
        if self._in_turn:  # steered: Claude takes it at its next step, or right after its turn
            if self._ending or not self._pump.running():
                raise RuntimeError("Claude Code's turn is ending: the message waits for the next")
            await self._write(user_message(text, files))
            return
        self._pending = user_message(text, files)
        self._parser.agent_retried = False
        self._spawn_error = None
        if not self._pump.running():
            try:
                await self._spawn(self.session_id)
            except SpawnError as exc:
                self._spawn_error = exc
                return
        await self._write_pending()

    async def _write_pending(self) -> None:
        """The turn's own message (again, to a process started anew)."""
        if self._pending is not None:
            await self._write(self._pending)

    async def _write(self, message: dict[str, Any]) -> None:
        self._written += 1
        await self._pump.send(message)

    async def stream(self) -> AsyncIterator[Block]:
        self._in_turn, self._ending = True, False
        try:
            async for block in self._turn():
                yield block
        finally:
            self._in_turn = False

    def _steers_waiting(self) -> bool:
        """A message was steered into this turn that Claude has not taken yet: it takes it as
        its next turn once this one's ``result`` is out, which the bridge keeps in this turn."""
        return self._parser.replayed < self._written

    async def _turn(self) -> AsyncIterator[Block]:
        reset_done = False
        respawned = False
        output_seen = False
        while True:
            child = self._pump.child
            if child is None:
                error = self._spawn_error
                yield ErrorBlock(
                    code=error.code if error else "agent_exited",
                    message=str(error) if error else "Claude Code is not running",
                )
                for block in self._parser.close_turn("error"):
                    yield block
                return
            blocks = await self._pump.read()
            if blocks is None:
                code = self._pump.exit_code
                stderr = child.stderr_tail()
                missing = self._parser.session_missing or is_unknown_session(stderr)
                if missing and self._resumed and not reset_done:
                    reset_done = True
                    yield await self._reset()
                    continue
                if not output_seen and not respawned and not missing:
                    # It died between turns (killed, crashed idle): start it again once.
                    respawned = True
                    await self._spawn(self.session_id)
                    await self._write_pending()
                    continue
                yield exit_failure("claude", "Claude Code", code, stderr)
                for block in self._parser.close_turn("error", code):
                    yield block
                return
            output_seen = True
            if self._parser.session_missing and self._resumed and not reset_done:
                reset_done = True
                yield await self._reset()
                output_seen = False
                continue
            end = next((b for b in blocks if isinstance(b, SessionEndBlock)), None)
            if end is not None and self._steers_waiting():
                if end.reason == "interrupted":
                    self._parser.interrupt()  # the steered message's turn is stopped too
                    await self._pump.flush()
                blocks = [b for b in blocks if b is not end and not isinstance(b, UsageBlock)]
                end = None
            self._ending = end is not None
            for block in blocks:
                yield block
                if isinstance(block, SessionEndBlock):
                    return

    async def _reset(self) -> SystemBlock:
        """The session to resume is gone: start a fresh one and resend the message."""
        old = self._resumed
        await self._pump.stop(STOP_GRACE_S)
        self.session_id = None
        await self._spawn(None)
        await self._write_pending()
        return session_reset(
            f"Claude Code no longer knows session {old}; continuing in a new session",
            old_agent_session_id=old,
        )

    # ---- control -----------------------------------------------------------------------------

    def retry_prompt(self, text: str) -> str:
        # Claude keeps a message whose model call failed in the conversation: sending it
        # again would put it there twice (checked against the fake server's request log).
        return CONTINUE_PROMPT

    def agent_retried(self, block: ErrorBlock) -> bool:
        # Claude says so with `api_retry` lines (CLAUDE_CODE_MAX_RETRIES, default 10).
        return self._parser.agent_retried

    async def interrupt(self) -> None:
        if self._pump.child is None:
            return
        self._parser.interrupt()
        await self._pump.flush()

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        self._parser.answer_permission(request_id, option_id)
        if self._parser.left_plan:
            self.mode = "default"  # a process started later must not go back to plan mode
        await self._pump.flush()

    def _effective_mode(self) -> str | None:
        mode = self.mode or self.options.get("permission_mode")
        return mode if isinstance(mode, str) and mode else None

    async def set_mode(self, mode: str) -> bool:
        """Live: a ``set_permission_mode`` control request to the running process, which
        applies to its next tool call; a process started later gets ``--permission-mode``."""
        self.mode = mode
        self._parser.refuse_edits = mode == "plan"
        if self._pump.running():
            self._parser.set_permission_mode(mode)
            await self._pump.flush()
        return True

    async def list_models(self) -> list[ModelInfo]:
        return list(MODELS)

    async def get_usage(self) -> UsageBlock | None:
        return self._parser.usage()

    # ---- environment ---------------------------------------------------------------------------

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        config = config or AdapterConfig()
        checks = super().check_environment(config)
        checks.extend(_auth_checks(config))
        checks.append(_cwd_check(config))
        return checks

    # ---- terminal handoff (bridge/handoff/claude.py; docs/session-handoff.md) -----------------

    # scan, ownership, mirror and resume command: ModuleHandoff, through handoff_module.

    @classmethod
    def latest_sid_for_cwd(cls, cwd: str) -> str | None:
        return handoff_claude.latest_sid(cwd)


def _auth_checks(config: AdapterConfig) -> list[Check]:
    """Where Claude Code's credentials come from, and a key that overrides a login."""
    env = build_env(config.env)

    def where(name: str) -> str:
        return "the adapter config env" if name in config.env else "the server environment"

    config_dir = Path(env.get("CLAUDE_CONFIG_DIR") or Path(env.get("HOME", "~")) / ".claude")
    login = (config_dir.expanduser() / ".credentials.json").is_file()
    checks: list[Check] = []
    if env.get("ANTHROPIC_API_KEY"):
        if login:
            checks.append(
                Check(
                    code="claude_api_key_overrides_subscription",
                    level="warn",
                    message="ANTHROPIC_API_KEY is set and overrides the Claude subscription "
                    "login: usage is billed to the API key",
                    detail=f"set in {where('ANTHROPIC_API_KEY')}",
                    hint="Unset ANTHROPIC_API_KEY to use the subscription login",
                )
            )
        else:
            checks.append(
                Check(
                    code="claude_auth_api_key",
                    message="authenticates with ANTHROPIC_API_KEY",
                    detail=f"set in {where('ANTHROPIC_API_KEY')}",
                )
            )
    elif env.get("ANTHROPIC_AUTH_TOKEN") or env.get("CLAUDE_CODE_OAUTH_TOKEN"):
        name = (
            "ANTHROPIC_AUTH_TOKEN" if env.get("ANTHROPIC_AUTH_TOKEN") else "CLAUDE_CODE_OAUTH_TOKEN"
        )
        checks.append(
            Check(
                code="claude_auth_token", message=f"authenticates with {name}", detail=where(name)
            )
        )
    elif env.get("CLAUDE_CODE_USE_BEDROCK") or env.get("CLAUDE_CODE_USE_VERTEX"):
        checks.append(Check(code="claude_auth_cloud", message="uses Bedrock or Vertex credentials"))
    elif login:
        checks.append(
            Check(
                code="claude_auth_login",
                message="uses the Claude login",
                detail=str(config_dir / ".credentials.json"),
            )
        )
    else:
        checks.append(
            Check(
                code="claude_auth_missing",
                level="warn",
                message="no Claude credentials found (no login, no ANTHROPIC_API_KEY)",
                hint="Run `claude` then `/login`, or set ANTHROPIC_API_KEY in [agents.claude] env",
            )
        )
    return checks


def _cwd_check(config: AdapterConfig) -> Check:
    wanted = config.options.get("cwd")
    cwd = wanted if isinstance(wanted, str) and wanted else os.getcwd()
    try:
        check_cwd(cwd)
    except SpawnError as exc:
        return Check(code="claude_cwd_invalid", level="error", message=str(exc))
    return Check(code="claude_cwd_valid", message=f"working directory {cwd} is usable")
