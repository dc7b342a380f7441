"""The Claude Code and Codex parsers on real captured output, and on garbage (property test).

Fixtures: ``tests/fixtures/captured/{claude,codex}`` and ``tests/fixtures/{claude,codex}`` (each
with a SOURCE.md saying how it was produced).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.blocks import (
    Block,
    DiffBlock,
    ErrorBlock,
    PermissionRequestBlock,
    PlanBlock,
    SessionEndBlock,
    SystemBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UsageBlock,
    is_block,
)
from bridge.parsers import apply_hunks, decode_object, parse_unified
from bridge.parsers.claude import ClaudeParser, is_unknown_session, user_message
from bridge.parsers.codex import CodexParser, display_command, fill_diff, parse_models
from tests.parserkit import (
    CAPTURED,
    FIXTURES,
    REAL,
    assert_well_formed,
    garbage_lines,
    lines_of,
    mutated,
    of,
    text,
)


def feed_all(parser: ClaudeParser, path: Path) -> list[Block]:
    out: list[Block] = []
    for line in lines_of(path):
        out.extend(parser.feed(line))
    return out


def turns(blocks: list[Block]) -> list[list[Block]]:
    """Blocks split after each session_end."""
    out: list[list[Block]] = [[]]
    for b in blocks:
        out[-1].append(b)
        if isinstance(b, SessionEndBlock):
            out.append([])
    return [t for t in out if t]


# ---- Claude Code ----------------------------------------------------------------------------


def test_claude_plain_two_turns_stream_thinking_and_text_with_running_usage() -> None:
    parser = ClaudeParser()
    first, second = turns(feed_all(parser, CAPTURED / "claude/plain.stdout.jsonl"))
    for turn in (first, second):
        assert_well_formed(turn)
    assert text(first, ThinkingBlock) == "The user greets me."
    assert text(first) == "Hello! I am the fake model."
    assert len([b for b in first if isinstance(b, TextBlock) and b.text]) == 3  # real deltas
    assert text(second) == "Second answer."
    u1, u2 = of(first, UsageBlock)[0], of(second, UsageBlock)[0]
    assert (u1.input_tokens, u1.output_tokens, u1.cost_usd) == (12, 5, 0.000111)
    assert (u2.input_tokens, u2.output_tokens, u2.cost_usd) == (24, 10, 0.000222)
    assert u2.context_size == 200000
    sid = "be620c71-dc72-4a6c-a02d-a193b723f27b"
    assert parser.session_id == sid
    assert [e.reason for e in of(first + second, SessionEndBlock)] == ["completed"] * 2
    assert all(e.agent_session_id == sid for e in of(first + second, SessionEndBlock))


def test_claude_tool_call_runs_then_finishes_with_its_result() -> None:
    (turn,) = turns(feed_all(ClaudeParser(), CAPTURED / "claude/tool.stdout.jsonl"))
    assert_well_formed(turn)
    running, done = of(turn, ToolCallBlock)
    assert running.status == "running" and done.status == "done" and running.id == done.id
    assert running.name == "Bash" and running.kind == "execute"
    assert running.input == {"command": "echo hello-from-tool", "description": "Print a greeting"}
    (result,) = of(turn, ToolResultBlock)
    assert result.tool_call_id == running.id and result.content == "hello-from-tool"
    assert not result.is_error
    assert text(turn) == "The command printed hello-from-tool."


@pytest.mark.parametrize(("scenario", "option"), [("allow", "allow"), ("deny", "deny")])
def test_claude_permission_request_and_the_answer_claude_accepted(
    scenario: str, option: str
) -> None:
    parser = ClaudeParser()
    out: list[Block] = []
    for line in lines_of(CAPTURED / f"claude/permission_{scenario}.stdout.jsonl"):
        out.extend(parser.feed(line))
        requests = of(out, PermissionRequestBlock)
        if requests and not parser.outbox:
            parser.answer_permission(requests[0].id, option)
    (request,) = of(out, PermissionRequestBlock)
    (call, final) = of(out, ToolCallBlock)
    assert request.tool_call_id == call.id
    assert [o.id for o in request.options] == ["allow", "always", "deny"]
    assert [o.kind for o in request.options] == ["allow_once", "allow_always", "reject_once"]
    assert "touch" in request.title
    # What we wrote is what the capture wrote to the real CLI (apart from the deny wording).
    sent = json.loads(lines_of(CAPTURED / f"claude/permission_{scenario}.stdin.jsonl")[1])
    (answer,) = parser.outbox
    if option == "deny":
        sent["response"]["response"]["message"] = answer["response"]["response"]["message"]
    assert answer == sent
    result = of(out, ToolResultBlock)[0]
    assert final.status == ("error" if option == "deny" else "done")
    assert result.is_error is (option == "deny")
    with pytest.raises(KeyError):
        parser.answer_permission(request.id, "allow")  # answered already


def test_claude_allow_always_sends_the_suggested_rules() -> None:
    parser = ClaudeParser()
    request_line = next(
        line
        for line in lines_of(CAPTURED / "claude/permission_allow.stdout.jsonl")
        if b'"control_request"' in line
    )
    (request,) = parser.feed(request_line)
    assert isinstance(request, PermissionRequestBlock)
    parser.answer_permission(request.id, "always")
    decision = parser.outbox[0]["response"]["response"]
    assert decision["behavior"] == "allow"
    assert (
        decision["updatedPermissions"]
        == json.loads(request_line)["request"]["permission_suggestions"]
    )


def test_claude_edit_and_write_become_whole_file_diffs() -> None:
    work = "/tmp/agent-bridge-capture/claude/edit/work"
    (turn,) = turns(feed_all(ClaudeParser(cwd=work), CAPTURED / "claude/edit.stdout.jsonl"))
    assert_well_formed(turn)
    edit, write = of(turn, DiffBlock)
    assert edit.path == f"{work}/notes.txt"
    assert (edit.old_text, edit.new_text) == ("hello\nworld\n", "hello\nthere\n")
    assert edit.unified is not None and edit.unified.startswith("--- a/notes.txt\n+++ b/notes.txt")
    assert apply_hunks(edit.old_text, parse_unified(edit.unified)) == edit.new_text
    assert write.path == f"{work}/new.txt"
    assert (write.old_text, write.new_text) == (None, "fresh file\n")
    assert write.unified is not None and write.unified.startswith("--- /dev/null")
    # each diff comes with its tool call, before the call is reported done
    for diff in (edit, write):
        idx = turn.index(diff)
        nxt = turn[idx + 1]
        assert isinstance(nxt, ToolCallBlock) and nxt.id == diff.tool_call_id
        assert nxt.status == "done"
    assert [r.title for r in of(turn, PermissionRequestBlock)] == [
        "Allow Edit: notes.txt?",
        "Allow Write: new.txt?",
    ]


def test_claude_interrupt_is_a_control_request_and_ends_the_turn_interrupted() -> None:
    parser = ClaudeParser()
    parser.interrupt()
    (request,) = parser.outbox
    assert request["type"] == "control_request"
    assert request["request"] == {"subtype": "interrupt"}
    (turn,) = turns(feed_all(parser, CAPTURED / "claude/interrupt.stdout.jsonl"))
    assert_well_formed(turn)
    assert text(turn) == "This is a long a"
    assert turn[-1] == SessionEndBlock(
        reason="interrupted", agent_session_id="f0375676-2f14-4fc5-906b-23c35d3ec042"
    )
    # Claude's own "aborted" marks it too, without our interrupt() (e.g. after a restart)
    (again,) = turns(feed_all(ClaudeParser(), CAPTURED / "claude/interrupt.stdout.jsonl"))
    assert isinstance(again[-1], SessionEndBlock) and again[-1].reason == "interrupted"


def test_claude_unknown_resume_sets_session_missing_and_yields_nothing() -> None:
    parser = ClaudeParser()
    assert feed_all(parser, CAPTURED / "claude/resume_unknown.stdout.jsonl") == []
    assert parser.session_missing
    stderr = (CAPTURED / "claude/resume_unknown.stderr.txt").read_text()
    assert is_unknown_session(stderr)
    assert not is_unknown_session("Error: rate limited, try again")


def test_claude_subagent_tools_carry_parent_id_and_its_prose_stays_inside() -> None:
    (turn,) = turns(feed_all(ClaudeParser(), FIXTURES / "claude/subagent.stdout.jsonl"))
    assert_well_formed(turn)
    agent = next(b for b in turn if isinstance(b, ToolCallBlock) and b.name == "Agent")
    inner = [b for b in turn if isinstance(b, ToolCallBlock) and b.name == "Bash"]
    assert inner and all(b.parent_id == agent.id for b in inner)
    inner_result = next(b for b in of(turn, ToolResultBlock) if b.tool_call_id == inner[0].id)
    assert inner_result.content == "from-sub" and inner_result.parent_id == agent.id
    assert text(turn) == "all done"


def test_claude_task_tools_and_todowrite_become_plans() -> None:
    (turn,) = turns(feed_all(ClaudeParser(), FIXTURES / "claude/tasks.stdout.jsonl"))
    assert_well_formed(turn)
    plans = [[(e.content, e.status) for e in p.entries] for p in of(turn, PlanBlock)]
    assert plans == [
        [("Edit notes", "pending")],
        [("Edit notes", "pending"), ("Report", "pending")],
        [("Edit notes", "in_progress"), ("Report", "pending")],
        [("Edit notes", "completed"), ("Report", "pending")],
    ]
    (todo_turn,) = turns(feed_all(ClaudeParser(), FIXTURES / "claude/todowrite.stdout.jsonl"))
    (plan,) = of(todo_turn, PlanBlock)
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Read code", "completed"),
        ("Fix bug", "in_progress"),
        ("Test", "pending"),
    ]


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("stream_json_basic_query_2.1.7.jsonl", "4"),
        ("stream_json_print_real_2.1.3.jsonl", ""),
    ],
)
def test_claude_reference_samples_without_partial_messages(name: str, answer: str) -> None:
    (turn,) = turns(feed_all(ClaudeParser(), FIXTURES / "claude" / name))
    assert_well_formed(turn)
    assert text(turn) == answer
    if answer:
        (whole,) = of(turn, TextBlock)
        assert whole.done and whole.text == answer  # one block, text and done together
    else:
        (result,) = of(turn, ToolResultBlock)
        assert result.content.startswith("total 1976")
    usage = of(turn, UsageBlock)[0]
    assert usage.cost_usd and usage.cost_usd > 0


def test_claude_error_result_and_api_retry() -> None:
    parser = ClaudeParser()
    plain = lines_of(CAPTURED / "claude/plain.stdout.jsonl")
    result = json.loads(next(x for x in plain if b'"type":"result"' in x))
    result.update(is_error=True, result="API Error: 529 overloaded", terminal_reason="error")
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 10,
        "error": "overloaded_error",
    }
    (warn,) = parser.feed(json.dumps(retry))
    assert isinstance(warn, SystemBlock) and warn.level == "warn" and "overloaded" in warn.text
    out = parser.feed(json.dumps(result))
    assert isinstance(out[0], ErrorBlock) and "529" in out[0].message
    assert isinstance(out[-1], SessionEndBlock) and out[-1].reason == "error"


def test_claude_unknown_control_requests_get_an_error_answer() -> None:
    parser = ClaudeParser()
    line = {"type": "control_request", "request_id": "r9", "request": {"subtype": "mcp_message"}}
    assert parser.feed(json.dumps(line)) == []
    (answer,) = parser.outbox
    assert answer["response"]["subtype"] == "error" and answer["response"]["request_id"] == "r9"


def test_claude_user_message_carries_images_documents_and_text() -> None:
    msg = user_message(
        "look",
        [
            ("a.png", "image/png", b"\x89PNG"),
            ("b.pdf", "application/pdf", b"%PDF"),
            ("c.txt", "text/plain", b"notes"),
        ],
    )
    content = msg["message"]["content"]
    assert [c["type"] for c in content] == ["image", "document", "text", "text"]
    assert content[0]["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}
    assert "notes" in content[2]["text"] and content[-1] == {"type": "text", "text": "look"}


# ---- Codex -----------------------------------------------------------------------------------


def codex_turns(path: Path, **kwargs: Any) -> tuple[list[list[Block]], list[CodexParser]]:
    """Feed a capture turn by turn: a fresh parser per turn, as the adapter does."""
    parsers: list[CodexParser] = []
    out: list[list[Block]] = []
    parser: CodexParser | None = None
    for line in lines_of(path):
        if parser is None or parser.done:
            parser = CodexParser(**kwargs)
            parser.start("x")
            parsers.append(parser)
            out.append([])
        out[-1].extend(parser.feed(line))
    return [t for t in out if t], parsers


def test_codex_requests_follow_the_answers() -> None:
    parser = CodexParser(
        cwd="/w", approval_policy="untrusted", sandbox="workspace-write", effort="high"
    )
    parser.start("Say hello.")
    assert [m["method"] for m in parser.outbox] == ["initialize"]
    parser.outbox.clear()
    parser.feed(json.dumps({"id": 1, "result": {"userAgent": "x"}}))
    assert parser.outbox == [
        {"method": "initialized"},
        {
            "id": 2,
            "method": "thread/start",
            "params": {"cwd": "/w", "approvalPolicy": "untrusted", "sandbox": "workspace-write"},
        },
    ]
    parser.outbox.clear()
    parser.feed(json.dumps({"id": 2, "result": {"thread": {"id": "T1"}}}))
    assert parser.thread_id == "T1"
    assert parser.outbox == [
        {
            "id": 3,
            "method": "turn/start",
            "params": {
                "threadId": "T1",
                "effort": "high",
                "input": [{"type": "text", "text": "Say hello.", "text_elements": []}],
            },
        },
    ]


def test_codex_captured_turns_text_usage_and_an_approved_command() -> None:
    (first, second), _ = codex_turns(CAPTURED / "codex/app_server.stdout.jsonl")
    assert_well_formed(first)
    assert text(first) == "Hello! I am the fake model."
    usage = of(first, UsageBlock)[0]
    assert (usage.input_tokens, usage.output_tokens, usage.context_size) == (12, 5, 258400)
    assert of(first, SessionEndBlock)[0].agent_session_id == "01a2367b-5a8e-75c2-a8a4-7a81bdec25bf"
    assert_well_formed(second)
    (request,) = of(second, PermissionRequestBlock)
    assert request.title == "Run `touch approved.txt`?"
    assert request.tool_call_id == "call_fake_0036"
    call = of(second, ToolCallBlock)[0]
    assert call.name == "shell" and call.input["command"] == "touch approved.txt"
    assert text(second) == "Created approved.txt."


def test_codex_approval_answer_is_what_codex_accepted() -> None:
    lines = lines_of(CAPTURED / "codex/app_server.stdout.jsonl")
    parser = CodexParser()
    approval = next(x for x in lines if b"requestApproval" in x)
    (request,) = parser.feed(approval)
    assert isinstance(request, PermissionRequestBlock)
    assert [o.id for o in request.options] == ["allow", "always", "deny"]
    parser.answer_permission(request.id, "allow")
    sent = [json.loads(x) for x in lines_of(CAPTURED / "codex/app_server.stdin.jsonl")]
    assert parser.outbox == [m for m in sent if m.get("result")]
    with pytest.raises(KeyError):
        parser.answer_permission(request.id, "allow")


def test_codex_plan_patch_and_command_output() -> None:
    work = "/tmp/agent-bridge-capture/codex-extra/app_server_plan_patch/work"
    (turn,), _ = codex_turns(FIXTURES / "codex/app_server_plan_patch.stdout.jsonl", cwd=work)
    assert_well_formed(turn)
    assert text(turn, ThinkingBlock) == "Plan first."
    (plan,) = of(turn, PlanBlock)
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Edit notes", "in_progress"),
        ("Report", "pending"),
    ]
    added, updated = of(turn, DiffBlock)
    assert added.path == f"{work}/new.txt" and added.old_text is None
    assert added.new_text == "fresh file\n"
    assert updated.path == f"{work}/notes.txt"
    assert updated.unified is not None and "-world\n+there" in updated.unified
    whole = fill_diff(updated, "hello\nthere\n")  # what the adapter reads back from disk
    assert (whole.old_text, whole.new_text) == ("hello\nworld\n", "hello\nthere\n")
    patch_request, command_request = of(turn, PermissionRequestBlock)
    assert patch_request.title == "Apply changes to new.txt, notes.txt?"
    assert command_request.title == "Run `cat notes.txt`?"
    cat = next(
        r for r in of(turn, ToolResultBlock) if r.tool_call_id == command_request.tool_call_id
    )
    assert cat.content == "hello\nthere\n" and not cat.is_error
    assert text(turn) == "Edited notes.txt and added new.txt."


def test_codex_declined_interrupted_and_failed_turns() -> None:
    path = FIXTURES / "codex/app_server_decline_interrupt_error.stdout.jsonl"
    (declined, interrupted, failed), _ = codex_turns(path)
    for turn in (declined, interrupted, failed):
        assert_well_formed(turn)
    (call_done,) = [b for b in of(declined, ToolCallBlock) if b.status != "running"]
    assert call_done.status == "error" and of(declined, ToolResultBlock)[0].is_error
    assert text(declined) == "I did not create it."
    assert isinstance(interrupted[-1], SessionEndBlock)
    assert interrupted[-1].reason == "interrupted"
    assert text(interrupted).startswith("a long answer")
    (error,) = of(failed, ErrorBlock)
    assert error.message == "the fake model refuses"
    assert isinstance(failed[-1], SessionEndBlock) and failed[-1].reason == "error"


def test_codex_interrupt_waits_for_the_turn_id() -> None:
    parser = CodexParser()
    parser.start("x")
    parser.interrupt()
    for answer in ({"id": 1, "result": {}}, {"id": 2, "result": {"thread": {"id": "T"}}}):
        parser.feed(json.dumps(answer))
    assert not any(m.get("method") == "turn/interrupt" for m in parser.outbox)
    parser.feed(json.dumps({"id": 3, "result": {"turn": {"id": "U"}}}))
    assert parser.outbox[-1]["method"] == "turn/interrupt"
    assert parser.outbox[-1]["params"] == {"threadId": "T", "turnId": "U"}


def test_codex_unknown_thread_resets_once_to_a_new_thread() -> None:
    captured = next(
        json.loads(x)
        for x in lines_of(FIXTURES / "codex/app_server_decline_interrupt_error.stdout.jsonl")
        if b"no rollout found" in x
    )
    parser = CodexParser()
    parser.start("x", resume="00000000-0000-4000-8000-000000000000")
    parser.feed(json.dumps({"id": 1, "result": {}}))
    assert parser.outbox[-1]["method"] == "thread/resume"
    (reset,) = parser.feed(json.dumps({**captured, "id": 2}))
    assert isinstance(reset, SystemBlock) and (reset.level, reset.code) == ("warn", "session_reset")
    assert parser.outbox[-1]["method"] == "thread/start"
    # a second refusal is an error, not another reset
    again = CodexParser()
    again.start("x", resume="gone")
    again.feed(json.dumps({"id": 1, "result": {}}))
    again.feed(json.dumps({**captured, "id": 2}))
    again.feed(json.dumps({"id": 3, "error": {"code": -1, "message": "disk full"}}))
    assert again.done


def test_codex_other_server_requests_are_refused_and_other_formats_ignored() -> None:
    parser = CodexParser()
    ask = {"id": 7, "method": "item/tool/requestUserInput", "params": {"itemId": "i"}}
    assert parser.feed(json.dumps(ask)) == []
    assert parser.outbox[0]["id"] == 7 and parser.outbox[0]["error"]["code"] == -32601
    exec_lines = lines_of(FIXTURES / "codex/exec_json_docs_sample.jsonl")
    assert [b for x in exec_lines for b in parser.feed(x)] == []


def test_codex_helpers() -> None:
    assert display_command("/bin/bash -lc 'ls -a'") == "ls -a"
    # what bash -lc runs once the outer quotes are gone
    assert display_command("/bin/bash -lc \"printf 'a\\\\n' > x\"") == "printf 'a\\n' > x"
    assert display_command("git status") == "git status"
    result = {
        "data": [
            {"id": "gpt-5.5", "displayName": "GPT-5.5", "hidden": False},
            {"id": "secret", "hidden": True},
            {"nope": 1},
            "junk",
        ]
    }
    assert parse_models(result) == [("gpt-5.5", "GPT-5.5")]


# ---- garbage in, no exception out (property test) --------------------------------------------


def _poke(parser: ClaudeParser | CodexParser, blocks: list[Block]) -> None:
    """Drive the parser's other entry points the way an adapter would."""
    for b in blocks:
        assert is_block(b), b
        if isinstance(b, PermissionRequestBlock):
            for option in ("allow", "always", "deny", "bogus"):
                with contextlib.suppress(KeyError):
                    parser.answer_permission(b.id, option)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(garbage_lines | mutated(REAL), max_size=25))
