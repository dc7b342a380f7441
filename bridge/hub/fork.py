"""Where a fork's history ends, and the context a replay fork's first turn gets (sans-I/O).

A fork keeps whole turns only: an agent's own fork (Claude Code's ``--fork-session``, Codex's
``thread/fork``) cannot cut a turn in two, so a seq inside a turn that completed moves to the
turn's end, and a seq inside the turn still running moves to that turn's start. Everything here
reads stored blocks and computes; the hub does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bridge.blocks import (
    Block,
    SessionEndBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UserBlock,
)
from bridge.hub.commands import parse_command
from bridge.wire.agent_types import FORK_CONTEXT_END, FORK_CONTEXT_HEAD

#: The most of the copied conversation a replay fork's first message carries (the latest part).
CONTEXT_MAX_CHARS = 200_000
#: The most of one tool result the context quotes.
TOOL_RESULT_CHARS = 2_000


def starts_turn(block: Block) -> bool:
    """A user block that began a turn (not one steered into a turn, not a slash command)."""
    if not isinstance(block, UserBlock) or block.steer:
        return False
    return block.attachments != [] or parse_command(block.text) is None


@dataclass
class ForkCut:
    """Walks a session's blocks in seq order and finds where a fork asked at ``at_seq`` ends."""

    at_seq: int
    #: the seq the fork's history ends at (a turn boundary)
    seq: int = 0
    #: the turns that history holds
    turns: int = 0
    #: where the turn open at ``at_seq`` began (the seq before its user block), if one is open
    _open_from: int | None = None
    _open_turns: int = 0
    _in_turn: bool = False
    done: bool = False

    def feed(self, seq: int, block: Block) -> None:
        if self.done:
            return
        if seq > self.at_seq and not self._in_turn:
            self.done = True  # the fork ends at a boundary at or before at_seq
            return
        if starts_turn(block) and not self._in_turn:
            self._in_turn = True
            self._open_from = seq - 1
            self._open_turns = self.turns
        elif isinstance(block, SessionEndBlock) and self._in_turn:
            self._in_turn = False
            self.turns += 1
            self._open_from = None
            if seq >= self.at_seq:
                self.seq = seq  # a turn completed after at_seq began: the fork keeps it whole
                self.done = True
                return
        if not self._in_turn and seq <= self.at_seq:
            self.seq = seq

    def finish(self) -> None:
        """The blocks ran out: a turn still open (running, or cut by a crash) is left out."""
        if self.done:
            return
        if self._in_turn and self._open_from is not None:
            self.seq = self._open_from
            self.turns = self._open_turns
        self.done = True


@dataclass
class Transcript:
    """The copied conversation as plain text, for a replay fork's first message."""

    lines: list[str] = field(default_factory=list)
    _texts: dict[str, list[str]] = field(default_factory=dict)
    _order: list[str] = field(default_factory=list)

    def feed(self, block: Block) -> None:
        if isinstance(block, UserBlock):
            self._flush()
            names = ", ".join(a.name for a in block.attachments)
            said = block.text + (f" [attachments: {names}]" if names else "")
            who = "User (added during the turn)" if block.steer else "User"
            self.lines.append(f"{who}: {said}")
        elif isinstance(block, TextBlock):
            if block.id not in self._texts:
                self._texts[block.id] = []
                self._order.append(block.id)
            self._texts[block.id].append(block.text)
        elif isinstance(block, ToolCallBlock) and block.status == "running" and block.input:
            self._flush()
            self.lines.append(f"Assistant used {block.name}: {block.title or block.input}")
        elif isinstance(block, ToolResultBlock):
            content = block.content[:TOOL_RESULT_CHARS]
            self.lines.append(f"Result{' (error)' if block.is_error else ''}: {content}")
        elif isinstance(block, SessionEndBlock):
            self._flush()

    def _flush(self) -> None:
        for tid in self._order:
            text = "".join(self._texts[tid]).strip()
            if text:
                self.lines.append(f"Assistant: {text}")
        self._texts.clear()
        self._order.clear()

    def text(self) -> str:
        self._flush()
        return "\n\n".join(self.lines)


def context_message(history: Iterable[Block], text: str) -> str:
    """``text`` preceded by the conversation ``history`` as context (a replay fork's first)."""
    transcript = Transcript()
    for block in history:
        transcript.feed(block)
    said = transcript.text()
    if not said:
        return text
    if len(said) > CONTEXT_MAX_CHARS:
        said = "(earlier part left out)\n\n" + said[-CONTEXT_MAX_CHARS:]
    return f"{FORK_CONTEXT_HEAD}\n{said}\n{FORK_CONTEXT_END}\n\n{text}"
