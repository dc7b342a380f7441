"""Codex: one ``codex app-server`` process per turn, spoken to in JSON-RPC over stdio.

``codex app-server`` is what Codex's own IDE integrations use: it streams text and reasoning
deltas, command output and exit codes, file changes with diffs, plan updates and token usage,
and asks for approval with server requests (``bridge.parsers.codex`` is the client).
``codex exec --json`` only reports whole items and cannot ask for approval, so it is not used.

Each turn starts a fresh process that resumes the thread (``thread/resume``) and exits when
the turn ends, so nothing holds the session between turns: a terminal can ``codex resume`` it
in the meantime, a crash loses at most one turn, and a daemon restart needs nothing special.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from bridge import __version__
from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    CliAdapter,
    ModeInfo,
    ModelInfo,
)
from bridge.adapters.diffs import text_now
from bridge.adapters.handoff_hooks import HandoffModule, ModuleHandoff
from bridge.adapters.pump import Pump, exit_failure
from bridge.blocks import AgentInfoBlock, Block, DiffBlock, ErrorBlock, SessionEndBlock, UsageBlock
from bridge.handoff import codex as handoff_codex
from bridge.logs import get_logger
from bridge.parsers import decode_object, jsonrpc
from bridge.parsers.codex import CodexParser, fill_diff, initialize_params, parse_models
from bridge.process import (
    ChildProcess,
    SpawnError,
    binary_version,
    build_env,
    check_cwd,
    resolve_binary,
)

log = get_logger("bridge.adapters.codex")

STOP_GRACE_S = 3.0
#: How long a steered message waits for Codex to say whether the running turn took it.
STEER_TIMEOUT_S = 10.0
MODEL_LIST_TIMEOUT_S = 20.0
#: Codex's "Auto" preset: commands run sandboxed in the project without asking; the model
#: asks (a permission request) when it needs more. Override in ``[agents.codex] options``.
DEFAULT_APPROVAL = "on-request"
DEFAULT_SANDBOX = "workspace-write"
#: Codex's approval presets (its ``/approvals``): mode → (approval policy, sandbox)
MODE_POLICIES = {
    "read-only": ("on-request", "read-only"),
    "auto": ("on-request", "workspace-write"),
    "full-access": ("never", "danger-full-access"),
}
MODES = (
    ModeInfo(
        id="auto",
        label="Auto",
        description="Edits and runs commands in the project's sandbox; asks for anything more",
    ),
    ModeInfo(
        id="read-only",
        label="Read only",
        description="Reads files; asks before any edit or command that changes something",
    ),
    ModeInfo(
        id="full-access",
        label="Full access",
        description="No sandbox and no questions: edits and runs anything",
    ),
)


class CodexAdapter(ModuleHandoff, CliAdapter):
    agent_id = "codex"
    # terminal handoff (bridge/handoff/codex.py; docs/session-handoff.md): ModuleHandoff
    handoff_module: ClassVar[HandoffModule] = handoff_codex
    display_name = "Codex"
    cli_binary = "codex"
    doc = (
        "# Codex\n\n"
        "**Use when** you want OpenAI's Codex agent to work in a project: it runs commands "
        "in a sandbox, edits files with patches (shown as diffs), keeps a plan, and asks "
        "before anything outside its sandbox.\n\n"
        "**Don't use when** Codex is not installed or not logged in on the daemon's machine "
        "(`codex login`), or the session is running in a terminal right now.\n\n"
        "Each turn runs `codex app-server` and resumes the Codex thread, so the conversation "
        "survives daemon restarts. Options (`[agents.codex] options`): `approval_policy` "
        "(`untrusted`, `on-request` (default), `never`), `sandbox` (`read-only`, "
        "`workspace-write` (default), `danger-full-access`), `config` (Codex config overrides). "
        "Modes are Codex's approval presets: `auto` (on-request, workspace-write), `read-only` "
        "(on-request, read-only), `full-access` (never, danger-full-access), from the next turn."
    )
    cap_thinking = True
    cap_permissions = True
    cap_interrupt = True
    cap_images = True
    #: ``turn/steer`` on the turn's app-server; a fork is ``thread/fork`` through a turn
    cap_input_during_turn = True
    cap_fork = "native"
    provides_models = True
    provides_usage = True
    handoff = "per_turn"
    modes = MODES

    def setup(self) -> None:
        self._pump: Pump[Block] | None = None
        self._parser: CodexParser | None = None
        self._agent_retried = False
        self._pending: tuple[str, list[str]] | None = None
        self._usage: UsageBlock | None = None
        #: set whenever the turn's app-server said something (a steer waits for its answer)
        self._heard = asyncio.Event()

    # ---- life cycle --------------------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        self.binary = resolve_binary(self.binary, build_env(self.env))
        check_cwd(self.cwd)
        version = await asyncio.to_thread(binary_version, self.binary)
        return self.make_agent_info(version=version, model=self.model)

    async def stop(self) -> None:
        if self._pump is not None:
            await self._pump.stop(STOP_GRACE_S)

    @property
    def pid(self) -> int | None:
        """The pid of the running ``codex app-server`` (also in ``OWN_PIDS``), if a turn runs."""
        child = self._pump.child if self._pump is not None else None
        return child.pid if child is not None else None

    def _policy(self) -> tuple[str | None, str | None]:
        """(approval policy, sandbox): the mode's preset, else the options, else "auto"."""
        if self.mode in MODE_POLICIES:
            return MODE_POLICIES[self.mode]
        return (
            self._option("approval_policy", DEFAULT_APPROVAL),
            self._option("sandbox", DEFAULT_SANDBOX),
        )

    async def set_mode(self, mode: str) -> bool:
        """Each turn starts its own ``codex app-server``: the next one gets the new policy."""
        self.mode = mode
        return False

    def _option(self, name: str, default: str | None) -> str | None:
        value = self.options.get(name, default)
        return value if isinstance(value, str) and value else None

    # ---- a turn ------------------------------------------------------------------------------

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        images = [
            f"data:{a.mime};base64,{base64.b64encode(a.data).decode('ascii')}"
            for a in attachments or []
            if a.mime.startswith("image/")
        ]
        if self._parser is not None:  # a turn runs: into it
            await self._steer(self._parser, text, images)
            return
        self._pending = (text, images)

    async def _steer(self, parser: CodexParser, text: str, images: list[str]) -> None:
        """``turn/steer`` on the running turn's app-server, once it has said which turn runs;
        raises when Codex did not take the input (no turn of its runs any more)."""
        async with asyncio.timeout(STEER_TIMEOUT_S):
            while parser.turn_id is None and not parser.done and self._parser is parser:
                await self._next_line()
            rid = parser.steer(text, images)
            if rid is None or self._pump is None:
                raise RuntimeError("no Codex turn is running")
            await self._pump.flush()
            while parser.steers.get(rid) is None and not parser.done and self._parser is parser:
                await self._next_line()
        if not parser.steers.get(rid):
            raise RuntimeError("Codex did not take the message into its turn")

    async def _next_line(self) -> None:
        self._heard.clear()
        await self._heard.wait()

    async def stream(self) -> AsyncIterator[Block]:
        if self._pending is None:
            return
        text, images = self._pending
        config = self.options.get("config")
        parser = CodexParser(
            cwd=self.cwd,
            model=self.model,
            effort=self.effort,
            approval_policy=self._policy()[0],
            sandbox=self._policy()[1],
            config=config if isinstance(config, dict) else None,
            client_version=__version__,
        )
        self._parser = parser
        pump = self._pump = Pump(
            parser,
            event="codex_parse_failed",
            session_id=lambda: parser.thread_id,
            on_session_id=self.remember_session_id,
            reported=self.session_id,
            complete_diff=_complete_diff,
        )
        try:
            child = await pump.spawn(
                [self.binary, "app-server"], cwd=self.cwd, env=build_env(self.env)
            )
        except SpawnError as exc:
            yield ErrorBlock(code=exc.code, message=str(exc))
            for block in parser.close_turn("error"):
                yield block
            return
        log.info("codex_started", pid=child.pid, resume=self.session_id)
        fork = self.fork_point
        try:
            parser.start(
                text,
                resume=self.session_id,
                images=images,
                fork=(fork.agent_session_id, fork.turns) if fork else None,
            )
            await pump.flush()
            while not parser.done:
                blocks = await pump.read()
                self._heard.set()
                if blocks is None:
                    yield exit_failure("codex", "Codex", pump.exit_code, child.stderr_tail())
                    for block in parser.close_turn("error", pump.exit_code):
                        yield block
                    return
                for block in blocks:
                    yield block
                    if isinstance(block, SessionEndBlock):
                        return
        finally:
            self._usage = parser.usage() or self._usage
            self._agent_retried = parser.agent_retried
            self._parser = None
            self._pump = None
            self._heard.set()
            # also what the finished app-server left behind in its process group
            await child.terminate(STOP_GRACE_S)

    def retry_prompt(self, text: str) -> str:
        # The thread keeps a message whose turn failed (checked against a fake server's log).
        return CONTINUE_PROMPT

    def agent_retried(self, block: ErrorBlock) -> bool:
        # Codex announces its own retries (`request_max_retries`, `stream_max_retries`).
        return self._agent_retried

    async def _flush(self) -> None:
        if self._pump is not None:
            await self._pump.flush()

    # ---- control -----------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self._parser is None:
            return
        self._parser.interrupt()
        await self._flush()

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        if self._parser is None:
            raise KeyError(request_id)
        self._parser.answer_permission(request_id, option_id)
        await self._flush()

    async def get_usage(self) -> UsageBlock | None:
        return (self._parser.usage() if self._parser else None) or self._usage

    async def list_models(self) -> list[ModelInfo]:
        """Ask ``codex app-server`` (``model/list``) for the models of the configured account."""
        binary = resolve_binary(self.binary, build_env(self.env))
        child = await ChildProcess.spawn([binary, "app-server"], env=build_env(self.env))
        try:
            async with asyncio.timeout(MODEL_LIST_TIMEOUT_S):
                await child.write_line(
                    json.dumps(jsonrpc.request(1, "initialize", initialize_params()))
                )
                await _answer(child, 1)
                await child.write_line(json.dumps(jsonrpc.notification("initialized")))
                await child.write_line(json.dumps(jsonrpc.request(2, "model/list", {})))
                result = await _answer(child, 2)
        finally:
            await child.terminate(STOP_GRACE_S)
        return [ModelInfo(id=mid, label=label) for mid, label in parse_models(result)]

    # ---- environment ---------------------------------------------------------------------------

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        config = config or AdapterConfig()
        checks = super().check_environment(config)
        checks.append(_auth_check(config))
        wanted = config.options.get("cwd")
        cwd = wanted if isinstance(wanted, str) and wanted else os.getcwd()
        try:
            check_cwd(cwd)
        except SpawnError as exc:
            checks.append(Check(code="codex_cwd_invalid", level="error", message=str(exc)))
        else:
            checks.append(
                Check(code="codex_cwd_valid", message=f"working directory {cwd} is usable")
            )
        return checks


