"""The turn a mirror parser follows in a terminal session's transcript, sans-I/O.

The transcript parsers of :mod:`bridge.handoff.codex`, :mod:`bridge.handoff.pi` and
:mod:`bridge.handoff.opencode` read different files but keep the same state: whether a turn is
open, and the tool calls it started and has not finished. A turn that ends (or a mirror that
stops) ends every call left running as unfinished, then the turn itself, so a client never
sees a call without its end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.blocks import Block, EndReason, SessionEndBlock, ToolCallBlock, ToolResultBlock
from bridge.parsers import unfinished_tool, with_status

#: A tool result copied from a transcript is cut at this length.
MAX_RESULT = 64 * 1024
#: A tool call's title is cut at this length.
MAX_TITLE = 200


class MirrorTurns:
    """Base of a transcript parser: the open turn and its running tool calls."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.turn_open = False
        self._tools: dict[str, ToolCallBlock] = {}

    def _start_tool(
        self, call_id: str, name: str, title: Any, kind: str | None, args: dict[str, Any]
    ) -> ToolCallBlock:
        """A tool call that starts (and so opens the turn), kept until it ends."""
        call = ToolCallBlock(
            id=call_id,
            name=name,
            title=str(title)[:MAX_TITLE] if title else None,
            kind=kind,
            input=args,
            status="running",
        )
        self._tools[call_id] = call
        self.turn_open = True
        return call

    @staticmethod
    def _end_tool(call: ToolCallBlock, result: str, *, failed: bool) -> list[Block]:
        """A started call's end and its result (cut at :data:`MAX_RESULT`)."""
        return [
            with_status(call, "error" if failed else "done"),
            ToolResultBlock(tool_call_id=call.id, content=result[:MAX_RESULT], is_error=failed),
        ]

    def _end_call(self, call_id: str, name: str, result: str, *, failed: bool) -> list[Block]:
        """The end of tool call ``call_id``; one that started before the mirror did is shown
        starting first (as ``name``)."""
        call = self._tools.pop(call_id, None)
        started: list[Block] = []
        if call is None:
            call = ToolCallBlock(id=call_id, name=name, status="running")
            started.append(call)
        return started + self._end_tool(call, result, failed=failed)

    def _turn_closed(self) -> None:
        """Called when a turn ends, for a subclass's per-turn state."""

    def _close(self, reason: EndReason) -> list[Block]:
        if not self.turn_open:
            return []
        out: list[Block] = []
        for call in self._tools.values():
            out += unfinished_tool(call)
        self._tools.clear()
        self._turn_closed()
        self.turn_open = False
        out.append(SessionEndBlock(reason=reason, agent_session_id=self.sid))
        return out

    def switched(self, path: Path) -> list[Block]:
        """The transcript moved to another file: the open turn ended there."""
        return self._close("completed")

    def close(self) -> list[Block]:
        """The mirror stops: an open turn is interrupted."""
        return self._close("interrupted")
