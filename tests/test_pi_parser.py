"""The Pi parser on real ``pi --mode json`` / ``--mode rpc`` output, and on garbage.

Fixtures: ``tests/fixtures/captured/pi`` (pi 0.73.1 against the fake model server, see SOURCE.md).
"""

from __future__ import annotations

import json

from bridge.blocks import (
    DiffBlock,
    ErrorBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.parsers import apply_hunks, parse_unified
from bridge.parsers.pi import PiParser, pi_diff_to_unified
from tests.parserkit import (
    FIXTURES,
    of,
    run,
    text,
    well_formed,
)

PI = FIXTURES / "captured" / "pi"


# ---- real output -------------------------------------------------------------------------------


def test_plain_answer_streams_thinking_and_text_deltas_with_usage_and_the_session_id() -> None:
    parser = PiParser()
    blocks = run(parser, PI / "json_plain.stdout.jsonl")
    assert parser.session_id == "01a2367d-c044-730f-b390-fa975a329bf4"
    assert text(blocks) == "Hello! I am the fake model."
    assert text(blocks, ThinkingBlock) == "Greeting."
    assert len([b for b in of(blocks, TextBlock) if b.text]) == 3  # real deltas, not one block
    assert parser.usage.input_tokens == 12 and parser.usage.output_tokens == 5
    assert parser.usage.cost_usd == 0.0  # pi reports a cost (0 for the fake model)
    assert parser.finished and not parser.failed
    well_formed(parser, blocks)


def test_tool_call_runs_then_finishes_with_its_output() -> None:
    parser = PiParser()
    blocks = run(parser, PI / "json_tool.stdout.jsonl")
    call = of(blocks, ToolCallBlock)
    assert [c.status for c in call] == ["running", "done"]
    assert call[0].name == "bash" and call[0].input == {"command": "echo hello-from-tool"}
    assert call[0].kind == "execute" and call[0].title == "echo hello-from-tool"
    result = of(blocks, ToolResultBlock)[0]
    assert result.tool_call_id == call[0].id and result.content == "hello-from-tool\n"
    assert text(blocks).endswith("hello-from-tool.")
    well_formed(parser, blocks)


def test_edit_and_write_become_diffs_with_a_unified_diff() -> None:
    parser = PiParser()
    blocks = run(parser, PI / "json_edit.stdout.jsonl")
    edit, write = of(blocks, DiffBlock)
    assert edit.path.endswith("/notes.txt") and (edit.old_text, edit.new_text) == ("world", "there")
    assert edit.unified is not None
    assert apply_hunks("hello\nworld\n", parse_unified(edit.unified)) == "hello\nthere\n"
    assert write.path.endswith("/new.txt") and write.old_text is None
    assert write.new_text == "fresh file\n" and write.unified.startswith("--- /dev/null")
    calls = {c.id: c for c in of(blocks, ToolCallBlock)}
    assert edit.tool_call_id in calls and write.tool_call_id in calls
    well_formed(parser, blocks)


def test_rpc_mode_events_parse_like_json_mode() -> None:
    parser = PiParser()
    blocks = run(parser, PI / "rpc.stdout.jsonl")
    assert text(blocks) == "Hello! I am the fake model.The command printed hello-from-tool."
    assert [c.status for c in of(blocks, ToolCallBlock)] == ["running", "done"]
    assert parser.session_id is None  # rpc mode prints no session header


def test_unknown_session_prints_nothing() -> None:
    parser = PiParser()
    assert run(parser, PI / "resume_unknown.stdout.jsonl") == []
    assert not parser.saw_output
    assert "No session found matching" in (PI / "resume_unknown.stderr.txt").read_text()


def test_a_failed_model_call_is_an_error_block() -> None:
    parser = PiParser()
    line = json.dumps(
        {
            "type": "message_end",
            "message": {
                "role": "assistant",
                "content": [],
                "usage": {"input": 3, "output": 0, "cost": {"total": 0.002}},
                "stopReason": "error",
                "errorMessage": "400 bad request",
            },
        }
    )
    # Held back until the run ends: Pi may still retry the call itself (auto_retry_start).
    blocks = parser.feed(line)
    assert of(blocks, ErrorBlock) == []
    blocks += parser.close_open()
    error = of(blocks, ErrorBlock)[0]
    assert (error.message, error.code, error.retryable) == (
        "400 bad request",
        "request_rejected",
        False,
    )
    assert parser.failed and parser.usage.cost_usd == 0.002


def test_pi_numbered_diff_with_two_hunks_becomes_an_applicable_unified_diff() -> None:
    # The shape pi's generateDiffString prints: context lines carry old numbers, "+" lines new
    # ones, and a " ..." line separates hunks.
    old = "".join(f"line {i}\n" for i in range(1, 21))
    new = old.replace("line 3\n", "line 3\nadded\n").replace("line 17\n", "")
    numbered = "\n".join(
        [
            "  1 line 1",
            "  2 line 2",
            "  3 line 3",
            "+ 4 added",
            "  4 line 4",
            "  5 line 5",
            "    ...",
            " 15 line 15",
            " 16 line 16",
            "-17 line 17",
            " 18 line 18",
        ]
    )
    unified = pi_diff_to_unified("f.txt", numbered)
    assert unified is not None and unified.count("@@ ") == 2
    assert apply_hunks(old, parse_unified(unified)) == new
    assert apply_hunks(new, parse_unified(unified), reverse=True) == old
    assert pi_diff_to_unified("f.txt", "not a diff") is None
