"""Hostile input, property-based: the frame decoder and the stream guard never break.

``decode_request`` takes whatever a client sends (bytes, broken UTF-8, deep nesting, huge
numbers, wrong types) and either returns a request or raises ``ProtocolError`` with a spec
error code; nothing else escapes. ``TurnGuard`` takes any sequence of blocks an adapter might
yield and its output always satisfies the spec's stream invariants.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.blocks import (
    Block,
    ErrorBlock,
    PermissionOption,
    PermissionRequestBlock,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UsageBlock,
)
from bridge.invariants import TurnGuard
from bridge.wire.protocol import ERROR_CODES, METHODS, ProtocolError, decode_request

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decodes_safely(data: bytes | str, msgpack: bool) -> None:
    try:
        decode_request(data, msgpack)
    except ProtocolError as exc:
        assert exc.code in ERROR_CODES
        assert exc.request_id is None or isinstance(exc.request_id, int | str)
        assert not isinstance(exc.request_id, bool)
        assert str(exc)


# ---- the frame decoder -------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "id",
        "t",
        "session",
        "text",
        "agent",
        "cwd",
        "after_seq",
        "attachments",
        "protocol",
        "token",
        "client",
        "include_external",
        "request_id",
        "option_id",
        "client_msg_id",
        "name",
        "mime",
        "data",
    ]
)
frames = st.dictionaries(field_names, json_values, max_size=8).flatmap(
    lambda d: (
        st.sampled_from([*sorted(METHODS), "nope", "", "hello "]).map(lambda t: {**d, "t": t})
        | st.just(d)
    )
)


@SETTINGS
@given(st.binary(max_size=2000), st.booleans())
def test_arbitrary_bytes(data: bytes, msgpack: bool) -> None:
    _decodes_safely(data, msgpack)


@SETTINGS
@given(st.text(max_size=500), st.booleans())
def test_arbitrary_text_including_lone_surrogates(text: str, msgpack: bool) -> None:
    _decodes_safely(text, msgpack)


@SETTINGS
@given(frames, st.booleans())
def test_request_shaped_frames_with_wrong_types(frame: dict[str, Any], msgpack: bool) -> None:
    data = msgspec.msgpack.encode(frame) if msgpack else json.dumps(frame).encode()
    try:
        decode_request(data, msgpack)
    except ProtocolError as exc:
        assert exc.code in ERROR_CODES
        rid = frame.get("id")
        if isinstance(rid, int | str) and not isinstance(rid, bool) and exc.request_id is not None:
            assert exc.request_id == rid
        method = frame.get("t")
        if isinstance(method, str) and method not in METHODS:
            assert exc.code == "unknown_method"
    else:
        assert frame["t"] in METHODS


@SETTINGS
@given(st.sampled_from(["[", '{"a":', "\x91", "\x81\xa1a"]), st.integers(1, 200_000))
def test_deep_nesting(opener: str, depth: int) -> None:
    raw = opener * depth
    _decodes_safely(raw.encode("latin-1"), msgpack=opener[0] > "~")
    _decodes_safely(raw.encode("latin-1"), msgpack=False)


@SETTINGS
@given(st.sampled_from(["id", "after_seq", "protocol"]), st.integers(1, 5000))
def test_huge_numbers_and_strings(field: str, digits: int) -> None:
    data = b'{"t":"session.subscribe","session":"s","%s":%s}' % (field.encode(), b"9" * digits)
    _decodes_safely(data, msgpack=False)
    big = b'{"t":"ping","id":"' + b"x" * (digits * 100) + b'"}'
    assert decode_request(big, msgpack=False).id == "x" * (digits * 100)


def test_broken_utf8_and_bad_escapes_are_bad_request() -> None:
    for data in (b'{"t":"ping","id":"\xff"}', b'{"t":"ping","id":"\\ud800"}', b"\xef\xbb\xbf{}"):
        try:
            decode_request(data, msgpack=False)
        except ProtocolError as exc:
            assert exc.code == "bad_request"


def test_decoding_memory_is_bounded_by_the_input() -> None:
    # A frame can only cost memory in proportion to its own size (it is capped at the socket).
    tracemalloc.start()
    try:
        for opener in ("[", '{"a":'):
            _decodes_safely((opener * 1_000_000).encode(), msgpack=False)
        _decodes_safely(b"\xdd\xff\xff\xff\xff" * 1000, msgpack=True)  # claims 4 G items
        _decodes_safely(b"\xdb\xff\xff\xff\xff", msgpack=True)  # claims a 4 GB string
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, peak


# ---- the stream guard -------------------------------------------------------------------------

ids = st.sampled_from(["a", "b", "c"])
maybe_parent = st.none() | st.sampled_from(["p1", "a"])
blocks: st.SearchStrategy[Block] = st.one_of(
    st.builds(TextBlock, id=ids, text=st.text(max_size=5), done=st.booleans()),
    st.builds(ThinkingBlock, id=ids, text=st.text(max_size=5), done=st.booleans()),
    st.builds(
        ToolCallBlock,
        id=ids,
        name=st.sampled_from(["bash", "edit"]),
        status=st.sampled_from(["running", "done", "error"]),
        parent_id=maybe_parent,
    ),
    st.builds(
        ToolResultBlock,
        tool_call_id=ids,
        content=st.text(max_size=5),
        is_error=st.booleans(),
        parent_id=maybe_parent,
    ),
    st.builds(
        PermissionRequestBlock,
        id=ids,
        tool_call_id=st.none() | ids,
        options=st.just([PermissionOption(id="ok", label="OK", kind="allow_once")]),
    ),
    st.builds(UsageBlock, input_tokens=st.none() | st.integers(0, 10)),
    st.builds(ErrorBlock, code=st.just("x"), message=st.text(max_size=5)),
    st.builds(
        SessionEndBlock,
        reason=st.sampled_from(["completed", "interrupted", "error", "timeout", "handoff"]),
        agent_session_id=st.none() | st.just("agent-sid"),
    ),
)


def check_invariants(out: list[Block], agent_sid: str | None) -> None:
    ends = [i for i, b in enumerate(out) if isinstance(b, SessionEndBlock)]
    assert len(ends) == 1 and ends[0] == len(out) - 1, "exactly one session_end, last"
    end = out[-1]
    assert isinstance(end, SessionEndBlock)
    if agent_sid is not None:
        assert end.agent_session_id is not None
    started: set[str] = set()
    final: set[str] = set()
    results: set[str] = set()
    open_deltas: dict[tuple[str, str], bool] = {}
    for b in out:
        if isinstance(b, ToolCallBlock):
            if b.status == "running":
                started.add(b.id)
            else:
                assert b.id in started, f"tool call {b.id} finished before it started"
                final.add(b.id)
        elif isinstance(b, ToolResultBlock):
            assert b.tool_call_id in started, f"result for unannounced {b.tool_call_id}"
            results.add(b.tool_call_id)
        elif isinstance(b, TextBlock | ThinkingBlock):
            key = (type(b).__name__, b.id)
            open_deltas[key] = not b.done
    assert started <= results, f"tool calls without a result: {started - results}"
    assert started <= final, f"tool calls never finished: {started - final}"
    assert not any(open_deltas.values()), f"deltas left open: {open_deltas}"


@SETTINGS
@given(
    st.lists(blocks, max_size=40),
    st.none() | st.just("agent-sid"),
    st.sampled_from(["completed", "interrupted", "error", "timeout"]),
    st.booleans(),
)
def test_guard_output_always_keeps_the_invariants(
    stream: list[Block], agent_sid: str | None, reason: Any, silent: bool
) -> None:
    guard = TurnGuard(agent_sid)
    out: list[Block] = []
    for block in stream:
        out += guard.feed(block)
    out += guard.finish(reason, silent=silent)
    check_invariants(out, agent_sid)
    # Nothing after the end, and the guard holds nothing once the turn is over.
    assert guard.feed(TextBlock(id="late", text="x")) == []
    assert guard.finish("error") == []
    assert not guard.pending_permissions


def test_guard_state_is_released_after_each_turn() -> None:
    # A runaway adapter that opens a million deltas and tool calls in one turn: the guard
    # keeps one entry per open id, and finish() releases all of it.
    tracemalloc.start()
    try:
        guard = TurnGuard()
        for i in range(20_000):
            guard.feed(TextBlock(id=f"t{i}", text="x"))
            guard.feed(ToolCallBlock(id=f"c{i}", name="bash"))
        repairs = guard.finish("error")
        assert len(repairs) == 20_000 * 3 + 1
        del repairs
        before, _ = tracemalloc.get_traced_memory()
        for turn in range(50):
            guard = TurnGuard()
            for i in range(1000):
                guard.feed(TextBlock(id=f"{turn}-{i}", text="x" * 100))
            guard.finish("completed")
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 1024 * 1024, after - before
