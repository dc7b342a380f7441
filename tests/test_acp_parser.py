"""The sans-I/O ACP codec and update mapper on real captured transcripts and on garbage.

Transcripts: tests/fixtures/captured/<cli>/acp_* (Gemini, Qwen, Hermes, OpenCode, Kilo) and
tests/fixtures/acp/ (the protocol's own examples, a Gemini --debug capture). Each is replayed
the way the adapter dispatches messages: ``session/update`` → ``update()``, permission
requests → ``permission()`` answered "allow once", the ``session/prompt`` answer →
``end_turn()``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.adapters.gemini import GeminiAdapter
from bridge.adapters.hermes import HermesAdapter
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    Command,
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
    block_to_json,
)
from bridge.invariants import CONTRACT, TurnGuard
from bridge.parsers.acp import UpdateMapper
from bridge.parsers.diff import unified_diff
from bridge.parsers.jsonrpc import (
    Invalid,
    Notification,
    Request,
    Response,
    decode,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
)
from tests.parserkit import CAPTURED, FIXTURES, json_trees

ACP = FIXTURES / "acp"


def info(commands: list[Command]) -> AgentInfoBlock:
    return AgentInfoBlock(agent="t", name="t", commands=commands)


class Replay:
    """Feeds agent lines to a mapper as the adapter would; collects blocks per turn."""

    def __init__(
        self, *, preprocess: Any = None, prompt_ids: set[Any] | None = None, **mapper: Any
    ) -> None:
        self.mapper = UpdateMapper(prefix="t", agent_info=info, **mapper)
        self.preprocess = preprocess
        self.prompt_ids = prompt_ids
        self.turns: list[list[Block]] = []
        self.current: list[Block] = []
        self.requests: list[Request] = []
        self.invalid: list[Invalid] = []

    def feed(self, line: bytes | str) -> None:
        msg = decode(line)
        if isinstance(msg, Invalid):
            self.invalid.append(msg)
        elif isinstance(msg, Response):
            result = msg.result if isinstance(msg.result, dict) else {}
            is_prompt = (
                msg.id in self.prompt_ids if self.prompt_ids is not None else "stopReason" in result
            )
            if is_prompt:
                if msg.error is not None:
                    self.current += self.mapper.fail_turn("agent_error", msg.error.describe())
                else:
                    self.current += self.mapper.end_turn(msg.result)
                self.turns.append(self.current)
                self.current = []
            elif isinstance(result.get("sessionId"), str):
                self.mapper.session_id = result["sessionId"]
        elif isinstance(msg, Notification) and msg.method == "session/update":
            params = msg.params
            if self.preprocess is not None and isinstance(params, dict):
                update = params.get("update")
                if isinstance(update, dict):
                    params = {**params, "update": self.preprocess(update)}
            self.current += self.mapper.update(params)
        elif isinstance(msg, Request):
            self.requests.append(msg)
            if msg.method == "session/request_permission":
                key = f"perm-{msg.id}"
                blocks = self.mapper.permission(key, msg.params)
                self.current += blocks
                asks = [b for b in blocks if isinstance(b, PermissionRequestBlock)]
                kind = (
                    next((o.kind for o in asks[0].options if o.kind == "allow_once"), None)
                    if asks
                    else None
                )
                self.current += self.mapper.answered(key, kind)

    def finish(self, result: Any = None) -> list[list[Block]]:
        if self.current or result is not None:
            self.current += self.mapper.end_turn(result)
            self.turns.append(self.current)
            self.current = []
        return self.turns


def replay_file(path: Path, **kw: Any) -> Replay:
    stdin = path.with_name(path.name.replace(".stdout.", ".stdin."))
    prompt_ids = None
    if stdin.exists():
        sent = [json.loads(x) for x in stdin.read_text().splitlines() if x.strip()]
        prompt_ids = {m["id"] for m in sent if m.get("method") == "session/prompt"}
    r = Replay(prompt_ids=prompt_ids, **kw)
    for line in path.read_bytes().splitlines():
        r.feed(line)
    return r


def check_invariants(blocks: list[Block]) -> None:
    guard = TurnGuard()
    for block in blocks:
        block_to_json(block)
        for out in guard.feed(block):
            assert not (isinstance(out, ErrorBlock) and out.code == CONTRACT), (out, blocks)
    ends = [b for b in blocks if isinstance(b, SessionEndBlock)]
    assert len(ends) == 1 and blocks[-1] is ends[0]


def of(blocks: list[Block], kind: type[Any]) -> list[Any]:
    return [b for b in blocks if isinstance(b, kind)]


def text_of(blocks: list[Block], kind: type[TextBlock | ThinkingBlock] = TextBlock) -> str:
    return "".join(b.text for b in blocks if isinstance(b, kind))


TRANSCRIPTS = [
    p for p in sorted(CAPTURED.glob("*/acp_*.stdout.jsonl")) if "load_unknown" not in p.name
] + [ACP / "gemini_debug.stdout.jsonl"]


# ---- codec --------------------------------------------------------------------------------------


def test_decode_kinds() -> None:
    assert decode(b'{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{"p":1}}') == (
        Request(3, "fs/read_text_file", {"p": 1})
    )
    assert decode('{"jsonrpc":"2.0","method":"session/update","params":[]}') == Notification(
        "session/update", []
    )
    assert decode(b'{"id":"a","result":null}') == Response("a", None, None)
    err = decode(
        b'{"id":2,"error":{"code":-32002,"message":"Resource not found","data":{"uri":1}}}'
    )
    assert isinstance(err, Response) and err.error is not None
    assert (err.error.code, err.error.message) == (-32002, "Resource not found")
    assert "uri" in err.error.describe()
    for bad in (
        b"",
        b"   ",
        b"not json",
        b"[1,2]",
        b"42",
        b'{"id":true,"method":"x"}',
        b'{"hello":"world"}',
        b"\xff\xfe{",
        b'{"id":{},"result":1}',
    ):
        assert isinstance(decode(bad), Invalid), bad


def test_decode_survives_deep_huge_and_broken_lines() -> None:
    assert isinstance(decode(b"[" * 200_000 + b"]" * 200_000), Invalid)
    assert isinstance(decode(b'{"a":"' + b"x" * 5_000_000), Invalid)
    # a lone surrogate escape (Node writes them) still decodes, and becomes encodable text
    line = (
        b'{"method":"session/update","params":{"update":{"sessionUpdate":"agent_message_chunk",'
        b'"content":{"type":"text","text":"a\\ud800b"}}}}'
    )
    msg = decode(line)
    assert isinstance(msg, Notification)
    blocks = UpdateMapper().update(msg.params)
    assert blocks and block_to_json(blocks[0])


def test_encoders_make_one_line_json_rpc() -> None:
    for line in (
        encode_request(1, "session/prompt", {"prompt": [{"type": "text", "text": "a\nb"}]}),
        encode_notification("session/cancel", {"sessionId": "s"}),
        encode_result(0, {"outcome": {"outcome": "cancelled"}}),
        encode_error(7, -32601, "Method not found: x"),
    ):
        assert b"\n" not in line
        obj = json.loads(line)
        assert obj["jsonrpc"] == "2.0"
        assert isinstance(decode(line), Request | Notification | Response)
    assert json.loads(encode_error(7, -32601, "m"))["error"] == {"code": -32601, "message": "m"}


# ---- real transcripts ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_captured_turn_keeps_the_invariants(path: Path) -> None:
    r = replay_file(path)
    turns = r.finish() if r.current else r.turns
    assert turns, "no turn in the transcript"
    for blocks in turns:
        check_invariants(blocks)
    assert not r.invalid


def test_gemini_plain_answer_and_quota_usage() -> None:
    (turn,) = replay_file(CAPTURED / "gemini" / "acp_plain.stdout.jsonl").turns
    assert text_of(turn) == "Hello! I am the fake model."
    assert len({b.id for b in of(turn, TextBlock)}) == 1
    (usage,) = of(turn, UsageBlock)
    assert (usage.input_tokens, usage.output_tokens) == (12, 5)
    commands = of(turn, AgentInfoBlock)[0].commands
    assert any(c.name == "/memory" for c in commands)
    assert turn[-1] == SessionEndBlock(
        reason="completed", agent_session_id="360fb56b-05e3-46da-936d-bf5ed6afa5e2"
    )


def test_gemini_permission_announces_the_tool_call_it_asks_about() -> None:
    (turn,) = replay_file(CAPTURED / "gemini" / "acp_permission.stdout.jsonl").turns
    calls = of(turn, ToolCallBlock)
    (ask,) = of(turn, PermissionRequestBlock)
    assert turn.index(calls[0]) < turn.index(ask)
    assert ask.tool_call_id == calls[0].id == "run_shell_command__call_fake_0010"
    assert ask.title == "touch allowed.txt"
    assert [(o.id, o.kind) for o in ask.options] == [
        ("proceed_always", "allow_always"),
        ("proceed_once", "allow_once"),
        ("cancel", "reject_once"),
    ]
    assert [c.status for c in calls] == ["running", "done"] and calls[0].kind == "execute"
    assert of(turn, ToolResultBlock)[0].tool_call_id == calls[0].id
    assert text_of(turn) == "Created allowed.txt."


def test_gemini_debug_capture_through_the_gemini_quirks() -> None:
    gemini = GeminiAdapter(cwd="/tmp")
    think, tool, edit = replay_file(
        ACP / "gemini_debug.stdout.jsonl", preprocess=gemini.preprocess_update
    ).turns
    # thoughts lose Gemini's empty "****" subject line
    assert text_of(think, ThinkingBlock) == "Thinking about it"
    assert text_of(think) == "Let me look."
    # --debug makes Gemini report the shell output; the tool name comes from the call id
    call = of(tool, ToolCallBlock)[-1]
    assert (call.name, call.status, call.title) == (
        "run_shell_command",
        "done",
        "echo hello-from-tool",
    )
    assert "hello-from-tool" in of(tool, ToolResultBlock)[0].content
    # the edit: a diff from the permission request, then "[MODE_UPDATE] autoEdit" as a mode
    (diff,) = of(edit, DiffBlock)
    assert diff.path.endswith("/notes.txt") and diff.new_text == "hello\n"
    assert diff.tool_call_id == of(edit, ToolCallBlock)[0].id
    assert [b.data for b in of(edit, SystemBlock) if b.code == "mode"] == [{"mode": "autoEdit"}]
    assert "MODE_UPDATE" not in text_of(edit) and text_of(edit) == "Wrote notes.txt."


def test_qwen_tool_usage_from_meta_and_unknown_requests() -> None:
    r = replay_file(CAPTURED / "qwen" / "acp_tool.stdout.jsonl")
    plain, tool = r.turns
    assert text_of(plain) == "Hello! I am the fake model."
    calls = of(tool, ToolCallBlock)
    assert calls[0].name == "run_shell_command" and calls[0].input == {}
    assert calls[-1].input == {"command": "echo hello-from-tool"} and calls[-1].status == "done"
    assert "Output: hello-from-tool" in of(tool, ToolResultBlock)[0].content
    # usage: each model call's tokens in an empty chunk's _meta, summed per turn and session
    assert of(plain, UsageBlock)[-1].input_tokens == 12
    assert (of(tool, UsageBlock)[-1].input_tokens, of(tool, UsageBlock)[-1].output_tokens) == (
        36,
        15,
    )
    # Qwen's own request, which the adapter answers "method not found"
    assert [q.method for q in r.requests] == ["craft/drainMidTurnQueue"]
    assert "" not in [b.text for b in of(tool, TextBlock) if not b.done]


def test_qwen_permission_options() -> None:
    (turn,) = replay_file(CAPTURED / "qwen" / "acp_permission.stdout.jsonl").turns
    (ask,) = of(turn, PermissionRequestBlock)
    assert [o.kind for o in ask.options] == [
        "allow_always",
        "allow_always",
        "allow_once",
        "reject_once",
    ]
    assert ask.tool_call_id == "call_fake_0016"
    assert of(turn, ToolCallBlock)[-1].status == "done"


def test_hermes_tool_context_usage_and_cumulative_tokens() -> None:
    hermes = HermesAdapter(cwd="/tmp")
    r = replay_file(
        CAPTURED / "hermes" / "acp_tool.stdout.jsonl",
        preprocess=hermes.preprocess_update,
        cumulative_usage=True,
    )
    plain, tool = r.turns
    first, second = of(plain, UsageBlock)[-1], of(tool, UsageBlock)[-1]
    assert (first.context_used, first.context_size) == (10373, 256000)
    assert second.context_used == 10552
    # Hermes reports 12 then 36 (the session so far): the session total is 36, not 48
    assert (first.input_tokens, second.input_tokens) == (12, 36)
    call = of(tool, ToolCallBlock)[-1]
    assert (call.name, call.kind, call.status) == ("terminal", "execute", "done")
    assert "hello-from-tool" in of(tool, ToolResultBlock)[0].content
    # the text after the tool is a new message
    ids = [b.id for b in of(tool, TextBlock)]
    assert len(set(ids)) == 1 and text_of(tool).strip() == "The command printed hello-from-tool."


def test_hermes_edit_approval_carries_the_diff_and_ends_when_answered() -> None:
    hermes = HermesAdapter(cwd="/tmp")
    (turn,) = replay_file(
        CAPTURED / "hermes" / "acp_permission.stdout.jsonl",
        preprocess=hermes.preprocess_update,
        approval_only=hermes.approval_only,
    ).turns
    (diff,) = of(turn, DiffBlock)
    assert diff.path.endswith("/notes.txt") and diff.old_text is None and diff.new_text == "hello\n"
    assert diff.unified is not None and "+hello" in diff.unified
    (ask,) = of(turn, PermissionRequestBlock)
    assert ask.tool_call_id == diff.tool_call_id == "edit-approval-1"
    approval = [b for b in of(turn, ToolCallBlock) if b.id == "edit-approval-1"]
    assert [b.status for b in approval] == ["running", "done"]
    # it ended right after the answer, before the agent's closing words
    assert turn.index(approval[-1]) < turn.index(of(turn, TextBlock)[0])


def test_opencode_and_kilo_updates_do_not_repeat_unchanged_calls() -> None:
    (tool,) = replay_file(CAPTURED / "opencode" / "acp_tool.stdout.jsonl").turns
    calls = of(tool, ToolCallBlock)
    assert [c.status for c in calls] == ["running", "running", "done"]
    assert calls[1].input["command"] == "echo hello-from-tool"
    assert of(tool, ToolResultBlock)[0].content == "hello-from-tool\n"
    (kilo,) = replay_file(CAPTURED / "kilo" / "acp_permission.stdout.jsonl").turns
    calls = of(kilo, ToolCallBlock)
    # Kilo repeats identical in_progress updates (6 of them); only changes are passed on
    assert len(calls) < 6 and calls[-1].status == "done"
    for before, after in itertools.pairwise(calls):
        assert (before.title, before.input) != (after.title, after.input) or after.status == "done"
    assert of(kilo, ToolResultBlock)[0].content == "(no output)"


def test_protocol_examples() -> None:
    r = replay_file(ACP / "docs_v1_session_envelopes.jsonl")
    turn = r.turns[0]
    (plan,) = of(turn, PlanBlock)
    assert [(e.status, e.priority) for e in plan.entries][:2] == [
        ("pending", "high"),
        ("pending", "medium"),
    ]
    usage = of(turn, UsageBlock)[-1]
    assert (usage.cost_usd, usage.context_used, usage.context_size) == (0.045, 53000, 200000)
    assert usage.input_tokens is None  # the example reports no tokens
    call = of(turn, ToolCallBlock)
    assert [c.status for c in call] == ["running", "done"]
    assert of(turn, ToolResultBlock)[0].content.startswith("Analysis complete")
    assert of(turn, PermissionRequestBlock)[0].tool_call_id == "call_001"
    modes = Replay()
    for line in (ACP / "docs_v1_commands_modes_fs_envelopes.jsonl").read_bytes().splitlines():
        modes.feed(line)
    blocks = modes.finish({"stopReason": "end_turn"})[0]
    assert [c.name for c in of(blocks, AgentInfoBlock)[0].commands] == ["/web", "/test", "/plan"]
    assert [b.data for b in of(blocks, SystemBlock) if b.code == "mode"] == [{"mode": "code"}]
    check_invariants(blocks)


def test_golden_payloads() -> None:
    def golden(name: str) -> Any:
        return json.loads((ACP / f"golden_{name}.jsonl").read_text())

    m = UpdateMapper()
    thought = m.update({"update": golden("session_update_agent_thought_chunk")})
    assert text_of(thought, ThinkingBlock) == "Thinking about best approach..."
    assert m.update({"update": golden("session_update_user_message_chunk")}) == []
    edit = m.update({"update": golden("session_update_tool_call_edit")})
    assert of(edit, ToolCallBlock)[0].input == {
        "path": "/home/user/project/src/config.json",
        "content": "print('hello')",
    }
    done = m.update(
        {
            "update": {
                **golden("session_update_tool_call_update_more_fields"),
                "toolCallId": "call_003",
            }
        }
    )
    assert of(done, ToolResultBlock)[0].content == "Edit completed."
    assert of(done, ToolCallBlock)[-1].title == "Processing changes"
    diff = {
        "sessionUpdate": "tool_call",
        "toolCallId": "d",
        "status": "completed",
        "content": [
            golden("tool_content_diff"),
            golden("tool_content_diff_no_old"),
            golden("tool_content_terminal"),
        ],
    }
    blocks = m.update({"update": diff})
    old, new = of(blocks, DiffBlock)
    assert old.old_text == '{\n  "debug": false\n}' and new.old_text is None
    assert of(blocks, ToolResultBlock)[0].content == "[terminal term_001]"
    ask = m.permission("p", golden("request_permission_request"))
    assert of(ask, PermissionRequestBlock)[0].tool_call_id == "call_001"


# ---- mapper rules -------------------------------------------------------------------------------


def upd(update_kind: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": "s", "update": {"sessionUpdate": update_kind, **fields}}


def chunk(text: str, kind: str = "agent_message_chunk", **extra: Any) -> dict[str, Any]:
    return upd(kind, content={"type": "text", "text": text}, **extra)


def test_a_tool_call_closes_open_text_and_later_text_is_a_new_message() -> None:
    m = UpdateMapper(session_id="s")
    out = m.update(chunk("before"))
    out += m.update(upd("tool_call", toolCallId="c", title="t", status="pending"))
    out += m.update(chunk("after"))
    out += m.end_turn({"stopReason": "end_turn"})
    check_invariants(out)
    texts = of(out, TextBlock)
    assert texts[0].id != texts[-1].id and texts[1].done
    # the tool never finished: done when the turn completed normally
    assert of(out, ToolCallBlock)[-1].status == "done"


def test_messages_split_on_message_id_and_other_sessions_are_ignored() -> None:
    m = UpdateMapper(session_id="s")
    out = m.update(chunk("a", messageId="m1")) + m.update(chunk("b", messageId="m2"))
    out += m.update({"sessionId": "other", "update": chunk("x")["update"]})
    assert [(b.text, b.done) for b in of(out, TextBlock)] == [
        ("a", False),
        ("", True),
        ("b", False),
    ]


def test_repeated_tool_call_ids_stay_unique() -> None:
    m = UpdateMapper()
    out: list[Block] = []
    for _ in range(2):
        out += m.update(upd("tool_call", toolCallId="edit-1", status="completed"))
        out += m.update(upd("tool_call_update", toolCallId="edit-1", status="failed"))  # late
    ids = [c.id for c in of(out, ToolCallBlock)]
    assert ids == ["edit-1", "edit-1", "edit-1~2", "edit-1~2"]
    assert [c.status for c in of(out, ToolCallBlock)] == ["running", "done", "running", "done"]


def test_interrupted_and_failed_turns_close_everything() -> None:
    m = UpdateMapper()
    out = m.update(chunk("thinking", "agent_thought_chunk")) + m.update(
        upd("tool_call", toolCallId="c", status="in_progress")
    )
    out += m.end_turn({"stopReason": "cancelled"})
    check_invariants(out)
    assert out[-1] == SessionEndBlock(reason="interrupted")
    assert of(out, ToolCallBlock)[-1].status == "error"
    m.update(upd("tool_call", toolCallId="d", status="pending"))
    failed = m.fail_turn("agent_exited", "gone", "stderr tail", exit_code=-9)
    assert failed[-1] == SessionEndBlock(reason="error", exit_code=-9)
    assert of(failed, ErrorBlock)[0] == ErrorBlock(
        code="agent_exited", message="gone", detail="stderr tail"
    )
    assert of(failed, ToolResultBlock)[0].is_error


def test_declined_permission_ends_the_call_as_an_error() -> None:
    m = UpdateMapper()
    ask = m.permission(
        "p",
        {
            "toolCall": {"toolCallId": "c", "title": "rm"},
            "options": [{"optionId": "no", "name": "Deny", "kind": "reject_once"}],
        },
    )
    assert of(ask, PermissionRequestBlock)[0].options[0].kind == "reject_once"
    m.answered("p", "reject_once")
    out = ask + m.end_turn({"stopReason": "end_turn"})
    check_invariants(out)
    assert of(out, ToolCallBlock)[-1].status == "error"
    assert "declined" in of(out, ToolResultBlock)[0].content


def test_declined_approval_question_ends_the_call_it_stood_for() -> None:
    # Hermes: "write: <path>" never reports its end; the approval carries the same path
    m = UpdateMapper(approval_only=lambda i: i.startswith("edit-approval-"))
    out: list[Block] = []
    for call_id, verb, kind, path in (
        ("tc-1", "write", "edit", "/w/a.txt"),
        ("tc-2", "read", "read", "/w/b.txt"),
    ):
        out += m.update(
            upd(
                "tool_call",
                toolCallId=call_id,
                title=f"{verb}: {path}",
                kind=kind,
                locations=[{"path": path}],
            )
        )
    out += m.permission(
        "p",
        {
            "toolCall": {
                "toolCallId": "edit-approval-1",
                "kind": "edit",
                "content": [{"type": "diff", "path": "/w/a.txt", "newText": "x"}],
            },
            "options": [{"optionId": "deny", "name": "Deny", "kind": "reject_once"}],
        },
    )
    out += m.answered("p", "reject_once")
    finished = [b for b in of(out, ToolCallBlock) if b.status != "running"]
    assert [(b.id, b.status) for b in finished] == [("tc-1", "error"), ("edit-approval-1", "error")]
    out += m.end_turn({"stopReason": "end_turn"})
    check_invariants(out)
    assert [b.status for b in of(out, ToolCallBlock) if b.id == "tc-2"][-1] == "done"


def test_permission_without_usable_options_asks_nothing() -> None:
    m = UpdateMapper()
    assert not of(m.permission("p", {"options": [{"name": "x"}, 5, None]}), PermissionRequestBlock)
    guessed = m.permission(
        "q",
        {
            "options": [
                {"optionId": "deny-always", "name": "Never"},
                {"optionId": "ok", "kind": "bogus"},
            ]
        },
    )
    assert [o.kind for o in of(guessed, PermissionRequestBlock)[0].options] == [
        "reject_always",
        "allow_once",
    ]


def test_unified_diff() -> None:
    assert (
        unified_diff("/a/b.txt", None, "x\n") == "--- /dev/null\n+++ b/a/b.txt\n@@ -0,0 +1 @@\n+x\n"
    )
    assert unified_diff("f", "same\n", "same\n") is None
    assert unified_diff("f", "a", "b" * 100_000) is None  # too big to diff cheaply
    assert unified_diff("f", "a", "b").endswith("+b\n")  # type: ignore[union-attr]


# ---- garbage ------------------------------------------------------------------------------------

KINDS = [
    "agent_message_chunk",
    "agent_thought_chunk",
    "user_message_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "usage_update",
    "config_option_update",
    "session_info_update",
    "bogus",
]
FIELDS = [
    "content",
    "text",
    "type",
    "messageId",
    "toolCallId",
    "title",
    "kind",
    "status",
    "rawInput",
    "rawOutput",
    "locations",
    "entries",
    "availableCommands",
    "currentModeId",
    "modeId",
    "used",
    "size",
    "cost",
    "_meta",
    "path",
    "oldText",
    "newText",
    "name",
    "description",
    "priority",
    "usage",
    "inputTokens",
    "outputTokens",
    "amount",
    "currency",
    "terminalId",
    "toolName",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(
        [
            "completed",
            "failed",
            "in_progress",
            "pending",
            "text",
            "diff",
            "content",
            "terminal",
            "allow_once",
            "reject_always",
            "USD",
            "s",
            "c1",
            "c2",
        ]
    )
)
json_values = json_trees(scalars, FIELDS, width=5, max_leaves=12)
texts = st.text(max_size=12) | st.sampled_from(["a\ud800b", "", "x" * 50])
statuses = st.sampled_from(["pending", "in_progress", "completed", "failed"]) | json_values
content_items = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("diff"), "path": texts | json_values, "newText": texts | json_values},
            optional={"oldText": texts | json_values},
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("content"),
                "content": st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "resource", "image"]), "text": texts}
                ),
            }
        ),
        json_values,
    ),
    max_size=3,
)
call_ids = st.sampled_from(["c1", "c2", "c3"]) | json_values
updates = st.builds(
    lambda kind, call, status, content, extra: {
        "sessionUpdate": kind,
        "toolCallId": call,
        "status": status,
        "content": content,
        **extra,
    },
    st.sampled_from(KINDS),
    call_ids,
    statuses,
    content_items | st.fixed_dictionaries({"type": st.just("text"), "text": texts}) | json_values,
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
)
options = st.lists(
    st.fixed_dictionaries(
        {"optionId": texts | json_values},
        optional={"name": texts, "kind": st.sampled_from(["allow_once", "reject_always", "x"])},
    )
    | json_values,
    max_size=4,
)
permissions = st.fixed_dictionaries(
    {},
    optional={
        "toolCall": st.fixed_dictionaries(
            {"toolCallId": call_ids}, optional={"status": statuses, "content": content_items}
        )
        | json_values,
        "options": options | json_values,
    },
)
messages = st.one_of(
    st.builds(
        lambda u: {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "s", "update": u},
        },
        updates,
    ),
    st.builds(
        lambda p, i: {
            "jsonrpc": "2.0",
            "id": i,
            "method": "session/request_permission",
            "params": p,
        },
        permissions | json_values,
        st.integers(0, 5),
    ),
    st.builds(lambda m, p: {"method": m, "params": p}, st.text(max_size=10), json_values),
    json_values,
)


def _dumps(obj: Any) -> bytes:
    try:
        return json.dumps(obj).encode()  # NaN, big ints and lone surrogates included
    except (ValueError, TypeError):
        return b"{}"


lines = st.one_of(messages.map(_dumps), st.binary(max_size=200))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, max_size=30), json_values, st.booleans())
def test_garbage_never_raises_nor_breaks_the_stream(
    feed: list[bytes], result: Any, dies: bool
) -> None:
    r = Replay(prompt_ids=set(), cumulative_usage=True, approval_only=lambda i: i == "c2")
    r.mapper.session_id = "s"
    for line in feed:
        r.feed(line)
    if dies:
        turn = r.current + r.mapper.fail_turn("agent_exited", "gone", exit_code=-9)
    else:
        (turn,) = r.finish(result if isinstance(result, dict) else {"stopReason": result})
    check_invariants(turn)
    usage = r.mapper.usage_block()
    assert usage is None or block_to_json(usage)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(updates, max_size=25))
def test_well_formed_envelopes_with_wrong_payloads_keep_the_invariants(ups: list[Any]) -> None:
    m = UpdateMapper(session_id="s")
    out: list[Block] = []
    for u in ups:
        out += m.update({"sessionId": "s", "update": u})
    out += m.end_turn({"stopReason": "end_turn"})
    check_invariants(out)
