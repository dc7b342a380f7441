"""Codex's app-server protocol (``codex app-server``, JSON-RPC over stdio), sans-I/O.

The parser is the JSON-RPC client for one turn: ``start()`` queues ``initialize``, and each
answer queues the next request (``thread/start`` or ``thread/resume``, then ``turn/start``) in
``outbox`` for the adapter to write. Notifications become blocks; server requests for approval
become ``permission_request`` blocks answered through ``answer_permission``. Codex numbers its
own requests from 0 and never sends ``"jsonrpc"``, so neither do we.

What becomes what:
- ``item/agentMessage/delta`` -> ``text``; ``item/reasoning/*Delta`` -> ``thinking``.
- ``commandExecution`` items -> ``tool_call`` (name ``shell``) with output and exit code;
  ``fileChange`` -> ``tool_call`` (``apply_patch``) plus one ``diff`` per file; ``mcpToolCall``,
  ``dynamicToolCall``, ``webSearch`` and sub-agent calls -> ``tool_call``.
- ``turn/plan/updated`` -> ``plan``; ``thread/tokenUsage/updated`` -> ``usage`` at turn end.
- ``item/commandExecution/requestApproval`` and ``item/fileChange/requestApproval`` ->
  ``permission_request``; other server requests get a JSON-RPC error so Codex never waits.
- ``turn/completed`` -> ``session_end`` (completed / interrupted / error).
- A ``thread/resume`` that Codex refuses because the thread is unknown starts a fresh thread
  once, announced by a ``system`` block ``session_reset``.

A ``diff`` carries the unified diff Codex reports; Codex does not report whole files, so
``new_text`` is only known here for added files. :func:`fill_diff` completes a block from the
file's current text, which the adapter reads after the change.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bridge import blocks
from bridge.parsers import (
    added_file_diff,
    apply_hunks,
    decode_object,
    get_dict,
    get_int,
    get_list,
    get_str,
    jsonrpc,
    parse_unified,
    short,
    tool_end,
    unfinished_tool,
)
from bridge.parsers.failures import FailureReport, failure_block
from bridge.parsers.jsonrpc import METHOD_NOT_FOUND
from bridge.parsers.limits import codex_limits

CLIENT_NAME = "agent-bridge"
UNKNOWN_THREAD = re.compile(
    r"no rollout found|unknown (session|thread)|thread \S+ not found|session \S+ not found"
    r"|missing rollout path",
    re.I,
)
PLAN_STATUS = {"pending": "pending", "inProgress": "in_progress", "completed": "completed"}
ALLOW, ALWAYS, DENY = "allow", "always", "deny"
MAX_OUTPUT = 256 * 1024
_WRAPPED = re.compile(r"^(?:/usr)?/bin/(?:ba|z)?sh -l?c (.+)$", re.S)


def is_unknown_thread(text: str) -> bool:
    return bool(UNKNOWN_THREAD.search(text))


def initialize_params(version: str = "0") -> dict[str, Any]:
    return {
        "clientInfo": {"name": CLIENT_NAME, "title": "agent-bridge", "version": version},
        "capabilities": {"experimentalApi": False},
    }


def parse_models(result: Any) -> list[tuple[str, str]]:
    """(id, label) of each model in a ``model/list`` answer's result."""
    out: list[tuple[str, str]] = []
    for model in get_list(result, "data"):
        model_id = get_str(model, "id") or get_str(model, "model")
        if model_id and model.get("hidden") is not True:
            out.append((model_id, get_str(model, "displayName") or model_id))
    return out


def display_command(command: str) -> str:
    """``/bin/bash -lc 'ls -a'`` as the user would type it: ``ls -a``."""
    match = _WRAPPED.match(command.strip())
    if not match:
        return command
    try:
        parts = shlex.split(match.group(1))
    except ValueError:
        return command
    return parts[0] if len(parts) == 1 else command


