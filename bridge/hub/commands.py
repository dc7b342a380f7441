"""The bridge's common slash commands, recognised in ``session.send`` text (sans-I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.wire.agent_types import COMMON_COMMANDS

_NAMES = {c.name for c in COMMON_COMMANDS}
_TAKES_ARGUMENT = {"/model"}


@dataclass(frozen=True)
class SlashCommand:
    name: str  # without the slash, e.g. "status"
    argument: str = ""


def parse_command(text: str) -> SlashCommand | None:
    """The common command ``text`` is exactly, or None (then the text goes to the agent)."""
    stripped = text.strip()
    word, _, rest = stripped.partition(" ")
    if word not in _NAMES:
        return None
    rest = rest.strip()
    if rest and word not in _TAKES_ARGUMENT:
        return None
    return SlashCommand(name=word[1:], argument=rest)


def help_text() -> str:
    return "\n".join(f"{c.name} — {c.description}" for c in COMMON_COMMANDS)
