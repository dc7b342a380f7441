"""Claude Code's stream-json protocol (``claude -p --input-format stream-json …``), sans-I/O.

Lines in (``feed``), blocks out; the messages to write back to Claude's stdin (permission
answers, interrupts) wait in ``outbox``. One parser lives as long as one Claude process and
sees many turns; each turn ends at Claude's ``result`` line.

What becomes what:
- ``stream_event`` text/thinking deltas -> ``text``/``thinking`` deltas (closed at
  ``content_block_stop``); without partial messages, whole ``assistant`` texts instead.
- ``assistant`` ``tool_use`` -> ``tool_call`` running; the ``user`` ``tool_result`` ->
  ``tool_call`` done/error then ``tool_result``. Lines of a sub-agent (``parent_tool_use_id``)
  give tool calls with ``parent_id``; their prose stays inside the sub-agent.
- Edit/MultiEdit/Write results -> ``diff`` (whole old and new file text, from the
  ``tool_use_result`` Claude attaches); TodoWrite and TaskCreate/TaskUpdate -> ``plan``.
- ``control_request`` ``can_use_tool`` -> ``permission_request``; other control requests get
  an error answer so Claude never waits on us.
- ``result`` -> ``usage`` (totals for the parser's lifetime) and ``session_end``. A result that
  says the resumed session does not exist sets ``session_missing`` and yields nothing: the
  adapter decides whether to retry with a fresh session.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge import blocks
from bridge.parsers import (
    added_file_diff,
    apply_hunks,
    clip,
    decode_object,
    get_bool,
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    hunks_from_json,
    render_unified,
    retry_notice,
    short,
    unfinished_tool,
)
from bridge.parsers.failures import FailureReport, failure_block
from bridge.parsers.limits import claude_limits

__all__ = ["ClaudeParser", "is_unknown_session", "user_message"]

UNKNOWN_SESSION = re.compile(
    r"no conversation found with session id|unknown session|session \S* ?not found"
    r"|--resume requires a valid session",
    re.I,
)

TOOL_KINDS = {
    "Bash": "execute",
    "BashOutput": "execute",
    "KillShell": "execute",
    "Read": "read",
    "NotebookRead": "read",
    "Edit": "edit",
    "MultiEdit": "edit",
    "Write": "edit",
    "NotebookEdit": "edit",
    "Glob": "search",
    "Grep": "search",
    "LS": "search",
    "WebFetch": "fetch",
    "WebSearch": "fetch",
    "Agent": "think",
    "Task": "think",
    "TodoWrite": "think",
    "TaskCreate": "think",
    "TaskUpdate": "think",
}
PLAN_STATUSES = {"pending": "pending", "in_progress": "in_progress", "completed": "completed"}

ALLOW, ALWAYS, DENY = "allow", "always", "deny"
DENY_MESSAGE = "The user denied this action from agent-bridge."
#: Tools that change files (Claude Code's names; ``MultiEdit`` is gone from 2.1's tool list but
#: older versions use it): their results carry the change shown as a diff, and Claude Code
#: 2.1.332 in plan mode still asks the permission prompt tool before them (it does not refuse
#: them itself), so the bridge refuses them in plan mode.
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "NotebookEdit", "Write"})
PLAN_MESSAGE = (
    "Plan mode is on: files are not changed. Present the plan; the user switches the mode "
    "to let you edit."
)


def is_unknown_session(text: str) -> bool:
    """Whether Claude's words say that the session it was asked to resume does not exist."""
    return bool(UNKNOWN_SESSION.search(text))


def user_message(
    text: str, attachments: list[tuple[str, str, bytes]] | None = None
) -> dict[str, Any]:
    """The stdin line for one user message; attachments are (name, mime, data)."""
    content: list[dict[str, Any]] = []
    for name, mime, data in attachments or []:
        encoded = base64.b64encode(data).decode("ascii")
        if mime.startswith("image/"):
            source = {"type": "base64", "media_type": mime, "data": encoded}
            content.append({"type": "image", "source": source})
        elif mime == "application/pdf":
            source = {"type": "base64", "media_type": mime, "data": encoded}
            content.append({"type": "document", "source": source, "title": name})
        else:
            body = data.decode("utf-8", "replace")
            content.append({"type": "text", "text": f"Attached file `{name}`:\n\n{body}"})
    content.append({"type": "text", "text": text})
    return {"type": "user", "message": {"role": "user", "content": content}}


