"""Factory Droid's ``droid exec -o stream-json`` lines turned into blocks.

Droid prints whole messages (no token deltas): ``system/init`` with the session id, ``message``
per user or assistant message, ``reasoning`` (printed twice, so repeats are dropped),
``tool_call``/``tool_result`` (an ``Edit`` result carries ``diffLines`` with line numbers),
``error``, and ``completion`` with the final text and usage. There is no cost field.
"""

from __future__ import annotations

from typing import Any

from bridge import blocks
from bridge.parsers import (
    Hunk,
    JsonLinesParser,
    accumulate_usage,
    decode_object,
    get_dict,
    get_int,
    get_list,
    get_str,
    new_file_diff_block,
    render_unified,
    running_call,
    short,
    tool_end,
)
from bridge.parsers.failures import FailureReport, failure_block

KINDS = {
    "Read": "read",
    "LS": "search",
    "Glob": "search",
    "Grep": "search",
    "Execute": "execute",
    "Edit": "edit",
    "MultiEdit": "edit",
    "Create": "edit",
    "ApplyPatch": "edit",
    "WebSearch": "fetch",
    "FetchUrl": "fetch",
    "TodoWrite": "think",
    "Task": "other",
}


def difflines_to_unified(path: str, items: list[Any]) -> str | None:
    """Droid's ``diffLines`` (``unchanged``/``removed``/``added`` with line numbers) as one hunk."""
    lines: list[str] = []
    old_start = new_start = None
    old_count = new_count = 0
    for item in items:
        kind = get_str(item, "type")
        content = get_str(item, "content")
        numbers = get_dict(item, "lineNumber")
        if content is None or kind not in ("unchanged", "removed", "added"):
            return None
        old_no, new_no = get_int(numbers, "old"), get_int(numbers, "new")
        if kind in ("unchanged", "removed") and old_start is None and old_no is not None:
            old_start = old_no
        if kind in ("unchanged", "added") and new_start is None and new_no is not None:
            new_start = new_no
        if kind == "unchanged":
            lines.append(" " + content)
            old_count += 1
            new_count += 1
        elif kind == "removed":
            lines.append("-" + content)
            old_count += 1
        else:
            lines.append("+" + content)
            new_count += 1
    if not lines:
        return None
    hunk = Hunk(old_start or 0, old_count, new_start or 0, new_count, tuple(lines))
    return render_unified(path, [hunk])


def _plan_status(value: str | None) -> blocks.PlanStatus:
    text = (value or "").lower()
    if "progress" in text:
        return "in_progress"
    if "complete" in text or text == "done":
        return "completed"
    return "pending"


