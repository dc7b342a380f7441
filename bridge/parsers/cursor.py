"""Cursor CLI's ``--output-format stream-json --stream-partial-output`` lines turned into blocks.

Events: ``system/init`` (session id, model), ``user`` (the prompt echoed), ``thinking``
(``delta``/``completed``), ``assistant`` (with partial output each delta is its own event),
``tool_call`` (``started``/``completed``, the tool is the one key of ``tool_call``, e.g.
``readToolCall``, ``shellToolCall``, ``writeToolCall``), ``result`` (full text, usage, no cost).

The known quirk: after streaming a text segment as deltas, Cursor sends the segment's full text
once more as one ``assistant`` event. Such a repeat (equal to what was just streamed, or a
longer text that starts with it) is dropped or reduced to its missing tail.
"""

from __future__ import annotations

import json
from typing import Any

from bridge import blocks
from bridge.parsers import (
    JsonLinesParser,
    accumulate_usage,
    call_title,
    decode_object,
    get_dict,
    get_int,
    get_list,
    get_str,
    new_file_diff_block,
    running_call,
    tool_end,
)
from bridge.parsers.failures import FailureReport, failure_block

KINDS = {
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "delete": "delete",
    "shell": "execute",
    "ls": "search",
    "grep": "search",
    "glob": "search",
    "semanticSearch": "search",
    "webFetch": "fetch",
    "updateTodos": "think",
    "todo": "think",
}

#: the arguments a call is titled by, the first one found
TITLE_KEYS = ("command", "path", "pattern", "globPattern", "query", "url")


def _tool_name(key: str) -> str:
    return key[: -len("ToolCall")] if key.endswith("ToolCall") else key


def _plan_status(value: str | None) -> blocks.PlanStatus:
    text = (value or "").lower()
    if "progress" in text:
        return "in_progress"
    if "complete" in text or "done" in text:
        return "completed"
    return "pending"


def _message_text(event: dict[str, Any]) -> str:
    message = event.get("message")
    if isinstance(message, str):
        return message
    direct = get_str(event, "text")
    if direct is not None and not isinstance(message, dict):
        return direct
    parts = []
    for part in get_list(message, "content"):
        if get_str(part, "type") in ("text", "output_text"):
            parts.append(get_str(part, "text") or "")
    if not parts and get_str(message, "text"):
        return get_str(message, "text") or ""
    return "".join(parts)


