"""Kimi Code (Moonshot AI) through its ACP server: ``kimi acp``.

Everything is the ACP adapter's; what differs for Kimi is here:

- the command is the ``acp`` subcommand (``kimi --acp`` is its deprecated spelling);
- its ACP server refuses ``session/new`` and ``session/load`` with ``AUTH_REQUIRED``
  (JSON-RPC -32000) until ``kimi login`` stored a Kimi Code token in
  ``$KIMI_SHARE_DIR/credentials/kimi-code.json`` (default ``~/.kimi``), even when
  ``config.toml`` names a provider with its own API key: the check looks for that file, and the
  failure's hint names ``kimi login``;
- ``session/load`` of an id it does not know is JSON-RPC -32602 "Session not found" (the
  adapter then starts a new session, ``session_reset``); sessions are kept per working
  directory, and ``kimi --session <id>`` continues one in a terminal;
- a model call that failed for good (a 401, a 429 after its retries, a dropped connection) ends
  the ACP prompt ``end_turn`` with no output at all: Kimi writes the failure only to its log
  (``$KIMI_SHARE_DIR/logs/kimi.log``: ``<session id> - Agent step N failed: <Error>: …``), so the
  adapter reads what the log gained during the turn and reports that line as the turn's error;
- tool calls carry no name and no ``rawInput``: the title starts with the tool's name
  (``Shell: echo hi``), and while the model writes the call its arguments stream as the call's
  text content (``{"command": "echo hi`` …) with the title following them; the adapter names the
  call from the title, takes the arguments as its input once they are whole JSON, and skips the
  updates in between;
- models are the ``[models.<key>]`` of its ``config.toml``, listed by ``session/new`` as
  ``<key>`` and, for models that can think, ``<key>,thinking``;
- PyPI's ``kimi-cli`` is archived: 1.51.0 is its last working release, and 1.52.0 only prints a
  notice that points to the new Kimi Code CLI (TypeScript, npm ``@moonshot-ai/kimi-code``,
  also ``kimi acp``). Detection says so when the ``kimi`` found is that notice.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from bridge.adapters.acp import DETECT_TIMEOUT, AcpBase
from bridge.adapters.base import AdapterConfig, Check, DetectedAgent, classify_failure
from bridge.blocks import ErrorBlock
from bridge.process import run_capture

#: what kimi-cli 1.52.0 (the archived package's last release) prints instead of working
_ARCHIVED = ("no longer maintained", "已停止维护")
ARCHIVED_ERROR = (
    "this `kimi` is the archived kimi-cli package (1.52.0), which only prints a notice: install "
    "the Kimi Code CLI (npm @moonshot-ai/kimi-code) or kimi-cli 1.51.0"
)


#: the most of its log a turn's failure is looked for in (the end of what the turn added)
LOG_TAIL = 256 * 1024
_STEP_FAILED = re.compile(r" - Agent step \d+ failed: (?P<error>.+)$", re.MULTILINE)


def step_failure(log: str, session_id: str) -> str | None:
    """The last "Agent step N failed: <Error>: <message>" Kimi logged for ``session_id``."""
    found = None
    for match in _STEP_FAILED.finditer(log):
        head = log[log.rfind("\n", 0, match.start()) + 1 : match.start()]
        if head.endswith(session_id):
            found = match.group("error").strip()
    return found


def streamed_arguments(content: Any) -> dict[str, Any] | bool | None:
    """A tool call's arguments as Kimi streams them in an ``in_progress`` update's content: the
    object once its JSON is whole, False while it is not yet, None for any other content."""
    if not (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)):
        return None
    inner = content[0].get("content")
    if content[0].get("type") != "content" or not isinstance(inner, dict):
        return None
    text = inner.get("text")
    if inner.get("type") != "text" or not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return value if isinstance(value, dict) else None


def share_dir(env: dict[str, str]) -> Path:
    """Where Kimi keeps its config, sessions and login (``KIMI_SHARE_DIR``, else ``~/.kimi``)."""
    if env.get("KIMI_SHARE_DIR"):
        return Path(env["KIMI_SHARE_DIR"])
    return Path(env.get("HOME") or Path.home()) / ".kimi"


class KimiAdapter(AcpBase):
    agent_id = "kimi"
    display_name = "Kimi Code"
    cli_binary = "kimi"
    acp_args = ("acp",)
    cap_images = True
    doc = (
        "# Kimi Code\n\n"
        "**Use when** you run Moonshot AI's Kimi Code CLI (`kimi`) with its Kimi models or a "
        "provider configured in `~/.kimi/config.toml`; tools ask the app first, thinking "
        "streams.\n\n"
        "**Don't use when** Kimi Code is not logged in: its ACP server refuses every session "
        "until `kimi login` ran once in a terminal.\n\n"
        "Runs `kimi acp`, one process per session; resumes with ACP `session/load`. Models are "
        "those of its config.toml (`<key>`, and `<key>,thinking` where the model can think)."
    )

    _log_offset = 0

    def preprocess_update(self, update: dict[str, Any]) -> dict[str, Any]:
        kind = update.get("sessionUpdate")
        if kind not in ("tool_call", "tool_call_update"):
            return update
        update = dict(update)
        title = update.get("title")
        meta = update.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        if isinstance(title, str) and title and "toolName" not in meta:
            update["_meta"] = {**meta, "toolName": title.partition(":")[0].strip()[:100]}
        if update.get("status") == "in_progress":
            arguments = streamed_arguments(update.get("content"))
            if arguments is False and kind == "tool_call_update":
                # Half-written arguments: nothing new to show yet.
                for key in ("title", "content", "_meta"):
                    update.pop(key, None)
            elif arguments is False:
                update.pop("content", None)
            elif isinstance(arguments, dict):
                update["rawInput"] = arguments
                update.pop("content", None)
        return update

    def _log(self) -> Path:
        return share_dir({**os.environ, **self.env}) / "logs" / "kimi.log"

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        try:
            self._log_offset = self._log().stat().st_size
        except OSError:
            self._log_offset = 0
        await super().send(text, attachments)

    def reported_failure(self) -> ErrorBlock | None:
        if self._session_id is None:
            return None
        try:
            with self._log().open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                start = self._log_offset if self._log_offset <= size else 0
                fh.seek(max(start, size - LOG_TAIL))
                added = fh.read().decode("utf-8", "replace")
        except OSError:
            return None
        error = step_failure(added, self._session_id)
        if error is None:
            return None
        return classify_failure(self.agent_id, f"{self.display_name}: {error}"[:2000])

    def agent_retried(self, block: ErrorBlock) -> bool:
        """Kimi retries 429, 5xx and connection errors itself (``loop_control.
        max_retries_per_step``, default 3) before it gives the step up."""
        return block.code in ("rate_limited", "overloaded", "network")

    @classmethod
    def probe_version(cls, path: str) -> tuple[str | None, str | None]:
        # The whole output, not only its first line: kimi-cli 1.52.0 prints its version, then
        # the notice that it no longer works.
        result = run_capture([path, "--version"], timeout=DETECT_TIMEOUT)
        text = (result.stdout or result.stderr).strip()
        if result.timed_out or not text:
            return None, f"`{path} --version` gave no answer"
        if any(word in text for word in _ARCHIVED):
            return None, ARCHIVED_ERROR
        return text.splitlines()[0][:200], None

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        found = super().detect(binary)
        if found is not None and found.error == ARCHIVED_ERROR:
            return DetectedAgent(available=False, binary=found.binary, error=found.error)
        return found

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        env = {**os.environ, **config.env}
        home = share_dir(env)
        token = home / "credentials" / "kimi-code.json"
        # the new Kimi Code CLI keeps one file per profile under its own home
        new_home = Path(env.get("KIMI_CODE_HOME") or Path(env.get("HOME") or Path.home()))
        new_home = new_home if env.get("KIMI_CODE_HOME") else new_home / ".kimi-code"
        found = [token] if token.is_file() else sorted((new_home / "credentials").glob("*.json"))
        checks: list[Check] = []
        if found:
            checks.append(Check(code="kimi_login", message=f"logged in ({found[0]})"))
        else:
            checks.append(
                Check(
                    code="kimi_login",
                    level="warn",
                    message="Kimi Code is not logged in: its ACP server refuses sessions "
                    "without a login, even with a provider's API key in its config",
                    detail=f"{token}; {new_home / 'credentials'}",
                    hint="run `kimi login` once in a terminal",
                )
            )
        config_file = home / "config.toml"
        if not config_file.is_file():
            checks.append(
                Check(
                    code="kimi_config",
                    level="info",
                    message="no config.toml yet: `kimi login` writes the Kimi models into it",
                    detail=str(config_file),
                )
            )
        return checks