@dataclass
class _Tool:
    name: str
    input: dict[str, Any]
    parent_id: str | None
    title: str | None
    kind: str | None


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    context_used: int | None = None
    context_size: int | None = None
    seen: bool = False


@dataclass
class ClaudeParser:
    """State of one Claude process's output; ``cwd`` only shortens titles."""

    cwd: str | None = None
    session_id: str | None = None
    model: str | None = None
    version: str | None = None
    #: Claude said the resumed session does not exist (the adapter may retry fresh).
    session_missing: bool = False
    outbox: list[dict[str, Any]] = field(default_factory=list)
    #: plan mode: edit tools are refused without asking the client
    refuse_edits: bool = False
    #: the client approved ``ExitPlanMode``: Claude left plan mode (said once, by ``feed``)
    left_plan: bool = False
    _open: dict[str, bool] = field(default_factory=dict)  # delta id -> is thinking
    _index_ids: dict[int, str] = field(default_factory=dict)
    _message_id: str | None = None
    _streamed: set[str] = field(default_factory=set)
    _tools: dict[str, _Tool] = field(default_factory=dict)
    _finished_tools: set[str] = field(default_factory=set)
    _permissions: dict[str, dict[str, Any]] = field(default_factory=dict)
    _tasks: dict[str, blocks.PlanEntry] = field(default_factory=dict)
    _usage: _Usage = field(default_factory=_Usage)
    _last_total_cost: float = 0.0
    _interrupting: bool = False
    _counter: int = 0
    #: Claude retried a failed model call itself during this turn (``api_retry`` lines)
    agent_retried: bool = False
    #: the API error Claude reported in this turn (the synthetic assistant line's fields)
    _api_error: dict[str, Any] = field(default_factory=dict)
    #: user messages Claude took from stdin so far (``--replay-user-messages`` echoes each)
    replayed: int = 0

    # ---- what the adapter calls ------------------------------------------------------------

    def feed(self, line: bytes | str) -> list[blocks.Block]:
        out = self._feed(line)
        if self.left_plan:
            self.left_plan = False
            notice = blocks.SystemBlock(
                code="mode",
                text="Claude Code left plan mode (plan approved): mode default",
                data={"mode": "default", "by_agent": True},
            )
            out.insert(0, notice)
        return out

    def _feed(self, line: bytes | str) -> list[blocks.Block]:
        msg = decode_object(line)
        if msg is None:
            return []
        kind = get_str(msg, "type")
        if kind == "stream_event":
            return self._stream_event(msg)
        if kind == "assistant":
            return self._assistant(msg)
        if kind == "user":
            return self._user(msg)
        if kind == "control_request":
            return self._control_request(msg)
        if kind == "control_cancel_request":
            self._permissions.pop(get_str(msg, "request_id") or "", None)
            return []
        if kind == "result":
            return self._result(msg)
        if kind == "system":
            return self._system(msg)
        if kind == "rate_limit_event":
            return list(claude_limits(get_dict(msg, "rate_limit_info")))
        return []

    def new_process(self) -> None:
        """Forget what belonged to the previous process; totals and the plan carry over."""
        self._open.clear()
        self._index_ids.clear()
        self._message_id = None
        self._tools.clear()
        self._permissions.clear()
        self._interrupting = False
        self._last_total_cost = 0.0
        self.session_missing = False
        self.replayed = 0
        self.outbox.clear()

    def interrupt(self) -> None:
        """Ask Claude to stop the current turn (it answers with an aborted ``result``)."""
        self._interrupting = True
        self.outbox.append(
            {
                "type": "control_request",
                "request_id": f"bridge-interrupt-{self._next()}",
                "request": {"subtype": "interrupt"},
            }
        )

    def set_permission_mode(self, mode: str) -> None:
        """Switch the running process's permission mode (its answer is ignored)."""
        self.outbox.append(
            {
                "type": "control_request",
                "request_id": f"bridge-mode-{self._next()}",
                "request": {"subtype": "set_permission_mode", "mode": mode},
            }
        )

    def answer_permission(self, request_id: str, option_id: str) -> None:
        """Queue the answer to a ``can_use_tool`` request; KeyError if it is not pending."""
        request = self._permissions.pop(request_id)
        if option_id in (ALLOW, ALWAYS) and get_str(request, "tool_name") == "ExitPlanMode":
            # Claude Code switches itself to the default mode once the plan is approved.
            self.left_plan = self.refuse_edits
            self.refuse_edits = False
        if option_id in (ALLOW, ALWAYS):
            decision: dict[str, Any] = {
                "behavior": "allow",
                "updatedInput": get_dict(request, "input"),
            }
            suggestions = get_list(request, "permission_suggestions")
            if option_id == ALWAYS and suggestions:
                decision["updatedPermissions"] = suggestions
        else:
            decision = {"behavior": "deny", "message": DENY_MESSAGE, "interrupt": False}
        self.outbox.append(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": decision},
            }
        )

    def close_turn(
        self, reason: blocks.EndReason, exit_code: int | None = None
    ) -> list[blocks.Block]:
        """Blocks that end the turn when Claude could not (it exited, or the adapter gave up)."""
        out = self._close_open()
        out.append(
            blocks.SessionEndBlock(
                reason=reason, exit_code=exit_code, agent_session_id=self.session_id
            )
        )
        self._interrupting = False
        return out

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def usage(self) -> blocks.UsageBlock | None:
        u = self._usage
        if not u.seen:
            return None
        return blocks.UsageBlock(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_input_tokens=u.cached_input_tokens,
            cost_usd=round(u.cost_usd, 6),
            context_used=u.context_used,
            context_size=u.context_size,
        )

    # ---- line kinds ------------------------------------------------------------------------------

    def _system(self, msg: dict[str, Any]) -> list[blocks.Block]:
        subtype = get_str(msg, "subtype")
        if subtype == "init":
            self.session_id = get_str(msg, "session_id") or self.session_id
            self.model = get_str(msg, "model") or self.model
            self.version = get_str(msg, "claude_code_version") or self.version
            return []
        if subtype == "api_retry":
            self.agent_retried = True
            error = get_str(msg, "error") or get_str(msg, "error_status") or "API error"
            report = FailureReport(
                message=get_str(msg, "error") or "", status=get_int(msg, "error_status")
            )
            return [
                retry_notice(
                    "claude",
                    report,
                    error,
                    attempt=get_int(msg, "attempt"),
                    of=get_int(msg, "max_retries"),
                )
            ]
        if subtype == "compact_boundary":
            return [blocks.SystemBlock(code="compacted", text="Claude compacted the conversation")]
        return []

    def _stream_event(self, msg: dict[str, Any]) -> list[blocks.Block]:
        if get_str(msg, "parent_tool_use_id"):
            return []  # a sub-agent's prose stays inside the sub-agent
        event = get_dict(msg, "event")
        etype = get_str(event, "type")
        if etype == "message_start":
            self._message_id = get_str(get_dict(event, "message"), "id") or f"m{self._next()}"
            self._index_ids.clear()
            return []
        index = get_int(event, "index")
        if index is None:
            return []
        message_id = self._message_id or get_str(msg, "api_message_id") or "m0"
        if etype == "content_block_start":
            block_type = get_str(get_dict(event, "content_block"), "type")
            if block_type in ("text", "thinking"):
                new_id = f"{message_id}:{index}"
                self._index_ids[index] = new_id
                self._open[new_id] = block_type == "thinking"
                self._streamed.add(message_id)
            return []
        block_id = self._index_ids.get(index)
        if block_id is None:
            return []
        if etype == "content_block_delta":
            delta = get_dict(event, "delta")
            dtype = get_str(delta, "type")
            if dtype == "text_delta":
                text = get_str(delta, "text")
                return [blocks.TextBlock(id=block_id, text=text)] if text else []
            if dtype == "thinking_delta":
                text = get_str(delta, "thinking")
                return [blocks.ThinkingBlock(id=block_id, text=text)] if text else []
            return []
        if etype == "content_block_stop":
            self._index_ids.pop(index, None)
            return self._close_delta(block_id)
        return []

    def _close_delta(self, block_id: str) -> list[blocks.Block]:
        if block_id not in self._open:
            return []
        thinking = self._open.pop(block_id)
        return [
            blocks.ThinkingBlock(id=block_id, done=True)
            if thinking
            else blocks.TextBlock(id=block_id, done=True)
        ]

    def _assistant(self, msg: dict[str, Any]) -> list[blocks.Block]:
        message = get_dict(msg, "message")
        if get_bool(msg, "is_api_error_message"):
            # A synthetic message carrying the API error: it becomes the turn's error block.
            self._api_error = {
                k: msg[k]
                for k in ("error", "api_error", "api_error_status", "api_error_type")
                if isinstance(msg.get(k), str | int)
            }
            return []
        parent = get_str(msg, "parent_tool_use_id")
        message_id = get_str(message, "id") or f"m{self._next()}"
        out: list[blocks.Block] = []
        self._note_context(get_dict(message, "usage"))
        for n, item in enumerate(get_list(message, "content")):
            itype = get_str(item, "type")
            if itype == "tool_use":
                out.extend(self._tool_use(item, parent))
            elif itype in ("text", "thinking") and not parent and message_id not in self._streamed:
                # Without partial messages Claude sends each text whole, once.
                text = get_str(item, "text" if itype == "text" else "thinking") or ""
                if text:
                    block_id = f"{message_id}:{n}:{self._next()}"
                    cls = blocks.TextBlock if itype == "text" else blocks.ThinkingBlock
                    out.append(cls(id=block_id, text=text, done=True))
        return out

    def _tool_use(self, item: dict[str, Any], parent: str | None) -> list[blocks.Block]:
        tool_id = get_str(item, "id")
        name = get_str(item, "name") or "tool"
        if not tool_id or tool_id in self._tools or tool_id in self._finished_tools:
            return []
        tool_input = get_dict(item, "input")
        tool = _Tool(name, tool_input, parent, self._title(name, tool_input), TOOL_KINDS.get(name))
        self._tools[tool_id] = tool
        return [
            blocks.ToolCallBlock(
                id=tool_id,
                name=name,
                title=tool.title,
                kind=tool.kind,
                input=tool_input,
                status="running",
                parent_id=parent,
            )
        ]

    def _user(self, msg: dict[str, Any]) -> list[blocks.Block]:
        if get_bool(msg, "isReplay"):
            self.replayed += 1  # a message of ours, taken: not the agent's output
            return []
        content = get_list(get_dict(msg, "message"), "content")
        extra = msg.get("tool_use_result")
        out: list[blocks.Block] = []
        for item in content:
            if get_str(item, "type") != "tool_result":
                continue
            tool_id = get_str(item, "tool_use_id")
            if not tool_id:
                continue
            out.extend(self._tool_result(tool_id, item, extra, get_str(msg, "parent_tool_use_id")))
        return out

    def _tool_result(
        self, tool_id: str, item: dict[str, Any], extra: Any, parent: str | None
    ) -> list[blocks.Block]:
        tool = self._tools.pop(tool_id, None)
        if tool is None:
            if tool_id in self._finished_tools:
                return []
            tool = _Tool("tool", {}, parent, None, None)
        self._finished_tools.add(tool_id)
        is_error = get_bool(item, "is_error")
        text = clip(_content_text(item.get("content")))
        details = extra if isinstance(extra, dict) else {}
        out: list[blocks.Block] = []
        if not is_error and tool.name in EDIT_TOOLS:
            diff = _diff_block(tool, details, tool_id, self._rel)
            if diff is not None:
                out.append(diff)
        out.append(
            blocks.ToolCallBlock(
                id=tool_id,
                name=tool.name,
                title=tool.title,
                kind=tool.kind,
                input=tool.input,
                status="error" if is_error else "done",
                parent_id=tool.parent_id,
            )
        )
        out.append(
            blocks.ToolResultBlock(
                tool_call_id=tool_id, content=text, is_error=is_error, parent_id=tool.parent_id
            )
        )
        if not is_error and self._update_plan(tool, details, text):
            out.append(blocks.PlanBlock(entries=list(self._tasks.values())))
        return out

    def _update_plan(self, tool: _Tool, details: dict[str, Any], text: str) -> bool:
        """Fold a successful plan tool into the task list; True if the plan changed."""
        if tool.name == "TodoWrite":
            todos = get_list(details, "newTodos") or get_list(tool.input, "todos")
            self._tasks = {
                str(n): blocks.PlanEntry(
                    content=get_str(t, "content") or "",
                    status=PLAN_STATUSES.get(get_str(t, "status") or "", "pending"),  # type: ignore[arg-type]
                )
                for n, t in enumerate(todos)
                if isinstance(t, dict)
            }
            return True
        if tool.name == "TaskCreate":
            task = get_dict(details, "task")
            task_id = get_str(task, "id")
            if task_id is None:
                found = re.search(r"#(\w+)", text)
                task_id = found.group(1) if found else f"t{len(self._tasks) + 1}"
            subject = get_str(task, "subject") or get_str(tool.input, "subject") or ""
            self._tasks[task_id] = blocks.PlanEntry(content=subject, status="pending")
            return True
        if tool.name == "TaskUpdate":
            task_id = get_str(tool.input, "taskId") or get_str(details, "taskId")
            if task_id is None or task_id not in self._tasks:
                return False
            status = get_str(tool.input, "status")
            if status == "deleted":
                del self._tasks[task_id]
                return True
            entry = self._tasks[task_id]
            self._tasks[task_id] = blocks.PlanEntry(
                content=get_str(tool.input, "subject") or entry.content,
                status=PLAN_STATUSES.get(status or "", entry.status),  # type: ignore[arg-type]
            )
            return True
        return False

    def _control_request(self, msg: dict[str, Any]) -> list[blocks.Block]:
        request_id = get_str(msg, "request_id")
        request = get_dict(msg, "request")
        if not request_id:
            return []
        if get_str(request, "subtype") != "can_use_tool":
            self.outbox.append(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "error",
                        "request_id": request_id,
                        "error": "agent-bridge does not handle this request",
                    },
                }
            )
            return []
        name = get_str(request, "display_name") or get_str(request, "tool_name") or "a tool"
        if self.refuse_edits and get_str(request, "tool_name") in EDIT_TOOLS:
            decision = {"behavior": "deny", "message": PLAN_MESSAGE, "interrupt": False}
            self.outbox.append(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "success",
                        "request_id": request_id,
                        "response": decision,
                    },
                }
            )
            return [
                blocks.SystemBlock(code="mode", text=f"plan mode: {name} refused, no file changed")
            ]
        self._permissions[request_id] = request
        tool_input = get_dict(request, "input")
        what = (
            get_str(tool_input, "command")
            or get_str(tool_input, "file_path")
            or get_str(request, "description")
        )
        options = [blocks.PermissionOption(id=ALLOW, label="Allow once", kind="allow_once")]
        if get_list(request, "permission_suggestions"):
            options.append(
                blocks.PermissionOption(id=ALWAYS, label="Always allow", kind="allow_always")
            )
        options.append(blocks.PermissionOption(id=DENY, label="Deny", kind="reject_once"))
        return [
            blocks.PermissionRequestBlock(
                id=request_id,
                tool_call_id=get_str(request, "tool_use_id"),
                title=f"Allow {name}" + (f": {short(self._rel(what), 200)}?" if what else "?"),
                options=options,
            )
        ]

    def _result(self, msg: dict[str, Any]) -> list[blocks.Block]:
        errors = [str(e) for e in get_list(msg, "errors") if isinstance(e, str | int | float)]
        result_text = get_str(msg, "result") or ""
        is_error = get_bool(msg, "is_error")
        if is_error and any(is_unknown_session(t) for t in [result_text, *errors]):
            self.session_missing = True
            return []
        self.session_id = get_str(msg, "session_id") or self.session_id
        self._add_usage(msg)
        out = self._close_open()
        subtype = get_str(msg, "subtype") or ""
        terminal = get_str(msg, "terminal_reason") or ""
        reason: blocks.EndReason = "completed"
        if self._interrupting or terminal.startswith("aborted"):
            reason = "interrupted"
        elif is_error or subtype != "success":
            reason = "error"
            message = result_text or (errors[0] if errors else "") or f"Claude stopped: {subtype}"
            report = FailureReport(
                message=short(message, 2000),
                status=get_int(msg, "api_error_status"),
                kind=get_str(msg, "api_error_type") or subtype,
                body={"errors": errors, **self._api_error},
            )
            out.append(failure_block("claude", report))
        self._interrupting = False
        self._api_error = {}
        usage = self.usage()
        if usage is not None:
            out.append(usage)
        out.append(
            blocks.SessionEndBlock(reason=reason, exit_code=None, agent_session_id=self.session_id)
        )
        return out

    # ---- helpers ---------------------------------------------------------------------------

    def _close_open(self) -> list[blocks.Block]:
        out: list[blocks.Block] = []
        for block_id in list(self._open):
            out.extend(self._close_delta(block_id))
        self._index_ids.clear()
        for tool_id, tool in list(self._tools.items()):
            call = blocks.ToolCallBlock(id=tool_id, name=tool.name, parent_id=tool.parent_id)
            out += unfinished_tool(call)
            self._finished_tools.add(tool_id)
        self._tools.clear()
        return out

    def _note_context(self, usage: dict[str, Any]) -> None:
        if not usage:
            return
        parts = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        used = sum(get_int(usage, key) or 0 for key in parts)
        if used:
            self._usage.context_used = used

    def _add_usage(self, msg: dict[str, Any]) -> None:
        usage = get_dict(msg, "usage")
        u = self._usage
        u.seen = True
        u.input_tokens += get_int(usage, "input_tokens") or 0
        u.output_tokens += get_int(usage, "output_tokens") or 0
        u.cached_input_tokens += get_int(usage, "cache_read_input_tokens") or 0
        total = get_float(msg, "total_cost_usd")
        if total is not None:
            # Claude reports the process's running total; keep our own across restarts.
            u.cost_usd += max(0.0, total - self._last_total_cost)
            self._last_total_cost = total
        for model_usage in get_dict(msg, "modelUsage").values():
            window = get_int(model_usage, "contextWindow")
            if window:
                u.context_size = window

    def _rel(self, path: str) -> str:
        if self.cwd and path.startswith(self.cwd.rstrip("/") + "/"):
            return path[len(self.cwd.rstrip("/")) + 1 :]
        return path

    def _title(self, name: str, tool_input: dict[str, Any]) -> str | None:
        if name == "Bash":
            text = get_str(tool_input, "description") or get_str(tool_input, "command")
            return short(text) if text else None
        if name == "TaskUpdate":
            status = get_str(tool_input, "status")
            task = get_str(tool_input, "taskId") or "?"
            return f"Task #{task}" + (f": {status.replace('_', ' ')}" if status else "")
        if name == "TodoWrite":
            return "Update the todo list"
        path = get_str(tool_input, "file_path") or get_str(tool_input, "notebook_path")
        if path:
            return f"{name} {self._rel(path)}"
        for key in ("pattern", "url", "query", "subject", "description"):
            value = get_str(tool_input, key)
            if value:
                return f"{name}: {short(value)}"
        return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [get_str(c, "text") or "" for c in content if get_str(c, "type") == "text"]
        return "\n".join(p for p in parts if p)
    return ""


