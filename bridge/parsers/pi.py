"""Pi's ``--mode json`` event stream (one JSON object per line) turned into blocks.

Pi streams real deltas (``message_update`` with ``text_delta``/``thinking_delta``; the
``partial`` snapshot runs ahead of the deltas, so only ``delta`` is read), announces tools with
``tool_execution_start``/``tool_execution_end``, and reports usage and cost per assistant
message in ``message_end``. The first line is the session header carrying the session id.
"""

from __future__ import annotations

import re
from typing import Any

from bridge import blocks
from bridge.parsers import (
    Hunk,
    JsonLinesParser,
    accumulate_usage,
    call_title,
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    new_file_diff_block,
    render_unified,
    retry_notice,
    running_call,
    short,
    tool_end,
)
from bridge.parsers.failures import FailureReport, failure_block

KINDS = {
    "bash": "execute",
    "read": "read",
    "edit": "edit",
    "write": "edit",
    "grep": "search",
    "find": "search",
    "ls": "search",
}

#: the arguments a call is titled by, the first one found
TITLE_KEYS = ("command", "path", "pattern")

_NUMBERED = re.compile(r"^([ +-])\s*(\d+) (.*)$")


def pi_diff_to_unified(path: str, diff: str) -> str | None:
    """Pi's numbered edit diff (`` 1 a``, ``-2 b``, ``+2 c``, `` ...``) as a unified diff.

    Context and removed lines carry old line numbers, added lines new ones; a `` ...`` line
    separates hunks. Returns None when the text is not in that shape.
    """
    hunks: list[Hunk] = []
    lines: list[str] = []
    old_start = new_start = 0
    old_count = new_count = 0
    offset = 0  # new line number minus old line number after the lines seen so far

    def close() -> None:
        if lines:
            hunks.append(Hunk(old_start, old_count, new_start, new_count, tuple(lines)))

    for raw in diff.split("\n"):
        if raw.strip() == "...":
            close()
            lines, old_count, new_count = [], 0, 0
            continue
        match = _NUMBERED.match(raw)
        if match is None:
            return None
        tag, num, body = match.group(1), int(match.group(2)), match.group(3)
        if not lines:
            if tag == "+":
                new_start, old_start = num, num - offset - 1
            else:
                old_start, new_start = num, num + offset
        lines.append(tag + body)
        if tag == " ":
            old_count += 1
            new_count += 1
        elif tag == "-":
            old_count += 1
            offset -= 1
        else:
            new_count += 1
            offset += 1
    close()
    if not hunks:
        return None
    return render_unified(path, hunks)


def _text_of(result: Any) -> str:
    parts = [get_str(item, "text") or "" for item in get_list(result, "content")]
    return "".join(parts)


