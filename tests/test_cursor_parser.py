"""The Cursor parser on Cursor's stream-json samples (see tests/fixtures/cursor/SOURCE.md).

Covers the known quirk: with ``--stream-partial-output`` Cursor repeats a text segment's full
text after its deltas; the repeat must not double the text.
"""

from __future__ import annotations

import json

from bridge.blocks import (
    Block,
    DiffBlock,
    ErrorBlock,
    PlanBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.parsers.cursor import CursorParser
from tests.parserkit import (
    FIXTURES,
    of,
    run,
    text,
    well_formed,
)

CURSOR = FIXTURES / "cursor"


def replay(name: str) -> tuple[CursorParser, list[Block]]:
    """A fresh parser fed the sample ``name``, and the blocks it made."""
    parser = CursorParser()
    return parser, run(parser, CURSOR / name)


def assistant(text: str, stamp: int | None = None) -> str:
    event = {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "session_id": "s",
    }
    if stamp is not None:
        event["timestamp_ms"] = stamp
    return json.dumps(event)


def test_partial_stream_drops_the_full_text_repeat() -> None:
    parser, blocks = replay("partial_plain.stdout.jsonl")
    assert text(blocks) == "Hello! I can help with this project."  # once, not twice
    assert len([b for b in of(blocks, TextBlock) if b.text]) == 4
    assert text(blocks, ThinkingBlock) == "The user wants a greeting."
    assert parser.session_id == "c6b62c6f-7ead-4fd6-9922-e952131177ff"
    assert parser.usage.input_tokens == 5120 and parser.usage.output_tokens == 12
    assert parser.finished and not parser.failed
    well_formed(parser, blocks)


def test_partial_stream_with_a_shell_tool() -> None:
    parser, blocks = replay("partial_tool.stdout.jsonl")
    assert text(blocks) == "I'll run the command.The command printed hello-from-tool."
    texts = {b.id for b in of(blocks, TextBlock)}
    assert len(texts) == 2  # the text before and after the tool are two messages
    running, done = of(blocks, ToolCallBlock)
    assert running.name == "shell" and running.kind == "execute"
    assert running.title == "echo hello-from-tool" and done.status == "done"
    assert of(blocks, ToolResultBlock)[0].content == "hello-from-tool\n"
    well_formed(parser, blocks)


def test_write_tool_is_a_new_file_diff() -> None:
    parser, blocks = replay("partial_write.stdout.jsonl")
    diff = of(blocks, DiffBlock)[0]
    assert diff.path == "notes.txt" and diff.old_text is None
    assert diff.new_text == "hello from cursor\n"
    assert diff.tool_call_id == "toolu_vrtx_01WriteCallFixture00000"
    well_formed(parser, blocks)


def test_docs_example_without_partial_output() -> None:
    parser, blocks = replay("docs_example.stdout.jsonl")
    assert text(blocks) == (
        "I'll read the README.md file"
        "Based on the README, I'll create a summary"
        "Done! I've created the summary in summary.txt"
    )  # the result's concatenated text is not added again
    assert [c.name for c in of(blocks, ToolCallBlock)] == ["read", "read", "write", "write"]
    assert of(blocks, ToolResultBlock)[0].content.startswith("# Project")
    assert of(blocks, DiffBlock)[0].path == "summary.txt"
    well_formed(parser, blocks)


def test_paperclip_shell_tool_sample() -> None:
    parser, blocks = replay("paperclip_shell_tool.jsonl")
    result = of(blocks, ToolResultBlock)[0]
    assert not result.is_error and result.content == '{"id":"abc","status":"in_progress"}'
    well_formed(parser, blocks)


def test_a_longer_repeat_adds_only_its_missing_tail() -> None:
    parser = CursorParser()
    blocks = parser.feed(assistant("Hel", 1)) + parser.feed(assistant("lo", 2))
    blocks += parser.feed(assistant("Hello world"))  # the repeat, with more than was streamed
    assert text(blocks) == "Hello world"
    well_formed(parser, blocks)


def test_a_delta_that_starts_like_the_segment_is_still_a_delta() -> None:
    parser = CursorParser()
    blocks = parser.feed(assistant("The", 1)) + parser.feed(assistant("Then", 2))
    assert text(blocks) == "TheThen"


def test_errors_and_todos() -> None:
    parser = CursorParser()
    todo = {
        "type": "tool_call",
        "subtype": "started",
        "call_id": "t1",
        "tool_call": {
            "updateTodosToolCall": {
                "args": {
                    "todos": [
                        {"content": "Read", "status": "TODO_STATUS_COMPLETED"},
                        {"content": "Write", "status": "TODO_STATUS_IN_PROGRESS"},
                    ]
                }
            }
        },
    }
    blocks = parser.feed(json.dumps(todo))
    plan = of(blocks, PlanBlock)[0]
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Read", "completed"),
        ("Write", "in_progress"),
    ]
    failed = {
        "type": "tool_call",
        "subtype": "completed",
        "call_id": "t1",
        "tool_call": {"updateTodosToolCall": {"result": {"error": {"message": "no"}}}},
    }
    blocks += parser.feed(json.dumps(failed))
    assert of(blocks, ToolResultBlock)[0].is_error
    blocks += parser.feed('{"type":"error","message":"model access denied"}')
    assert parser.failed and of(blocks, ErrorBlock)[0].message == "model access denied"
    well_formed(parser, blocks)
