"""Pi (``@mariozechner/pi-coding-agent``): one ``pi --mode json -p`` process per turn.

Why this interface: ``--mode json`` streams the same events as ``--mode rpc`` (real text and
thinking deltas, tool start/end, usage with cost per message) from a process that lives only
for the turn, so nothing holds the session between turns and a terminal can pick it up with
``pi --session <id>``. RPC's extras (steering a running turn, abort without killing) are not
worth a long-lived process here; an interrupt stops the turn's process group.

Resume is by session id (``--session <uuid>``; a path would silently create a new file). An
unknown id exits 1 with ``No session found matching``: the turn is retried once fresh.
Pi has no approvals: its tools (read, bash, edit, write) run without asking.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    ExternalSession,
    ModelInfo,
    ResumeCommand,
)
from bridge.adapters.perturn import PerTurnAdapter, TurnParser
from bridge.blocks import Block
from bridge.handoff import pi as handoff_pi
from bridge.parsers.pi import PiParser
from bridge.process import build_env, run_capture

THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parse_model_table(text: str) -> list[ModelInfo]:
    """``pi --list-models`` output (a table headed ``provider  model …``) as model ids."""
    models: list[ModelInfo] = []
    in_table = False
    for raw in _ANSI.sub("", text).splitlines():
        cols = raw.split()
        if cols[:2] == ["provider", "model"]:
            in_table = True
        elif in_table and len(cols) >= 2:
            models.append(ModelInfo(id=f"{cols[0]}/{cols[1]}", label=f"{cols[1]} ({cols[0]})"))
        else:
            in_table = False
    return models


class PiAdapter(PerTurnAdapter):
    agent_id = "pi"
    display_name = "Pi"
    cli_binary = "pi"
    doc = (
        "# Pi\n\n"
        "**Use when** you want Pi's small, fast coding agent with any provider Pi knows "
        "(models.json), streamed live with thinking and cost.\n\n"
        "**Don't use when** you need approvals before commands run: Pi runs its tools "
        "(read, bash, edit, write) without asking.\n\n"
        "Models are `provider/model` ids as `pi --list-models` shows them; `effort` sets "
        "`--thinking` (off, minimal, low, medium, high, xhigh)."
    )
    resume_modes = ("session",)

    def argv(self, binary: str, resume_mode: str | None) -> list[str]:
        argv = [binary, "--mode", "json", "-p"]
        if self.model:
            argv += ["--model", self.model]
        if self.effort in THINKING_LEVELS:
            argv += ["--thinking", str(self.effort)]
        if resume_mode == "session" and self.session_id:
            argv += ["--session", self.session_id]
        return argv

    def retry_prompt(self, text: str) -> str:
        # Pi keeps a message whose model call failed in the session file (checked).
        return CONTINUE_PROMPT

    def new_parser(self) -> TurnParser:
        return PiParser()

    def resume_failed(self, exit_code: int, stderr: str, parser: TurnParser) -> bool:
        if exit_code == 0 or parser.saw_output:
            return False
        return "No session found" in stderr or not stderr.strip()

    async def list_models(self) -> list[ModelInfo]:
        result = await asyncio.to_thread(
            run_capture,
            [self.binary, "--list-models"],
            timeout=30.0,
            env=build_env(self.env),
        )
        # Pi prints the table on stderr.
        return parse_model_table(result.stdout + "\n" + result.stderr)

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        result, failed = cls.run_probe(
            config, ["--list-models"], timeout=30.0, code="pi_models_probe_failed"
        )
        if failed is not None:
            return [failed]
        # Pi prints the table on stderr.
        models = parse_model_table(result.stdout + "\n" + result.stderr)
        if not models:
            return [
                Check(
                    code="pi_no_models",
                    level="warn",
                    message="Pi lists no usable model",
                    hint="Set a provider API key or add a provider to ~/.pi/agent/models.json",
                )
            ]
        return [Check(code="pi_models", message=f"{len(models)} model(s) available")]

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=[cls.cli_binary or "pi", "--session", sid], cwd=cwd or ".")

    # Listing and mirroring terminal sessions: bridge/handoff/pi.py.

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        return handoff_pi.scan()

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        return handoff_pi.mirror(cwd, sid)