def _diff_block(
    tool: _Tool, details: dict[str, Any], tool_id: str, rel: Callable[[str], str]
) -> blocks.DiffBlock | None:
    """The whole-file change an edit tool made, from the result Claude attached."""
    path = get_str(details, "filePath") or get_str(tool.input, "file_path")
    if not path:
        return None
    shown = rel(path)
    hunks = hunks_from_json(get_list(details, "structuredPatch"))
    original = get_str(details, "originalFile")
    if tool.name == "Write":
        content = get_str(details, "content") or get_str(tool.input, "content")
        if content is None:
            return None
        unified: str | None
        if original is None:
            unified = added_file_diff(shown, content)
        else:
            unified = render_unified(shown, hunks) if hunks else None
        return blocks.DiffBlock(
            path=path, old_text=original, new_text=content, unified=unified, tool_call_id=tool_id
        )
    if original is not None and hunks:
        new_text = apply_hunks(original, hunks)
        if new_text is not None:
            return blocks.DiffBlock(
                path=path,
                old_text=original,
                new_text=new_text,
                unified=render_unified(shown, hunks),
                tool_call_id=tool_id,
            )
    # No structured patch: show the replaced snippet rather than nothing.
    old = get_str(tool.input, "old_string")
    new = get_str(tool.input, "new_string")
    if old is None or new is None:
        return None
    return blocks.DiffBlock(
        path=path, old_text=old, new_text=new, unified=None, tool_call_id=tool_id
    )
