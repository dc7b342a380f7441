"""The spec's stream invariants, enforced for every adapter (sans-I/O).

``TurnGuard`` sees each block an adapter yields during one turn and returns the blocks that
may go to clients: repaired where the adapter broke a rule (a tool call finished that never
started, deltas never closed, no ``session_end``), with an ``error`` block of code
``adapter_contract`` saying what was repaired. ``finish()`` closes whatever is still open when
the turn ends for any reason, so every turn ends with exactly one ``session_end``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.blocks import (
    Block,
    EndReason,
    ErrorBlock,
    PermissionRequestBlock,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

CONTRACT = "adapter_contract"


@dataclass(slots=True)
class _Tool:
    name: str
    parent_id: str | None
    final: bool = False
    has_result: bool = False


class TurnGuard:
    def __init__(self, agent_session_id: str | None = None) -> None:
        self.agent_session_id = agent_session_id
        self._open_text: dict[str, None] = {}
        self._open_thinking: dict[str, None] = {}
        self._tools: dict[str, _Tool] = {}
        self.pending_permissions: dict[str, str | None] = {}
        self.ended = False

    @staticmethod
    def _contract(message: str) -> ErrorBlock:
        return ErrorBlock(code=CONTRACT, message=message)

    def feed(self, block: Block) -> list[Block]:
        """Blocks to emit for one adapter block (possibly none, possibly repairs first)."""
        if self.ended:
            return []
        if isinstance(block, TextBlock | ThinkingBlock):
            return self._delta(block)
        if isinstance(block, ToolCallBlock):
            return self._tool_call(block)
        if isinstance(block, ToolResultBlock):
            return self._tool_result(block)
        if isinstance(block, PermissionRequestBlock):
            self.pending_permissions[block.id] = block.tool_call_id
            return [block]
        if isinstance(block, SessionEndBlock):
            out = self._close_all()
            if block.agent_session_id is None and self.agent_session_id is not None:
                block = SessionEndBlock(
                    reason=block.reason,
                    exit_code=block.exit_code,
                    agent_session_id=self.agent_session_id,
                )
            self.ended = True
            out.append(block)
            return out
        return [block]

    def finish(
        self, reason: EndReason, exit_code: int | None = None, *, silent: bool = False
    ) -> list[Block]:
        """Close the turn: repairs plus the one ``session_end``, or nothing if already ended."""
        if self.ended:
            return []
        out = self._close_all()
        if not silent and reason == "completed":
            out.append(self._contract("the adapter ended its stream without a session_end"))
            reason = "error"
        out.append(
            SessionEndBlock(
                reason=reason, exit_code=exit_code, agent_session_id=self.agent_session_id
            )
        )
        self.ended = True
        return out

    def _delta(self, block: TextBlock | ThinkingBlock) -> list[Block]:
        opened = self._open_text if isinstance(block, TextBlock) else self._open_thinking
        if block.done:
            opened.pop(block.id, None)
        else:
            opened[block.id] = None
        return [block]

    def _tool_call(self, block: ToolCallBlock) -> list[Block]:
        state = self._tools.get(block.id)
        out: list[Block] = []
        if block.status == "running":
            if state is None:
                self._tools[block.id] = _Tool(block.name, block.parent_id)
            return [block]
        if state is None:
            out.append(self._contract(f"tool call {block.id} finished without starting"))
            out.append(
                ToolCallBlock(
                    id=block.id,
                    name=block.name,
                    title=block.title,
                    kind=block.kind,
                    input=block.input,
                    status="running",
                    parent_id=block.parent_id,
                )
            )
            state = self._tools[block.id] = _Tool(block.name, block.parent_id)
        state.final = True
        out.append(block)
        return out

    def _tool_result(self, block: ToolResultBlock) -> list[Block]:
        state = self._tools.get(block.tool_call_id)
        if state is None:
            # A result for a call never announced: announce it so clients can pair them.
            self._tools[block.tool_call_id] = _Tool("unknown", block.parent_id, has_result=True)
            return [
                self._contract(f"tool result for unknown tool call {block.tool_call_id}"),
                ToolCallBlock(
                    id=block.tool_call_id,
                    name="unknown",
                    status="running",
                    parent_id=block.parent_id,
                ),
                block,
            ]
        state.has_result = True
        return [block]

    def _close_all(self) -> list[Block]:
        out: list[Block] = []
        for tool_id, tool in self._tools.items():
            if not tool.has_result:
                out.append(
                    ToolResultBlock(
                        tool_call_id=tool_id,
                        content="the tool call did not finish",
                        is_error=True,
                        parent_id=tool.parent_id,
                    )
                )
            if not tool.final:
                out.append(
                    ToolCallBlock(
                        id=tool_id, name=tool.name, status="error", parent_id=tool.parent_id
                    )
                )
        self._tools.clear()
        for msg_id in self._open_text:
            out.append(TextBlock(id=msg_id, text="", done=True))
        for msg_id in self._open_thinking:
            out.append(ThinkingBlock(id=msg_id, text="", done=True))
        self._open_text.clear()
        self._open_thinking.clear()
        self.pending_permissions.clear()
        return out