def test_claude_parser_survives_garbage(lines: list[bytes]) -> None:
    parser = ClaudeParser(cwd="/tmp")
    for line in lines:
        _poke(parser, parser.feed(line))
    parser.interrupt()
    parser.new_process()
    assert all(is_block(b) for b in parser.close_turn("error", 1))
    usage = parser.usage()
    assert usage is None or is_block(usage)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(garbage_lines | mutated(REAL), max_size=25), st.booleans())
def test_codex_parser_survives_garbage(lines: list[bytes], resume: bool) -> None:
    parser = CodexParser(cwd="/tmp")
    parser.start("x", resume="old" if resume else None)
    for line in lines:
        _poke(parser, parser.feed(line))
        if parser.done:
            parser = CodexParser(cwd="/tmp")
            parser.start("x")
    parser.interrupt()
    for block in parser.close_turn("error", 1):
        assert is_block(block)
    for diff in (DiffBlock(path="/x", unified=line.decode("utf-8", "replace")) for line in lines):
        assert is_block(fill_diff(diff, "a\nb\n"))


WRONG = [None, True, -1, 1.5, "x", "", [], {}, [{}], {"type": "text"}]
REMOVED = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _mutations(obj: dict[str, Any]) -> list[bytes]:
    """Every real line with one value removed or replaced by a value of another shape."""
    out: list[bytes] = []
    for path in _paths(obj):
        for wrong in [REMOVED, *WRONG]:
            copy = json.loads(json.dumps(obj))
            node = copy
            for key in path[:-1]:
                node = node[key]
            if wrong is REMOVED:
                if not isinstance(node, dict):
                    continue
                del node[path[-1]]
            else:
                node[path[-1]] = wrong
            out.append(json.dumps(copy).encode())
    return out


