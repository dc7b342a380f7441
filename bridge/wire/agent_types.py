"""The types adapters and the rest of the daemon share, below both.

Config tables, findings of checks, what detection found, sessions found on disk and how to
resume one in a terminal, the bridge's own slash commands. ``bridge.adapters.base`` re-exports
all of them, so adapter authors keep importing from there; modules below the adapters
(``config``, ``commands``, ``parsers``, ``handoff``, ``doctor``, ``schema``) import from here.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from bridge.blocks import Command

#: ``agents.check`` with this name reports the daemon's own checks; no adapter may use it.
DAEMON_AGENT = "daemon"

CheckLevel = Literal["info", "warn", "error"]
HandoffMode = Literal["per_turn", "persistent", "none"]

#: The bridge's own slash commands, appended to every agent's command list.
COMMON_COMMANDS: tuple[Command, ...] = (
    Command(name="/status", description="Session state, writer, queue, model and usage"),
    Command(name="/model", description="Use another model from the next turn: /model <id>"),
    Command(name="/stop", description="Interrupt the running turn"),
    Command(name="/terminal", description="Continue this session in a terminal"),
    Command(name="/help", description="List the commands available in this session"),
)


class DetectedAgent(msgspec.Struct, kw_only=True):
    """What ``detect()`` found: whether the agent can run here, with which binary and version."""

    available: bool = True
    binary: str | None = None
    version: str | None = None
    error: str | None = None


class Check(msgspec.Struct, kw_only=True):
    """One finding of an environment check (the protocol's CHECK object)."""

    code: str
    level: CheckLevel = "info"
    message: str
    detail: str | None = None
    hint: str | None = None


class ModelInfo(msgspec.Struct, kw_only=True):
    id: str
    label: str


class ModeInfo(msgspec.Struct, kw_only=True):
    """One of the agent's own modes (how much it may do on its own), as the AGENT lists it."""

    id: str
    label: str
    description: str = ""


class ExternalSession(msgspec.Struct, kw_only=True):
    """A session the user started in the agent's own terminal CLI, found on disk."""

    agent_session_id: str
    cwd: str
    title: str = ""
    updated_at: float = 0.0
    owned: bool = False
    owner_pid: int | None = None


#: ``capabilities.fork``: the agent forks its own session ("native"), the fork's first turn is
#: given the copied conversation as context ("replay"), or it cannot be forked (False).
ForkCapability = Literal["native", "replay", False]


class ForkPoint(msgspec.Struct, kw_only=True):
    """A native fork still to be made: the agent session to fork, and how many of its turns
    (the first ``turns``) the new one keeps. An adapter whose ``cap_fork`` is "native" takes it
    as the ``fork`` keyword and makes the fork when it starts the agent's new session."""

    agent_session_id: str
    turns: int


class ResumeCommand(msgspec.Struct, kw_only=True):
    """How to continue a session in a terminal: argv run in cwd."""

    argv: list[str]
    cwd: str


class AdapterConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``[agents.<id>]`` table of config.toml."""

    binary: str | None = None
    model: str | None = None
    effort: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    args: list[str] = msgspec.field(default_factory=list)
    turn_timeout: float | None = None
    idle_timeout: float | None = None
    enabled: bool = True
    options: dict[str, Any] = msgspec.field(default_factory=dict)


def overall_status(checks: list[Check]) -> Literal["pass", "warn", "fail"]:
    levels = {c.level for c in checks}
    if "error" in levels:
        return "fail"
    if "warn" in levels:
        return "warn"
    return "pass"


#: How a replay fork's first message begins and where its context ends (``session.fork``).
FORK_CONTEXT_HEAD = "[This conversation continues one forked from an earlier session. Its history:]"
FORK_CONTEXT_END = "[End of the earlier conversation. The new message follows.]"


def split_fork_context(text: str) -> tuple[str | None, str]:
    """(the replayed history, the message) of a replay fork's first message; (None, text) for
    any other message."""
    if not text.startswith(FORK_CONTEXT_HEAD):
        return None, text
    history, sep, message = text[len(FORK_CONTEXT_HEAD) :].partition("\n" + FORK_CONTEXT_END)
    if not sep:
        return None, text
    return history.strip("\n"), message.lstrip("\n")