class CursorParser(JsonLinesParser):
    """Feed it stdout lines of one ``cursor-agent -p --output-format stream-json`` run."""

    def __init__(self, id_prefix: str | None = None) -> None:
        super().__init__(id_prefix)
        self.model: str | None = None
        self._n = 0
        self._text_id: str | None = None
        self._segment = ""  # text streamed since the last non-text event
        self._all_text = ""  # every assistant text of this run
        self._thinking_id: str | None = None
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}

    def _new_id(self, kind: str) -> str:
        self._n += 1
        return f"cursor-{self.prefix}-{kind}{self._n}"

    def close_open(self) -> list[blocks.Block]:
        out: list[blocks.Block] = []
        if self._thinking_id is not None:
            out.append(blocks.ThinkingBlock(id=self._thinking_id, done=True))
            self._thinking_id = None
        if self._text_id is not None:
            out.append(blocks.TextBlock(id=self._text_id, done=True))
            self._text_id = None
        return out

    def _break_segment(self) -> list[blocks.Block]:
        out = self.close_open()
        self._segment = ""
        return out

    def _on_system(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.model = get_str(event, "model") or self.model
        return []

    def _on_thinking(self, event: dict[str, Any]) -> list[blocks.Block]:
        subtype = get_str(event, "subtype")
        if subtype == "completed":
            if self._thinking_id is None:
                return []
            out: list[blocks.Block] = [blocks.ThinkingBlock(id=self._thinking_id, done=True)]
            self._thinking_id = None
            return out
        text = get_str(event, "text")
        if not text:
            return []
        out = []
        if self._text_id is not None:
            out.extend(self._break_segment())
        if self._thinking_id is None:
            self._thinking_id = self._new_id("th")
        out.append(blocks.ThinkingBlock(id=self._thinking_id, text=text))
        return out

    def _on_assistant(self, event: dict[str, Any]) -> list[blocks.Block]:
        text = _message_text(event)
        if not text:
            return []
        out: list[blocks.Block] = []
        if self._thinking_id is not None:
            out.append(blocks.ThinkingBlock(id=self._thinking_id, done=True))
            self._thinking_id = None
        partial = "timestamp_ms" in event
        if self._segment and (
            text in (self._segment, self._all_text)
            or (not partial and text.startswith(self._segment))
        ):
            # The full-text repeat of what was just streamed: keep only what is new.
            tail = text[len(self._segment) :] if text.startswith(self._segment) else ""
            self._segment += tail
            self._all_text += tail
            if tail and self._text_id is not None:
                out.append(blocks.TextBlock(id=self._text_id, text=tail))
            out.extend(self.close_open())
            return out
        if self._text_id is None:
            self._text_id = self._new_id("tx")
        self._segment += text
        self._all_text += text
        out.append(blocks.TextBlock(id=self._text_id, text=text))
        if not partial:
            # A whole message (no partial output): nothing more will be appended to it.
            out.extend(self.close_open())
            self._segment = text
        return out

    def _on_tool_call(self, event: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(event, "call_id") or get_str(event, "id")
        if not call_id:
            return []
        call = get_dict(event, "tool_call")
        key = next(iter(call), None) if call else None
        if key is None:
            return []
        body = get_dict(call, key)
        name = _tool_name(key)
        if key == "function":
            name = get_str(body, "name") or "function"
        args = get_dict(body, "args")
        if key == "function" and not args:
            raw = get_str(body, "arguments")
            args = (decode_object(raw) or {}) if raw else {}
        subtype = get_str(event, "subtype")
        out = self._break_segment()
        if subtype == "started":
            self._calls[call_id] = (name, args)
            out.append(_call(call_id, name, args))
            if name in ("updateTodos", "todo"):
                plan = _plan(args)
                if plan is not None:
                    out.append(plan)
            return out
        if subtype != "completed":
            return out
        known = self._calls.pop(call_id, None)
        if known is None:
            out.append(_call(call_id, name, args))
        else:
            args = args or known[1]
        result = get_dict(body, "result")
        failure = result.get("error") if "error" in result else result.get("failure")
        is_error = failure is not None or "rejected" in result
        success = get_dict(result, "success")
        if not is_error:
            diff = _diff_block(name, args, success, call_id)
            if diff is not None:
                out.append(diff)
        content = _result_text(name, success if not is_error else failure or result)
        return out + tool_end(_call(call_id, name, args), content, is_error=is_error)

    def _on_result(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.finished = True
        out: list[blocks.Block] = []
        text = get_str(event, "result")
        if text and not self._all_text and not event.get("is_error"):
            bid = self._new_id("tx")
            out += [blocks.TextBlock(id=bid, text=text), blocks.TextBlock(id=bid, done=True)]
        out.extend(self.close_open())
        usage = get_dict(event, "usage")
        if usage:

            def num(*keys: str) -> int:
                return next((v for k in keys if (v := get_int(usage, k)) is not None), 0)

            self.usage = accumulate_usage(
                self.usage,
                input_tokens=num("inputTokens", "input_tokens"),
                output_tokens=num("outputTokens", "output_tokens"),
                cached_input_tokens=num(
                    "cacheReadTokens", "cached_input_tokens", "cache_read_input_tokens"
                ),
            )
        if event.get("is_error") is True or get_str(event, "subtype") == "error":
            self.failed = True
            self.error_message = text or get_str(event, "error") or "cursor reported an error"
            report = FailureReport(message=self.error_message, body=event)
            out.append(failure_block("cursor", report))
        return out

    def _on_error(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.failed = True
        self.error_message = get_str(event, "message") or "cursor reported an error"
        report = FailureReport(message=self.error_message, body=event)
        return [*self.close_open(), failure_block("cursor", report)]


def _call(call_id: str, name: str, args: dict[str, Any]) -> blocks.ToolCallBlock:
    return running_call(call_id, name, args, title=call_title(name, args, TITLE_KEYS), kinds=KINDS)


def _result_text(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if name == "shell" and isinstance(value, dict):
        parts = [get_str(value, "stdout") or "", get_str(value, "stderr") or ""]
        code = get_int(value, "exitCode")
        text = "".join(p for p in parts if p)
        return text + (f"\n[exit code {code}]" if code not in (None, 0) else "")
    if isinstance(value, dict):
        for key in ("content", "message", "error"):
            found = get_str(value, key)
            if found is not None:
                return found
        try:
            return json.dumps(value, ensure_ascii=False)[:4000]
        except (TypeError, ValueError):
            return ""
    return ""


def _plan(args: dict[str, Any]) -> blocks.PlanBlock | None:
    entries = [
        blocks.PlanEntry(content=content, status=_plan_status(get_str(item, "status")))
        for item in get_list(args, "todos")
        if (content := get_str(item, "content"))
    ]
    return blocks.PlanBlock(entries=entries) if entries else None


def _diff_block(
    name: str, args: dict[str, Any], success: dict[str, Any], call_id: str
) -> blocks.DiffBlock | None:
    path = get_str(args, "path") or get_str(success, "path")
    if not path:
        return None
    if name == "write":
        content = get_str(args, "fileText")
        if content is None:
            content = get_str(args, "contents")
        return new_file_diff_block(path, content, call_id)
    if name != "edit":
        return None
    old = get_str(args, "oldString") or get_str(args, "old_string") or ""
    new = get_str(args, "newString") or get_str(args, "new_string") or ""
    unified = get_str(success, "diffString") or get_str(success, "diff")
    if not (old or new or unified):
        return None
    return blocks.DiffBlock(
        path=path, old_text=old, new_text=new, unified=unified, tool_call_id=call_id
    )
