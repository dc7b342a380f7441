"""Fake Gemini API: ``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` and friends.

Configure Gemini CLI with ``GOOGLE_GEMINI_BASE_URL=<server.base_url>`` (no ``/v1beta``).
Gemini CLI's shell tool is ``run_shell_command`` with ``{"command": "...", "description": "..."}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .core import FakeServer, ModelCall, ModelView, RecordedRequest, Route, StaticJson, sse, text_of
from .script import HttpError, Reply, next_id, split_text

FINISH_REASONS = {"end": "STOP", "tool": "STOP", "max_tokens": "MAX_TOKENS", "refusal": "SAFETY"}
ERROR_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^:/]+):(?P<method>\w+)$")


class FakeGemini(FakeServer):
    """Gemini SSE: text parts, ``thought`` parts, ``functionCall`` parts, ``usageMetadata``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", "gemini-2.5-flash")
        super().__init__(**kwargs)

    def route(self, rec: RecordedRequest) -> Route:
        m = _PATH.match(rec.path)
        if rec.method == "POST" and m:
            method = m["method"]
            if method in ("streamGenerateContent", "generateContent"):
                return ModelCall()
            if method == "countTokens":
                return StaticJson({"totalTokens": max(1, len(rec.raw) // 4)})
            if method == "embedContent":
                return StaticJson({"embedding": {"values": [0.0] * 8}})
        if rec.method == "GET" and rec.path in ("/v1beta/models", "/v1/models"):
            return StaticJson(
                {"models": [{"name": f"models/{self.model_name}", "displayName": "Fake"}]}
            )
        return None

    def inspect(self, rec: RecordedRequest) -> ModelView:
        body: dict[str, Any] = rec.body or {}
        m = _PATH.match(rec.path)
        view = ModelView(
            model=m["model"] if m else None,
            stream=bool(m and m["method"] == "streamGenerateContent"),
        )
        for tool in body.get("tools") or []:
            for decl in tool.get("functionDeclarations") or []:
                view.tools.append(decl.get("name", ""))
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        for c in contents:
            for part in c.get("parts") or []:
                if "functionResponse" in part:
                    view.tool_results.append(
                        text_of((part["functionResponse"] or {}).get("response"))
                    )
        if contents:
            view.last_is_tool_result = any(
                "functionResponse" in p for p in contents[-1].get("parts") or []
            )
        for c in reversed(contents):
            parts = c.get("parts") or []
            if c.get("role", "user") == "user" and not any("functionResponse" in p for p in parts):
                view.last_user_text = "\n".join(p.get("text", "") for p in parts if "text" in p)
                break
        return view

    def _usage(self, reply: Reply) -> dict[str, Any]:
        u = reply.usage
        return {
            "promptTokenCount": u.input_tokens,
            "candidatesTokenCount": u.output_tokens,
            "totalTokenCount": u.input_tokens + u.output_tokens,
            "cachedContentTokenCount": u.cached_input_tokens,
            "thoughtsTokenCount": u.reasoning_tokens,
        }

    def _parts(self, reply: Reply) -> list[list[dict[str, Any]]]:
        """Groups of parts, one group per streamed chunk."""
        groups: list[list[dict[str, Any]]] = []
        for piece in split_text(reply.thinking or "", reply.chunks):
            groups.append([{"text": piece, "thought": True}])
        for piece in split_text(reply.text, reply.chunks):
            groups.append([{"text": piece}])
        if reply.tool_calls:
            groups.append(
                [
                    {
                        "functionCall": {
                            "id": call.id or next_id("call"),
                            "name": call.name,
                            "args": dict(call.args),
                        }
                    }
                    for call in reply.tool_calls
                ]
            )
        if not groups:
            groups.append([{"text": ""}])
        return groups

    def _chunk(
        self, rec: RecordedRequest, rid: str, parts: list[dict[str, Any]], reply: Reply | None
    ) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        out: dict[str, Any] = {
            "candidates": [cand],
            "modelVersion": rec.view.model or self.model_name,
            "responseId": rid,
        }
        if reply is not None:
            cand["finishReason"] = FINISH_REASONS[reply.stop_reason]
            out["usageMetadata"] = self._usage(reply)
        return out

    def render_stream(self, reply: Reply, rec: RecordedRequest) -> Iterator[bytes]:
        rid = next_id("resp")
        groups = self._parts(reply)
        for n, parts in enumerate(groups):
            last = n == len(groups) - 1
            yield sse(self._chunk(rec, rid, parts, reply if last else None))

    def render_json(self, reply: Reply, rec: RecordedRequest) -> Any:
        parts: list[dict[str, Any]] = []
        if reply.thinking is not None:
            parts.append({"text": reply.thinking, "thought": True})
        if reply.text or not reply.tool_calls:
            parts.append({"text": reply.text})
        parts.extend(p for p in self._parts(reply)[-1] if "functionCall" in p)
        return self._chunk(rec, next_id("resp"), parts, reply)

    def render_error(self, err: HttpError, rec: RecordedRequest) -> Any:
        status = err.kind or ERROR_STATUS.get(err.status, "INTERNAL")
        return {"error": {"code": err.status, "message": err.message, "status": status}}
