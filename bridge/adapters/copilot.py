"""GitHub Copilot CLI through its native ACP server: ``copilot --acp``.

Copilot CLI 1.0.102 speaks ACP itself (text and thought deltas, tool calls with their output,
``session/request_permission`` before shell commands and edits, edits as structured diffs,
``session/load`` to resume, ``session/cancel``), so the shared ACP client does the work.
With a GitHub login it uses Copilot's hosted models; with ``COPILOT_PROVIDER_BASE_URL`` (and
``COPILOT_PROVIDER_TYPE``, ``COPILOT_PROVIDER_API_KEY``) it talks to any OpenAI-compatible or
Anthropic endpoint instead, and ``COPILOT_OFFLINE=true`` then keeps it off the network
altogether (no GitHub login, telemetry, web tools or update checks).

What differs from other ACP agents (all seen in 1.0.102):

- its mode ids are URLs (``https://agentclientprotocol.com/protocol/session-modes#plan``): the
  bridge offers them as ``agent``, ``plan`` and ``autopilot``;
- a model call that failed for good is not a JSON-RPC error: Copilot retries it itself (5
  times), saying ``Info: Request failed due to a transient API error. Retrying...`` as answer
  text (each becomes an ``api_retry`` notice), then says ``Error: …`` as the answer's text and
  ends the turn normally, so that text becomes the turn's classified error;
- after an approved file creation it says ``Info: <path>`` as answer text, which only repeats
  the tool call: dropped;
- tool calls carry no tool name: it is read from the call's input (``command`` → ``bash``, …),
  else the ACP kind stands in.

The terminal takes a session over with ``copilot --resume <id>``; while a Copilot process holds
a session it keeps ``inuse.<pid>.lock`` in the session's folder
(``$COPILOT_HOME/session-state/<id>/``, default ``~/.copilot``), which is the ownership signal,
and its ``events.jsonl`` is the transcript the mirror follows (bridge/handoff/copilot.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import Any

from bridge.adapters.acp import AcpBase
from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    ModeInfo,
    ResumeCommand,
    classify_failure,
)
from bridge.blocks import Block, ErrorBlock, SystemBlock
from bridge.handoff import copilot as handoff_copilot
from bridge.wire.agent_types import ExternalSession

#: the prefix of Copilot's ACP mode ids; the rest is the bridge's mode id
MODE_URL = "https://agentclientprotocol.com/protocol/session-modes#"

#: how Copilot words a model call that failed for good (as answer text, the turn "completed")
_FAILED = re.compile(r"^\s*Error: ")
#: Copilot's own notices in the answer's text (a retry, a tool call's path repeated)
_NOTICE = re.compile(r"^Info: [^\n]*$")
_RETRYING = re.compile(r"^Info: (?P<why>[^\n]*?)\s*Retrying\.*$")
#: Copilot's tool names, recognised by an argument only that tool has
_TOOL_BY_INPUT = (
    ("command", "bash"),
    ("file_text", "create"),
    ("old_str", "edit"),
    ("new_str", "edit"),
    ("agent_type", "task"),
)
#: the variables Copilot CLI takes a GitHub token from, in its order
_AUTH_VARS = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")


def reported_failure(text: str) -> ErrorBlock | None:
    """The error block for a Copilot answer that is really a failed model call, else None."""
    if not _FAILED.match(text):
        return None
    return classify_failure("copilot", text.strip())


class CopilotAdapter(AcpBase):
    agent_id = "copilot"
    display_name = "GitHub Copilot CLI"
    cli_binary = "copilot"
    acp_args = ("--acp",)
    cap_images = True
    handoff = "persistent"
    mode_prefix = MODE_URL
    doc = (
        "# GitHub Copilot CLI\n\n"
        "**Use when** you work with GitHub Copilot (`npm i -g @github/copilot`, then "
        "`copilot login`), or with your own model provider through "
        "`COPILOT_PROVIDER_BASE_URL`; shell commands and edits ask the app first, edits "
        "arrive as diffs.\n\n"
        "**Don't use when** Copilot CLI has neither a GitHub login nor a provider of its own.\n\n"
        "Runs `copilot --acp` (with `--model` when a model is set), one process per session; "
        "resumes with ACP `session/load`, and `copilot --resume <id>` continues the session "
        "in a terminal. Modes `agent`, `plan`, `autopilot`, switched live with ACP "
        "`session/set_mode`."
    )
    #: Copilot CLI 1.0.102's modes, as its ``session/new`` lists them (ids without the URL)
    modes = (
        ModeInfo(
            id="agent",
            label="Agent",
            description="Default agent mode for conversational interactions",
        ),
        ModeInfo(
            id="plan", label="Plan", description="Plan mode for creating multi-step plans first"
        ),
        ModeInfo(
            id="autopilot",
            label="Autopilot",
            description="Allows every tool and runs until the task is done (experimental)",
        ),
    )

    _failure: str | None = None
    _retried: bool = False
    #: Copilot's retries of a model call in this turn, as it said them
    _retries: int = 0

    def command_line(self) -> list[str]:
        argv = [self.binary or "copilot", *self.acp_args]
        if self.model:
            argv += ["--model", self.model]
        return argv

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        self._retries, self._retried = 0, False
        await super().send(text, attachments)

    def notices_in(self, update: dict[str, Any]) -> list[Block]:
        content = update.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        if update.get("sessionUpdate") != "agent_message_chunk" or not isinstance(text, str):
            return []
        retrying = _RETRYING.match(text)
        if retrying is None:
            return []
        self._retries += 1
        self._retried = True
        why = retrying.group("why").strip().rstrip(".") or "the model call failed"
        # Copilot's words do not say the cause ("a server error" for a refused connection too),
        # so the notice names none; the turn's final error, if any, is classified.
        return [
            SystemBlock(
                level="warn",
                code="api_retry",
                text=f"retrying the model call (attempt {self._retries}): {why}",
                data={"attempt": self._retries, "error_code": None, "hint": None},
            )
        ]

    def preprocess_update(self, update: dict[str, Any]) -> dict[str, Any]:
        kind = update.get("sessionUpdate")
        content = update.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        if kind == "agent_message_chunk" and isinstance(text, str) and isinstance(content, dict):
            if _FAILED.match(text):
                self._failure = text.strip()
                return {**update, "content": {**content, "text": ""}}
            if _NOTICE.match(text):
                return {**update, "content": {**content, "text": ""}}
        if kind == "current_mode_update":
            mode = update.get("currentModeId") or update.get("modeId")
            if isinstance(mode, str):
                return {**update, "currentModeId": mode.removeprefix(MODE_URL)}
        if kind in ("tool_call", "tool_call_update"):
            return _named(update)
        return update

    def reported_failure(self) -> ErrorBlock | None:
        text, self._failure = self._failure, None
        if text is None:
            return None
        self._retried = self._retried or "retried" in text
        return reported_failure(text)

    def retry_prompt(self, text: str) -> str:
        # Copilot keeps a message whose model call failed in the session (its events.jsonl).
        return CONTINUE_PROMPT

    def agent_retried(self, block: ErrorBlock) -> bool:
        # "Failed to get response from the AI model; retried 5 times (…) Last error: 429 …"
        return self._retried

    # ---- the terminal ----------------------------------------------------------------------

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=[cls.cli_binary or "copilot", "--resume", sid], cwd=cwd or ".")

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        return handoff_copilot.is_owned(sid)

    # Listing and mirroring terminal sessions from Copilot's files: bridge/handoff/copilot.py.

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        return handoff_copilot.scan()

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        return handoff_copilot.mirror(cwd, sid)

    # ---- environment -------------------------------------------------------------------------

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        env = {**os.environ, **config.env}
        home = handoff_copilot.copilot_home(env)
        if env.get("COPILOT_PROVIDER_BASE_URL"):
            offline = " (offline)" if env.get("COPILOT_OFFLINE", "").lower() == "true" else ""
            return [
                Check(
                    code="copilot_auth",
                    message=f"model provider {env['COPILOT_PROVIDER_BASE_URL']}{offline}",
                )
            ]
        if any(env.get(name) for name in _AUTH_VARS):
            return [Check(code="copilot_auth", message="a GitHub token is set")]
        # `copilot login` keeps its token in the system keychain, which this check cannot read.
        return [
            Check(
                code="copilot_auth",
                level="warn",
                message="no GitHub token and no model provider in the environment",
                detail=str(home),
                hint="run `copilot login` (fine if done already), or set "
                "COPILOT_PROVIDER_BASE_URL in [agents.copilot] env",
            )
        ]


def _named(update: dict[str, Any]) -> dict[str, Any]:
    """``update`` with ``_meta.toolName`` read from its input, when that tells the tool."""
    meta = update.get("_meta")
    raw = update.get("rawInput")
    if (isinstance(meta, dict) and "toolName" in meta) or not isinstance(raw, dict):
        return update
    for key, name in _TOOL_BY_INPUT:
        if key in raw:
            return {
                **update,
                "_meta": {**(meta if isinstance(meta, dict) else {}), "toolName": name},
            }
    return update
