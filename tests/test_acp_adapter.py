"""The ACP adapter's plumbing against a scripted ACP agent (tests/fixtures/acp/fake_agent.py).

Real agents are covered end to end in tests/test_acp_realcli.py; this file drives every path
the real ones rarely take (file system limits, unknown methods, death, cancelled permissions)
quickly and deterministically, through the adapter's public coroutines.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.adapters.acp import AcpAdapter, AcpBase
from bridge.adapters.base import contract_problems, instantiate
from bridge.blocks import (
    AgentInfoBlock,
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
    block_to_json,
)
from bridge.config import AcpAgentConfig, Config
from bridge.invariants import CONTRACT, TurnGuard
from bridge.loading.acp_config import adapter_class, adapters_from_config
from bridge.process import SpawnError
from bridge.store.records import AttachmentData

FAKE_AGENT = Path(__file__).parent / "fixtures" / "acp" / "fake_agent.py"

pytestmark = pytest.mark.timeout(60)


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cwd = tmp / "work"
        self.cwd.mkdir(exist_ok=True)
        self.log = tmp / "agent-log.jsonl"
        self.session_ids: list[str] = []
        self.cls = adapter_class(
            "fake",
            AcpAgentConfig(
                command=[sys.executable, str(FAKE_AGENT)],
                display_name="Fake",
                env={"FAKE_ACP_STATE": str(tmp / "state"), "FAKE_ACP_LOG": str(self.log)},
            ),
        )

    def make(self, **kw: Any) -> AcpBase:
        values = {"cwd": str(self.cwd), "on_session_id": self.session_ids.append, **kw}
        adapter = instantiate(self.cls, values)
        assert isinstance(adapter, AcpBase)
        return adapter

    async def one_turn(self, text: str, answer: str | None = None, **kw: Any) -> list[Block]:
        """The first turn of a fresh adapter (made with ``kw``, see :func:`turn`), stopped
        after."""
        adapter = self.make(**kw)
        await adapter.start("s")
        try:
            return await turn(adapter, text, answer)
        finally:
            await adapter.stop()

    def received(self, method: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        msgs = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [m for m in msgs if m.get("method") == method]


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


async def turn(adapter: AcpBase, text: str, answer: str | None = None) -> list[Block]:
    """One turn's blocks; ``answer`` is the option chosen for permission requests."""
    await adapter.send(text)
    out: list[Block] = []
    async with asyncio.timeout(30):
        async for block in adapter.stream():
            out.append(block)
            if isinstance(block, PermissionRequestBlock):
                if answer == "interrupt":
                    await adapter.interrupt()
                elif answer is not None:
                    await adapter.respond_permission(block.id, answer)
    assert_invariants(out)
    return out


def assert_invariants(blocks: list[Block]) -> None:
    """The hub's guard has nothing to repair, and every block encodes."""
    guard = TurnGuard()
    for block in blocks:
        block_to_json(block)
        for out in guard.feed(block):
            assert not (isinstance(out, ErrorBlock) and out.code == CONTRACT), out
    ends = [b for b in blocks if isinstance(b, SessionEndBlock)]
    assert len(ends) == 1 and blocks[-1] is ends[0]


