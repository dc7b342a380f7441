"""Unit tests of the fake model servers (tests/fakes) with a plain HTTP client."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fakes import (
    CallTool,
    FakeAnthropic,
    FakeChat,
    FakeGemini,
    FakeResponses,
    FakeServer,
    HttpError,
    Reply,
    ToolCall,
    Usage,
)

# -- a tiny client --------------------------------------------------------------------------


class Resp:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[tuple[str | None, Any]]:
        """Parsed SSE events: (event name, JSON data or the raw string)."""
        out: list[tuple[str | None, Any]] = []
        for block in self.body.decode().split("\n\n"):
            if not block.strip():
                continue
            name = None
            data = []
            for line in block.splitlines():
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: "):
                    data.append(line[len("data: ") :])
            raw = "\n".join(data)
            try:
                out.append((name, json.loads(raw)))
            except ValueError:
                out.append((name, raw))
        return out

    def data(self) -> list[Any]:
        return [d for _, d in self.events()]

    def text(self) -> str:
        """All streamed text of any of the four wire formats, concatenated."""
        out = []
        for d in self.data():
            if not isinstance(d, dict):
                continue
            if d.get("type") == "content_block_delta":
                out.append(d["delta"].get("text", ""))
            elif d.get("type") == "response.output_text.delta":
                out.append(d["delta"])
            elif d.get("object") == "chat.completion.chunk" and d["choices"]:
                out.append(d["choices"][0]["delta"].get("content") or "")
            elif "candidates" in d:
                parts = d["candidates"][0]["content"]["parts"]
                out.extend(p.get("text", "") for p in parts if not p.get("thought"))
        return "".join(out)


def call(
    srv: FakeServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Resp:
    u = urlsplit(srv.origin)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=data, headers=hdrs)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, raw)


TOOLS_ANTHROPIC = [{"name": "Bash", "input_schema": {"type": "object"}}]


def anthropic_body(*messages: dict[str, Any], tools: bool = True, stream: bool = True) -> Any:
    body: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 100,
        "stream": stream,
        "messages": list(messages),
    }
    if tools:
        body["tools"] = TOOLS_ANTHROPIC
    return body


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


# -- core -----------------------------------------------------------------------------------


def test_base_url_and_random_port() -> None:
    with FakeAnthropic() as a, FakeResponses() as b:
        assert a.port != b.port
        assert a.base_url == f"http://127.0.0.1:{a.port}"
        assert b.base_url == f"http://127.0.0.1:{b.port}/v1"
    with pytest.raises(RuntimeError):
        _ = a.port


def test_unknown_route_is_404_and_logged() -> None:
    with FakeChat() as srv:
        r = call(srv, "GET", "/nope")
        assert r.status == 404
        assert srv.requests[0].path == "/nope"
        assert srv.requests[0].kind == "other"


# -- Anthropic --------------------------------------------------------------------------------


def test_anthropic_text_and_thinking_stream() -> None:
    with FakeAnthropic() as srv:
        srv.script(Reply(text="hello world", thinking="hmm", usage=Usage(7, 3)))
        r = call(
            srv,
            "POST",
            "/v1/messages?beta=true",
            anthropic_body(user("hi")),
            {"x-api-key": "k"},
        )
        assert r.status == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = r.events()
        names = [n for n, _ in events]
        assert names[0] == "message_start"
        assert names[-2:] == ["message_delta", "message_stop"]
        assert all(n == d["type"] for n, d in events)
        deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
        assert "".join(d.get("thinking", "") for d in deltas) == "hmm"
        assert "".join(d.get("text", "") for d in deltas) == "hello world"
        assert any(d["type"] == "signature_delta" for d in deltas)
        starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
        assert starts == ["thinking", "text"]
        msg_delta = events[-2][1]
        assert msg_delta["delta"]["stop_reason"] == "end_turn"
        assert msg_delta["usage"]["output_tokens"] == 3
        assert events[0][1]["message"]["usage"]["input_tokens"] == 7
        rec = srv.requests[0]
        assert rec.query == {"beta": "true"}
        assert rec.headers["x-api-key"] == "k"
        assert rec.kind == "agent"
        assert rec.view.last_user_text == "hi"
        assert rec.view.tools == ["Bash"]


def test_anthropic_tool_call_then_reply_after_tool_result() -> None:
    with FakeAnthropic() as srv:
        srv.script(
            CallTool("Bash", {"command": "echo hi"}, id="toolu_1"),
            Reply(text="done", when="tool_result"),
        )
        r1 = call(srv, "POST", "/v1/messages", anthropic_body(user("run it")))
        events = r1.events()
        start = next(d for n, d in events if n == "content_block_start")
        assert start["content_block"] == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "Bash",
            "input": {},
        }
        partial = "".join(
            d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"
        )
        assert json.loads(partial) == {"command": "echo hi"}
        assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

        second = anthropic_body(
            user("run it"),
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                ],
            },
            {"role": "system", "content": "env update"},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi"}],
            },
        )
        r2 = call(srv, "POST", "/v1/messages", second)
        text = "".join(
            d["delta"].get("text", "") for n, d in r2.events() if n == "content_block_delta"
        )
        assert text == "done"
        rec = srv.agent_requests[1]
        assert rec.view.last_is_tool_result
        assert rec.view.tool_results == ["hi"]
        assert rec.contains("run it")
        assert srv.pending == []


def test_when_tool_result_step_waits_for_a_tool_result() -> None:
    with FakeAnthropic(default=Reply(text="default")) as srv:
        srv.script(Reply(text="after tool", when="tool_result"))
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("hi"), stream=False))
        assert r.json()["content"] == [{"type": "text", "text": "default"}]
        assert len(srv.pending) == 1


def test_anthropic_non_stream_count_tokens_and_aux() -> None:
    with FakeAnthropic(aux_text="A title") as srv:
        srv.script(Reply(text="scripted"))
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("t"), tools=False, stream=False))
        assert r.json()["content"][0]["text"] == "A title"
        assert srv.requests[0].kind == "aux"
        assert len(srv.pending) == 1
        r = call(srv, "POST", "/v1/messages/count_tokens", {"messages": [user("x" * 40)]})
        assert r.json()["input_tokens"] > 0
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("t"), stream=False))
        body = r.json()
        assert body["content"][0]["text"] == "scripted"
        assert body["stop_reason"] == "end_turn"


@pytest.mark.parametrize(
    ("status", "etype"),
    [(429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error"), (400, None)],
)
def test_anthropic_http_errors(status: int, etype: str | None) -> None:
    with FakeAnthropic() as srv:
        srv.script(HttpError(status, "nope", retry_after=1))
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("hi")))
        assert r.status == status
        assert r.headers["retry-after"] == "1"
        body = r.json()
        assert body["type"] == "error"
        assert body["error"]["message"] == "nope"
        assert body["error"]["type"] == (etype or "invalid_request_error")


def test_mid_stream_disconnect() -> None:
    with FakeAnthropic() as srv:
        srv.script(Reply(text="abcdef", disconnect_after=2))
        u = urlsplit(srv.origin)
        conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=5)
        conn.request("POST", "/v1/messages", body=json.dumps(anthropic_body(user("hi"))))
        r = conn.getresponse()
        assert r.status == 200
        with pytest.raises(http.client.IncompleteRead) as exc:
            r.read()
        assert b"message_start" in exc.value.partial
        assert b"message_stop" not in exc.value.partial


def test_stall_is_released_early() -> None:
    with FakeAnthropic() as srv:
        srv.script(Reply(text="abc", stall_after=1, stall=20))
        threading.Timer(0.3, srv.release).start()
        t0 = time.monotonic()
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("hi")))
        assert 0.2 < time.monotonic() - t0 < 5
        assert r.events()[-1][0] == "message_stop"


def test_delay_before_headers() -> None:
    with FakeAnthropic() as srv:
        srv.script(Reply(text="x", delay=0.3))
        t0 = time.monotonic()
        call(srv, "POST", "/v1/messages", anthropic_body(user("hi")))
        assert time.monotonic() - t0 >= 0.3


def test_custom_when_predicate_and_wait_for() -> None:
    with FakeAnthropic() as srv:
        srv.script(
            Reply(text="for B", when=lambda r: "B" in r.view.last_user_text),
            Reply(text="for A"),
        )
        r = call(srv, "POST", "/v1/messages", anthropic_body(user("B"), stream=False))
        assert r.json()["content"][0]["text"] == "for B"
        assert len(srv.wait_for(1)) == 1
        with pytest.raises(TimeoutError):
            srv.wait_for(2, timeout=0.1)


# -- OpenAI Responses -------------------------------------------------------------------------


def responses_body(*items: dict[str, Any]) -> Any:
    return {
        "model": "m",
        "stream": True,
        "input": list(items),
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {}},
            {"type": "custom", "name": "apply_patch"},
        ],
    }


def test_responses_text_reasoning_and_usage() -> None:
    with FakeResponses() as srv:
        srv.script(Reply(text="hello", thinking="think", usage=Usage(11, 4, 2)))
        msg = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
        r = call(srv, "POST", "/v1/responses", responses_body(msg))
        events = r.events()
        kinds = [n for n, _ in events]
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"
        text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
        assert text == "hello"
        summary = "".join(
            d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta"
        )
        assert summary == "think"
        done = [d["item"]["type"] for n, d in events if n == "response.output_item.done"]
        assert done == ["reasoning", "message"]
        usage = events[-1][1]["response"]["usage"]
        assert usage["input_tokens"] == 11
        assert usage["output_tokens"] == 4
        assert usage["input_tokens_details"]["cached_tokens"] == 2
        rec = srv.requests[0]
        assert rec.view.tools == ["exec_command", "apply_patch"]
        assert rec.view.last_user_text == "q"


def test_responses_function_call_and_tool_result() -> None:
    with FakeResponses() as srv:
        srv.script(
            CallTool("exec_command", {"cmd": "ls"}, id="call_1"),
            CallTool("apply_patch", {"input": "*** Begin Patch"}, when="tool_result"),
            Reply(text="done", when="tool_result"),
        )
        user_msg = {"type": "message", "role": "user", "content": "go"}
        r = call(srv, "POST", "/v1/responses", responses_body(user_msg))
        item = next(d["item"] for n, d in r.events() if n == "response.output_item.done")
        assert item["type"] == "function_call"
        assert item["call_id"] == "call_1"
        assert item["name"] == "exec_command"
        assert json.loads(item["arguments"]) == {"cmd": "ls"}
        out = {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"}
        r = call(srv, "POST", "/v1/responses", responses_body(user_msg, item, out))
        item2 = next(d["item"] for n, d in r.events() if n == "response.output_item.done")
        assert item2["type"] == "custom_tool_call"
        assert item2["input"] == "*** Begin Patch"
        assert srv.agent_requests[1].view.tool_results == ["a.txt"]
        out2 = {"type": "custom_tool_call_output", "call_id": item2["call_id"], "output": "ok"}
        r = call(srv, "POST", "/v1/responses", responses_body(user_msg, item, out, item2, out2))
        assert r.text() == "done"


def test_responses_error_body() -> None:
    with FakeResponses() as srv:
        srv.script(HttpError(429, "slow down"))
        r = call(srv, "POST", "/v1/responses", responses_body())
        assert r.status == 429
        assert r.json()["error"]["message"] == "slow down"


# -- Chat Completions -------------------------------------------------------------------------


def chat_body(*messages: dict[str, Any], tools: bool = True, usage: bool = True) -> Any:
    body: dict[str, Any] = {"model": "fake-model", "stream": True, "messages": list(messages)}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def test_chat_text_stream_usage_and_done() -> None:
    with FakeChat() as srv:
        srv.script(Reply(text="hello there", thinking="hm"))
        r = call(srv, "POST", "/v1/chat/completions", chat_body({"role": "user", "content": "hi"}))
        data = r.data()
        assert data[-1] == "[DONE]"
        chunks = data[:-1]
        content = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert content == "hello there"
        reasoning = "".join(
            c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"]
        )
        assert reasoning == "hm"
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finishes[-1] == "stop"
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"]["prompt_tokens"] == 12


def test_chat_tool_calls_and_tool_result() -> None:
    with FakeChat() as srv:
        srv.script(
            CallTool("bash", {"command": "ls"}, id="call_9"),
            Reply(text="done", when="tool_result"),
        )
        u = {"role": "user", "content": "list"}
        r = call(srv, "POST", "/v1/chat/completions", chat_body(u, usage=False))
        chunks = r.data()[:-1]
        calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
        assert calls[0]["id"] == "call_9"
        assert calls[0]["function"]["name"] == "bash"
        args = "".join(tc["function"]["arguments"] for tc in calls)
        assert json.loads(args) == {"command": "ls"}
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["usage"]["completion_tokens"] == 5
        a = {"role": "assistant", "content": None, "tool_calls": [calls[0]]}
        t = {"role": "tool", "tool_call_id": "call_9", "content": "x.txt"}
        r = call(srv, "POST", "/v1/chat/completions", chat_body(u, a, t))
        assert r.text() == "done"
        assert srv.agent_requests[1].view.tool_results == ["x.txt"]


def test_chat_aux_models_and_non_stream() -> None:
    with FakeChat(aux_text="Title", model_name="fm") as srv:
        srv.script(Reply(text="agent"))
        r = call(
            srv,
            "POST",
            "/v1/chat/completions",
            chat_body({"role": "user", "content": "title?"}, tools=False),
        )
        assert "Title" in r.body.decode()
        assert srv.pending
        r = call(srv, "GET", "/v1/models")
        assert r.json()["data"][0]["id"] == "fm"
        body = chat_body({"role": "user", "content": "q"})
        body["stream"] = False
        r = call(srv, "POST", "/v1/chat/completions", body)
        assert r.json()["choices"][0]["message"]["content"] == "agent"


# -- Gemini -----------------------------------------------------------------------------------


def gemini_body(*contents: dict[str, Any]) -> Any:
    return {
        "contents": list(contents),
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
    }


def test_gemini_stream_text_and_function_call() -> None:
    with FakeGemini() as srv:
        srv.script(
            Reply(
                text="let me look",
                tool_calls=[ToolCall("run_shell_command", {"command": "ls"})],
            ),
            Reply(text="done", when="tool_result"),
        )
        path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        u = {"role": "user", "parts": [{"text": "go"}]}
        r = call(srv, "POST", path, gemini_body(u), {"x-goog-api-key": "k"})
        chunks = r.data()
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        assert "".join(p.get("text", "") for p in parts) == "let me look"
        fc = next(p["functionCall"] for p in parts if "functionCall" in p)
        assert fc["name"] == "run_shell_command"
        assert fc["args"] == {"command": "ls"}
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
        assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 12
        rec = srv.requests[0]
        assert rec.view.model == "gemini-2.5-flash"
        assert rec.view.tools == ["run_shell_command"]
        fr = {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "run_shell_command", "response": {"output": "a"}}}
            ],
        }
        m = {"role": "model", "parts": [{"functionCall": fc}]}
        r = call(srv, "POST", path, gemini_body(u, m, fr))
        assert r.text() == "done"
        assert srv.agent_requests[1].view.last_is_tool_result


def test_gemini_generate_content_count_tokens_and_error() -> None:
    with FakeGemini() as srv:
        srv.script(Reply(text="whole"), HttpError(429, "quota"))
        base = "/v1beta/models/gemini-2.5-flash"
        u = {"role": "user", "parts": [{"text": "go"}]}
        r = call(srv, "POST", f"{base}:generateContent", gemini_body(u))
        assert r.json()["candidates"][0]["content"]["parts"] == [{"text": "whole"}]
        r = call(srv, "POST", f"{base}:countTokens", {"contents": [u]})
        assert r.json()["totalTokens"] > 0
        r = call(srv, "POST", f"{base}:streamGenerateContent?alt=sse", gemini_body(u))
        assert r.status == 429
        assert r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


# -- async use --------------------------------------------------------------------------------


async def test_async_context_manager_and_wait() -> None:
    async with FakeChat() as srv:
        srv.script(Reply(text="async hi"))
        body = chat_body({"role": "user", "content": "hi"})
        task = asyncio.create_task(
            asyncio.to_thread(call, srv, "POST", "/v1/chat/completions", body)
        )
        got = await srv.wait_for_async(1, timeout=5)
        assert got[0].view.last_user_text == "hi"
        r = await task
        assert r.text() == "async hi"