class DroidParser(JsonLinesParser):
    """Feed it stdout lines of one ``droid exec -o stream-json`` run; it returns blocks."""

    def __init__(self, id_prefix: str | None = None) -> None:
        super().__init__(id_prefix)
        self.model: str | None = None
        self._seen_reasoning: set[tuple[str, str]] = set()
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self._texts = 0

    def close_open(self) -> list[blocks.Block]:
        """Nothing streams in Droid's output: every block is already whole."""
        return []

    def _next_id(self, kind: str, own: str | None) -> str:
        self._texts += 1
        return f"droid-{self.prefix}-{kind}-{own or self._texts}"

    def _on_system(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.model = get_str(event, "model") or self.model
        return []

    def _on_message(self, event: dict[str, Any]) -> list[blocks.Block]:
        if get_str(event, "role") != "assistant":
            return []
        text = get_str(event, "text")
        if not text:
            return []
        bid = self._next_id("msg", get_str(event, "id"))
        return [blocks.TextBlock(id=bid, text=text), blocks.TextBlock(id=bid, done=True)]

    def _on_reasoning(self, event: dict[str, Any]) -> list[blocks.Block]:
        text = get_str(event, "text")
        own = get_str(event, "id") or ""
        if not text or (own, text) in self._seen_reasoning:
            return []
        self._seen_reasoning.add((own, text))
        bid = self._next_id("think", f"{own}-{len(self._seen_reasoning)}")
        return [blocks.ThinkingBlock(id=bid, text=text), blocks.ThinkingBlock(id=bid, done=True)]

    def _on_tool_call(self, event: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(event, "id")
        if not call_id:
            return []
        name = get_str(event, "toolName") or get_str(event, "toolId") or "tool"
        params = get_dict(event, "parameters")
        self._calls[call_id] = (name, params)
        out: list[blocks.Block] = [_call(call_id, name, params)]
        if name == "TodoWrite":
            plan = _plan(params)
            if plan is not None:
                out.append(plan)
        return out

    def _on_tool_result(self, event: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(event, "id")
        if not call_id:
            return []
        known = self._calls.pop(call_id, None)
        name, params = known or (get_str(event, "toolId") or "tool", {})
        is_error = event.get("isError") is True
        out: list[blocks.Block] = []
        if known is None:
            out.append(
                blocks.ToolCallBlock(
                    id=call_id, name=name, kind=KINDS.get(name, "other"), status="running"
                )
            )
        value = event.get("value")
        if is_error:
            content = get_str(get_dict(event, "error"), "message") or _as_text(value)
        else:
            content = _as_text(value)
            diff = _diff_block(name, params, value, call_id)
            if diff is not None:
                out.append(diff)
        return out + tool_end(_call(call_id, name, params), content, is_error=is_error)

    def _on_error(self, event: dict[str, Any]) -> list[blocks.Block]:
        if self.failed and get_str(event, "source") == "cli":
            return []  # "Exec failed": the CLI's summary of the error already reported
        self.failed = True
        self.error_message = get_str(event, "message") or "droid reported an error"
        return [failure_block("droid", FailureReport(message=self.error_message, body=event))]

    def _on_completion(self, event: dict[str, Any]) -> list[blocks.Block]:
        self.finished = True
        usage = get_dict(event, "usage")
        if usage:
            self.usage = accumulate_usage(
                self.usage,
                input_tokens=get_int(usage, "input_tokens") or 0,
                output_tokens=get_int(usage, "output_tokens") or 0,
                cached_input_tokens=get_int(usage, "cache_read_input_tokens") or 0,
            )
        return []


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return short(repr(value), 4000)


def _call(call_id: str, name: str, params: dict[str, Any]) -> blocks.ToolCallBlock:
    return running_call(call_id, name, params, title=_title(name, params), kinds=KINDS)


def _title(name: str, params: dict[str, Any]) -> str:
    for key in ("summary", "command", "file_path", "pattern", "url"):
        value = get_str(params, key)
        if value:
            return short(value)
    return name


def _plan(params: dict[str, Any]) -> blocks.PlanBlock | None:
    todos = params.get("todos")
    entries: list[blocks.PlanEntry] = []
    if isinstance(todos, list):
        for item in todos:
            content = get_str(item, "content") or get_str(item, "title")
            if content:
                entries.append(
                    blocks.PlanEntry(
                        content=content,
                        status=_plan_status(get_str(item, "status")),
                        priority=get_str(item, "priority"),
                    )
                )
    elif isinstance(todos, str):
        # Droid's TodoWrite may take a checklist text: "1. [in_progress] Do X".
        for raw in todos.splitlines():
            line = raw.strip().lstrip("-*0123456789. ")
            if not line:
                continue
            status: blocks.PlanStatus = "pending"
            if line.startswith("[") and "]" in line:
                status = _plan_status(line[1 : line.index("]")])
                line = line[line.index("]") + 1 :].strip()
            entries.append(blocks.PlanEntry(content=line, status=status))
    return blocks.PlanBlock(entries=entries) if entries else None


def _diff_block(
    name: str, params: dict[str, Any], value: Any, call_id: str
) -> blocks.DiffBlock | None:
    path = get_str(params, "file_path") or get_str(params, "path")
    if not path:
        return None
    if name == "Create":
        return new_file_diff_block(path, get_str(params, "content"), call_id)
    if name != "Edit":
        return None
    details = decode_object(value) if isinstance(value, str) else None
    unified = difflines_to_unified(path, get_list(details, "diffLines")) if details else None
    return blocks.DiffBlock(
        path=path,
        old_text=get_str(params, "old_str") or "",
        new_text=get_str(params, "new_str") or "",
        unified=unified,
        tool_call_id=call_id,
    )
