"""Fake Anthropic Messages API (Claude Code): ``POST /v1/messages`` SSE and ``count_tokens``.

Configure Claude Code with ``ANTHROPIC_BASE_URL=<server.base_url>`` (no ``/v1``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .core import FakeServer, ModelCall, ModelView, RecordedRequest, Route, StaticJson, sse, text_of
from .script import HttpError, Reply, next_id, split_text

STOP_REASONS = {
    "end": "end_turn",
    "tool": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

FAKE_SIGNATURE = "ZmFrZS1zaWduYXR1cmU="


class FakeAnthropic(FakeServer):
    """Anthropic Messages SSE: text, thinking (+ ``signature_delta``), ``tool_use``, usage."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", "claude-fake")
        super().__init__(**kwargs)

    def route(self, rec: RecordedRequest) -> Route:
        if rec.method == "POST" and rec.path == "/v1/messages":
            return ModelCall()
        if rec.method == "POST" and rec.path == "/v1/messages/count_tokens":
            return StaticJson({"input_tokens": max(1, len(rec.raw) // 4)})
        if rec.method == "GET" and rec.path == "/v1/models":
            return StaticJson(
                {
                    "data": [
                        {
                            "type": "model",
                            "id": self.model_name,
                            "display_name": "Fake",
                            "created_at": "2025-01-01T00:00:00Z",
                        }
                    ],
                    "has_more": False,
                    "first_id": self.model_name,
                    "last_id": self.model_name,
                }
            )
        return None

    def inspect(self, rec: RecordedRequest) -> ModelView:
        body: dict[str, Any] = rec.body or {}
        view = ModelView.of(body, [t.get("name", "") for t in body.get("tools") or []])
        messages = [m for m in body.get("messages") or [] if m.get("role") in ("user", "assistant")]
        for m in messages:
            for block in _blocks(m):
                if block.get("type") == "tool_result":
                    view.tool_results.append(text_of(block.get("content")))
        if messages:
            last = messages[-1]
            blocks = _blocks(last)
            view.last_is_tool_result = last.get("role") == "user" and any(
                b.get("type") == "tool_result" for b in blocks
            )
        for m in reversed(messages):
            if m.get("role") != "user":
                continue
            blocks = _blocks(m)
            if any(b.get("type") == "tool_result" for b in blocks):
                continue
            view.last_user_text = "\n".join(
                b.get("text", "") for b in blocks if b.get("type") == "text"
            )
            break
        return view

    def _usage(self, reply: Reply) -> dict[str, Any]:
        u = reply.usage
        return {
            "input_tokens": u.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens,
        }

    def _model(self, rec: RecordedRequest) -> str:
        return rec.view.model or self.model_name

    def render_stream(self, reply: Reply, rec: RecordedRequest) -> Iterator[bytes]:
        usage = self._usage(reply)
        yield sse(
            {
                "type": "message_start",
                "message": {
                    "id": next_id("msg"),
                    "type": "message",
                    "role": "assistant",
                    "model": self._model(rec),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
            "message_start",
        )
        index = 0
        if reply.thinking is not None:
            yield _block_start(index, {"type": "thinking", "thinking": "", "signature": ""})
            for piece in split_text(reply.thinking, reply.chunks):
                yield _block_delta(index, {"type": "thinking_delta", "thinking": piece})
            yield _block_delta(index, {"type": "signature_delta", "signature": FAKE_SIGNATURE})
            yield _block_stop(index)
            index += 1
        if reply.text:
            yield _block_start(index, {"type": "text", "text": ""})
            for piece in split_text(reply.text, reply.chunks):
                yield _block_delta(index, {"type": "text_delta", "text": piece})
            yield _block_stop(index)
            index += 1
        for call in reply.tool_calls:
            yield _block_start(
                index,
                {
                    "type": "tool_use",
                    "id": call.id or next_id("toolu"),
                    "name": call.name,
                    "input": {},
                },
            )
            args = json.dumps(dict(call.args))
            for piece in split_text(args, reply.chunks):
                yield _block_delta(index, {"type": "input_json_delta", "partial_json": piece})
            yield _block_stop(index)
            index += 1
        yield sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": STOP_REASONS[reply.stop_reason], "stop_sequence": None},
                "usage": {"output_tokens": reply.usage.output_tokens},
            },
            "message_delta",
        )
        yield sse({"type": "message_stop"}, "message_stop")

    def render_json(self, reply: Reply, rec: RecordedRequest) -> Any:
        content: list[dict[str, Any]] = []
        if reply.thinking is not None:
            content.append(
                {"type": "thinking", "thinking": reply.thinking, "signature": FAKE_SIGNATURE}
            )
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": call.id or next_id("toolu"),
                    "name": call.name,
                    "input": dict(call.args),
                }
            )
        return {
            "id": next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": self._model(rec),
            "content": content,
            "stop_reason": STOP_REASONS[reply.stop_reason],
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def render_error(self, err: HttpError, rec: RecordedRequest) -> Any:
        kind = err.kind or ERROR_TYPES.get(err.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": err.message}}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return sse(
        {"type": "content_block_start", "index": index, "content_block": block},
        "content_block_start",
    )


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse(
        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
    )


def _block_stop(index: int) -> bytes:
    return sse({"type": "content_block_stop", "index": index}, "content_block_stop")
