"""Cursor CLI (``cursor-agent``): one ``-p --output-format stream-json`` process per turn.

Why this interface: print mode with ``stream-json`` and ``--stream-partial-output`` gives text
and thinking deltas, tool calls with results and a final ``result`` with usage, from a process
that lives only for the turn (Cursor's own ``acp`` mode needs the same login and adds nothing
the bridge uses). The prompt goes on stdin, so a message starting with ``-`` is never a flag.

Known quirks handled: after a partial text segment Cursor repeats the segment's full text (the
parser drops the repeat), and ``--resume`` with an id Cursor does not know silently starts a new
chat and exits 0 — the adapter notices the different ``session_id`` and says ``session_reset``.

Cursor has no approval channel in print mode. Option ``force`` (default true) passes
``--force`` so edits and commands run; ``force = false`` leaves Cursor to refuse them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

from bridge.adapters.base import AdapterConfig, Check, ModelInfo, ResumeCommand
from bridge.adapters.perturn import PerTurnAdapter, TurnParser
from bridge.parsers.cursor import CursorParser
from bridge.process import build_env, run_capture

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MODEL_LINE = re.compile(r"^\s*([A-Za-z0-9][\w.:/\[\]=,-]*)\s+-\s+(.+?)\s*$")
#: How Cursor says it does not know a chat (when it does not just start a new one).
UNKNOWN_SESSION = re.compile(
    r"unknown\s+(session|chat)|(session|chat)\s+.*\s*not\s+found|could\s+not\s+resume", re.I
)


def parse_models(text: str) -> list[ModelInfo]:
    """``cursor-agent models`` output: ``<id> - <label>`` lines under a heading."""
    models: list[ModelInfo] = []
    for raw in _ANSI.sub("", text).splitlines():
        match = _MODEL_LINE.match(raw)
        if match:
            label = re.sub(r"\s*\((current|default)\)\s*$", "", match.group(2))
            models.append(ModelInfo(id=match.group(1), label=label))
    return models


def _logged_in(home: str | None) -> bool:
    path = Path(home or os.path.expanduser("~")) / ".cursor" / "cli-config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    auth = data.get("authInfo") if isinstance(data, dict) else None
    return isinstance(auth, dict) and bool(auth)


class CursorAdapter(PerTurnAdapter):
    agent_id = "cursor"
    display_name = "Cursor"
    cli_binary = "cursor-agent"
    doc = (
        "# Cursor\n\n"
        "**Use when** you want Cursor's agent (`cursor-agent`, logged in or with "
        "CURSOR_API_KEY) with live text, thinking and tool calls.\n\n"
        "**Don't use when** you need approvals before edits or commands: print mode has "
        "none; with option `force = false` Cursor refuses them instead.\n\n"
        "Models are the ids `cursor-agent models` lists."
    )

    def argv(self, binary: str, resume_mode: str | None) -> list[str]:
        argv = [binary, "-p", "--output-format", "stream-json", "--stream-partial-output"]
        if self.cwd:
            argv += ["--workspace", self.cwd]
        if self.model:
            argv += ["--model", self.model]
        if self.options.get("force", True):
            argv.append("--force")
        if self.options.get("trust", True):
            argv.append("--trust")
        if resume_mode == "resume" and self.session_id:
            argv += ["--resume", self.session_id]
        return argv

    def new_parser(self) -> TurnParser:
        return CursorParser()

    def resume_failed(self, exit_code: int, stderr: str, parser: TurnParser) -> bool:
        # Cursor usually starts a new chat for an unknown id (seen in the stream); some builds
        # refuse instead, saying so on stderr.
        return exit_code != 0 and not parser.saw_output and bool(UNKNOWN_SESSION.search(stderr))

    async def list_models(self) -> list[ModelInfo]:
        result = await asyncio.to_thread(
            run_capture, [self.binary, "models"], timeout=30.0, env=build_env(self.env)
        )
        return parse_models(result.stdout)

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        checks: list[Check] = []
        env = config.env
        if env.get("CURSOR_API_KEY") or os.environ.get("CURSOR_API_KEY"):
            checks.append(Check(code="cursor_api_key", message="CURSOR_API_KEY is set"))
        elif _logged_in(env.get("HOME") or os.environ.get("HOME")):
            checks.append(Check(code="cursor_login", message="logged in to Cursor"))
        else:
            checks.append(
                Check(
                    code="cursor_login_missing",
                    level="warn",
                    message="no CURSOR_API_KEY and no Cursor login found",
                    hint="Run `cursor-agent login` or set CURSOR_API_KEY in [agents.cursor] env",
                )
            )
        return checks

    @classmethod
    def process_names(cls) -> tuple[str, ...]:
        return ("cursor-agent", "agent")

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        binary = cls.cli_binary or "cursor-agent"
        return ResumeCommand(argv=[binary, "--resume", sid], cwd=cwd or ".")
