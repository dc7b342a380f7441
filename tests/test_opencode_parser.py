"""The OpenCode/Kilo server-event parser on real SSE captures, and on garbage.

Fixtures: ``tests/fixtures/opencode_serve`` (``opencode serve`` 1.18.33 and ``kilo serve`` 7.7.7
against the fake model server; see SOURCE.md). Kilo is an OpenCode fork with the same events,
so every scenario runs for both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.blocks import (
    Block,
    DiffBlock,
    ErrorBlock,
    PermissionRequestBlock,
    PlanBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.parsers import apply_hunks, parse_unified
from bridge.parsers.opencode import OpenCodeParser, sse_data
from tests.parserkit import (
    FIXTURES,
    of,
    text,
    well_formed,
)

SERVE = FIXTURES / "opencode_serve"
CLIS = ["opencode", "kilo"]


def session_of(path: Path) -> str:
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "session.created":
            return str(event["properties"]["info"]["id"])
    raise AssertionError(f"no session.created in {path}")


def replay(cli: str, scenario: str) -> tuple[OpenCodeParser, list[Block]]:
    path = SERVE / f"{cli}_{scenario}.jsonl"
    parser = OpenCodeParser(session_of(path))
    blocks: list[Block] = []
    for line in path.read_text().splitlines():
        blocks += parser.feed(line)
    return parser, blocks


@pytest.mark.parametrize("cli", CLIS)
def test_plain_streams_reasoning_and_text_deltas_and_ends_at_idle(cli: str) -> None:
    parser, blocks = replay(cli, "plain")
    assert text(blocks) == "Hello! I am the fake model."
    assert text(blocks, ThinkingBlock) == "Greeting."
    assert len([b for b in of(blocks, TextBlock) if b.text]) == 3  # deltas, not one block
    assert "Say hello." not in text(blocks)  # the user's own prompt is not echoed
    assert parser.turn_done and not parser.failed and not parser.aborted
    assert parser.turn_usage.input_tokens == 12 and parser.turn_usage.cost_usd == 0.0
    assert parser.session_usage is not None and parser.session_usage.output_tokens == 5
    well_formed(parser, blocks)


@pytest.mark.parametrize("cli", CLIS)
def test_tool_runs_then_completes_with_its_output(cli: str) -> None:
    parser, blocks = replay(cli, "tool")
    running, done = of(blocks, ToolCallBlock)
    assert (running.status, done.status) == ("running", "done")
    assert running.name == "bash" and running.input["command"] == "echo hello-from-tool"
    assert of(blocks, ToolResultBlock)[0].content == "hello-from-tool\n"
    assert text(blocks) == "The command printed hello-from-tool."
    assert parser.turn_usage.input_tokens == 24  # two model calls summed
    well_formed(parser, blocks)


@pytest.mark.parametrize("cli", CLIS)
def test_edit_carries_the_unified_diff_and_write_a_new_file(cli: str) -> None:
    _, blocks = replay(cli, "edit")
    edit, write = of(blocks, DiffBlock)
    assert edit.path.endswith("/notes.txt") and edit.unified is not None
    assert apply_hunks("hello\nworld\n", parse_unified(edit.unified)) == "hello\nthere\n"
    assert (edit.old_text, edit.new_text) == ("world", "there")
    assert write.path.endswith("/new.txt") and write.old_text is None
    assert write.new_text == "fresh file\n"
    assert {edit.tool_call_id, write.tool_call_id} <= {c.id for c in of(blocks, ToolCallBlock)}


@pytest.mark.parametrize("cli", CLIS)
def test_todos_become_a_plan(cli: str) -> None:
    _, blocks = replay(cli, "todo")
    plan = of(blocks, PlanBlock)[-1]
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Read the code", "completed"),
        ("Fix the bug", "in_progress"),
        ("Run the tests", "pending"),
    ]


@pytest.mark.parametrize("cli", CLIS)
def test_permission_request_points_at_its_tool_call(cli: str) -> None:
    parser, blocks = replay(cli, "permission")
    request = of(blocks, PermissionRequestBlock)[0]
    call = of(blocks, ToolCallBlock)[0]
    assert request.id.startswith("per_") and request.tool_call_id == call.id
    assert "touch allowed.txt" in request.title
    assert [(o.id, o.kind) for o in request.options] == [
        ("once", "allow_once"),
        ("always", "allow_always"),
        ("reject", "reject_once"),
    ]
    assert blocks.index(call) < blocks.index(request)
    well_formed(parser, blocks)


@pytest.mark.parametrize("cli", CLIS)
def test_model_error_fails_the_turn(cli: str) -> None:
    parser, blocks = replay(cli, "error")
    assert parser.turn_done and parser.failed
    error = of(blocks, ErrorBlock)[0]
    assert "bad request from the fake" in error.message and error.detail == "APIError"


@pytest.mark.parametrize("cli", CLIS)
def test_abort_ends_the_turn_as_aborted_not_failed(cli: str) -> None:
    parser, blocks = replay(cli, "abort")
    assert parser.turn_done and parser.aborted and not parser.failed
    assert not of(blocks, ErrorBlock)
    well_formed(parser, blocks)


def test_an_idle_before_the_session_was_busy_does_not_end_the_turn() -> None:
    parser = OpenCodeParser("ses_1")
    parser.feed_event({"type": "session.idle", "properties": {"sessionID": "ses_1"}})
    assert not parser.turn_done
    parser.feed_event(
        {"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}}
    )
    parser.feed_event({"type": "session.idle", "properties": {"sessionID": "ses_1"}})
    assert parser.turn_done


def test_events_of_other_sessions_are_ignored() -> None:
    path = SERVE / "opencode_plain.jsonl"
    parser = OpenCodeParser("ses_someone_else")
    blocks = [b for line in path.read_text().splitlines() for b in parser.feed(line)]
    assert blocks == [] and not parser.turn_done


def test_sse_data_lines() -> None:
    assert sse_data(b'data: {"type":"x","properties":{}}') == {"type": "x", "properties": {}}
    assert sse_data(": keepalive") is None and sse_data("event: message") is None