def fill_diff(block: blocks.DiffBlock, current: str | None) -> blocks.DiffBlock:
    """``block`` with whole-file texts, given the file's text after the change (None: gone)."""
    unified = block.unified or ""
    hunks = parse_unified(unified)
    if unified.startswith("--- /dev/null"):
        new_text = current if current is not None else block.new_text
        return msgspec.structs.replace(block, old_text=None, new_text=new_text, unified=unified)
    new_text = current if current is not None else ""
    old_text = apply_hunks(new_text, hunks, reverse=True)
    return msgspec.structs.replace(block, old_text=old_text, new_text=new_text, unified=unified)


def _title(prefix: str, subject: str | None) -> str | None:
    """A tool call's title: ``prefix`` and the (shortened) subject, or none without one."""
    return f"{prefix}{short(subject)}" if subject else None


@dataclass
class _Tool:
    name: str
    title: str | None
    kind: str | None
    input: dict[str, Any]
    output: list[str] = field(default_factory=list)
    output_size: int = 0

    def block(self, item_id: str) -> blocks.ToolCallBlock:
        """The call, running."""
        return blocks.ToolCallBlock(
            id=item_id, name=self.name, title=self.title, kind=self.kind, input=self.input
        )


@dataclass
class _Pending:
    rpc_id: Any
    method: str
    params: dict[str, Any]
    decisions: dict[str, Any]


