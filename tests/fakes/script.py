"""Model-neutral script steps for the fake model servers.

A test queues steps on a server; each model request (one that offers tools, i.e. an agent turn)
takes the first queued step whose ``when`` matches it, and the server renders that step in its own
wire format (Anthropic SSE, OpenAI Responses SSE, Chat Completions SSE, Gemini SSE).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .core import RecordedRequest

#: ``"any"``: any agent request; ``"tool_result"``: the request's last message carries a tool
#: result; ``"user"``: the last message is a user message without a tool result; or a predicate.
When = Literal["any", "tool_result", "user"] | Callable[["RecordedRequest"], bool]

#: Model-neutral stop reasons; each wire format maps them (e.g. ``"tool"`` → ``tool_use``).
Stop = Literal["end", "tool", "max_tokens", "refusal"]

_ids = itertools.count(1)


def next_id(prefix: str) -> str:
    """A process-unique id such as ``toolu_fake_0007``."""
    return f"{prefix}_fake_{next(_ids):04d}"


@dataclass(frozen=True)
class Usage:
    """Token counts reported in the reply (each wire format maps the names)."""

    input_tokens: int = 12
    output_tokens: int = 5
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class ToolCall:
    """One tool call: ``name`` as the CLI named the tool, ``args`` as a JSON object."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One model turn: optional thinking, text, and tool calls, streamed in the wire format.

    Fault injection:
      * ``delay``: seconds to wait before sending the response headers (a stalled model);
      * ``stall_after`` / ``stall``: after that many stream events, wait ``stall`` seconds
        (released early by ``server.release()``), then continue;
      * ``disconnect_after``: after that many stream events, drop the connection without ending
        the chunked body (a mid-stream disconnect).
    """

    text: str = ""
    thinking: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    stop: Stop | None = None
    usage: Usage = field(default_factory=Usage)
    chunks: int = 3
    when: When = "any"
    delay: float = 0.0
    stall_after: int | None = None
    stall: float = 0.0
    disconnect_after: int | None = None
    #: extra response headers (an API's rate-limit headers, say)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def stop_reason(self) -> Stop:
        if self.stop is not None:
            return self.stop
        return "tool" if self.tool_calls else "end"


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error status and the wire format's error body.

    ``kind`` overrides the error type string (e.g. Anthropic ``overloaded_error``); ``body``
    replaces the whole JSON body; ``retry_after`` sets the ``Retry-After`` header.
    """

    status: int
    message: str = "fake error"
    kind: str | None = None
    body: Any = None
    retry_after: float | None = None
    when: When = "any"
    delay: float = 0.0


Step = Reply | HttpError


def CallTool(
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    text: str = "",
    thinking: str | None = None,
    id: str | None = None,
    when: When = "any",
    usage: Usage | None = None,
) -> Reply:
    """A turn that calls one tool, e.g. ``CallTool("Bash", {"command": "ls"})``."""
    return Reply(
        text=text,
        thinking=thinking,
        tool_calls=(ToolCall(name=name, args=dict(args or {}), id=id),),
        when=when,
        usage=usage or Usage(),
    )


def split_text(text: str, chunks: int) -> list[str]:
    """Split ``text`` into at most ``chunks`` non-empty pieces (deltas)."""
    if not text:
        return []
    n = max(1, min(chunks, len(text)))
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]
