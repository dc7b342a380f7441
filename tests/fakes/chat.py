"""Fake OpenAI Chat Completions API: ``POST /v1/chat/completions`` SSE and ``GET /v1/models``.

Used for OpenCode, Kilo, Qwen, Pi, Hermes and Droid; point them at ``server.base_url``
(which ends in ``/v1``). Requests without ``tools`` (title generation, classifiers) are "aux"
calls answered with ``aux_text`` and do not consume the script.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from .core import ModelCall, ModelView, OpenAIServer, RecordedRequest, Route, sse, text_of
from .script import Reply, next_id, split_text

FINISH_REASONS = {
    "end": "stop",
    "tool": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


class FakeChat(OpenAIServer):
    """Chat Completions SSE: content deltas, ``reasoning_content``, ``delta.tool_calls``, usage."""

    def route(self, rec: RecordedRequest) -> Route:
        if rec.method == "POST" and rec.path in ("/v1/chat/completions", "/chat/completions"):
            return ModelCall()
        return self.models_route(rec)

    def inspect(self, rec: RecordedRequest) -> ModelView:
        body: dict[str, Any] = rec.body or {}
        view = ModelView.of(
            body,
            [
                (t.get("function") or {}).get("name") or t.get("name", "")
                for t in body.get("tools") or []
            ],
        )
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        for m in messages:
            if m.get("role") == "tool":
                view.tool_results.append(text_of(m.get("content")))
        convo = [m for m in messages if m.get("role") not in ("system", "developer")]
        if convo:
            view.last_is_tool_result = convo[-1].get("role") == "tool"
        for m in reversed(messages):
            if m.get("role") == "user":
                view.last_user_text = text_of(m.get("content"))
                break
        return view

    def _usage(self, reply: Reply) -> dict[str, Any]:
        u = reply.usage
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        }

    def render_stream(self, reply: Reply, rec: RecordedRequest) -> Iterator[bytes]:
        cid = next_id("chatcmpl")
        created = int(time.time())
        model = rec.view.model or self.model_name

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            return sse(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    **extra,
                }
            )

        yield chunk({"role": "assistant", "content": ""})
        for piece in split_text(reply.thinking or "", reply.chunks):
            yield chunk({"reasoning_content": piece})
        for piece in split_text(reply.text, reply.chunks):
            yield chunk({"content": piece})
        for n, call in enumerate(reply.tool_calls):
            args = json.dumps(dict(call.args))
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": n,
                            "id": call.id or next_id("call"),
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in split_text(args, reply.chunks):
                yield chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
        include_usage = bool(((rec.body or {}).get("stream_options") or {}).get("include_usage"))
        finish = FINISH_REASONS[reply.stop_reason]
        if include_usage:
            yield chunk({}, finish)
            yield sse(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": self._usage(reply),
                }
            )
        else:
            yield chunk({}, finish, usage=self._usage(reply))

    def stream_tail(self, rec: RecordedRequest) -> bytes:
        return sse("[DONE]")

    def render_json(self, reply: Reply, rec: RecordedRequest) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.thinking is not None:
            message["reasoning_content"] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or next_id("call"),
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(dict(call.args))},
                }
                for call in reply.tool_calls
            ]
        return {
            "id": next_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": rec.view.model or self.model_name,
            "choices": [
                {"index": 0, "message": message, "finish_reason": FINISH_REASONS[reply.stop_reason]}
            ],
            "usage": self._usage(reply),
        }