@dataclass
class CodexParser:
    """One turn of ``codex app-server``; construct, ``start()``, then ``feed`` every line."""

    cwd: str | None = None
    model: str | None = None
    effort: str | None = None
    approval_policy: str | None = None
    sandbox: str | None = None
    config: dict[str, Any] | None = None
    client_version: str = "0"
    #: The Codex thread (the agent session id); set once Codex started or resumed it.
    thread_id: str | None = None
    turn_id: str | None = None
    #: The turn has ended (a ``session_end`` was produced).
    done: bool = False
    outbox: list[dict[str, Any]] = field(default_factory=list)
    _last_id: int = 0
    _calls: dict[Any, str] = field(default_factory=dict)
    _input: list[dict[str, Any]] = field(default_factory=list)
    _resume: str | None = None
    #: (thread, turns): fork the first ``turns`` turns of that thread instead (``thread/fork``)
    _fork: tuple[str, int] | None = None
    #: ``turn/steer`` requests by id: None while unanswered, then whether Codex took the input
    steers: dict[int, bool | None] = field(default_factory=dict)
    _reset_done: bool = False
    _interrupt_wanted: bool = False
    _open: dict[str, bool] = field(default_factory=dict)  # delta id -> is thinking
    _summary_index: dict[str, int] = field(default_factory=dict)
    _tools: dict[str, _Tool] = field(default_factory=dict)
    _finished: set[str] = field(default_factory=set)
    _permissions: dict[str, _Pending] = field(default_factory=dict)
    _usage: blocks.UsageBlock | None = None
    _last_error: str | None = None
    _last_error_body: dict[str, Any] = field(default_factory=dict)
    #: Codex retried a failed model call itself in this turn (``error`` with ``willRetry``)
    agent_retried: bool = False

    # ---- what the adapter calls ------------------------------------------------------------

    def start(
        self,
        text: str,
        *,
        resume: str | None = None,
        images: list[str] | None = None,
        fork: tuple[str, int] | None = None,
    ) -> None:
        """Begin a turn: ``resume`` a thread id, ``fork`` (thread, turns) the first turns of one,
        or start a new thread; images as data URLs."""
        self._resume = resume
        self._fork = fork if resume is None else None
        self._input = [{"type": "image", "url": url} for url in images or []]
        self._input.append({"type": "text", "text": text, "text_elements": []})
        self._request("initialize", initialize_params(self.client_version))

    def steer(self, text: str, images: list[str] | None = None) -> int | None:
        """Ask Codex to take ``text`` into the running turn (``turn/steer``): the request's id,
        whose answer lands in ``steers``; None when no turn of Codex's runs."""
        if self.done or not self.turn_id or not self.thread_id:
            return None
        content: list[dict[str, Any]] = [{"type": "image", "url": url} for url in images or []]
        content.append({"type": "text", "text": text, "text_elements": []})
        rid = self._request(
            "turn/steer",
            {"threadId": self.thread_id, "expectedTurnId": self.turn_id, "input": content},
        )
        self.steers[rid] = None
        return rid

    def interrupt(self) -> None:
        if self.turn_id and self.thread_id:
            self._request("turn/interrupt", {"threadId": self.thread_id, "turnId": self.turn_id})
        else:
            self._interrupt_wanted = True

    def answer_permission(self, request_id: str, option_id: str) -> None:
        """Queue the answer to an approval request; KeyError if it is not pending."""
        pending = self._permissions[request_id]
        if option_id not in pending.decisions:
            raise KeyError(option_id)
        del self._permissions[request_id]
        self.outbox.append(
            jsonrpc.result(pending.rpc_id, {"decision": pending.decisions[option_id]})
        )

    def close_turn(
        self, reason: blocks.EndReason, exit_code: int | None = None
    ) -> list[blocks.Block]:
        """Blocks that end the turn when Codex could not (it exited, or the adapter gave up)."""
        if self.done:
            return []
        out = self._close_open()
        if self._usage is not None:
            out.append(self._usage)
        out.append(
            blocks.SessionEndBlock(
                reason=reason, exit_code=exit_code, agent_session_id=self.thread_id
            )
        )
        self.done = True
        return out

    def usage(self) -> blocks.UsageBlock | None:
        return self._usage

    def feed(self, line: bytes | str) -> list[blocks.Block]:
        msg = decode_object(line)
        if msg is None or self.done:
            return []
        method = get_str(msg, "method")
        if method is None:
            return self._response(msg)
        params = get_dict(msg, "params")
        if "id" in msg:
            return self._server_request(msg["id"], method, params)
        thread = get_str(params, "threadId")
        if thread and self.thread_id and thread != self.thread_id:
            return []  # another thread (a sub-agent's): not this conversation
        return self._notification(method, params)

    # ---- the request sequence ------------------------------------------------------------------

    def _request(self, method: str, params: dict[str, Any]) -> int:
        self._last_id += 1
        rid = self._last_id
        self._calls[rid] = method
        self.outbox.append(jsonrpc.request(rid, method, params))
        return rid

    def _thread_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "cwd": self.cwd,
            "model": self.model,
            "approvalPolicy": self.approval_policy,
            "sandbox": self.sandbox,
            "config": self.config or None,
        }
        return {k: v for k, v in params.items() if v is not None}

    def _open_thread(self) -> None:
        if self._fork:
            thread, turns = self._fork
            # The first ``turns`` turns' ids (oldest first): the fork keeps those.
            params = {"threadId": thread, "sortDirection": "asc", "limit": turns}
            self._request("thread/turns/list", {**params, "itemsView": "notLoaded"})
        elif self._resume:
            params = {"threadId": self._resume, **self._thread_params(), "excludeTurns": True}
            self._request("thread/resume", params)
        else:
            self._request("thread/start", self._thread_params())

    def _response(self, msg: dict[str, Any]) -> list[blocks.Block]:
        rid = msg.get("id")
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            return []
        method = self._calls.pop(rid, None)
        error = msg.get("error")
        if method is None:
            return []
        if method == "turn/steer" and isinstance(rid, int):
            self.steers[rid] = error is None
            return []
        if error is not None:
            text = get_str(error, "message") or (error if isinstance(error, str) else str(error))
            return self._failed(method, text)
        result = get_dict(msg, "result")
        if method == "initialize":
            self.outbox.append(jsonrpc.notification("initialized"))
            self._open_thread()
        elif method == "thread/turns/list" and self._fork:
            ids = [get_str(turn, "id") for turn in get_list(result, "data")]
            kept = [tid for tid in ids if tid][: self._fork[1]]
            fork = {"threadId": self._fork[0], **self._thread_params(), "excludeTurns": True}
            if kept:
                fork["lastTurnId"] = kept[-1]
            self._request("thread/fork", fork)
        elif method in ("thread/start", "thread/resume", "thread/fork"):
            self.thread_id = get_str(get_dict(result, "thread"), "id") or self._resume
            params: dict[str, Any] = {"threadId": self.thread_id, "input": self._input}
            if self.effort:
                params["effort"] = self.effort
            self._request("turn/start", params)
        elif method == "turn/start":
            self._turn_started(get_str(get_dict(result, "turn"), "id"))
        return []

    def _failed(self, method: str, text: str) -> list[blocks.Block]:
        if method == "thread/resume" and not self._reset_done and is_unknown_thread(text):
            old, self._resume, self._reset_done = self._resume, None, True
            self._open_thread()
            return [
                blocks.SystemBlock(
                    level="warn",
                    code="session_reset",
                    text=f"Codex no longer knows session {old}; continuing in a new session",
                    data={"old_agent_session_id": old},
                )
            ]
        if method in ("turn/interrupt",):
            return []
        error = failure_block(
            "codex", FailureReport(message=f"Codex refused {method}: {short(text, 500)}")
        )
        return [error, *self.close_turn("error")]

    def _turn_started(self, turn_id: str | None) -> None:
        if turn_id and not self.turn_id:
            self.turn_id = turn_id
            if self._interrupt_wanted:
                self._interrupt_wanted = False
                self.interrupt()

    # ---- server requests (approvals) -------------------------------------------------------------

    def _server_request(
        self, rpc_id: Any, method: str, params: dict[str, Any]
    ) -> list[blocks.Block]:
        if isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str):
            return []
        item_id = get_str(params, "itemId") or ""
        if method == "item/commandExecution/requestApproval":
            command = display_command(get_str(params, "command") or "")
            decisions = _command_decisions(get_list(params, "availableDecisions"))
            title = f"Run `{short(command, 200)}`?" if command else "Run a command?"
        elif method == "item/fileChange/requestApproval":
            decisions = {ALLOW: "accept", ALWAYS: "acceptForSession", DENY: "decline"}
            tool = self._tools.get(item_id)
            changes = get_list(tool.input, "changes") if tool else []
            files = ", ".join(self._rel(get_str(c, "path") or "?") for c in changes)
            title = f"Apply changes to {short(files, 200)}?" if files else "Apply changes?"
        else:
            self.outbox.append(
                jsonrpc.error(rpc_id, METHOD_NOT_FOUND, f"agent-bridge does not handle {method}")
            )
            return []
        reason = get_str(params, "reason")
        if reason:
            title = f"{title} ({short(reason, 200)})"
        request_id = f"codex-{rpc_id}-{item_id}"
        self._permissions[request_id] = _Pending(rpc_id, method, params, decisions)
        labels = {ALLOW: ("Allow once", "allow_once"), ALWAYS: ("Always allow", "allow_always")}
        labels[DENY] = ("Deny", "reject_once")
        options = [
            blocks.PermissionOption(id=key, label=labels[key][0], kind=labels[key][1])  # type: ignore[arg-type]
            for key in (ALLOW, ALWAYS, DENY)
            if key in decisions
        ]
        return [
            blocks.PermissionRequestBlock(
                id=request_id, tool_call_id=item_id or None, title=title, options=options
            )
        ]

    # ---- notifications ---------------------------------------------------------------------------

    def _notification(self, method: str, params: dict[str, Any]) -> list[blocks.Block]:
        handler = _HANDLERS.get(method)
        return handler(self, params) if handler is not None else []

    def _on_turn_started(self, params: dict[str, Any]) -> list[blocks.Block]:
        self._turn_started(get_str(get_dict(params, "turn"), "id"))
        return []

    def _on_text_delta(self, params: dict[str, Any]) -> list[blocks.Block]:
        return self._delta(params, thinking=False)

    def _on_reasoning_delta(self, params: dict[str, Any]) -> list[blocks.Block]:
        return self._delta(params, thinking=True)

    def _delta(self, params: dict[str, Any], *, thinking: bool) -> list[blocks.Block]:
        item_id = get_str(params, "itemId")
        delta = get_str(params, "delta")
        if not item_id or not delta or item_id in self._finished:
            return []
        if thinking:
            index = get_int(params, "summaryIndex") or 0
            previous = self._summary_index.setdefault(item_id, index)
            if index != previous:
                self._summary_index[item_id] = index
                delta = "\n\n" + delta
        self._open[item_id] = thinking
        cls = blocks.ThinkingBlock if thinking else blocks.TextBlock
        return [cls(id=item_id, text=delta)]

    def _on_output_delta(self, params: dict[str, Any]) -> list[blocks.Block]:
        tool = self._tools.get(get_str(params, "itemId") or "")
        delta = get_str(params, "delta")
        if tool is not None and delta and tool.output_size < MAX_OUTPUT:
            tool.output.append(delta)
            tool.output_size += len(delta)
        return []

    def _on_plan(self, params: dict[str, Any]) -> list[blocks.Block]:
        entries = [
            blocks.PlanEntry(
                content=get_str(step, "step") or "",
                status=PLAN_STATUS.get(get_str(step, "status") or "", "pending"),  # type: ignore[arg-type]
            )
            for step in get_list(params, "plan")
            if isinstance(step, dict)
        ]
        return [blocks.PlanBlock(entries=entries)]

    def _on_usage(self, params: dict[str, Any]) -> list[blocks.Block]:
        usage = get_dict(params, "tokenUsage")
        total, last = get_dict(usage, "total"), get_dict(usage, "last")
        self._usage = blocks.UsageBlock(
            input_tokens=get_int(total, "inputTokens"),
            output_tokens=get_int(total, "outputTokens"),
            cached_input_tokens=get_int(total, "cachedInputTokens"),
            cost_usd=None,
            context_used=get_int(last, "totalTokens"),
            context_size=get_int(usage, "modelContextWindow"),
        )
        return []

    def _on_error(self, params: dict[str, Any]) -> list[blocks.Block]:
        message = get_str(get_dict(params, "error"), "message") or "Codex reported an error"
        if params.get("willRetry") is True:
            self.agent_retried = True
            return [blocks.SystemBlock(level="warn", code="api_retry", text=short(message, 500))]
        self._last_error = message
        self._last_error_body = get_dict(params, "error")
        return []

    def _on_item_started(self, params: dict[str, Any]) -> list[blocks.Block]:
        item = get_dict(params, "item")
        item_id = get_str(item, "id")
        if not item_id or item_id in self._tools or item_id in self._finished:
            return []
        announced = self._tool_for(item)
        if announced is None:
            return []
        self._tools[item_id] = announced
        return [announced.block(item_id)]

    def _on_item_completed(self, params: dict[str, Any]) -> list[blocks.Block]:
        item = get_dict(params, "item")
        item_id = get_str(item, "id")
        itype = get_str(item, "type")
        if not item_id or item_id in self._finished:
            return []
        if itype in ("agentMessage", "reasoning"):
            return self._finish_message(item_id, item, thinking=itype == "reasoning")
        tool = self._tools.pop(item_id, None)
        out: list[blocks.Block] = []
        if tool is None:
            tool = self._tool_for(item)
            if tool is None:
                return []
            out.append(tool.block(item_id))
        self._finished.add(item_id)
        content, ok = self._result_of(item, tool)
        if ok and itype == "fileChange":
            out.extend(self._diffs(item, item_id))
        return out + tool_end(tool.block(item_id), content, is_error=not ok)

    def _on_turn_completed(self, params: dict[str, Any]) -> list[blocks.Block]:
        turn = get_dict(params, "turn")
        status = get_str(turn, "status")
        out: list[blocks.Block] = []
        reason: blocks.EndReason = "completed"
        if status == "interrupted":
            reason = "interrupted"
        elif status == "failed":
            reason = "error"
            error = get_dict(turn, "error") or self._last_error_body
            raw = get_str(error, "message") or self._last_error
            message = _readable(raw)
            info = error.get("codexErrorInfo")
            report = FailureReport(
                message=short(message or "the turn failed", 2000),
                kind=next(iter(info), None)
                if isinstance(info, dict)
                else get_str(error, "codexErrorInfo"),
                body={"error": error, "raw": decode_object(raw) if raw else None},
            )
            out.append(failure_block("codex", report))
        return out + self.close_turn(reason)

    # ---- items --------------------------------------------------------------------------------

    def _tool_for(self, item: dict[str, Any]) -> _Tool | None:
        itype = get_str(item, "type")
        if itype == "commandExecution":
            actions = get_list(item, "commandActions")
            command = get_str(actions[0], "command") if len(actions) == 1 else None
            command = command or display_command(get_str(item, "command") or "")
            cwd = get_str(item, "cwd")
            return _Tool("shell", _title("", command), "execute", {"command": command, "cwd": cwd})
        if itype == "fileChange":
            changes = [
                {"path": get_str(c, "path"), "kind": get_str(get_dict(c, "kind"), "type")}
                for c in get_list(item, "changes")
                if isinstance(c, dict)
            ]
            names = ", ".join(self._rel(str(c["path"])) for c in changes)
            return _Tool("apply_patch", _title("Edit ", names), "edit", {"changes": changes})
        if itype == "mcpToolCall":
            server, tool = get_str(item, "server") or "mcp", get_str(item, "tool") or "tool"
            args = item.get("arguments")
            return _Tool(
                f"{server}.{tool}",
                f"{server}: {tool}",
                "other",
                args if isinstance(args, dict) else {},
            )
        if itype == "dynamicToolCall":
            name = get_str(item, "tool") or "tool"
            args = item.get("arguments")
            return _Tool(name, name, "other", args if isinstance(args, dict) else {})
        if itype == "webSearch":
            query = get_str(item, "query") or ""
            return _Tool("web_search", _title("Search: ", query), "fetch", {"query": query})
        if itype == "collabAgentToolCall":
            tool_name = get_str(item, "tool") or "agent"
            prompt = get_str(item, "prompt") or ""
            return _Tool(f"agent.{tool_name}", _title("", prompt), "think", {"prompt": prompt})
        return None

    def _result_of(self, item: dict[str, Any], tool: _Tool) -> tuple[str, bool]:
        itype = get_str(item, "type")
        status = get_str(item, "status") or "completed"
        if status == "declined":
            return "The user declined this.", False
        if itype == "commandExecution":
            output = get_str(item, "aggregatedOutput")
            if output is None:
                output = "".join(tool.output)
            code = get_int(item, "exitCode")
            if code not in (None, 0):
                output = f"{output.rstrip()}\n[exit code {code}]".lstrip()
            return output, status == "completed" and code in (None, 0)
        if itype == "fileChange":
            count = len(get_list(item, "changes"))
            verb = "Applied" if status == "completed" else "Could not apply"
            return (
                f"{verb} changes to {count} file{'s' if count != 1 else ''}",
                status == "completed",
            )
        if itype == "mcpToolCall":
            error = get_str(get_dict(item, "error"), "message")
            if error:
                return error, False
            parts = [
                get_str(c, "text") or "" for c in get_list(get_dict(item, "result"), "content")
            ]
            return "\n".join(p for p in parts if p), status == "completed"
        if itype == "dynamicToolCall":
            parts = [get_str(c, "text") or "" for c in get_list(item, "contentItems")]
            return "\n".join(p for p in parts if p), item.get("success") is not False
        if itype == "webSearch":
            return get_str(item, "query") or "", True
        return "", status in ("completed", "succeeded")

    def _diffs(self, item: dict[str, Any], item_id: str) -> list[blocks.Block]:
        out: list[blocks.Block] = []
        for change in get_list(item, "changes"):
            path = get_str(change, "path")
            diff = get_str(change, "diff") or ""
            if not path:
                continue
            kind = get_dict(change, "kind")
            ctype = get_str(kind, "type")
            path = get_str(kind, "move_path") or path
            shown = self._rel(path)
            if ctype == "add":
                # Codex gives an added file's content as the "diff" or as hunks of '+' lines.
                hunks = parse_unified(diff)
                text = apply_hunks("", hunks) if hunks else diff
                new_text = text if text is not None else diff
                out.append(
                    blocks.DiffBlock(
                        path=path,
                        old_text=None,
                        new_text=new_text,
                        unified=added_file_diff(shown, new_text),
                        tool_call_id=item_id,
                    )
                )
                continue
            body = diff if diff.startswith("---") else f"--- a/{shown}\n+++ b/{shown}\n{diff}"
            if ctype == "delete":
                body = body.replace(f"+++ b/{shown}", "+++ /dev/null", 1)
            out.append(
                blocks.DiffBlock(
                    path=path, old_text=None, new_text="", unified=body, tool_call_id=item_id
                )
            )
        return out

    def _finish_message(
        self, item_id: str, item: dict[str, Any], *, thinking: bool
    ) -> list[blocks.Block]:
        self._finished.add(item_id)
        cls = blocks.ThinkingBlock if thinking else blocks.TextBlock
        if item_id in self._open:
            del self._open[item_id]
            return [cls(id=item_id, done=True)]
        if thinking:
            parts = [
                p
                for p in get_list(item, "summary") + get_list(item, "content")
                if isinstance(p, str)
            ]
            text = "\n\n".join(p for p in parts if p)
        else:
            text = get_str(item, "text") or ""
        return [cls(id=item_id, text=text, done=True)] if text else []

    def _close_open(self) -> list[blocks.Block]:
        out: list[blocks.Block] = []
        for item_id, thinking in self._open.items():
            out.append(
                blocks.ThinkingBlock(id=item_id, done=True)
                if thinking
                else blocks.TextBlock(id=item_id, done=True)
            )
            self._finished.add(item_id)
        self._open.clear()
        for item_id, tool in self._tools.items():
            out += unfinished_tool(blocks.ToolCallBlock(id=item_id, name=tool.name))
            self._finished.add(item_id)
        self._tools.clear()
        self._permissions.clear()
        return out

    def _rel(self, path: str) -> str:
        base = (self.cwd or "").rstrip("/")
        return path[len(base) + 1 :] if base and path.startswith(base + "/") else path


