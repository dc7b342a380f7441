"""Hermes Agent through its ACP server: ``hermes acp``.

Hermes 0.19.0 has no JSON output for ``hermes chat`` (``-Q`` prints only the final text and
the session id goes to stderr), so ACP is the only structured stream: text deltas, tool calls
with their results, ``session/request_permission`` for edits and dangerous commands (an edit's
approval carries the diff), context usage in ``usage_update`` and token counts in the
``session/prompt`` result. ``hermes acp`` needs the package's ``[acp]`` extra.

Quirks handled here (Hermes 0.19.0):

- ``session/load`` of an id Hermes does not know answers ``{}`` instead of an error (and every
  prompt to it then ends with ``refusal``), so an empty answer counts as an unknown session
  and the adapter starts a new one;
- the ``usage`` of a ``session/prompt`` result counts the whole session so far (in this
  process), not the turn;
- an edit's permission question comes with a tool call of its own (``edit-approval-<n>``)
  that never gets an update: it ends when the question is answered;
- tool calls carry no name; their title starts with it (``terminal: echo hi``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from bridge.adapters.acp import AcpBase
from bridge.adapters.base import CONTINUE_PROMPT, AdapterConfig, Check, ModeInfo, classify_failure
from bridge.blocks import ErrorBlock

_TITLED = re.compile(r"([a-z][a-z0-9_]*): ")


#: How Hermes words a model call that failed for good (as agent text, the turn "completed").
_FAILED = re.compile(
    r"^\s*(?:API call failed\b|HTTP [45]\d\d: |Context length exceeded\b.*Cannot compress)"
)


def reported_failure(text: str) -> ErrorBlock | None:
    """The error block for a Hermes answer that is really a failed model call, else None."""
    if not _FAILED.match(text):
        return None
    return classify_failure("hermes", text.strip())


class HermesAdapter(AcpBase):
    agent_id = "hermes"
    display_name = "Hermes Agent"
    cli_binary = "hermes"
    acp_args = ("acp",)
    cap_images = True
    cumulative_usage = True
    doc = (
        "# Hermes Agent\n\n"
        "**Use when** you run Nous Research's Hermes Agent (`pip install "
        "'hermes-agent[acp]'`) with any provider it supports; edits and dangerous commands "
        "ask the app first, with the edit's diff.\n\n"
        "**Don't use when** Hermes has no provider configured (`hermes setup`) or was "
        "installed without the `[acp]` extra.\n\n"
        "Runs `hermes acp`, one process per session; resumes with ACP `session/load`. The "
        "model comes from Hermes' `config.yaml` unless `/model` picks one it offers. Modes "
        "`default`, `accept_edits`, `dont_ask`, switched live with ACP `session/set_mode`."
    )
    #: as Hermes 0.19.0 reports them in ``session/new``
    modes = (
        ModeInfo(id="default", label="Default", description="Ask before edits."),
        ModeInfo(
            id="accept_edits",
            label="Accept Edits",
            description="Auto-allow workspace and /tmp edits; still asks for sensitive paths.",
        ),
        ModeInfo(
            id="dont_ask",
            label="Don't Ask",
            description="Auto-allow file edits for this session except sensitive paths.",
        ),
    )

    _failure: str | None = None
    _retried: bool = False

    def approval_only(self, tool_call_id: str) -> bool:
        return tool_call_id.startswith("edit-approval-")

    def preprocess_update(self, update: dict[str, Any]) -> dict[str, Any]:
        content = update.get("content")
        if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(content, dict):
            text = content.get("text")
            if isinstance(text, str) and _FAILED.match(text):
                # Hermes reports a failed model call as the answer and ends the turn normally.
                self._failure = text.strip()
                return {**update, "content": {**content, "text": ""}}
        title = update.get("title")
        meta = update.get("_meta")
        if isinstance(title, str) and not (isinstance(meta, dict) and "toolName" in meta):
            name = _TITLED.match(title)
            if name:
                meta = meta if isinstance(meta, dict) else {}
                return {**update, "_meta": {**meta, "toolName": name.group(1)}}
        return update

    def reported_failure(self) -> ErrorBlock | None:
        text, self._failure = self._failure, None
        if text is None:
            return None
        self._retried = "retries" in text
        return reported_failure(text)

    def retry_prompt(self, text: str) -> str:
        # Hermes keeps a message whose model call failed in the session (checked).
        return CONTINUE_PROMPT

    def agent_retried(self, block: ErrorBlock) -> bool:
        # "API call failed after 3 retries: …": Hermes retried 429/5xx/network itself.
        return self._retried

    def load_failed(self, result: Any) -> str | None:
        if not isinstance(result, dict) or not result:
            return "Hermes does not know this session"
        return None

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        checks = super().check_environment(config)
        env = {**os.environ, **(config.env if config else {})}
        home = Path(env["HERMES_HOME"]) if env.get("HERMES_HOME") else Path.home() / ".hermes"
        config_file = home / "config.yaml"
        if config_file.is_file():
            checks.append(Check(code="hermes_config", message=f"found {config_file}"))
        else:
            checks.append(
                Check(
                    code="hermes_config",
                    level="warn",
                    message="Hermes has no config.yaml yet",
                    detail=str(config_file),
                    hint="run `hermes setup` to choose a provider and model",
                )
            )
        return checks
