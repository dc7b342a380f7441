"""Shared core of the fake model servers: an HTTP server thread, a request log and a script.

Each wire format subclasses :class:`FakeServer` and implements :meth:`FakeServer.route` (which
endpoint is this?), :meth:`FakeServer.inspect` (a model-neutral view of a model request) and the
renderers (:meth:`FakeServer.render_stream`, :meth:`FakeServer.render_json`,
:meth:`FakeServer.render_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import socket
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import parse_qs, urlsplit

from .script import HttpError, Reply, Step, When

Kind = Literal["agent", "aux", "other"]


@dataclass
class ModelView:
    """A model-neutral reading of a model request, filled in by the wire format."""

    model: str | None = None
    stream: bool = True
    tools: list[str] = field(default_factory=list)
    #: the last message (ignoring system/developer entries) carries a tool result
    last_is_tool_result: bool = False
    #: texts of all tool results in the request, in order
    tool_results: list[str] = field(default_factory=list)
    #: the text of the last user message that is not a tool result ("" if none)
    last_user_text: str = ""

    @classmethod
    def of(cls, body: dict[str, Any], tools: list[str]) -> ModelView:
        """A view of a request ``body`` that names its ``model`` and ``stream`` flag."""
        return cls(model=body.get("model"), stream=bool(body.get("stream", False)), tools=tools)


@dataclass
class RecordedRequest:
    """One request the fake server received."""

    index: int
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes
    body: Any
    time: float
    #: ``"agent"``: a scripted model turn; ``"aux"``: a model call without tools (title
    #: generation, classifiers), answered with ``aux_text``; ``"other"``: anything else.
    kind: Kind = "other"
    view: ModelView = field(default_factory=ModelView)
    step: Step | None = None
    route: Route = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def contains(self, needle: str) -> bool:
        """Whether ``needle`` occurs anywhere in the JSON body (as JSON-decoded text)."""
        if needle in self.text:
            return True
        return needle in json.dumps(self.body, ensure_ascii=False)

    def __repr__(self) -> str:
        return (
            f"<RecordedRequest #{self.index} {self.method} {self.path} kind={self.kind} "
            f"model={self.view.model} tools={len(self.view.tools)} "
            f"tool_result={self.view.last_is_tool_result}>"
        )


@dataclass(frozen=True)
class StaticJson:
    """Route result: answer with this JSON body and status."""

    body: Any
    status: int = 200


@dataclass(frozen=True)
class ModelCall:
    """Route result: this is a model call; answer from the script (or aux / default)."""


Route = StaticJson | ModelCall | None


def sse(data: Any, event: str | None = None) -> bytes:
    """Encode one server-sent event (``data`` JSON-encoded unless already a string)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            sys.stderr.write(f"[{type(self.server.fake).__name__}] {format % args}\n")

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(parts)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        enc = self.headers.get("Content-Encoding", "").lower()
        try:
            if enc == "gzip":
                raw = gzip.decompress(raw)
            elif enc == "deflate":
                raw = zlib.decompress(raw)
        except (OSError, zlib.error):
            pass
        return raw

    def _serve(self) -> None:
        fake = self.server.fake
        raw = self._read_body()
        split = urlsplit(self.path)
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        rec = fake._record(
            method=self.command,
            path=split.path,
            query={k: v[-1] for k, v in parse_qs(split.query).items()},
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            body=body,
        )
        try:
            fake._respond(self, rec)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- response helpers used by FakeServer._respond ---------------------------------------

    def send_json(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def start_stream(self, content_type: str, extra: Mapping[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
        """Close the connection abruptly (no chunked terminator)."""
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fake: FakeServer) -> None:
        self.fake = fake
        super().__init__((fake.host, 0), _Handler)


class FakeServer:
    """A scriptable fake model server on ``127.0.0.1:<random port>``, run in a thread.

    Use as a context manager (sync or async) or call :meth:`start` / :meth:`stop`.
    """

    #: MIME type of the streamed answers
    stream_content_type = "text/event-stream"
    #: path prefix clients should use as their base URL (e.g. ``/v1`` for OpenAI clients)
    base_path = ""

    def __init__(
        self,
        *,
        default: Reply | None = None,
        aux_text: str = "Fake title",
        model_name: str = "fake-model",
        verbose: bool | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        #: answer when the script has no matching step
        self.default: Reply = default or Reply(text="OK")
        #: answer to model calls without tools (title generation and the like)
        self.aux_text = aux_text
        self.model_name = model_name
        self.verbose = bool(os.environ.get("FAKE_SERVER_VERBOSE")) if verbose is None else verbose
        self.host = host
        self._lock = threading.Condition()
        self._log: list[RecordedRequest] = []
        self._script: deque[Step] = deque()
        self._release = threading.Event()
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        self._closing.clear()
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._closing.set()
        self._release.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- addresses -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("fake server not started")
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL a client should be configured with (``origin`` + ``base_path``)."""
        return self.origin + self.base_path

    # -- script ----------------------------------------------------------------------------

    def script(self, *steps: Step) -> Self:
        """Append steps; each agent request takes the first queued step whose ``when`` matches."""
        with self._lock:
            self._script.extend(steps)
        return self

    def rescript(self, *steps: Step) -> Self:
        """Drop what is left of the script (an earlier test's), then script ``steps``."""
        self.clear_script()
        return self.script(*steps)

    def clear_script(self) -> None:
        with self._lock:
            self._script.clear()

    @property
    def pending(self) -> list[Step]:
        """Steps not consumed yet."""
        with self._lock:
            return list(self._script)

    def release(self) -> None:
        """Wake every stall and delay in progress (they then continue)."""
        with self._lock:
            old, self._release = self._release, threading.Event()
        old.set()

    # -- request log -----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._log)

    @property
    def agent_requests(self) -> list[RecordedRequest]:
        """Model calls that offered tools (the ones the script answers)."""
        return [r for r in self.requests if r.kind == "agent"]

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """All model calls (agent and aux)."""
        return [r for r in self.requests if r.kind != "other"]

    def wait_for(
        self, count: int = 1, *, kind: Kind | None = "agent", timeout: float = 30.0
    ) -> list[RecordedRequest]:
        """Block until ``count`` requests of ``kind`` (None: any) arrived; return them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                got = [r for r in self._log if kind is None or r.kind == kind]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{type(self).__name__}: {len(got)}/{count} {kind or ''} requests "
                        f"after {timeout}s; log: {self._log!r}"
                    )
                self._lock.wait(left)

    async def wait_for_async(
        self, count: int = 1, *, kind: Kind | None = "agent", timeout: float = 30.0
    ) -> list[RecordedRequest]:
        """Async variant of :meth:`wait_for` (polls, so it never blocks the event loop)."""
        deadline = time.monotonic() + timeout
        while True:
            got = [r for r in self.requests if kind is None or r.kind == kind]
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"{type(self).__name__}: {len(got)}/{count} {kind} requests")
            await asyncio.sleep(0.02)

    # -- hooks for wire formats ------------------------------------------------------------

    def route(self, rec: RecordedRequest) -> Route:
        """Classify a request: a model call, a static JSON answer, or None (404)."""
        raise NotImplementedError

    def inspect(self, rec: RecordedRequest) -> ModelView:
        """Read a model call's body into a :class:`ModelView`."""
        raise NotImplementedError

    def is_agent(self, rec: RecordedRequest) -> bool:
        """Whether a model call is an agent turn (scripted) rather than an aux call."""
        return bool(rec.view.tools)

    def render_stream(self, reply: Reply, rec: RecordedRequest) -> Iterable[bytes]:
        """The SSE events (already encoded) answering ``rec`` with ``reply``."""
        raise NotImplementedError

    def render_json(self, reply: Reply, rec: RecordedRequest) -> Any:
        """The non-streamed JSON body answering ``rec`` with ``reply``."""
        raise NotImplementedError

    def render_error(self, err: HttpError, rec: RecordedRequest) -> Any:
        """The JSON error body for ``err`` in this wire format."""
        return {"error": {"message": err.message, "type": err.kind or "error", "code": err.status}}

    def stream_tail(self, rec: RecordedRequest) -> bytes:
        """Bytes sent after the last event (e.g. ``data: [DONE]``)."""
        return b""

    # -- internals -------------------------------------------------------------------------

    def _record(
        self,
        *,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        raw: bytes,
        body: Any,
    ) -> RecordedRequest:
        with self._lock:
            rec = RecordedRequest(
                index=len(self._log),
                method=method,
                path=path,
                query=query,
                headers=headers,
                raw=raw,
                body=body,
                time=time.time(),
            )
        route = rec.route = self.route(rec)
        if isinstance(route, ModelCall):
            try:
                rec.view = self.inspect(rec)
            except (AttributeError, KeyError, TypeError, ValueError, IndexError):
                rec.view = ModelView()
            rec.kind = "agent" if self.is_agent(rec) else "aux"
        with self._lock:
            if rec.kind == "agent":
                rec.step = self._take(rec)
            self._log.append(rec)
            self._lock.notify_all()
        return rec

    def _take(self, rec: RecordedRequest) -> Step | None:
        for i, step in enumerate(self._script):
            if _matches(step.when, rec):
                del self._script[i]
                return step
        return None

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            with self._lock:
                ev = self._release
            ev.wait(seconds)

    def _respond(self, h: _Handler, rec: RecordedRequest) -> None:
        route = rec.route
        if route is None:
            h.send_json(404, {"error": {"message": f"fake server: no route {rec.path}"}})
            return
        if isinstance(route, StaticJson):
            h.send_json(route.status, route.body)
            return
        step: Step
        if rec.kind == "aux":
            step = Reply(text=self.aux_text, chunks=1)
        else:
            step = rec.step if rec.step is not None else self.default
        self._wait(step.delay)
        if self._closing.is_set():
            h.drop()
            return
        if isinstance(step, HttpError):
            extra = {}
            if step.retry_after is not None:
                extra["Retry-After"] = f"{step.retry_after:g}"
            body = step.body if step.body is not None else self.render_error(step, rec)
            h.send_json(step.status, body, extra)
            return
        if not rec.view.stream:
            h.send_json(200, self.render_json(step, rec), dict(step.headers))
            return
        h.start_stream(self.stream_content_type, step.headers)
        for n, event in enumerate(self._events(step, rec)):
            if step.disconnect_after is not None and n >= step.disconnect_after:
                h.drop()
                return
            if step.stall_after is not None and n == step.stall_after:
                self._wait(step.stall)
                if self._closing.is_set():
                    h.drop()
                    return
            h.send_chunk(event)
        if step.disconnect_after is not None:
            h.drop()
            return
        h.send_chunk(self.stream_tail(rec))
        h.end_stream()

    def _events(self, step: Reply, rec: RecordedRequest) -> Iterator[bytes]:
        yield from self.render_stream(step, rec)


class OpenAIServer(FakeServer):
    """What OpenAI's wire formats share: the ``/v1`` base, the models endpoints, the error body."""

    base_path = "/v1"

    def models_route(self, rec: RecordedRequest) -> Route:
        """``GET /v1/models`` (also ``/models``) and ``GET /v1/models/<id>``."""
        if rec.method != "GET":
            return None
        if rec.path in ("/v1/models", "/models"):
            return StaticJson(openai_model_list(self.model_name))
        if rec.path.startswith("/v1/models/"):
            model_id = rec.path.removeprefix("/v1/models/")
            return StaticJson({"id": model_id, "object": "model", "created": 0, "owned_by": "fake"})
        return None

    def render_error(self, err: HttpError, rec: RecordedRequest) -> Any:
        return openai_error(err)


def _matches(when: When, rec: RecordedRequest) -> bool:
    if when == "any":
        return True
    if when == "tool_result":
        return rec.view.last_is_tool_result
    if when == "user":
        return not rec.view.last_is_tool_result
    if callable(when):
        return bool(when(rec))
    raise ValueError(f"bad when: {when!r}")


def text_of(content: Any) -> str:
    """Flatten a message ``content`` (string, list of blocks/parts, dict) into plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (text_of(c) for c in content) if t)
    if isinstance(content, dict):
        for key in ("text", "output", "content", "result"):
            if key in content:
                return text_of(content[key])
        return ""
    return str(content)


def openai_error(err: HttpError) -> dict[str, Any]:
    """An OpenAI-style error body."""
    default_kind = {
        400: "invalid_request_error",
        401: "invalid_api_key",
        404: "not_found",
        429: "rate_limit_exceeded",
    }.get(err.status, "server_error")
    kind = err.kind or default_kind
    return {"error": {"message": err.message, "type": kind, "param": None, "code": kind}}


def openai_model_list(name: str) -> dict[str, Any]:
    """An OpenAI-style ``GET /v1/models`` answer listing one model."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "fake"}],
    }