def _shape(obj: dict[str, Any]) -> str:
    """Lines of the same shape exercise the same code; mutate one of each."""
    event = obj.get("event") if isinstance(obj.get("event"), dict) else {}
    params = obj.get("params") if isinstance(obj.get("params"), dict) else {}
    item = params.get("item") if isinstance(params.get("item"), dict) else {}
    content = (
        (obj.get("message") or {}).get("content") if isinstance(obj.get("message"), dict) else None
    )
    first = (
        content[0].get("type")
        if isinstance(content, list) and content and isinstance(content[0], dict)
        else None
    )
    parts = [
        obj.get("type"),
        obj.get("subtype"),
        event.get("type"),
        str(event.get("delta", {}))[:30],
        obj.get("method"),
        item.get("type"),
        item.get("status"),
        first,
        "id" in obj,
        "tool_use_result" in obj,
    ]
    return json.dumps(parts, default=str)


def _stateful_files(folder_globs: list[Path]) -> list[Path]:
    return [p for pattern in folder_globs for p in sorted(pattern.parent.glob(pattern.name))]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_parser_survives_every_single_point_mutation_of_real_lines(agent: str) -> None:
    """Replay each real capture; at each new line shape, feed every one-value mutation of it
    to a copy of the parser in the state the real line found it (wrong types, missing keys)."""
    import copy

    files = _stateful_files([CAPTURED / agent / "*.stdout.jsonl", FIXTURES / agent / "*.jsonl"])
    seen: set[str] = set()
    fed = 0

    def fresh() -> ClaudeParser | CodexParser:
        if agent == "claude":
            return ClaudeParser(cwd="/tmp")
        parser = CodexParser(cwd="/tmp")
        parser.start("x")
        return parser

    for path in files:
        parser = fresh()
        for line in lines_of(path):
            obj = decode_object(line)
            if obj is not None and _shape(obj) not in seen:
                seen.add(_shape(obj))
                for mutated in _mutations(obj):
                    probe = copy.deepcopy(parser)
                    _poke(probe, probe.feed(mutated))
                    fed += 1
            parser.feed(line)
            if isinstance(parser, CodexParser) and parser.done:
                parser = fresh()
    assert fed > 1000
