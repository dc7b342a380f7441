"""The event stream of ``opencode serve`` (and ``kilo serve``) turned into blocks.

The server's ``GET /event`` is Server-Sent Events; each ``data:`` line is one JSON object
``{"type", "properties"}``. The parser follows one session: it learns message roles from
``message.updated`` (so the user's own prompt parts are skipped), streams text and reasoning
from ``message.part.delta``, follows tool parts from ``running`` to ``completed``/``error``
(an ``edit`` carries a unified ``diff`` in its metadata), turns ``permission.asked`` into a
permission request and ``todo.updated`` into a plan, sums ``step-finish`` tokens and cost,
and marks the turn done at ``session.idle`` once the session was seen busy.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from bridge import blocks
from bridge.parsers import (
    accumulate_usage,
    added_file_diff,
    call_title,
    decode_object,
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    retry_notice,
    short,
    tool_end,
)
from bridge.parsers.failures import FailureReport, failure_block

KINDS = {
    "bash": "execute",
    "read": "read",
    "edit": "edit",
    "write": "edit",
    "patch": "edit",
    "multiedit": "edit",
    "glob": "search",
    "grep": "search",
    "list": "search",
    "codesearch": "search",
    "webfetch": "fetch",
    "websearch": "fetch",
    "todowrite": "think",
    "todoread": "think",
    "task": "other",
}

#: the arguments a call is titled by, the first one found
TITLE_KEYS = ("command", "filePath", "path", "pattern", "url", "description")

#: The answers ``POST /session/<id>/permissions/<permission id>`` accepts.
PERMISSION_OPTIONS = (
    blocks.PermissionOption(id="once", label="Allow once", kind="allow_once"),
    blocks.PermissionOption(id="always", label="Always allow", kind="allow_always"),
    blocks.PermissionOption(id="reject", label="Reject", kind="reject_once"),
)


def _plan_status(value: str | None) -> blocks.PlanStatus:
    if value == "in_progress":
        return "in_progress"
    if value in ("completed", "cancelled"):
        return "completed"
    return "pending"


def sse_data(line: bytes | str) -> dict[str, Any] | None:
    """The event object of one SSE ``data:`` line (other SSE lines give None)."""
    raw = line.decode("utf-8", "replace") if isinstance(line, bytes | bytearray) else line
    if not isinstance(raw, str) or not raw.startswith("data:"):
        return None
    return decode_object(raw[5:])


@dataclass
class _Part:
    kind: str  # "text" | "reasoning"
    sent: str = ""
    done: bool = False


@dataclass
class _Tool:
    name: str
    started: bool = False
    final: bool = False
    input: dict[str, Any] = field(default_factory=dict)


class OpenCodeParser:
    """Feed it the events of one session, turn after turn; it returns blocks.

    Call :meth:`begin_turn` before each prompt; :attr:`turn_done` turns true at the end of the
    turn, :attr:`turn_usage` has the turn's tokens and cost, :attr:`session_usage` the totals
    the server reports for the whole session.
    """

    def __init__(
        self,
        session_id: str | None = None,
        id_prefix: str | None = None,
        agent_id: str = "opencode",
    ) -> None:
        self.session_id = session_id
        self.agent_id = agent_id
        self.prefix = id_prefix or uuid.uuid4().hex[:8]
        self.roles: dict[str, str] = {}
        #: the messages a fork copied from its parent: their parts are history, not output
        self.copied: set[str] = set()
        self.session_usage: blocks.UsageBlock | None = None
        self.title: str | None = None
        self.begin_turn()

    def begin_turn(self) -> None:
        self.turn_done = False
        self.busy = False
        self.aborted = False
        self.failed = False
        self.agent_retried = False
        #: the server's own retries of the model call in this turn, and the last one's reason
        self.retries = 0
        self.last_retry_message: str | None = None
        self.error_message: str | None = None
        self.turn_usage = blocks.UsageBlock()
        self._steps: set[str] = set()
        self._parts: dict[str, _Part] = {}
        self._tools: dict[str, _Tool] = {}

    # ---- input ----------------------------------------------------------------------------------

    def feed(self, line: bytes | str) -> list[blocks.Block]:
        """One line: an SSE ``data:`` line or a bare JSON event object."""
        event = sse_data(line)
        if event is None:
            event = decode_object(line)
        return self.feed_event(event) if event is not None else []

    def feed_event(self, event: dict[str, Any]) -> list[blocks.Block]:
        kind = get_str(event, "type")
        props = get_dict(event, "properties")
        if not kind:
            return []
        sid = get_str(props, "sessionID") or get_str(get_dict(props, "part"), "sessionID")
        if sid is None:
            sid = get_str(get_dict(props, "info"), "sessionID")
        if self.session_id is not None and sid is not None and sid != self.session_id:
            return []
        handler = getattr(self, "_on_" + kind.replace(".", "_"), None)
        if handler is None:
            return []
        result: list[blocks.Block] = handler(props)
        return result

    def close_open(self) -> list[blocks.Block]:
        """Finish whatever is still streaming (used when the turn ends abnormally)."""
        out: list[blocks.Block] = []
        for pid, part in self._parts.items():
            if part.sent and not part.done:
                part.done = True
                out.append(self._block(part.kind, pid, "", done=True))
        return out

    # ---- helpers --------------------------------------------------------------------------------

    def _block(self, kind: str, pid: str, text: str, done: bool = False) -> blocks.Block:
        bid = f"oc-{self.prefix}-{pid}"
        if kind == "reasoning":
            return blocks.ThinkingBlock(id=bid, text=text, done=done)
        return blocks.TextBlock(id=bid, text=text, done=done)

    def _is_user(self, message_id: str | None, part: dict[str, Any]) -> bool:
        role = self.roles.get(message_id or "")
        if role is not None:
            return role == "user"
        # A part of a message not announced yet: only the model's parts carry timings.
        return get_str(part, "type") == "text" and "time" not in part

    # ---- events ---------------------------------------------------------------------------------

    def _on_message_updated(self, props: dict[str, Any]) -> list[blocks.Block]:
        info = get_dict(props, "info")
        mid, role = get_str(info, "id"), get_str(info, "role")
        if mid and role:
            self.roles[mid] = role
        return []

    def _on_session_updated(self, props: dict[str, Any]) -> list[blocks.Block]:
        info = get_dict(props, "info")
        self.title = get_str(info, "title") or self.title
        tokens = get_dict(info, "tokens")
        if tokens:
            self.session_usage = blocks.UsageBlock(
                input_tokens=get_int(tokens, "input"),
                output_tokens=get_int(tokens, "output"),
                cached_input_tokens=get_int(get_dict(tokens, "cache"), "read"),
                cost_usd=get_float(info, "cost"),
            )
        return []

    def _on_session_status(self, props: dict[str, Any]) -> list[blocks.Block]:
        status = get_dict(props, "status")
        if get_str(status, "type") in ("busy", "retry"):
            self.busy = True
        if get_str(status, "type") == "retry":
            self.agent_retried = True
            self.retries += 1
            why = get_str(status, "message") or "the model call failed"
            self.last_retry_message = why
            report = FailureReport(message=why)
            attempt = get_int(status, "attempt")
            return [retry_notice(self.agent_id, report, short(why, 300), attempt=attempt)]
        return []

    def _on_session_idle(self, props: dict[str, Any]) -> list[blocks.Block]:
        if not self.busy:
            return []  # an idle left over from the previous turn
        self.turn_done = True
        return self.close_open()

    def _on_session_error(self, props: dict[str, Any]) -> list[blocks.Block]:
        error = get_dict(props, "error")
        name = get_str(error, "name") or "Error"
        if name == "MessageAbortedError":
            self.aborted = True
            return []
        data = get_dict(error, "data")
        message = get_str(data, "message") or name
        self.failed = True
        self.error_message = message
        report = FailureReport(
            message=short(message, 2000), status=get_int(data, "statusCode"), kind=name, body=data
        )
        return [failure_block(self.agent_id, report, detail=name)]

    def _on_todo_updated(self, props: dict[str, Any]) -> list[blocks.Block]:
        entries = [
            blocks.PlanEntry(
                content=content,
                status=_plan_status(get_str(item, "status")),
                priority=get_str(item, "priority"),
            )
            for item in get_list(props, "todos")
            if (content := get_str(item, "content"))
        ]
        return [blocks.PlanBlock(entries=entries)]

    def _on_permission_asked(self, props: dict[str, Any]) -> list[blocks.Block]:
        pid = get_str(props, "id")
        if not pid:
            return []
        what = get_str(props, "permission") or get_str(props, "type") or "permission"
        patterns = [p for p in get_list(props, "patterns") if isinstance(p, str)]
        detail = ", ".join(patterns) or get_str(props, "title") or ""
        return [
            blocks.PermissionRequestBlock(
                id=pid,
                tool_call_id=get_str(get_dict(props, "tool"), "callID"),
                title=short(f"{what}: {detail}" if detail else what, 300),
                options=list(PERMISSION_OPTIONS),
            )
        ]

    # Older servers (≤ 1.1) name it ``permission.updated``.
    _on_permission_updated = _on_permission_asked

    def _on_message_part_delta(self, props: dict[str, Any]) -> list[blocks.Block]:
        pid = get_str(props, "partID")
        delta = get_str(props, "delta")
        part = self._parts.get(pid or "")
        if part is None or not delta or part.done or get_str(props, "field") not in (None, "text"):
            return []
        part.sent += delta
        assert pid is not None
        return [self._block(part.kind, pid, delta)]

    def _on_message_part_updated(self, props: dict[str, Any]) -> list[blocks.Block]:
        part = get_dict(props, "part")
        pid = get_str(part, "id")
        kind = get_str(part, "type")
        if not pid or not kind or self._is_user(get_str(part, "messageID"), part):
            return []
        if get_str(part, "messageID") in self.copied:
            return []
        if kind in ("text", "reasoning"):
            return self._text_part(pid, kind, part, get_str(props, "delta"))
        if kind == "tool":
            return self._tool_part(part)
        if kind == "step-finish":
            return self._step_finish(pid, part)
        return []

    def _text_part(
        self, pid: str, kind: str, part: dict[str, Any], delta: str | None
    ) -> list[blocks.Block]:
        if part.get("synthetic") is True or part.get("ignored") is True:
            return []
        state = self._parts.setdefault(pid, _Part(kind))
        if state.done:
            return []
        out: list[blocks.Block] = []
        text = get_str(part, "text") or ""
        if delta and not text.startswith(state.sent + delta):
            text = state.sent + delta  # older servers: the delta rides on the update
        if text.startswith(state.sent) and len(text) > len(state.sent):
            out.append(self._block(kind, pid, text[len(state.sent) :]))
            state.sent = text
        if "end" in get_dict(part, "time") and state.sent:
            state.done = True
            out.append(self._block(kind, pid, "", done=True))
        return out

    def _tool_part(self, part: dict[str, Any]) -> list[blocks.Block]:
        call_id = get_str(part, "callID") or get_str(part, "id")
        if not call_id:
            return []
        name = get_str(part, "tool") or "tool"
        state = get_dict(part, "state")
        status = get_str(state, "status")
        tool = self._tools.setdefault(call_id, _Tool(name))
        if tool.final:
            return []
        tool_input = get_dict(state, "input") or tool.input
        tool.input = tool_input
        title = get_str(state, "title") or call_title(name, tool_input, TITLE_KEYS)
        out: list[blocks.Block] = []
        call = blocks.ToolCallBlock(
            id=call_id, name=name, title=title, kind=KINDS.get(name, "other"), input=tool_input
        )
        if status in ("running", "completed", "error") and not tool.started:
            tool.started = True
            out.append(call)
        if status not in ("completed", "error"):
            return out
        tool.final = True
        is_error = status == "error"
        if is_error:
            content = get_str(state, "error") or "the tool failed"
        else:
            content = get_str(state, "output") or ""
            diff = _diff_block(name, tool_input, get_dict(state, "metadata"), call_id)
            if diff is not None:
                out.append(diff)
        return out + tool_end(call, content, is_error=is_error)

    def _step_finish(self, pid: str, part: dict[str, Any]) -> list[blocks.Block]:
        if pid in self._steps:
            return []
        self._steps.add(pid)
        tokens = get_dict(part, "tokens")
        inp = get_int(tokens, "input") or 0
        cached = get_int(get_dict(tokens, "cache"), "read") or 0
        self.turn_usage = accumulate_usage(
            self.turn_usage,
            input_tokens=inp,
            output_tokens=get_int(tokens, "output") or 0,
            cached_input_tokens=cached,
            cost_usd=get_float(part, "cost"),
            context_used=(inp + cached) or None,
        )
        return []


def _diff_block(
    name: str, tool_input: dict[str, Any], metadata: dict[str, Any], call_id: str
) -> blocks.DiffBlock | None:
    path = get_str(tool_input, "filePath") or get_str(get_dict(metadata, "filediff"), "file")
    if not path:
        return None
    unified = get_str(metadata, "diff") or get_str(get_dict(metadata, "filediff"), "patch")
    if name == "write":
        content = get_str(tool_input, "content")
        if content is None:
            return None
        existed = metadata.get("exists") is True
        return blocks.DiffBlock(
            path=path,
            old_text=None,
            new_text=content,
            unified=unified or (added_file_diff(path, content) if not existed else None),
            tool_call_id=call_id,
        )
    if name not in ("edit", "multiedit", "patch") or not (unified or "oldString" in tool_input):
        return None
    return blocks.DiffBlock(
        path=path,
        old_text=get_str(tool_input, "oldString"),
        new_text=get_str(tool_input, "newString") or "",
        unified=unified,
        tool_call_id=call_id,
    )
