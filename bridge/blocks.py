"""The normalized block stream: every agent's output becomes these typed blocks.

Each block is a msgspec Struct tagged by its wire field ``type``; together they form the
``Block`` tagged union that the protocol, the store and the JSON Schema are generated from.
Block classes take their wire fields as keyword arguments, with defaults for optional fields,
so adapters write ``TextBlock(id="m1", text="hi")``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ToolStatus = Literal["running", "done", "error"]
PlanStatus = Literal["pending", "in_progress", "completed"]
PermissionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
Level = Literal["info", "warn", "error"]
EndReason = Literal["completed", "interrupted", "error", "timeout", "handoff"]
UserSource = Literal["bridge", "terminal"]


class _Block(msgspec.Struct, kw_only=True, tag_field="type", omit_defaults=False):
    """Base of every block; ``type`` is the tag written on the wire."""


class Command(msgspec.Struct, kw_only=True):
    name: str
    description: str = ""


class AgentInfoBlock(_Block, tag="agent_info", kw_only=True):
    agent: str
    name: str
    version: str | None = None
    #: ``fork`` is "native", "replay" or false; every other capability is a bool
    capabilities: dict[str, bool | str] = msgspec.field(default_factory=dict)
    commands: list[Command] = msgspec.field(default_factory=list)
    model: str | None = None


class AttachmentRef(msgspec.Struct, kw_only=True):
    name: str
    mime: str
    size: int | None = None


class UserBlock(_Block, tag="user", kw_only=True):
    id: str
    text: str
    attachments: list[AttachmentRef] = msgspec.field(default_factory=list)
    source: UserSource = "bridge"
    #: sent with ``session.send`` ``steer`` into the turn that was running: it entered that
    #: turn here, it did not start one
    steer: bool = False


class TextBlock(_Block, tag="text", kw_only=True):
    id: str
    text: str = ""
    done: bool = False


class ThinkingBlock(_Block, tag="thinking", kw_only=True):
    id: str
    text: str = ""
    done: bool = False


class ToolCallBlock(_Block, tag="tool_call", kw_only=True):
    id: str
    name: str
    title: str | None = None
    kind: str | None = None
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    status: ToolStatus = "running"
    parent_id: str | None = None


class ToolResultBlock(_Block, tag="tool_result", kw_only=True):
    tool_call_id: str
    content: str = ""
    is_error: bool = False
    parent_id: str | None = None


class PlanEntry(msgspec.Struct, kw_only=True):
    content: str
    status: PlanStatus = "pending"
    priority: str | None = None


class PlanBlock(_Block, tag="plan", kw_only=True):
    entries: list[PlanEntry] = msgspec.field(default_factory=list)


class DiffBlock(_Block, tag="diff", kw_only=True):
    path: str
    old_text: str | None = None
    new_text: str = ""
    unified: str | None = None
    tool_call_id: str | None = None


class PermissionOption(msgspec.Struct, kw_only=True):
    id: str
    label: str
    kind: PermissionKind


class PermissionRequestBlock(_Block, tag="permission_request", kw_only=True):
    id: str
    tool_call_id: str | None = None
    title: str = ""
    options: list[PermissionOption] = msgspec.field(default_factory=list)


class UsageBlock(_Block, tag="usage", kw_only=True):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cost_usd: float | None = None
    context_used: int | None = None
    context_size: int | None = None


class LimitsBlock(_Block, tag="limits", kw_only=True):
    """Where the agent stands in one of its plan's or account's usage windows, as it reported
    it (Claude Code's rate-limit events, Codex's account rate limits); nothing is guessed."""

    #: ``5h``, ``week``, ``week_opus``, ``week_sonnet``, ``overage``, or the window's length
    #: (``30m``, ``2h``, ``3d``) when the agent names none of these
    window: str
    #: How much of the window is used, 0 to 100 (None: the agent did not say)
    used_pct: float | None = None
    #: When the window resets (ISO 8601, UTC), None when the agent did not say
    resets_at: str | None = None
    #: The window is used up: the agent refuses work until ``resets_at``
    reached: bool = False


class SystemBlock(_Block, tag="system", kw_only=True):
    level: Level = "info"
    code: str
    text: str = ""
    data: dict[str, Any] | None = None


class ErrorBlock(_Block, tag="error", kw_only=True):
    """A failure. ``code`` is one of the failure codes (docs/protocol.md, "Failure codes");
    ``retryable`` says whether trying the same turn again may succeed, ``retry_after_s`` when
    (from the provider's header or the CLI's words), ``hint`` what a person can do about it."""

    code: str
    message: str
    detail: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    hint: str | None = None


class SessionEndBlock(_Block, tag="session_end", kw_only=True):
    reason: EndReason = "completed"
    exit_code: int | None = None
    agent_session_id: str | None = None


Block = (
    AgentInfoBlock
    | UserBlock
    | TextBlock
    | ThinkingBlock
    | ToolCallBlock
    | ToolResultBlock
    | PlanBlock
    | DiffBlock
    | PermissionRequestBlock
    | UsageBlock
    | LimitsBlock
    | SystemBlock
    | ErrorBlock
    | SessionEndBlock
)

BLOCK_TYPES: tuple[type[_Block], ...] = (
    AgentInfoBlock,
    UserBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    PlanBlock,
    DiffBlock,
    PermissionRequestBlock,
    UsageBlock,
    LimitsBlock,
    SystemBlock,
    ErrorBlock,
    SessionEndBlock,
)


_EXACT_TYPES = frozenset(BLOCK_TYPES)


def is_block(value: object) -> bool:
    """True for an instance of one of the protocol's block types."""
    # The set lookup first: isinstance against the tuple costs 5x more, per block.
    return type(value) in _EXACT_TYPES or isinstance(value, BLOCK_TYPES)


_json_encoder = msgspec.json.Encoder()
_json_decoder: msgspec.json.Decoder[Block] = msgspec.json.Decoder(Block)


def block_to_json(block: Block) -> bytes:
    return _json_encoder.encode(block)


def block_from_json(data: bytes | str) -> Block:
    return _json_decoder.decode(data)
