"""The Droid parser on real ``droid exec -o stream-json`` output, and on garbage.

Fixtures: ``tests/fixtures/captured/droid`` (droid 0.225.2 against the fake model server, see
SOURCE.md). ``EDIT_RESULT`` is one more line of the same kind, captured while writing this
adapter (an ``Edit`` of notes.txt, "world" -> "there").
"""

from __future__ import annotations

from bridge.blocks import DiffBlock, ErrorBlock, TextBlock, ThinkingBlock, ToolCallBlock
from bridge.blocks import ToolResultBlock as Result
from bridge.parsers import apply_hunks, parse_unified
from bridge.parsers.droid import DroidParser
from tests.parserkit import (
    FIXTURES,
    of,
    run,
    text,
    well_formed,
)

DROID = FIXTURES / "captured" / "droid"
EDIT_CALL = (
    '{"type":"tool_call","id":"call_fake_0002","messageId":"ea783abc","toolId":"Edit",'
    '"toolName":"Edit","parameters":{"file_path":"/w/notes.txt","old_str":"world",'
    '"new_str":"there"},"timestamp":1796212455241,"session_id":"119922f6"}'
)
EDIT_RESULT = (
    '{"type":"tool_result","id":"call_fake_0002","messageId":"46d34fcc","toolId":"Edit",'
    '"isError":false,"value":"{\\"success\\":true,\\"file_path\\":\\"/w/notes.txt\\",'
    '\\"diffLines\\":[{\\"type\\":\\"unchanged\\",\\"content\\":\\"hello\\",\\"lineNumber\\":'
    '{\\"old\\":1,\\"new\\":1}},{\\"type\\":\\"removed\\",\\"content\\":\\"world\\",'
    '\\"lineNumber\\":{\\"old\\":2}},{\\"type\\":\\"added\\",\\"content\\":\\"there\\",'
    '\\"lineNumber\\":{\\"new\\":2}}],\\"linesAdded\\":1,\\"linesRemoved\\":1}",'
    '"timestamp":1796212455321,"session_id":"119922f6"}'
)


def test_plain_answer_whole_message_with_reasoning_printed_twice_shown_once() -> None:
    parser = DroidParser()
    blocks = run(parser, DROID / "plain.stdout.jsonl")
    assert parser.session_id == "5e0c0cd2-343a-4bc8-adbc-f87462227cda"
    assert text(blocks) == "Hello! I am the fake model."
    assert text(blocks, ThinkingBlock) == "Greeting."  # the recording has it twice
    assert parser.usage.input_tokens == 12 and parser.usage.cost_usd is None  # no cost field
    assert parser.finished and not parser.failed
    well_formed(parser, blocks)


def test_tool_call_then_its_result() -> None:
    parser = DroidParser()
    blocks = run(parser, DROID / "tool.stdout.jsonl")
    running, done = of(blocks, ToolCallBlock)
    assert (running.status, done.status) == ("running", "done")
    assert running.name == "Execute" and running.input["command"] == "echo hello-from-tool"
    assert running.kind == "execute" and running.title == "Print a greeting"
    assert of(blocks, Result)[0].content.startswith("hello-from-tool")
    well_formed(parser, blocks)


def test_create_is_a_new_file_diff() -> None:
    parser = DroidParser()
    blocks = run(parser, DROID / "edit.stdout.jsonl")
    diff = of(blocks, DiffBlock)[0]
    assert diff.path.endswith("/notes.txt") and diff.old_text is None
    assert diff.new_text == "hello\n" and diff.unified.startswith("--- /dev/null")
    well_formed(parser, blocks)


def test_edit_result_diff_lines_become_a_unified_diff() -> None:
    parser = DroidParser()
    blocks = parser.feed(EDIT_CALL) + parser.feed(EDIT_RESULT)
    diff = of(blocks, DiffBlock)[0]
    assert (diff.old_text, diff.new_text) == ("world", "there")
    assert diff.unified is not None
    assert apply_hunks("hello\nworld\n", parse_unified(diff.unified)) == "hello\nthere\n"
    well_formed(parser, blocks)


def test_refused_command_fails_the_tool_and_the_turn() -> None:
    parser = DroidParser()
    blocks = run(parser, DROID / "tool_denied.stdout.jsonl")
    assert [c.status for c in of(blocks, ToolCallBlock)] == ["running", "error"]
    result = of(blocks, Result)[0]
    assert result.is_error and "insufficient permission" in result.content
    assert parser.failed and "insufficient permission" in of(blocks, ErrorBlock)[0].message
    well_formed(parser, blocks)


def test_resume_without_login_prints_nothing() -> None:
    parser = DroidParser()
    assert run(parser, DROID / "resume_unknown.stdout.jsonl") == []
    assert not parser.saw_output


def test_text_ids_differ_between_runs() -> None:
    a, b = DroidParser(), DroidParser()
    first = of(run(a, DROID / "plain.stdout.jsonl"), TextBlock)[0].id
    second = of(run(b, DROID / "plain.stdout.jsonl"), TextBlock)[0].id
    assert first != second  # each turn's messages stay apart in a client
