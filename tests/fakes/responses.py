"""Fake OpenAI Responses API (Codex): ``POST /v1/responses`` SSE.

Configure Codex with a ``[model_providers.fake]`` entry whose ``base_url`` is ``server.base_url``
(which ends in ``/v1``) and ``wire_api = "responses"`` (see ``tests/realcli.py``).
Codex 0.171's shell tool is the function ``exec_command`` with ``{"cmd": "..."}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from .core import ModelCall, ModelView, OpenAIServer, RecordedRequest, Route, sse, text_of
from .script import Reply, ToolCall, next_id, split_text

TOOL_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


class FakeResponses(OpenAIServer):
    """OpenAI Responses SSE: reasoning, message text deltas, ``function_call`` items, usage."""

    def route(self, rec: RecordedRequest) -> Route:
        if rec.method == "POST" and rec.path == "/v1/responses":
            return ModelCall()
        return self.models_route(rec)

    def inspect(self, rec: RecordedRequest) -> ModelView:
        body: dict[str, Any] = rec.body or {}
        view = ModelView.of(
            body, [t.get("name") or t.get("type", "") for t in body.get("tools") or []]
        )
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = [i for i in items or [] if isinstance(i, dict)]
        for item in items:
            if item.get("type") in TOOL_OUTPUT_TYPES:
                view.tool_results.append(text_of(item.get("output")))
        convo = [i for i in items if i.get("role") not in ("developer", "system")]
        if convo:
            view.last_is_tool_result = convo[-1].get("type") in TOOL_OUTPUT_TYPES
        for item in reversed(items):
            if item.get("type", "message") == "message" and item.get("role") == "user":
                view.last_user_text = text_of(item.get("content"))
                break
        return view

    def _custom_tools(self, rec: RecordedRequest) -> set[str]:
        tools = (rec.body or {}).get("tools") or []
        return {t.get("name", "") for t in tools if t.get("type") == "custom"}

    def _items(self, reply: Reply, rec: RecordedRequest) -> list[dict[str, Any]]:
        """The output items (complete form) for ``reply``."""
        items: list[dict[str, Any]] = []
        if reply.thinking is not None:
            items.append(
                {
                    "type": "reasoning",
                    "id": next_id("rs"),
                    "summary": [{"type": "summary_text", "text": reply.thinking}],
                }
            )
        if reply.text:
            items.append(
                {
                    "type": "message",
                    "id": next_id("msg"),
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        custom = self._custom_tools(rec)
        for call in reply.tool_calls:
            items.append(_call_item(call, custom))
        return items

    def _response(
        self, rec: RecordedRequest, reply: Reply, rid: str, status: str, output: list[Any]
    ) -> dict[str, Any]:
        u = reply.usage
        resp: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": rec.view.model or self.model_name,
            "output": output,
        }
        if status != "in_progress":
            resp["usage"] = {
                "input_tokens": u.input_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                "total_tokens": u.input_tokens + u.output_tokens,
            }
        if status == "incomplete":
            resp["incomplete_details"] = {"reason": "max_output_tokens"}
        return resp

    def render_stream(self, reply: Reply, rec: RecordedRequest) -> Iterator[bytes]:
        rid = next_id("resp")
        seq = iter(range(1_000_000))

        def ev(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

        yield ev("response.created", response=self._response(rec, reply, rid, "in_progress", []))
        items = self._items(reply, rec)
        for idx, item in enumerate(items):
            iid = item["id"]
            kind = item["type"]
            if kind == "reasoning":
                yield ev(
                    "response.output_item.added", output_index=idx, item={**item, "summary": []}
                )
                yield ev(
                    "response.reasoning_summary_part.added",
                    item_id=iid,
                    output_index=idx,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in split_text(reply.thinking or "", reply.chunks):
                    yield ev(
                        "response.reasoning_summary_text.delta",
                        item_id=iid,
                        output_index=idx,
                        summary_index=0,
                        delta=piece,
                    )
                yield ev(
                    "response.reasoning_summary_text.done",
                    item_id=iid,
                    output_index=idx,
                    summary_index=0,
                    text=reply.thinking or "",
                )
            elif kind == "message":
                yield ev(
                    "response.output_item.added",
                    output_index=idx,
                    item={**item, "status": "in_progress", "content": []},
                )
                yield ev(
                    "response.content_part.added",
                    item_id=iid,
                    output_index=idx,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
                for piece in split_text(reply.text, reply.chunks):
                    yield ev(
                        "response.output_text.delta",
                        item_id=iid,
                        output_index=idx,
                        content_index=0,
                        delta=piece,
                    )
                yield ev(
                    "response.output_text.done",
                    item_id=iid,
                    output_index=idx,
                    content_index=0,
                    text=reply.text,
                )
            elif kind == "function_call":
                yield ev(
                    "response.output_item.added",
                    output_index=idx,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
                for piece in split_text(item["arguments"], reply.chunks):
                    yield ev(
                        "response.function_call_arguments.delta",
                        item_id=iid,
                        output_index=idx,
                        delta=piece,
                    )
                yield ev(
                    "response.function_call_arguments.done",
                    item_id=iid,
                    output_index=idx,
                    arguments=item["arguments"],
                )
            else:
                yield ev("response.output_item.added", output_index=idx, item=item)
            yield ev("response.output_item.done", output_index=idx, item=item)
        if reply.stop_reason == "max_tokens":
            yield ev(
                "response.incomplete", response=self._response(rec, reply, rid, "incomplete", items)
            )
        else:
            yield ev(
                "response.completed", response=self._response(rec, reply, rid, "completed", items)
            )

    def render_json(self, reply: Reply, rec: RecordedRequest) -> Any:
        status = "incomplete" if reply.stop_reason == "max_tokens" else "completed"
        return self._response(rec, reply, next_id("resp"), status, self._items(reply, rec))


def _call_item(call: ToolCall, custom: set[str]) -> dict[str, Any]:
    call_id = call.id or next_id("call")
    if call.name in custom:
        value = call.args.get("input", "") if isinstance(call.args, dict) else ""
        return {
            "type": "custom_tool_call",
            "id": next_id("ctc"),
            "call_id": call_id,
            "name": call.name,
            "input": value if isinstance(value, str) else json.dumps(value),
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": next_id("fc"),
        "call_id": call_id,
        "name": call.name,
        "arguments": json.dumps(dict(call.args)),
        "status": "completed",
    }
