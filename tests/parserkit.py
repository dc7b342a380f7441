"""What the parser tests share: fixtures, well-formedness, and garbage for property tests.

Every parser is sans-I/O (lines in, blocks out), so every one is tested the same way: on real
captured output (``tests/fixtures/captured``, each folder with a SOURCE.md), and on garbage —
random bytes, random JSON, and real lines with one value replaced, removed or wrapped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st

from bridge.blocks import (
    Block,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.parsers import decode_object

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURED = FIXTURES / "captured"


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def text(blocks: list[Block], kind: type[TextBlock] | type[ThinkingBlock] = TextBlock) -> str:
    return "".join(b.text for b in blocks if isinstance(b, kind))


def of(blocks: list[Block], kind: type[Any]) -> list[Any]:
    return [b for b in blocks if isinstance(b, kind)]


def assert_well_formed(blocks: list[Block]) -> None:
    """Deltas close once, tool calls go running -> done/error -> result, one session_end last."""
    open_ids: set[str] = set()
    state: dict[str, str] = {}
    for b in blocks:
        if isinstance(b, TextBlock | ThinkingBlock):
            if b.done:
                assert b.id in open_ids or b.text, f"{b.id} closed without deltas"
                open_ids.discard(b.id)
            else:
                open_ids.add(b.id)
        elif isinstance(b, ToolCallBlock):
            if b.status == "running":
                assert b.id not in state
                state[b.id] = "running"
            else:
                assert state.get(b.id) == "running", f"{b.id} finished without starting"
                state[b.id] = "final"
        elif isinstance(b, ToolResultBlock):
            assert state.get(b.tool_call_id) == "final", "result before the call finished"
            state[b.tool_call_id] = "result"
    assert not open_ids, f"unclosed deltas {open_ids}"
    assert all(v == "result" for v in state.values()), state
    ends = of(blocks, SessionEndBlock)
    assert len(ends) == 1 and blocks[-1] is ends[0]


class Parser(Protocol):
    def feed(self, line: bytes | str) -> list[Block]: ...

    def close_open(self) -> list[Block]: ...


def run(parser: Parser, path: Path) -> list[Block]:
    out: list[Block] = []
    for line in lines_of(path):
        out.extend(parser.feed(line))
    return out


def well_formed(parser: Parser, blocks: list[Block]) -> None:
    """The parser's blocks plus what an adapter adds at the end form a valid turn."""
    assert_well_formed([*blocks, *parser.close_open(), SessionEndBlock()])


def samples(*paths: Path) -> list[Any]:
    return [obj for p in paths for x in lines_of(p) if (obj := decode_object(x)) is not None]


def mutated(real: Sequence[Any]) -> st.SearchStrategy[bytes]:
    """A real line with one value somewhere replaced, removed or wrapped in a list."""

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        obj = json.loads(json.dumps(draw(st.sampled_from(list(real)))))
        node: Any = obj
        for _ in range(draw(st.integers(0, 6))):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, dict | list) and child and draw(st.booleans()):
                node = child
                continue
            action = draw(st.sampled_from(["replace", "remove", "wrap"]))
            if action == "remove" and isinstance(node, dict):
                del node[key]
            elif action == "wrap":
                node[key] = [child]
            else:
                node[key] = draw(json_values)
            break
        return json.dumps(obj).encode()

    return build()


# ---- garbage ----------------------------------------------------------------------------------

KEYS = [
    "type",
    "subtype",
    "message",
    "content",
    "event",
    "delta",
    "index",
    "id",
    "name",
    "input",
    "tool_use_id",
    "is_error",
    "result",
    "usage",
    "session_id",
    "parent_tool_use_id",
    "request_id",
    "request",
    "response",
    "tool_use_result",
    "structuredPatch",
    "originalFile",
    "method",
    "params",
    "item",
    "itemId",
    "threadId",
    "turn",
    "status",
    "changes",
    "kind",
    "diff",
    "path",
    "plan",
    "tokenUsage",
    "error",
    "errors",
    "text",
    "thinking",
    "todos",
    "task",
    "taskId",
    "availableDecisions",
    "summaryIndex",
    "aggregatedOutput",
    "exitCode",
]
TYPES = [
    "system",
    "assistant",
    "user",
    "result",
    "stream_event",
    "control_request",
    "control_cancel_request",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "text_delta",
    "thinking_delta",
    "tool_use",
    "tool_result",
    "text",
    "init",
    "api_retry",
    "commandExecution",
    "fileChange",
    "agentMessage",
    "reasoning",
    "mcpToolCall",
    "webSearch",
    "Edit",
    "Write",
    "TodoWrite",
    "TaskCreate",
    "TaskUpdate",
]
METHODS = [
    "item/started",
    "item/completed",
    "item/agentMessage/delta",
    "turn/completed",
    "turn/started",
    "turn/plan/updated",
    "thread/tokenUsage/updated",
    "error",
    "item/reasoning/summaryTextDelta",
    "item/commandExecution/outputDelta",
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=30)
    | st.sampled_from(TYPES + METHODS + ["can_use_tool", "Bash", "0"])
)


def json_trees(
    leaves: st.SearchStrategy[Any], keys: Sequence[str], *, width: int, max_leaves: int
) -> st.SearchStrategy[Any]:
    """JSON values grown from ``leaves``: lists, and objects of up to ``width`` members keyed by
    ``keys`` (the names a parser looks for) or by short random text."""
    return st.recursive(
        leaves,
        lambda kids: (
            st.lists(kids, max_size=4)
            | st.dictionaries(
                st.sampled_from(list(keys)) | st.text(max_size=width), kids, max_size=width
            )
        ),
        max_leaves=max_leaves,
    )


json_values = json_trees(scalars, KEYS, width=6, max_leaves=25)


def _real_objects() -> list[Any]:
    out = []
    for folder in (
        CAPTURED / "claude",
        CAPTURED / "codex",
        FIXTURES / "claude",
        FIXTURES / "codex",
    ):
        for path in sorted(folder.glob("*.jsonl")):
            out.extend(obj for x in lines_of(path) if (obj := decode_object(x)) is not None)
    return out


REAL = _real_objects()


garbage_lines = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    mutated(REAL),
    st.builds(
        lambda v, b: json.dumps(v).encode()[:-1] + b + b"}", json_values, st.binary(max_size=4)
    ),
    st.integers(1, 3).map(lambda n: b"{" + b'"text":"' + b"\xff" * (n * 100_000) + b'"}'),
    st.integers(2_000, 60_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(2_000, 60_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from(
        [b"", b"\n", b"null", b"[]", b'"str"', b"{", b"\x00\x00", "é".encode("latin-1")]
    ),
)