def text_of(blocks: list[Block]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def of(blocks: list[Block], kind: type[Any]) -> list[Any]:
    return [b for b in blocks if isinstance(b, kind)]


async def test_streamed_answer_usage_and_session_id(h: Harness) -> None:
    adapter = h.make()
    info = await adapter.start("s1")
    try:
        assert (info.agent, info.name, info.version, info.model) == (
            "fake",
            "Fake ACP",
            "9.9.9",
            "small",
        )
        blocks = await turn(adapter, "echo hello there friend")
        texts = of(blocks, TextBlock)
        assert text_of(blocks) == "hello there friend"
        assert len(texts) >= 3 and len({t.id for t in texts}) == 1 and texts[-1].done
        usage = of(blocks, UsageBlock)[-1]
        assert (usage.input_tokens, usage.output_tokens) == (10, 4)
        end = blocks[-1]
        assert isinstance(end, SessionEndBlock) and end.reason == "completed"
        assert h.session_ids and end.agent_session_id == h.session_ids[0]
        init = h.received("initialize")[0]["params"]
        assert init["clientCapabilities"]["fs"] == {"readTextFile": True, "writeTextFile": True}
        # usage adds up over turns
        await turn(adapter, "echo again")
        assert (await adapter.get_usage()) == UsageBlock(input_tokens=20, output_tokens=8)
    finally:
        await adapter.stop()


async def test_attachments_become_prompt_content(h: Harness) -> None:
    adapter = h.make()
    await adapter.start("s")
    files = [
        AttachmentData(name="shot.png", mime="image/png", data=b"\x89PNG"),
        AttachmentData(name="notes.txt", mime="text/plain", data=b"hello notes"),
        AttachmentData(name="blob.bin", mime="application/octet-stream", data=b"\xff\x00"),
    ]
    try:
        await adapter.send("echo with files", files)
        async for _ in adapter.stream():
            pass
    finally:
        await adapter.stop()
    prompt = h.received("session/prompt")[-1]["params"]["prompt"]
    assert prompt[0] == {"type": "text", "text": "echo with files"}
    assert prompt[1] == {"type": "image", "mimeType": "image/png", "data": "iVBORw=="}
    assert prompt[2]["resource"]["text"] == "hello notes"  # the agent takes embedded context
    assert prompt[3]["resource"]["blob"] == "/wA="


async def test_tool_call_runs_then_finishes_with_its_result(h: Harness) -> None:
    blocks = await h.one_turn("tool ls -la")
    calls = of(blocks, ToolCallBlock)
    assert [c.status for c in calls] == ["running", "running", "done"]
    assert calls[1].input == {"command": "ls -la"} and calls[-1].title == "Shell: ls -la"
    (result,) = of(blocks, ToolResultBlock)
    assert result.tool_call_id == calls[0].id and result.content == "ran ls -la"
    assert not result.is_error
    assert text_of(blocks) == "done"


async def test_tour_of_update_kinds(h: Harness) -> None:
    blocks = await h.one_turn("tour")
    (plan,) = of(blocks, PlanBlock)
    assert [(e.content, e.status, e.priority) for e in plan.entries] == [
        ("look", "completed", "high"),
        ("edit", "in_progress", "low"),
    ]
    assert "".join(t.text for t in of(blocks, ThinkingBlock)) == "hmm"
    mode = [b for b in of(blocks, SystemBlock) if b.code == "mode"]
    assert mode and mode[0].data == {"mode": "code"}
    (info,) = of(blocks, AgentInfoBlock)
    names = [c.name for c in info.commands]
    assert "/web" in names and names.count("/status") == 1  # the bridge's own /status wins
    (diff,) = of(blocks, DiffBlock)
    assert (diff.path, diff.old_text, diff.new_text) == ("/w/a.txt", "a\n", "b\n")
    assert diff.unified is not None and "-a\n+b\n" in diff.unified
    usage = of(blocks, UsageBlock)[-1]
    assert (usage.cost_usd, usage.context_used, usage.context_size) == (0.25, 500, 1000)
    assert usage.cached_input_tokens == 2
    assert text_of(blocks) == "toured"  # the stray non-JSON line was skipped


@pytest.mark.parametrize(("option", "status"), [("yes", "done"), ("no", "error")])
async def test_permission_answer_reaches_the_agent(h: Harness, option: str, status: str) -> None:
    blocks = await h.one_turn("perm", answer=option)
    (ask,) = of(blocks, PermissionRequestBlock)
    assert [(o.id, o.kind) for o in ask.options] == [
        ("yes", "allow_once"),
        ("always", "allow_always"),
        ("no", "reject_once"),
    ]
    calls = of(blocks, ToolCallBlock)
    assert ask.tool_call_id == calls[0].id and calls[-1].status == status
    assert f"outcome {option}" in text_of(blocks)


async def test_interrupt_answers_open_permission_cancelled(h: Harness) -> None:
    adapter = h.make()
    await adapter.start("s")
    try:
        blocks = await turn(adapter, "perm", answer="interrupt")
        with pytest.raises(KeyError):
            await adapter.respond_permission(of(blocks, PermissionRequestBlock)[0].id, "yes")
    finally:
        await adapter.stop()
    end = blocks[-1]
    assert isinstance(end, SessionEndBlock) and end.reason == "interrupted"
    assert of(blocks, ToolCallBlock)[-1].status == "error"
    answers = [
        json.loads(line)
        for line in h.log.read_text().splitlines()
        if '"outcome"' in line and '"method"' not in line
    ]
    assert answers[-1]["result"] == {"outcome": {"outcome": "cancelled"}}
    assert h.received("session/cancel")


async def test_interrupt_stops_a_running_turn(h: Harness) -> None:
    adapter = h.make()
    await adapter.start("s")
    try:
        await adapter.send("hang")
        blocks: list[Block] = []
        async with asyncio.timeout(30):
            async for block in adapter.stream():
                blocks.append(block)
                if isinstance(block, TextBlock) and not block.done:
                    await adapter.interrupt()
        assert_invariants(blocks)
        end = blocks[-1]
        assert isinstance(end, SessionEndBlock) and end.reason == "interrupted"
        # the process is still there for the next turn
        assert text_of(await turn(adapter, "echo still here")) == "still here"
    finally:
        await adapter.stop()


async def test_fs_requests_are_served_inside_the_working_directory(h: Harness) -> None:
    adapter = h.make()
    await adapter.start("s")
    target = h.cwd / "sub" / "new.txt"
    try:
        wrote = json.loads(text_of(await turn(adapter, f"fswrite {target} hello-fs")))
        assert wrote["result"] is None and target.read_text() == "hello-fs"
        read = json.loads(text_of(await turn(adapter, f"fsread {target}")))
        assert read["result"] == {"content": "hello-fs"}
        missing = json.loads(text_of(await turn(adapter, f"fsread {h.cwd / 'nope.txt'}")))
        assert missing["error"]["code"] == -32002
        assert "Resource not found" in missing["error"]["message"]
    finally:
        await adapter.stop()


async def test_fs_requests_outside_the_working_directory_are_refused(h: Harness) -> None:
    outside = h.tmp / "secret.txt"
    outside.write_text("top secret")
    (h.cwd / "link.txt").symlink_to(outside)
    adapter = h.make()
    await adapter.start("s")
    try:
        for request in (
            f"fsread {outside}",
            f"fsread {h.cwd / 'link.txt'}",  # a symlink out of the cwd
            f"fsread {h.cwd}/../secret.txt",
            f"fswrite {h.tmp / 'escape.txt'} pwned",
            f"fswrite {h.cwd}/../escape.txt pwned",
        ):
            answer = json.loads(text_of(await turn(adapter, request)))
            assert answer["error"]["code"] == -32602, request
            assert "outside the session's working directory" in answer["error"]["message"]
            assert "top secret" not in json.dumps(answer)
    finally:
        await adapter.stop()
    assert not (h.tmp / "escape.txt").exists()
    assert outside.read_text() == "top secret"


async def test_fs_can_be_switched_off(h: Harness) -> None:
    adapter = h.make(options={"fs": False})
    await adapter.start("s")
    try:
        answer = json.loads(text_of(await turn(adapter, f"fsread {h.cwd / 'x'}")))
    finally:
        await adapter.stop()
    assert answer["error"]["code"] == -32601
    init = h.received("initialize")[0]["params"]
    assert init["clientCapabilities"]["fs"] == {"readTextFile": False, "writeTextFile": False}


async def test_unknown_agent_requests_get_method_not_found(h: Harness) -> None:
    blocks = await h.one_turn("ext")
    answer = json.loads(text_of(blocks))
    assert answer["error"]["code"] == -32601
    assert "craft/drainMidTurnQueue" in answer["error"]["message"]
    assert blocks[-1] == SessionEndBlock(reason="completed", agent_session_id=h.session_ids[0])


async def test_agent_dying_mid_turn_ends_the_turn_and_the_next_turn_restarts_it(
    h: Harness,
) -> None:
    adapter = h.make()
    await adapter.start("s")
    try:
        blocks = await turn(adapter, "die")
        (error,) = of(blocks, ErrorBlock)
        assert error.code == "agent_error" and "exited with code 3" in error.message
        end = blocks[-1]
        assert isinstance(end, SessionEndBlock) and end.reason == "error" and end.exit_code == 3
        assert text_of(blocks) == "about to die"
        sid = h.session_ids[-1]
        again = await turn(adapter, "slow back again")
        restarted = [b for b in of(again, SystemBlock) if b.code == "agent_restarted"]
        assert restarted and again.index(restarted[0]) == 0
        # the same session was loaded, and its replayed history did not leak into the turn
        assert h.received("session/load")[-1]["params"]["sessionId"] == sid
        assert text_of(again) == "back again"
        assert h.session_ids[-1] == sid
    finally:
        await adapter.stop()


async def test_agent_death_is_seen_even_when_its_children_keep_stdout_open(h: Harness) -> None:
    blocks = await h.one_turn("orphan")
    end = blocks[-1]
    assert isinstance(end, SessionEndBlock) and end.reason == "error" and end.exit_code == 3


async def test_resume_loads_the_session_without_replaying_it(h: Harness) -> None:
    first = h.make()
    await first.start("s")
    await turn(first, "echo one")
    await first.stop()
    sid = h.session_ids[-1]
    second = h.make(resume_session_id=sid)
    await second.start("s")
    try:
        blocks = await turn(second, "slow two")
    finally:
        await second.stop()
    assert text_of(blocks) == "two"
    assert not [b for b in of(blocks, SystemBlock) if b.code == "session_reset"]
    assert h.session_ids[-1] == sid and len(h.received("session/new")) == 1


async def test_unknown_session_starts_a_new_one_and_says_so(h: Harness) -> None:
    blocks = await h.one_turn("echo fresh", resume_session_id="gone-123")
    (reset,) = [b for b in of(blocks, SystemBlock) if b.code == "session_reset"]
    assert reset.level == "warn" and "gone-123" in reset.text and "Resource not found" in reset.text
    assert reset.data == {"previous_session": "gone-123", "session": h.session_ids[-1]}
    assert text_of(blocks) == "fresh" and h.session_ids[-1] != "gone-123"


@pytest.mark.parametrize(
    ("reason", "end", "note"),
    [
        ("max_tokens", "completed", "output token limit"),
        ("refusal", "completed", "refused"),
        ("max_turn_requests", "completed", "limit of model requests"),
        ("cancelled", "interrupted", None),
    ],
)
async def test_stop_reasons(h: Harness, reason: str, end: str, note: str | None) -> None:
    blocks = await h.one_turn(f"stop {reason}")
    last = blocks[-1]
    assert isinstance(last, SessionEndBlock) and last.reason == end
    notes = [b for b in of(blocks, SystemBlock) if b.code == "stop_reason"]
    if note is None:
        assert not notes
    else:
        assert notes and note in notes[0].text and notes[0].level == "warn"


async def test_prompt_error_ends_the_turn_with_an_error(h: Harness) -> None:
    blocks = await h.one_turn("fail")
    (error,) = of(blocks, ErrorBlock)
    assert error.code == "agent_error" and "the model is unavailable" in error.message
    last = blocks[-1]
    assert isinstance(last, SessionEndBlock) and last.reason == "error"


async def test_model_is_selected_in_the_session(h: Harness) -> None:
    adapter = h.make(model="Big")
    info = await adapter.start("s")
    try:
        assert info.model == "big"
        assert h.received("session/set_model")[0]["params"]["modelId"] == "big"
        assert [m.id for m in await adapter.list_models()] == ["small", "big"]
    finally:
        await adapter.stop()
    blocks = await h.one_turn("echo x", model="huge")
    warn = [b for b in of(blocks, SystemBlock) if b.code == "model"]
    assert warn and "huge" in warn[0].text


async def test_stop_ends_the_agent_process(h: Harness) -> None:
    adapter = h.make()
    await adapter.start("s")
    proc = adapter._proc
    assert proc is not None and proc.returncode is None
    await adapter.stop()
    assert proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)


