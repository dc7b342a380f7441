"""Sans-I/O parsers: an agent's output lines in, blocks out.

A parser never touches a process, a socket, a file or a clock, so it is tested on recorded
real output and fuzzed with garbage. What the parser wants written back to the agent (a
permission answer, an interrupt, the next JSON-RPC request) waits in its ``outbox`` for the
adapter to send, the way ``h11`` hands back bytes to send.

The package's shared parts: :mod:`bridge.parsers.untrusted` reads untrusted JSON safely
(decoding one line into an object or nothing, reading fields without trusting their types,
bounding texts), :mod:`bridge.parsers.diff` reads, applies and writes unified diffs, and this
``__init__`` re-exports both and holds the block-building steps most parsers share: a tool
call's end with its result, an unfinished call's end, running usage totals, and the
``_on_<type>`` dispatch of JSON-lines parsers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from bridge.blocks import (
    Block,
    SystemBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolStatus,
    UsageBlock,
)
from bridge.parsers.diff import (
    Hunk,
    added_file_diff,
    apply_hunks,
    hunks_from_json,
    new_file_diff_block,
    parse_unified,
    render_unified,
    unified_diff,
)
from bridge.parsers.failures import FailureReport, classify
from bridge.parsers.untrusted import (
    MAX_LINE_CHARS,
    MAX_TEXT,
    MAX_VALUE_TEXT,
    clean,
    clip,
    decode_object,
    get_bool,
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    plain,
    short,
)

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_TEXT",
    "MAX_VALUE_TEXT",
    "UNFINISHED_TOOL",
    "Hunk",
    "JsonLinesParser",
    "accumulate_usage",
    "added_file_diff",
    "apply_hunks",
    "call_title",
    "clean",
    "clip",
    "decode_object",
    "get_bool",
    "get_dict",
    "get_float",
    "get_int",
    "get_list",
    "get_str",
    "handler_for",
    "hunks_from_json",
    "new_file_diff_block",
    "parse_unified",
    "plain",
    "render_unified",
    "retry_notice",
    "running_call",
    "short",
    "tool_end",
    "unfinished_tool",
    "unified_diff",
    "with_status",
]

#: The result of a tool call that a turn left unfinished.
UNFINISHED_TOOL = "the tool call did not finish"


def with_status(call: ToolCallBlock, status: ToolStatus) -> ToolCallBlock:
    """The same call, in another status (a started call that finished or failed)."""
    return msgspec.structs.replace(call, status=status)


def running_call(
    call_id: str,
    name: str,
    tool_input: dict[str, Any],
    *,
    title: str | None,
    kinds: Mapping[str, str],
) -> ToolCallBlock:
    """A call that started, its kind looked up by tool name in the parser's ``kinds``."""
    return ToolCallBlock(
        id=call_id,
        name=name,
        title=title,
        kind=kinds.get(name, "other"),
        input=tool_input,
        status="running",
    )


def tool_end(call: ToolCallBlock, content: str, *, is_error: bool) -> list[Block]:
    """A call's end: the call again as done (or error), then its result, clipped."""
    return [
        with_status(call, "error" if is_error else "done"),
        ToolResultBlock(
            tool_call_id=call.id, content=clip(content), is_error=is_error, parent_id=call.parent_id
        ),
    ]


def unfinished_tool(call: ToolCallBlock) -> list[Block]:
    """A call the turn left running, ended: as an error, with a result saying it did not
    finish (so every call a client saw start gets its end and its result)."""
    return [
        with_status(call, "error"),
        ToolResultBlock(
            tool_call_id=call.id, content=UNFINISHED_TOOL, is_error=True, parent_id=call.parent_id
        ),
    ]


def accumulate_usage(
    total: UsageBlock,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int,
    cost_usd: float | None = None,
    context_used: int | None = None,
) -> UsageBlock:
    """Running totals: ``total`` plus one step's tokens and cost (the context is the step's)."""
    return UsageBlock(
        input_tokens=(total.input_tokens or 0) + input_tokens,
        output_tokens=(total.output_tokens or 0) + output_tokens,
        cached_input_tokens=(total.cached_input_tokens or 0) + cached_input_tokens,
        cost_usd=(total.cost_usd or 0.0) + cost_usd if cost_usd is not None else total.cost_usd,
        context_used=context_used,
    )


def retry_notice(
    agent: str | None,
    report: FailureReport,
    reason: str,
    *,
    attempt: int | None,
    of: int | None = None,
    wait: str = "",
) -> SystemBlock:
    """The notice that the agent retries a failed model call by itself (``api_retry``): which
    attempt, why, and the failure's code and hint as
    :func:`bridge.parsers.failures.classify` sees it."""
    counts = ""
    if attempt:
        counts = f" (attempt {attempt} of {of})" if of else f" (attempt {attempt})"
    failure = classify(agent, report)
    return SystemBlock(
        level="warn",
        code="api_retry",
        text=f"retrying the model call{counts}{wait}: {reason}",
        data={"attempt": attempt, "error_code": failure.code, "hint": failure.hint},
    )


def call_title(name: str, tool_input: dict[str, Any], keys: tuple[str, ...]) -> str:
    """A tool call's title: its command, else the tool's name and its first argument of
    ``keys`` (a path, a pattern, a URL…), else the name alone."""
    for key in keys:
        value = get_str(tool_input, key)
        if value:
            return short(value if key == "command" else f"{name} {value}")
    return name


def handler_for(
    parser: object, event: dict[str, Any]
) -> Callable[[dict[str, Any]], list[Block]] | None:
    """The parser's ``_on_<type>`` method for an event's ``type``, or None."""
    kind = get_str(event, "type")
    handler = getattr(parser, f"_on_{kind}", None) if kind else None
    return handler if callable(handler) else None


class JsonLinesParser:
    """The base of parsers of one JSON event per line, each event's ``type`` handled by the
    subclass's ``_on_<type>`` method (events of other types are skipped).

    It holds what the per-turn adapters read after a run: the session id (from the field
    ``session_key`` of any event, when the subclass names one), whether the agent printed
    anything, whether the run finished or failed and why, and the usage totals.
    """

    session_key: str | None = "session_id"

    def __init__(self, id_prefix: str | None = None) -> None:
        self.prefix = id_prefix or uuid.uuid4().hex[:8]
        self.session_id: str | None = None
        self.saw_output = False
        self.finished = False
        self.failed = False
        self.error_message: str | None = None
        self.usage = UsageBlock()

    def feed(self, line: bytes | str) -> list[Block]:
        event = decode_object(line)
        if event is None:
            return []
        handler = handler_for(self, event)
        if handler is None:
            return []
        self.saw_output = True
        sid = get_str(event, self.session_key) if self.session_key else None
        if sid:
            self.session_id = sid
        return handler(event)
