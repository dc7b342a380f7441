"""The client side of the Agent Client Protocol (ACP), sans-I/O.

Two pure pieces, no processes, sockets or clocks:

- the JSON-RPC 2.0 codec for the newline-delimited messages an ACP agent speaks on stdio, from
  :mod:`bridge.parsers.jsonrpc` (re-exported here): :func:`decode` turns one line into a
  :data:`Message` and never raises; the ``encode_*`` helpers build the lines the bridge writes;
- :class:`UpdateMapper`, which turns ``session/update`` notifications, permission requests and
  the ``session/prompt`` answer into the bridge's blocks, keeping the stream invariants itself
  (every delta closed, every tool call ``running`` then ``done``/``error`` with its result, one
  ``session_end`` per turn).

Agent output is untrusted data: wrong types, missing fields and unknown kinds are skipped, and
every string that reaches a block is made encodable, so garbage can cost a block but never the
stream.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge import blocks
from bridge.parsers.diff import unified_diff
from bridge.parsers.untrusted import MAX_ITEMS, MAX_VALUE_TEXT, clean, dumps_plain, plain
from bridge.wire.agent_types import COMMON_COMMANDS

# ---- untrusted values ---------------------------------------------------------------------------

MAX_COUNT = 2**53


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any, limit: int = 2000) -> str | None:
    return clean(value, limit) if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    """A token count: a non-negative whole number, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_COUNT:
        return int(value)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


# ---- session/update → blocks --------------------------------------------------------------------

_TOOL_STATUS = {"completed": "done", "failed": "error"}
_PLAN_STATUS: dict[str, blocks.PlanStatus] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}
_PERMISSION_KINDS: tuple[blocks.PermissionKind, ...] = (
    "allow_once",
    "allow_always",
    "reject_once",
    "reject_always",
)
_RESERVED_COMMANDS = frozenset(c.name for c in COMMON_COMMANDS)
#: stop reasons that still complete the turn, with the note clients see
STOP_NOTES = {
    "max_tokens": "the model reached its output token limit",
    "max_turn_requests": "the agent reached its limit of model requests for one turn",
    "refusal": "the agent refused to continue",
}
MAX_COMMANDS = 200
MAX_PLAN = 200
MAX_OPTIONS = 20


@dataclass(slots=True)
class _Tool:
    block_id: str
    name: str = "tool"
    named: bool = False
    title: str | None = None
    kind: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    result: str = ""
    raw_output: Any = None
    diffs: set[tuple[str, int, int]] = field(default_factory=set)
    shown: str = ""
    declined: bool = False
    paths: set[str] = field(default_factory=set)

    def block(self, status: Any = "running") -> blocks.ToolCallBlock:
        return blocks.ToolCallBlock(
            id=self.block_id,
            name=self.name,
            title=self.title,
            kind=self.kind,
            input=self.input,
            status=status,
        )

    def signature(self) -> str:
        return dumps_plain([self.name, self.title, self.kind, self.input])


def _permission_kind(kind: Any, option_id: str, label: str) -> blocks.PermissionKind:
    if kind in _PERMISSION_KINDS:
        return kind  # type: ignore[no-any-return]
    words = f"{option_id} {label}".lower()
    rejects = any(w in words for w in ("reject", "deny", "cancel", "no"))
    always = "always" in words
    if rejects:
        return "reject_always" if always else "reject_once"
    return "allow_always" if always else "allow_once"


def _delta(thinking: bool, block_id: str, *, text: str = "", done: bool = False) -> blocks.Block:
    """A piece of the agent's thinking or of its answer (``done``: that stream's end)."""
    kind = blocks.ThinkingBlock if thinking else blocks.TextBlock
    return kind(id=block_id, text=text, done=done)


def _content_text(content: dict[str, Any]) -> str | None:
    """The text of one ACP content block (text, resource, link), else None."""
    kind = content.get("type")
    if kind == "text":
        return _str(content.get("text"), MAX_VALUE_TEXT)
    if kind == "resource":
        resource = _dict(content.get("resource"))
        return _str(resource.get("text"), MAX_VALUE_TEXT) or _str(resource.get("uri"))
    if kind == "resource_link":
        return _str(content.get("uri"))
    return None