async def test_missing_command_fails_to_start(tmp_path: Path) -> None:
    cls = adapter_class("ghost", AcpAgentConfig(command=["/nonexistent/agent", "--acp"]))
    adapter = instantiate(cls, {"cwd": str(tmp_path)})
    with pytest.raises(SpawnError):
        await adapter.start("s")


def test_config_tables_become_agents() -> None:
    config = Config(
        acp={
            "qwen": AcpAgentConfig(command=["qwen", "--acp"], display_name="Qwen Code", model="m"),
            "my-agent": AcpAgentConfig(command=["/opt/agent"], env={"A": "1"}),
            "gemini": AcpAgentConfig(command=["gemini", "--acp"]),  # a built-in's name
            "bad name!": AcpAgentConfig(command=["x"]),
        }
    )
    classes = {cls.agent_id: cls for cls in adapters_from_config(config)}
    assert set(classes) == {"qwen", "my-agent"}
    qwen = classes["qwen"]
    assert issubclass(qwen, AcpBase) and contract_problems(qwen) == []
    assert (qwen.display_name, qwen.cli_binary, qwen.default_model) == ("Qwen Code", "qwen", "m")
    assert qwen.capabilities()["permissions"] and qwen.capabilities()["interrupt"]
    adapter = instantiate(classes["my-agent"], {"cwd": "/tmp", "binary": "/usr/bin/other"})
    assert isinstance(adapter, AcpBase)
    assert adapter.command_line() == ["/usr/bin/other"]
    assert classes["my-agent"].display_name == "my-agent"


def test_generic_acp_adapter_needs_a_command() -> None:
    found = AcpAdapter.detect()
    assert found is not None and not found.available and "[acp.<name>]" in (found.error or "")
    adapter = instantiate(AcpAdapter, {"binary": "agent", "options": {"args": ["--acp"]}})
    assert isinstance(adapter, AcpAdapter) and adapter.command_line() == ["agent", "--acp"]
    with pytest.raises(RuntimeError):
        instantiate(AcpAdapter, {}).command_line()  # type: ignore[attr-defined]