def _readable(message: str | None) -> str | None:
    """The ``message`` of an API error body Codex passes on as raw JSON, else ``message``."""
    body = decode_object(message) if message else None
    inner = get_str(get_dict(body, "error"), "message") if body else None
    return inner or message


def _command_decisions(available: list[Any]) -> dict[str, Any]:
    """Our three options mapped to the decisions Codex offers for this command."""
    decisions: dict[str, Any] = {ALLOW: "accept"}
    if not available or "acceptForSession" in available:
        decisions[ALWAYS] = "acceptForSession"
    else:
        amendment = next(
            (d for d in available if isinstance(d, dict) and "acceptWithExecpolicyAmendment" in d),
            None,
        )
        if amendment is not None:
            decisions[ALWAYS] = amendment
    # "decline" lets the turn go on without the command; Codex accepts it even when it only
    # lists "cancel" (which would end the whole turn).
    decisions[DENY] = "decline"
    return decisions


_HANDLERS: dict[str, Callable[[CodexParser, dict[str, Any]], list[blocks.Block]]] = {
    "turn/started": CodexParser._on_turn_started,
    "item/agentMessage/delta": CodexParser._on_text_delta,
    "item/reasoning/summaryTextDelta": CodexParser._on_reasoning_delta,
    "item/reasoning/textDelta": CodexParser._on_reasoning_delta,
    "item/commandExecution/outputDelta": CodexParser._on_output_delta,
    "turn/plan/updated": CodexParser._on_plan,
    "thread/tokenUsage/updated": CodexParser._on_usage,
    "account/rateLimits/updated": lambda _parser, params: list(codex_limits(params)),
    "error": CodexParser._on_error,
    "item/started": CodexParser._on_item_started,
    "item/completed": CodexParser._on_item_completed,
    "turn/completed": CodexParser._on_turn_completed,
}