def _raw_output_text(raw: Any) -> str:
    if isinstance(raw, str):
        return clean(raw, MAX_VALUE_TEXT)
    if isinstance(raw, dict):
        for key in ("output", "text", "content", "error"):
            value = raw.get(key)
            if isinstance(value, str) and value:
                return clean(value, MAX_VALUE_TEXT)
    return ""


class UpdateMapper:
    """Blocks for one ACP session, turn after turn.

    Ids of text and thinking messages are the mapper's own (``<prefix>-m<n>``), so an agent
    that reuses or omits ``messageId`` cannot reopen a message that was already closed; tool
    call ids are the agent's, made unique within the session. ``agent_info`` builds the
    ``agent_info`` block sent again when the agent's command list changes.
    """

    def __init__(
        self,
        *,
        prefix: str = "acp",
        session_id: str | None = None,
        agent_info: Callable[[list[blocks.Command]], blocks.AgentInfoBlock] | None = None,
        cumulative_usage: bool = False,
        approval_only: Callable[[str], bool] | None = None,
    ) -> None:
        self.session_id = session_id
        self.commands: list[blocks.Command] = []
        self.mode: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_input_tokens: int | None = None
        self.cost_usd: float | None = None
        self.context_used: int | None = None
        self.context_size: int | None = None
        self._has_tokens = False
        self._prefix = prefix
        self._agent_info = agent_info
        self._ids = itertools.count(1)
        # the open text (False) and thinking (True) streams: [block id, agent messageId]
        self._open: dict[bool, list[Any]] = {}
        self._tools: dict[str, _Tool] = {}
        self._finished: set[str] = set()
        self._used_tool_ids: set[str] = set()
        self._meta_usage: list[int] | None = None
        self._asked: dict[str, str] = {}  # permission request id → agent tool call id
        # Hermes reports the session's tokens so far in each prompt result, not the turn's.
        self._cumulative = cumulative_usage
        self._last_reported: tuple[int, int, int] | None = None
        # Tool calls that only stand for a permission question end when it is answered.
        self._approval_only = approval_only

    # ---- turn boundaries ------------------------------------------------------------------------

    def begin_turn(self) -> None:
        """Forget what was open before this turn (history replayed by ``session/load``)."""
        self._open.clear()
        self._tools.clear()
        self._finished.clear()
        self._meta_usage = None
        self._asked.clear()

    def end_turn(self, result: Any, *, cancelled: bool = False) -> list[blocks.Block]:
        """Blocks for the ``session/prompt`` result: closes, usage, notes, ``session_end``."""
        result = _dict(result)
        stop = result.get("stopReason")
        interrupted = cancelled or stop == "cancelled"
        out = self._close_deltas()
        out += self._close_tools(error=interrupted)
        self._add_turn_usage(result)
        usage = self.usage_block()
        if usage is not None:
            out.append(usage)
        if not interrupted and isinstance(stop, str) and stop != "end_turn":
            note = STOP_NOTES.get(stop, f"the agent stopped: {clean(stop, 200)}")
            out.append(
                blocks.SystemBlock(
                    level="warn",
                    code="stop_reason",
                    text=note,
                    data={"stop_reason": clean(stop, 200)},
                )
            )
        out.append(
            blocks.SessionEndBlock(
                reason="interrupted" if interrupted else "completed",
                agent_session_id=self.session_id,
            )
        )
        self.begin_turn()
        return out

    def fail_turn(
        self,
        code: str,
        message: str,
        detail: str | None = None,
        *,
        reason: blocks.EndReason = "error",
        exit_code: int | None = None,
        error: blocks.ErrorBlock | None = None,
    ) -> list[blocks.Block]:
        """Blocks that end a turn the agent could not finish (``error``: already classified)."""
        out = self._close_deltas()
        out += self._close_tools(error=True, why="the agent stopped before the tool finished")
        if error is None:
            error = blocks.ErrorBlock(code=code, message=clean(message, 2000), detail=detail)
        out.append(error)
        out.append(
            blocks.SessionEndBlock(
                reason=reason, exit_code=exit_code, agent_session_id=self.session_id
            )
        )
        self.begin_turn()
        return out

    # ---- notifications --------------------------------------------------------------------------

    def update(self, params: Any) -> list[blocks.Block]:
        """Blocks for one ``session/update`` notification's params."""
        params = _dict(params)
        sid = params.get("sessionId")
        if self.session_id is not None and isinstance(sid, str) and sid != self.session_id:
            return []
        update = _dict(params.get("update"))
        self._take_meta_usage(update.get("_meta"))
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            return self._chunk(update, thinking=False)
        if kind == "agent_thought_chunk":
            return self._chunk(update, thinking=True)
        if kind in ("tool_call", "tool_call_update"):
            return self._tool(update, new=kind == "tool_call")
        if kind == "plan":
            return self._plan(update)
        if kind == "available_commands_update":
            return self._commands(update)
        if kind == "current_mode_update":
            return self._mode(update.get("currentModeId") or update.get("modeId"))
        if kind == "usage_update":
            self._usage_update(update)
        return []

    def permission(self, request_id: str, params: Any) -> list[blocks.Block]:
        """Blocks for ``session/request_permission``, ending with the request when it can be
        answered (no usable option: no request block, and the caller declines it)."""
        params = _dict(params)
        call = _dict(params.get("toolCall"))
        out: list[blocks.Block] = []
        tool_block_id: str | None = None
        agent_tool = _str(call.get("toolCallId"), 300)
        if agent_tool is not None:
            # The request's own "pending" status describes the question, not the tool.
            update = {k: v for k, v in call.items() if k != "status"}
            out += self._tool(update, new=agent_tool not in self._tools)
            state = self._tools.get(agent_tool)
            tool_block_id = state.block_id if state is not None else None
            self._asked[request_id] = agent_tool
        options: list[blocks.PermissionOption] = []
        seen: set[str] = set()
        raw_options = params.get("options")
        for raw in raw_options[:MAX_OPTIONS] if isinstance(raw_options, list) else []:
            option = _dict(raw)
            option_id = option.get("optionId")
            if not isinstance(option_id, str) or not option_id or option_id in seen:
                continue
            if clean(option_id) != option_id:
                continue  # could not be sent back exactly
            seen.add(option_id)
            label = _str(option.get("name"), 300) or option_id
            kind = _permission_kind(option.get("kind"), option_id, label)
            options.append(blocks.PermissionOption(id=option_id, label=label, kind=kind))
        if options:
            title = _str(call.get("title"), 2000) or "Allow the agent to continue?"
            out.append(
                blocks.PermissionRequestBlock(
                    id=request_id, tool_call_id=tool_block_id, title=title, options=options
                )
            )
        return out

    def answered(self, request_id: str, kind: blocks.PermissionKind | None) -> list[blocks.Block]:
        """Record the client's answer (None: cancelled). A declined call that the agent never
        reports finished then ends as an error instead of as done (Gemini sends nothing)."""
        agent_tool = self._asked.pop(request_id, None)
        state = self._tools.get(agent_tool) if agent_tool is not None else None
        if agent_tool is None or state is None:
            return []
        declined = kind is None or kind.startswith("reject")
        state.declined = declined
        if self._approval_only is None or not self._approval_only(agent_tool):
            return []
        # The question stood for another call on the same files (Hermes: "write: <path>"),
        # which never reports its end: declined, that call failed too.
        out: list[blocks.Block] = []
        if declined:
            for other_id, other in list(self._tools.items()):
                if other_id != agent_tool and other.paths & state.paths:
                    other.result = "the user declined this tool call"
                    out += self._finish_tool(other_id, other, failed=True)
        state.result = (
            "the user declined this tool call" if declined else state.result or "approved"
        )
        return out + self._finish_tool(agent_tool, state, failed=declined)

    # ---- usage ----------------------------------------------------------------------------------

    def usage_block(self) -> blocks.UsageBlock | None:
        """The session's usage so far (tokens summed over turns), or None if none was seen."""
        if not self._has_tokens and self.context_used is None and self.cost_usd is None:
            return None
        return blocks.UsageBlock(
            input_tokens=self.input_tokens if self._has_tokens else None,
            output_tokens=self.output_tokens if self._has_tokens else None,
            cached_input_tokens=self.cached_input_tokens,
            cost_usd=self.cost_usd,
            context_used=self.context_used,
            context_size=self.context_size,
        )

    def _take_meta_usage(self, meta: Any) -> None:
        # Qwen reports each model call's tokens in an empty chunk's ``_meta.usage``.
        usage = _dict(_dict(meta).get("usage"))
        tokens = _tokens(usage, "inputTokens", "outputTokens", "cachedReadTokens")
        if tokens is None:
            return
        if self._meta_usage is None:
            self._meta_usage = [0, 0, 0]
        for i, n in enumerate(tokens):
            self._meta_usage[i] += n

    def _add_turn_usage(self, result: dict[str, Any]) -> None:
        meta = _dict(result.get("_meta"))
        tokens = self._reported(
            _tokens(_dict(result.get("usage")), "inputTokens", "outputTokens", "cachedReadTokens")
        ) or (
            _tokens(_dict(meta.get("usage")), "inputTokens", "outputTokens", "cachedReadTokens")
            # Gemini: ``_meta.quota.token_count``
            or _tokens(
                _dict(_dict(meta.get("quota")).get("token_count")),
                "input_tokens",
                "output_tokens",
                "cached_input_tokens",
            )
        )
        if tokens is None and self._meta_usage is not None:
            tokens = (self._meta_usage[0], self._meta_usage[1], self._meta_usage[2])
        if tokens is None:
            return
        self._has_tokens = True
        self.input_tokens = min(self.input_tokens + tokens[0], MAX_COUNT)
        self.output_tokens = min(self.output_tokens + tokens[1], MAX_COUNT)
        if tokens[2]:
            self.cached_input_tokens = min((self.cached_input_tokens or 0) + tokens[2], MAX_COUNT)

    def _reported(self, tokens: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        """The turn's share of a prompt result's ``usage`` (a difference when cumulative)."""
        if tokens is None or not self._cumulative:
            return tokens
        last, self._last_reported = self._last_reported, tokens
        if last is None or any(now < before for now, before in zip(tokens, last, strict=True)):
            return tokens  # the first report, or the agent process started over
        delta = (tokens[0] - last[0], tokens[1] - last[1], tokens[2] - last[2])
        return delta

    def _usage_update(self, update: dict[str, Any]) -> None:
        used, size = _count(update.get("used")), _count(update.get("size"))
        if used is not None:
            self.context_used = used
        if size is not None:
            self.context_size = size
        cost = _dict(update.get("cost"))
        amount = _number(cost.get("amount"))
        currency = cost.get("currency")
        if amount is not None and (currency is None or str(currency).upper() == "USD"):
            self.cost_usd = amount

    # ---- text and thinking ----------------------------------------------------------------------

    def _new_id(self, kind: str) -> str:
        return f"{self._prefix}-{kind}{next(self._ids)}"

    def _close(self, *, thinking: bool) -> list[blocks.Block]:
        current = self._open.pop(thinking, None)
        if current is None:
            return []
        return [_delta(thinking, current[0], done=True)]

    def _close_deltas(self) -> list[blocks.Block]:
        return self._close(thinking=True) + self._close(thinking=False)

    def _chunk(self, update: dict[str, Any], *, thinking: bool) -> list[blocks.Block]:
        content = _dict(update.get("content"))
        if content.get("type", "text") != "text":
            return []
        text = _str(content.get("text"), MAX_VALUE_TEXT * 8)
        if text is None:
            return []
        message_id = _str(update.get("messageId"), 300)
        out = self._close(thinking=not thinking)
        current = self._open.get(thinking)
        if current is not None and message_id and current[1] and message_id != current[1]:
            out += self._close(thinking=thinking)
            current = None
        if current is None:
            current = [self._new_id("t" if thinking else "m"), message_id]
            self._open[thinking] = current
        elif message_id and not current[1]:
            current[1] = message_id
        out.append(_delta(thinking, current[0], text=text))
        return out

    # ---- tool calls -----------------------------------------------------------------------------

    def _unique_tool_id(self, agent_id: str) -> str:
        block_id = agent_id
        n = 1
        while block_id in self._used_tool_ids:
            n += 1
            block_id = f"{agent_id}~{n}"
        self._used_tool_ids.add(block_id)
        return block_id

    @staticmethod
    def _merge(state: _Tool, update: dict[str, Any]) -> None:
        title = _str(update.get("title"))
        if title is not None:
            state.title = title
        kind = _str(update.get("kind"), 100)
        if kind is not None:
            state.kind = kind
        if "rawInput" in update and update["rawInput"] is not None:
            raw = plain(update["rawInput"])
            state.input = raw if isinstance(raw, dict) else {"value": raw}
        if "rawOutput" in update:
            state.raw_output = update["rawOutput"]
        locations = update.get("locations")
        for location in locations[:MAX_ITEMS] if isinstance(locations, list) else []:
            path = _str(_dict(location).get("path"), 4096)
            if path is not None and len(state.paths) < MAX_ITEMS:
                state.paths.add(path)
        # ACP has no tool name: Qwen gives it in ``_meta.toolName``; else the kind stands in.
        name = _str(_dict(update.get("_meta")).get("toolName"), 200)
        if name is not None:
            state.name = name
            state.named = True
        elif not state.named:
            state.name = state.kind or "tool"

    def _tool(self, update: dict[str, Any], *, new: bool) -> list[blocks.Block]:
        agent_id = _str(update.get("toolCallId"), 300)
        if agent_id is None:
            return []
        state = self._tools.get(agent_id)
        out: list[blocks.Block] = []
        if state is None and not new and agent_id in self._finished:
            return []  # late news about a call that already ended
        if state is None:
            out += self._close_deltas()
            state = _Tool(block_id=self._unique_tool_id(agent_id))
            self._tools[agent_id] = state
            self._finished.discard(agent_id)
        self._merge(state, update)
        status = update.get("status")
        final = _TOOL_STATUS.get(status) if isinstance(status, str) else None
        signature = state.signature()
        if not state.shown or (signature != state.shown and final is None):
            state.shown = signature
            out.append(state.block())
        out += self._content(state, update.get("content"))
        if final is not None:
            out += self._finish_tool(agent_id, state, failed=final == "error")
        return out

    def _content(self, state: _Tool, content: Any) -> list[blocks.Block]:
        if not isinstance(content, list):
            return []
        out: list[blocks.Block] = []
        texts: list[str] = []
        for raw in content[:MAX_ITEMS]:
            item = _dict(raw)
            kind = item.get("type")
            if kind == "diff":
                out += self._diff(state, item)
            elif kind == "content":
                text = _content_text(_dict(item.get("content")))
                if text:
                    texts.append(text)
            elif kind == "terminal":
                terminal = _str(item.get("terminalId"), 200)
                if terminal:
                    texts.append(f"[terminal {terminal}]")
        # ACP: a tool call's content is replaced by each update that carries one.
        state.result = clean("\n".join(texts), MAX_VALUE_TEXT)
        return out

    def _diff(self, state: _Tool, item: dict[str, Any]) -> list[blocks.Block]:
        path = _str(item.get("path"), 4096)
        new_text = item.get("newText")
        old_text = item.get("oldText")
        if path is None or not isinstance(new_text, str):
            return []
        old = clean(old_text, MAX_VALUE_TEXT) if isinstance(old_text, str) else None
        new = clean(new_text, MAX_VALUE_TEXT)
        key = (path, hash(new), hash(old))
        if key in state.diffs:
            return []
        state.diffs.add(key)
        state.paths.add(path)
        return [
            blocks.DiffBlock(
                path=path,
                old_text=old,
                new_text=new,
                unified=unified_diff(path, old, new),
                tool_call_id=state.block_id,
            )
        ]

    def _finish_tool(self, agent_id: str, state: _Tool, *, failed: bool) -> list[blocks.Block]:
        self._tools.pop(agent_id, None)
        self._finished.add(agent_id)
        content = state.result or _raw_output_text(state.raw_output)
        if failed and not content:
            content = "the tool call failed"
        # The protocol's order: the final status, then the result that pairs with it.
        return [
            state.block("error" if failed else "done"),
            blocks.ToolResultBlock(tool_call_id=state.block_id, content=content, is_error=failed),
        ]

    def _close_tools(self, *, error: bool, why: str = "interrupted") -> list[blocks.Block]:
        """Finish tool calls the agent never reported finished (some agents never do)."""
        out: list[blocks.Block] = []
        for agent_id, state in list(self._tools.items()):
            failed = error or state.declined
            if state.declined and not error:
                state.result = "the user declined this tool call"
            elif failed and not state.result:
                state.result = why
            out += self._finish_tool(agent_id, state, failed=failed)
        return out

    # ---- plan, commands, mode -------------------------------------------------------------------

    def _plan(self, update: dict[str, Any]) -> list[blocks.Block]:
        entries = update.get("entries")
        if not isinstance(entries, list):
            return []
        out: list[blocks.PlanEntry] = []
        for raw in entries[:MAX_PLAN]:
            entry = _dict(raw)
            content = _str(entry.get("content"), 4000)
            if content is None:
                continue
            status = entry.get("status")
            out.append(
                blocks.PlanEntry(
                    content=content,
                    status=_PLAN_STATUS.get(status, "pending")
                    if isinstance(status, str)
                    else "pending",
                    priority=_str(entry.get("priority"), 50),
                )
            )
        return [blocks.PlanBlock(entries=out)]

    def _commands(self, update: dict[str, Any]) -> list[blocks.Block]:
        items = update.get("availableCommands")
        if not isinstance(items, list):
            return []
        commands: list[blocks.Command] = []
        seen: set[str] = set()
        for raw in items[:MAX_COMMANDS]:
            item = _dict(raw)
            name = _str(item.get("name"), 100)
            if name is None or not name.strip():
                continue
            name = name.strip()
            slash = name if name.startswith("/") else f"/{name}"
            # The bridge answers its own commands itself; the agent's namesakes never arrive.
            if slash in _RESERVED_COMMANDS or slash in seen:
                continue
            seen.add(slash)
            description = _str(item.get("description"), 500) or ""
            commands.append(blocks.Command(name=slash, description=description))
        if commands == self.commands:
            return []
        self.commands = commands
        return [self._agent_info(commands)] if self._agent_info is not None else []

    def _mode(self, mode_id: Any) -> list[blocks.Block]:
        mode = _str(mode_id, 200)
        if mode is None or mode == self.mode:
            return []
        self.mode = mode
        return [blocks.SystemBlock(code="mode", text=f"mode: {mode}", data={"mode": mode})]

    def set_mode(self, mode_id: Any) -> None:
        """Record the mode the session started in (no block)."""
        mode = _str(mode_id, 200)
        if mode is not None:
            self.mode = mode


def _tokens(
    usage: dict[str, Any], input_key: str, output_key: str, cached_key: str
) -> tuple[int, int, int] | None:
    tokens_in, tokens_out = _count(usage.get(input_key)), _count(usage.get(output_key))
    if tokens_in is None and tokens_out is None:
        return None
    return (tokens_in or 0, tokens_out or 0, _count(usage.get(cached_key)) or 0)
