"""Gemini CLI through its native ACP mode: ``gemini --acp --debug -m <model>``.

Why ACP and not ``gemini -p … -o stream-json`` (both checked against Gemini CLI 0.61.0):
ACP keeps one process for the whole session (no Node start-up per turn), asks
``session/request_permission`` before risky tools so the app can approve them (stream-json
needs the approval mode fixed up front), streams thoughts (stream-json drops them), reports
edits as structured diffs and stops a turn with ``session/cancel`` instead of a kill.
stream-json has one thing ACP lacks: shell output in tool results. Gemini's ACP mode drops
a shell tool's output unless ``--debug`` is on (its display then is the text the model sees),
so the adapter passes ``--debug``; it only makes stderr chattier.

Gemini quirks handled here (all seen in 0.61.0):

- the file-system capability stays off by default: Gemini treats any error of
  ``fs/read_text_file`` (including "not found") as fatal and then cannot create new files
  through a client;
- ``session/load`` first rewrites the session's chat file
  (``~/.gemini/tmp/<project>/chats/session-<UTC minute>-<id8>.jsonl``) and only then reads it:
  when the load happens within the minute in the file's name, it finds the session empty,
  fails, and the next Gemini start deletes the now empty file. Before a load the adapter
  renames that one file to the previous minute (Gemini reads the time from inside the file);
- after answering ``session/load`` Gemini keeps replaying the history for a moment, so a load
  waits until the agent has been quiet before the first turn;
- a mode switch after "Allow for this session" arrives as the text chunk
  ``[MODE_UPDATE] <mode>``; thoughts carry an empty ``****`` subject line when the model gave
  none; tool names only live in the tool call id (``<tool>__<call id>``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from bridge.adapters.acp import AcpBase
from bridge.adapters.base import AdapterConfig, Check, ModeInfo, ModelInfo
from bridge.blocks import ErrorBlock
from bridge.parsers.failures import GEMINI_PERSONAL_HINT

_MODE_UPDATE = re.compile(r"\[MODE_UPDATE\]\s+(\S+)")
#: ``security.auth.selectedType`` of "Login with Google"
PERSONAL_LOGIN = "oauth-personal"
#: set for an organization's account (Workspace, Code Assist Standard/Enterprise)
_PROJECT_VARS = ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_PROJECT_ID")
_KEY_VARS = (
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
)


class GeminiAdapter(AcpBase):
    agent_id = "gemini"
    display_name = "Gemini CLI"
    cli_binary = "gemini"
    acp_args = ("--acp",)
    serve_fs = False
    load_settle = 0.75
    cap_images = True
    doc = (
        "# Gemini CLI\n\n"
        "**Use when** you want Google's Gemini models with approvals from the app: shell "
        "commands and edits ask first (mode `default`), thoughts stream, edits arrive as "
        "diffs.\n\n"
        "**Don't use when** Gemini CLI is not logged in or has no API key: run `gemini` "
        "once in a terminal first.\n\n"
        "Runs `gemini --acp --debug -m <model>`, one process per session; resumes with ACP "
        "`session/load`. Set `[agents.gemini] model` (e.g. `gemini-2.5-pro`) to skip the "
        "CLI's model router. Modes: `default`, `autoEdit` (edits without asking), `yolo`, `plan` "
        "(read-only), switched live with ACP `session/set_mode`; "
        '`options = {mode = "autoEdit"}` sets the default.'
    )
    #: Gemini CLI 0.61.0's approval modes, as its ``session/new`` lists them; switched live with
    #: ACP ``session/set_mode``
    modes = (
        ModeInfo(id="default", label="Ask", description="Asks before edits and shell commands"),
        ModeInfo(
            id="autoEdit",
            label="Accept edits",
            description="Edits files without asking; still asks before shell commands",
        ),
        ModeInfo(id="yolo", label="YOLO", description="Runs every tool without asking"),
        ModeInfo(id="plan", label="Plan", description="Read-only tools only: plans, no changes"),
    )
    #: as Gemini CLI 0.61.0 lists them in ``session/new`` (replaced by what a session reports)
    static_models: ClassVar[tuple[ModelInfo, ...]] = (
        ModelInfo(id="auto", label="Auto (Gemini CLI picks per request)"),
        ModelInfo(id="gemini-2.5-pro", label="Gemini 2.5 Pro"),
        ModelInfo(id="gemini-2.5-flash", label="Gemini 2.5 Flash"),
        ModelInfo(id="gemini-2.5-flash-lite", label="Gemini 2.5 Flash Lite"),
        ModelInfo(id="gemini-3-flash-preview", label="Gemini 3 Flash (preview)"),
        ModelInfo(id="gemini-3.1-pro-preview", label="Gemini 3.1 Pro (preview)"),
    )

    def command_line(self) -> list[str]:
        argv = [self.binary or "gemini", "--acp"]
        if self.options.get("debug", True) is not False:
            argv.append("--debug")
        if self.model:
            argv += ["-m", self.model]
        return argv

    async def before_load(self, session_id: str) -> None:
        env = {**os.environ, **self.env}
        home = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home())
        await asyncio.to_thread(sidestep_same_minute, home, session_id, datetime.now(UTC))

    def agent_retried(self, block: ErrorBlock) -> bool:
        """Gemini CLI retries 429, 5xx and network errors itself (``general.maxAttempts``,
        default 10, 5-30 s apart) without saying so over ACP: a transient failure that
        reaches the bridge has been retried already, unless the settings allow one attempt."""
        if block.code not in ("rate_limited", "overloaded", "network"):
            return False
        env = {**os.environ, **self.env}
        home = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home())
        try:
            settings = json.loads((home / ".gemini" / "settings.json").read_text())
            attempts = settings["general"]["maxAttempts"]
        except (OSError, ValueError, KeyError, TypeError):
            return True
        return not (isinstance(attempts, int) and attempts <= 1)

    def preprocess_update(self, update: dict[str, Any]) -> dict[str, Any]:
        kind = update.get("sessionUpdate")
        content = update.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        if kind == "agent_message_chunk" and isinstance(text, str):
            mode = _MODE_UPDATE.fullmatch(text.strip())
            if mode:
                return {"sessionUpdate": "current_mode_update", "currentModeId": mode.group(1)}
        if kind == "agent_thought_chunk" and isinstance(text, str) and text.startswith("****\n"):
            assert isinstance(content, dict)
            return {**update, "content": {**content, "text": text[5:]}}
        call_id = update.get("toolCallId")
        if kind in ("tool_call", "tool_call_update") and isinstance(call_id, str):
            name, sep, _ = call_id.partition("__")
            meta = update.get("_meta")
            if sep and name and not (isinstance(meta, dict) and "toolName" in meta):
                return {
                    **update,
                    "_meta": {**(meta if isinstance(meta, dict) else {}), "toolName": name},
                }
        return update

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        checks = super().check_environment(config)
        env = {**os.environ, **(config.env if config else {})}
        home = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home())
        settings = home / ".gemini" / "settings.json"
        selected: str | None = None
        try:
            data = json.loads(settings.read_text(encoding="utf-8"))
            auth = data.get("security", {}).get("auth", {}) if isinstance(data, dict) else {}
            value = auth.get("selectedType") if isinstance(auth, dict) else None
            selected = value if isinstance(value, str) else None
        except (OSError, ValueError, AttributeError):
            pass
        has_key = any(env.get(name) for name in _KEY_VARS)
        oauth = (home / ".gemini" / "oauth_creds.json").exists()
        if selected == PERSONAL_LOGIN and not any(env.get(v) for v in _PROJECT_VARS):
            checks.append(
                Check(
                    code="gemini_personal_login",
                    level="warn",
                    message="Gemini CLI logs in with a Google account (oauth-personal): Google "
                    "refuses personal accounts since 2026-06-18",
                    detail=str(settings),
                    hint=GEMINI_PERSONAL_HINT,
                )
            )
            return checks
        if selected:
            checks.append(Check(code="gemini_auth", message=f"authentication: {selected}"))
            return checks
        if has_key or oauth:
            message = "credentials found but no authentication method selected"
            hint = (
                'set security.auth.selectedType (e.g. "gemini-api-key") in settings.json, '
                "or run `gemini` once and pick one"
            )
        else:
            message = "Gemini CLI has no login or API key configured"
            hint = "run `gemini` once to log in, or set GEMINI_API_KEY in [agents.gemini] env"
        checks.append(
            Check(
                code="gemini_auth",
                level="warn",
                message=message,
                detail=str(settings),
                hint=hint,
            )
        )
        return checks


def _minute(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H-%M")


def sidestep_same_minute(home: Path, session_id: str, now: datetime) -> list[Path]:
    """Rename ``session_id``'s chat file out of the current minute (see the module doc).

    Only a file whose name carries this minute and whose first record names this session is
    touched; returns the new paths.
    """
    short = session_id[:8]
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,8}", short):
        return []
    earlier = _minute(now - timedelta(minutes=1))
    moved: list[Path] = []
    for chats in (home / ".gemini" / "tmp").glob("*/chats"):
        for path in chats.glob(f"session-{_minute(now)}-{short}.jsonl"):
            try:
                with path.open(encoding="utf-8") as fh:
                    first = json.loads(fh.readline())
            except (OSError, ValueError):
                continue
            target = path.with_name(f"session-{earlier}-{short}.jsonl")
            if not isinstance(first, dict) or first.get("sessionId") != session_id:
                continue
            if target.exists():
                continue
            try:
                path.rename(target)
            except OSError:
                continue
            moved.append(target)
    return moved