class PiParser(JsonLinesParser):
    """Feed it stdout lines of one ``pi --mode json`` run; it returns blocks."""

    session_key = None  # the session id is in the ``session`` header only

    def __init__(self, id_prefix: str | None = None) -> None:
        super().__init__(id_prefix)
        self.aborted = False
        self.agent_retried = False
        self._pending_error: blocks.Block | None = None
        self._messages = 0
        self._open: dict[str, type[blocks.TextBlock] | type[blocks.ThinkingBlock]] = {}
        self._sent: dict[str, str] = {}
        self._tool_args: dict[str, dict[str, Any]] = {}

    # ---- helpers --------------------------------------------------------------------------------

    def _block_id(self, index: Any, thinking: bool) -> str:
        idx = index if isinstance(index, int) and not isinstance(index, bool) else 0
        return f"pi-{self.prefix}-{self._messages}-{'th' if thinking else 'tx'}{idx}"

    def _delta(
        self, kind: type[blocks.TextBlock] | type[blocks.ThinkingBlock], bid: str, text: str
    ) -> blocks.Block:
        self._open[bid] = kind
        self._sent[bid] = self._sent.get(bid, "") + text
        return kind(id=bid, text=text)

    def _close(self, bid: str, full: str | None = None) -> list[blocks.Block]:
        kind = self._open.pop(bid, None)
        if kind is None:
            return []
        out: list[blocks.Block] = []
        sent = self._sent.pop(bid, "")
        if full and full.startswith(sent) and len(full) > len(sent):
            out.append(kind(id=bid, text=full[len(sent) :]))
        out.append(kind(id=bid, done=True))
        return out

    def close_open(self) -> list[blocks.Block]:
        """Close open deltas; at the end of the run, also the error of the last failed call."""
        out = self._close_deltas()
        if self._pending_error is not None:
            out.append(self._pending_error)
            self._pending_error = None
        return out

    def _close_deltas(self) -> list[blocks.Block]:
        out: list[blocks.Block] = []
        for bid in list(self._open):
            out.extend(self._close(bid))
        return out

    def _on_auto_retry_start(self, event: dict[str, Any]) -> list[blocks.Block]:
        """Pi retries a failed model call itself (429, 5xx: ``retry`` settings, 3 attempts)."""
        self.agent_retried = True
        self.failed = False
        self._pending_error = None
        delay = get_int(event, "delayMs")
        why = get_str(event, "errorMessage") or "the model call failed"
        return [
            retry_notice(
                "pi",
                FailureReport(message=why),
                short(why, 300),
                attempt=get_int(event, "attempt"),
                of=get_int(event, "maxAttempts"),
                wait=f" in {delay / 1000:g} s" if delay else "",
            )
        ]

    def _on_auto_retry_end(self, event: dict[str, Any]) -> list[blocks.Block]:
        if event.get("success") is False and self._pending_error is None:
            why = get_str(event, "finalError") or "the model call failed"
            self.failed = True
            self.error_message = why
            self._pending_error = failure_block("pi", FailureReport(message=why))
        return []

    # ---- events ---------------------------------------------------------------------------------

    def _on_session(self, event: dict[str, Any]) -> list[blocks.Block]:
        sid = get_str(event, "id")
        if sid:
            self.session_id = sid
        return []

    def _on_message_start(self, event: dict[str, Any]) -> list[blocks.Block]:
        if get_str(get_dict(event, "message"), "role") == "assistant":
            self._messages += 1
        return []

    def _on_message_update(self, event: dict[str, Any]) -> list[blocks.Block]:
        update = get_dict(event, "assistantMessageEvent")
        kind = get_str(update, "type") or ""
        index = update.get("contentIndex")
        if kind in ("text_delta", "thinking_delta"):
            delta = get_str(update, "delta")
            if not delta:
                return []
            thinking = kind == "thinking_delta"
            block = blocks.TextBlock if not thinking else blocks.ThinkingBlock
            return [self._delta(block, self._block_id(index, thinking), delta)]
        if kind in ("text_end", "thinking_end"):
            thinking = kind == "thinking_end"
            return self._close(self._block_id(index, thinking), get_str(update, "content"))
        return []

    def _on_message_end(self, event: dict[str, Any]) -> list[blocks.Block]:
        message = get_dict(event, "message")
        if get_str(message, "role") != "assistant":
            return []
        out = self.close_open()
        usage = get_dict(message, "usage")
        if usage:
            self._add_usage(usage)
        stop = get_str(message, "stopReason")
        if stop == "error":
            self.failed = True
            self.error_message = get_str(message, "errorMessage") or "the model call failed"
            # Held back: Pi may retry the call itself (``auto_retry_start``) and succeed.
            self._pending_error = failure_block(
                "pi", FailureReport(message=self.error_message, body=message)
            )
        elif stop == "aborted":
            self.aborted = True
        return out

    def _add_usage(self, usage: dict[str, Any]) -> None:
        self.usage = accumulate_usage(
            self.usage,
            input_tokens=get_int(usage, "input") or 0,
            output_tokens=get_int(usage, "output") or 0,
            cached_input_tokens=get_int(usage, "cacheRead") or 0,
            cost_usd=get_float(get_dict(usage, "cost"), "total"),
            context_used=(get_int(usage, "totalTokens") or None),
        )

    def _on_tool_execution_start(self, event: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(event, "toolCallId")
        if not call_id:
            return []
        name = get_str(event, "toolName") or "tool"
        args = get_dict(event, "args")
        self._tool_args[call_id] = args
        return [*self.close_open(), _call(call_id, name, args)]

    def _on_tool_execution_end(self, event: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(event, "toolCallId")
        if not call_id:
            return []
        name = get_str(event, "toolName") or "tool"
        args = self._tool_args.pop(call_id, None)
        known = args is not None
        args = args or {}
        result = get_dict(event, "result")
        is_error = event.get("isError") is True
        out: list[blocks.Block] = []
        if not known:
            out.append(
                blocks.ToolCallBlock(
                    id=call_id, name=name, kind=KINDS.get(name, "other"), status="running"
                )
            )
        if not is_error:
            diff = _diff_block(name, args, result, call_id)
            if diff is not None:
                out.append(diff)
        return out + tool_end(_call(call_id, name, args), _text_of(result), is_error=is_error)

    def _on_agent_end(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.finished = True
        return self._close_deltas()

    def _on_auto_compaction_start(self, event: dict[str, Any]) -> list[blocks.Block]:
        return [blocks.SystemBlock(code="compaction", text="pi compacts the conversation")]


def _call(call_id: str, name: str, args: dict[str, Any]) -> blocks.ToolCallBlock:
    return running_call(call_id, name, args, title=call_title(name, args, TITLE_KEYS), kinds=KINDS)


def _diff_block(
    name: str, args: dict[str, Any], result: dict[str, Any], call_id: str
) -> blocks.DiffBlock | None:
    path = get_str(args, "path") or get_str(args, "file_path")
    if not path:
        return None
    if name == "write":
        return new_file_diff_block(path, get_str(args, "content"), call_id)
    if name != "edit":
        return None
    edits = [e for e in get_list(args, "edits") if isinstance(e, dict)]
    if not edits and get_str(args, "oldText") is not None:
        edits = [args]
    olds = [get_str(e, "oldText") or "" for e in edits]
    news = [get_str(e, "newText") or "" for e in edits]
    numbered = get_str(get_dict(result, "details"), "diff")
    unified = pi_diff_to_unified(path, numbered) if numbered else None
    if not edits and unified is None:
        return None
    return blocks.DiffBlock(
        path=path,
        old_text="\n".join(olds),
        new_text="\n".join(news),
        unified=unified,
        tool_call_id=call_id,
    )
