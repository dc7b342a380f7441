"""JSON-RPC over newline-delimited stdio, sans-I/O: the one codec the bridge speaks it with.

ACP agents speak JSON-RPC 2.0; Codex's ``app-server`` speaks the same messages without the
``"jsonrpc"`` member. :func:`decode` turns one line into a :data:`Message` and never raises
(untrusted input: a bad line is :class:`Invalid`, kept for the log); the builders
(:func:`request`, :func:`notification`, :func:`result`, :func:`error`) make the messages the
bridge sends and :func:`encode` writes one as a line, with or without the version member.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from bridge.parsers.untrusted import clean, dumps_plain, plain
from bridge.util.redact import redact

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: ACP's "resource not found" (an unknown session, a missing file)
RESOURCE_NOT_FOUND = -32002

RpcId = int | str


@dataclass(frozen=True, slots=True)
class RpcError:
    code: int
    message: str
    data: Any = None

    def describe(self) -> str:
        """The message plus the agent's details, as one line for people."""
        detail = self.data
        if isinstance(detail, dict):
            detail = detail.get("details") or detail.get("message") or detail
        if detail in (None, "", {}, []):
            return self.message
        text = detail if isinstance(detail, str) else dumps_plain(detail)
        return f"{self.message}: {text}"[:2000]


@dataclass(frozen=True, slots=True)
class Request:
    """The agent asks the client something and waits for the answer."""

    id: RpcId
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to one of the client's requests."""

    id: RpcId | None
    result: Any = None
    error: RpcError | None = None


@dataclass(frozen=True, slots=True)
class Invalid:
    """A line that is not a JSON-RPC message; kept for the log, never acted on."""

    reason: str
    preview: str


Message = Request | Notification | Response | Invalid

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _loads(data: bytes | str) -> Any:
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError, ValueError):
        pass
    # msgspec refuses lone surrogate escapes and NaN that Node and Python agents may write;
    # the stdlib reads them, and strings are made encodable again before they reach a block.
    return json.loads(data)


def _preview(data: bytes | str) -> str:
    # Redact first: a secret cut by the preview would no longer be found by the log's masking.
    # (Far more than the preview is redacted, so a secret that straddles its end is whole.)
    text = data[:4096] if isinstance(data, str) else data[:4096].decode("utf-8", "replace")
    return clean(redact(text)[:200])


def _valid_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def decode(line: bytes | str) -> Message:
    """One line from the agent as a message; anything else is :class:`Invalid`."""
    data = line.strip()
    if not data:
        return Invalid("empty line", "")
    try:
        obj = _loads(data)
    except (ValueError, RecursionError, MemoryError) as exc:
        return Invalid(f"not JSON: {type(exc).__name__}", _preview(data))
    if not isinstance(obj, dict):
        return Invalid("not a JSON object", _preview(data))
    method = obj.get("method")
    rid = obj.get("id")
    if isinstance(method, str):
        if rid is None:
            return Notification(method, obj.get("params"))
        if not _valid_id(rid):
            return Invalid("request id is neither a number nor a string", _preview(data))
        return Request(rid, method, obj.get("params"))
    if "result" in obj or "error" in obj:
        if rid is not None and not _valid_id(rid):
            return Invalid("response id is neither a number nor a string", _preview(data))
        error = obj.get("error")
        if error is not None:
            return Response(rid, None, _rpc_error(error))
        return Response(rid, obj.get("result"))
    return Invalid("neither a request, a notification nor a response", _preview(data))


class JsonRpcLines:
    """A peer's stdout as JSON-RPC messages, one a line: what a ``Pump`` feeds."""

    def feed(self, line: bytes) -> list[Message]:
        return [decode(line)]


def _rpc_error(value: Any) -> RpcError:
    if not isinstance(value, dict):
        return RpcError(INTERNAL_ERROR, clean(str(value))[:500])
    code = value.get("code")
    message = value.get("message")
    return RpcError(
        code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
        clean(message)[:2000] if isinstance(message, str) else "error",
        plain(value.get("data")),
    )


# ---- messages out ------------------------------------------------------------------------------
# The builders return the message as a dict (Codex's app-server wants it without ``"jsonrpc"``,
# so its parser queues these in its outbox); the ``encode_*`` functions are the JSON-RPC 2.0
# lines ACP agents read.


def request(rid: RpcId, method: str, params: Any) -> dict[str, Any]:
    return {"id": rid, "method": method, "params": params}


def notification(method: str, params: Any = None) -> dict[str, Any]:
    return {"method": method} if params is None else {"method": method, "params": params}


def result(rid: RpcId, value: Any) -> dict[str, Any]:
    return {"id": rid, "result": value}


def error(rid: RpcId | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"id": rid, "error": body}


def encode(message: dict[str, Any], *, version: bool = True) -> bytes:
    """One message as a line's bytes, with ``"jsonrpc": "2.0"`` first unless ``version`` is off."""
    return _encoder.encode({"jsonrpc": "2.0", **message} if version else message)


def encode_request(rid: RpcId, method: str, params: Any) -> bytes:
    return encode({"id": rid, "method": method, "params": params})


def encode_notification(method: str, params: Any) -> bytes:
    return encode({"method": method, "params": params})


def encode_result(rid: RpcId, value: Any) -> bytes:
    return encode(result(rid, value))


def encode_error(rid: RpcId | None, code: int, message: str, data: Any = None) -> bytes:
    return encode(error(rid, code, message, data))