async def _answer(child: ChildProcess, request_id: int) -> Any:
    """The result of JSON-RPC request ``request_id`` (other lines are skipped)."""
    while (line := await child.read_line()) is not None:
        msg = decode_object(line)
        if msg is not None and msg.get("id") == request_id and "method" not in msg:
            if "error" in msg:
                raise RuntimeError(f"codex app-server: {msg['error']}")
            return msg.get("result")
    raise RuntimeError(f"codex app-server exited: {child.stderr_tail(500)}")


def _complete_diff(block: DiffBlock) -> DiffBlock:
    """Fill a Codex diff with the file's whole text as it is now, after the change."""
    return fill_diff(block, text_now(Path(block.path), errors="replace"))


def _auth_check(config: AdapterConfig) -> Check:
    """Where Codex's credentials come from: its login, an API key, or a custom provider."""
    env = build_env(config.env)
    home = Path(env.get("CODEX_HOME") or Path(env.get("HOME", "~")) / ".codex").expanduser()
    if (home / "auth.json").is_file():
        return Check(code="codex_auth_login", message="uses the Codex login", detail=str(home))
    for name in ("CODEX_API_KEY", "OPENAI_API_KEY"):
        if env.get(name):
            where = "the adapter config env" if name in config.env else "the server environment"
            return Check(code="codex_auth_api_key", message=f"{name} is set", detail=where)
    config_toml = home / "config.toml"
    with contextlib.suppress(OSError):
        if "model_provider" in config_toml.read_text(errors="replace"):
            return Check(
                code="codex_auth_provider",
                message="uses the model provider configured in config.toml",
                detail=str(config_toml),
            )
    return Check(
        code="codex_auth_missing",
        level="warn",
        message="no Codex login, API key or custom provider found",
        hint="Run `codex login`, or set OPENAI_API_KEY in [agents.codex] env",
    )
