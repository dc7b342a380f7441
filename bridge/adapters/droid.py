"""Factory Droid: one ``droid exec -o stream-json`` process per turn, prompt on stdin.

Why this interface: ``exec -o stream-json`` is the only structured mode that runs without a
Factory login (with a custom model from ``~/.factory/settings.json``); ``-o acp`` and
``--input-format stream-jsonrpc`` need a login. It prints whole messages (no token deltas),
tool calls with their results (an ``Edit`` result carries line-numbered diff lines), reasoning
(printed twice; the parser drops repeats) and a final ``completion`` with usage (no cost).

Resume: ``-s <id>`` continues a session but needs a login (offline it exits 1 and prints
nothing). Then ``--fork <id>``, which works offline, continues the conversation under a new
session id; the adapter remembers that ``-s`` failed and forks directly on later turns. When
both fail the agent does not know the session: the turn runs fresh and says ``session_reset``.

Autonomy: option ``auto`` (default ``"low"``: file edits allowed, risky commands refused;
``"medium"``/``"high"`` allow more; ``"off"`` is Droid's read-only default). Droid asks no
questions in exec mode: a command above the level fails the tool call.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    ModelInfo,
    ResumeCommand,
)
from bridge.adapters.perturn import PerTurnAdapter, TurnParser
from bridge.blocks import ErrorBlock
from bridge.parsers.droid import DroidParser

AUTONOMY = ("low", "medium", "high")


def custom_models(home: str | None) -> list[ModelInfo]:
    """The custom (bring-your-own-key) models of ``<home>/.factory/settings.json``."""
    path = Path(home or os.path.expanduser("~")) / ".factory" / "settings.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    models: list[ModelInfo] = []
    entries = data.get("customModels") if isinstance(data, dict) else None
    for item in entries if isinstance(entries, list) else []:
        if isinstance(item, dict) and isinstance(item.get("model"), str):
            label = item.get("displayName")
            models.append(
                ModelInfo(
                    id=f"custom:{item['model']}",
                    label=label if isinstance(label, str) else item["model"],
                )
            )
    return models


class DroidAdapter(PerTurnAdapter):
    agent_id = "droid"
    display_name = "Factory Droid"
    cli_binary = "droid"
    doc = (
        "# Factory Droid\n\n"
        "**Use when** you work with Factory's Droid, logged in or with a custom model "
        "(`custom:<model>` from ~/.factory/settings.json).\n\n"
        "**Don't use when** you need live token streaming or approvals: Droid prints whole "
        "messages and decides by autonomy level (option `auto`, default `low`) instead of "
        "asking.\n\n"
        "Without a login a session continues by forking it each turn (a new session id, the "
        "same conversation)."
    )
    resume_modes = ("session", "fork")
    forking_modes = frozenset({"fork"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session_flag_works: bool | None = None

    def argv(self, binary: str, resume_mode: str | None) -> list[str]:
        argv = [binary, "exec", "-o", "stream-json"]
        if self.model:
            argv += ["-m", self.model]
        auto = self.options.get("auto", "low")
        if auto in AUTONOMY:
            argv += ["--auto", str(auto)]
        if self.effort:
            argv += ["-r", self.effort]
        if resume_mode == "session" and self.session_id:
            argv += ["-s", self.session_id]
        elif resume_mode == "fork" and self.session_id:
            argv += ["--fork", self.session_id]
        return argv

    def agent_retried(self, block: ErrorBlock) -> bool:
        # Droid retries 429 and 5xx silently (recorded: still retrying after 45 s).
        return block.code in ("rate_limited", "overloaded")

    def retry_prompt(self, text: str) -> str:
        # Droid keeps a message whose model call failed in the session file (checked).
        return CONTINUE_PROMPT

    def new_parser(self) -> TurnParser:
        return DroidParser()

    def resume_plan(self) -> list[str]:
        if self._session_flag_works is False:
            return ["fork"]
        return list(self.resume_modes)

    def resume_result(self, mode: str, ok: bool) -> None:
        if mode == "session":
            self._session_flag_works = ok

    async def list_models(self) -> list[ModelInfo]:
        return custom_models(self.env.get("HOME") or os.environ.get("HOME"))

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        checks: list[Check] = []
        env = config.env
        models = custom_models(env.get("HOME") or os.environ.get("HOME"))
        if env.get("FACTORY_API_KEY") or os.environ.get("FACTORY_API_KEY"):
            checks.append(Check(code="droid_api_key", message="FACTORY_API_KEY is set"))
        elif models:
            checks.append(
                Check(
                    code="droid_custom_models",
                    message=f"{len(models)} custom model(s); without a login set "
                    "[agents.droid] model to one of them",
                    detail=", ".join(m.id for m in models),
                )
            )
        else:
            checks.append(
                Check(
                    code="droid_login_missing",
                    level="warn",
                    message="no FACTORY_API_KEY and no custom model",
                    hint="Run `droid` once to log in, set FACTORY_API_KEY, or add customModels "
                    "to ~/.factory/settings.json",
                )
            )
        return checks

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=[cls.cli_binary or "droid", "--resume", sid], cwd=cwd or ".")
