"""GitHub Copilot CLI adapter specifics: its command line, its quirks on the ACP output it really
printed (tests/fixtures/captured/copilot), the terminal's ownership of a session and the
environment check.

The adapter runs end to end in tests/test_copilot_e2e.py; these are the pieces that need no CLI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.adapters.base import AdapterConfig, contract_problems, instantiate
from bridge.adapters.copilot import MODE_URL, CopilotAdapter, reported_failure
from bridge.blocks import (
    Block,
    ErrorBlock,
    SessionEndBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.handoff import copilot as handoff
from bridge.invariants import CONTRACT, TurnGuard
from bridge.process import OWN_PIDS
from tests.parserkit import CAPTURED, FIXTURES

COPILOT = CAPTURED / "copilot"
TERMINAL = FIXTURES / "handoff" / "copilot"
TERMINAL_SID = "5b0c7c2e-7d3a-4c55-9a51-2f0d6c1e8a10"


def updates(name: str) -> list[dict[str, Any]]:
    """The ``session/update`` payloads of a captured transcript, in order."""
    out: list[dict[str, Any]] = []
    for line in (COPILOT / name).read_text().splitlines():
        msg = json.loads(line)
        if msg.get("method") == "session/update":
            out.append(msg["params"]["update"])
    return out


def answer_texts(adapter: CopilotAdapter, name: str) -> str:
    """The answer text the adapter passes on from a captured transcript."""
    text = ""
    for update in updates(name):
        update = adapter.preprocess_update(update)
        if update.get("sessionUpdate") == "agent_message_chunk":
            text += update["content"]["text"]
    return text


def test_contract_and_command_line() -> None:
    assert contract_problems(CopilotAdapter) == []
    adapter = instantiate(CopilotAdapter, {"binary": "/opt/copilot"})
    assert isinstance(adapter, CopilotAdapter)
    assert adapter.command_line() == ["/opt/copilot", "--acp"]
    adapter = instantiate(CopilotAdapter, {"model": "gpt-5.5"})
    assert isinstance(adapter, CopilotAdapter)
    assert adapter.command_line() == ["copilot", "--acp", "--model", "gpt-5.5"]
    assert CopilotAdapter.handoff == "persistent"


def test_mode_ids_are_short_for_the_bridge_and_urls_for_copilot() -> None:
    adapter = CopilotAdapter()
    assert adapter.mode_prefix == MODE_URL
    mode = adapter.preprocess_update(
        {"sessionUpdate": "current_mode_update", "currentModeId": MODE_URL + "plan"}
    )
    assert mode["currentModeId"] == "plan"
    # the ids Copilot really reported in session/new are the declared modes'
    (new,) = [
        json.loads(line)["result"]
        for line in (COPILOT / "acp_tool.stdout.jsonl").read_text().splitlines()
        if "availableModes" in line
    ]
    reported = [m["id"].removeprefix(MODE_URL) for m in new["modes"]["availableModes"]]
    assert reported == [m.id for m in CopilotAdapter.modes]


def test_an_error_answer_becomes_the_turns_classified_error() -> None:
    adapter = CopilotAdapter()
    notices = [n for u in updates("acp_auth_failed.stdout.jsonl") for n in adapter.notices_in(u)]
    assert answer_texts(adapter, "acp_auth_failed.stdout.jsonl") == ""
    error = adapter.reported_failure()
    assert error is not None and error.code == "auth_required"
    assert "HTTP 401" in error.message and "`copilot login`" in (error.hint or "")
    assert adapter.reported_failure() is None  # said once
    # Copilot asked twice more before it gave up, and said so: the app is told each time
    assert [n.code for n in notices] == ["api_retry", "api_retry"]
    assert [(n.data or {})["attempt"] for n in notices] == [1, 2]
    assert "transient API error" in notices[0].text
    assert adapter.agent_retried(error)


def test_a_turn_without_retries_leaves_them_to_the_bridge() -> None:
    adapter = CopilotAdapter()
    assert not [n for u in updates("acp_tool.stdout.jsonl") for n in adapter.notices_in(u)]
    error = reported_failure("Error: Could not connect to local model provider at http://x/v1.")
    assert error is not None and error.code == "network"
    assert not adapter.agent_retried(error)


def test_a_rate_limit_after_copilots_own_retries() -> None:
    adapter = CopilotAdapter()
    assert answer_texts(adapter, "acp_rate_limited.stdout.jsonl") == ""
    error = adapter.reported_failure()
    assert error is not None and error.code == "rate_limited" and error.retryable
    assert adapter.agent_retried(error)  # "retried 5 times": the bridge does not retry on top


def test_plain_answers_and_the_info_echo() -> None:
    adapter = CopilotAdapter()
    assert answer_texts(adapter, "acp_tool.stdout.jsonl")
    assert adapter.reported_failure() is None
    # after an approved write Copilot says "Info: <path>" as answer text: only the answer stays
    assert answer_texts(adapter, "acp_permission.stdout.jsonl") == "I wrote notes.txt."
    # the model's own words are kept, even when they look alike
    kept = adapter.preprocess_update(
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Info: see below\nand more"},
        }
    )
    assert kept["content"]["text"] == "Info: see below\nand more"


def test_tool_names_come_from_the_input() -> None:
    adapter = CopilotAdapter()
    named = {
        u["toolCallId"]: adapter.preprocess_update(u)["_meta"]["toolName"]
        for name in ("acp_tool.stdout.jsonl", "acp_permission.stdout.jsonl")
        for u in updates(name)
        if u.get("sessionUpdate") == "tool_call"
    }
    assert sorted(named.values()) == ["bash", "create"]
    unknown = {"sessionUpdate": "tool_call", "toolCallId": "t", "rawInput": {"x": 1}}
    assert adapter.preprocess_update(unknown) is unknown
    given = {**unknown, "_meta": {"toolName": "mine"}, "rawInput": {"command": "ls"}}
    assert adapter.preprocess_update(given) is given


# ---- the terminal ---------------------------------------------------------------------------


@pytest.fixture
def terminal() -> Iterator[subprocess.Popen[bytes]]:
    """A process the daemon did not start (standing in for a terminal's copilot)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_terminal_holding_the_session_owns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: subprocess.Popen[bytes]
) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path))
    sid = "80762902-a79e-480e-8529-2608c2eb7097"
    folder = tmp_path / "session-state" / sid
    folder.mkdir(parents=True)
    assert not CopilotAdapter.is_cwd_externally_owned("/work", sid)
    (folder / f"inuse.{terminal.pid}.lock").write_text("")
    (folder / f"inuse.{terminal.pid}.hold").write_text("")
    assert handoff.holders(sid) == [terminal.pid]
    assert CopilotAdapter.is_cwd_externally_owned("/work", sid)
    assert not CopilotAdapter.is_cwd_externally_owned("/work", None)
    assert not CopilotAdapter.is_cwd_externally_owned("/work", "../" + sid)
    terminal.kill()
    terminal.wait()
    # a killed holder leaves its lock behind: that is no owner
    assert not CopilotAdapter.is_cwd_externally_owned("/work", sid)


def test_the_bridges_own_copilot_is_no_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: subprocess.Popen[bytes]
) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path))
    folder = tmp_path / "session-state" / "s1"
    folder.mkdir(parents=True)
    (folder / f"inuse.{terminal.pid}.lock").write_text("")
    OWN_PIDS.add(terminal.pid)  # as if the daemon had started it
    try:
        assert handoff.holders("s1") == [terminal.pid]
        assert not CopilotAdapter.is_cwd_externally_owned("/work", "s1")
    finally:
        OWN_PIDS.discard(terminal.pid)
    assert CopilotAdapter.is_cwd_externally_owned("/work", "s1")


def test_resume_command() -> None:
    command = CopilotAdapter.terminal_resume_command("abc", "/work")
    assert command is not None and command.argv == ["copilot", "--resume", "abc"]
    assert command.cwd == "/work"


def test_a_terminals_session_is_listed_with_its_directory_and_first_prompt(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "session-state" / TERMINAL_SID
    folder.mkdir(parents=True)
    for name in ("prompt_events.jsonl", "workspace.yaml"):
        shutil.copy(TERMINAL / name, folder / name.replace("prompt_", ""))
    (tmp_path / "session-state" / "stray").mkdir()  # no events: not a session
    (listed,) = handoff.scan(tmp_path)
    assert listed.agent_session_id == TERMINAL_SID and listed.title == "Say hello."
    assert listed.cwd == "/tmp/agent-bridge-capture-handoff/copilot/work" and not listed.owned


def test_the_mirror_parser_reads_a_terminals_turns() -> None:
    parser = handoff.EventsParser(TERMINAL_SID)
    blocks = [
        b
        for line in (TERMINAL / "prompt_events.jsonl").read_bytes().splitlines()
        for b in parser.feed(line)
    ]
    blocks += parser.close()
    turns: list[list[Block]] = [[]]
    for block in blocks:
        turns[-1].append(block)
        if isinstance(block, SessionEndBlock):
            turns.append([])
    assert turns.pop() == []
    for turn in turns:  # each a whole turn, as the hub's guard checks a terminal's turns
        guard = TurnGuard(TERMINAL_SID)
        for block in turn:
            broken = [b for b in guard.feed(block) if getattr(b, "code", None) == CONTRACT]
            assert not broken, turn
    hello, echo, failed = turns
    assert [type(b).__name__ for b in hello] == [
        "UserBlock",
        "ThinkingBlock",
        "TextBlock",
        "SessionEndBlock",
    ]
    assert hello[0].text == "Say hello." and hello[0].source == "terminal"
    assert hello[2].text == "Hello from the terminal."
    calls = [b for b in echo if isinstance(b, ToolCallBlock)]
    assert [(c.name, c.kind, c.status) for c in calls] == [
        ("bash", "execute", "running"),
        ("bash", "execute", "done"),
    ]
    assert calls[0].title == "echo hi-from-tool"
    assert any(isinstance(b, ToolResultBlock) and "hi-from-tool" in b.content for b in echo)
    assert isinstance(echo[-2], TextBlock) and echo[-2].text == "It printed hi-from-tool."
    assert isinstance(echo[-1], SessionEndBlock) and echo[-1].reason == "completed"
    (error,) = [b for b in failed if isinstance(b, ErrorBlock)]
    assert error.code == "auth_required" and "copilot login" in (error.hint or "")
    assert isinstance(failed[-1], SessionEndBlock) and failed[-1].reason == "error"
    # the same lines again (a tail re-reading them) add nothing
    assert not [
        b
        for line in (TERMINAL / "prompt_events.jsonl").read_bytes().splitlines()
        for b in parser.feed(line)
    ]


# ---- environment ------------------------------------------------------------------------------


def test_environment_check_says_where_the_model_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    fake = tmp_path / "copilot"
    fake.write_text("#!/bin/sh\necho 'GitHub Copilot CLI 1.0.102.'\n")
    fake.chmod(0o755)

    def check(**env: str) -> Any:
        config = AdapterConfig(binary=str(fake), env={"COPILOT_HOME": str(tmp_path), **env})
        return {c.code: c for c in CopilotAdapter.check_environment(config)}

    checks = check()
    assert "1.0.102" in (checks["binary_found"].detail or "")
    assert checks["copilot_auth"].level == "warn"
    assert "copilot login" in (checks["copilot_auth"].hint or "")
    assert check(GH_TOKEN="x")["copilot_auth"].level == "info"
    offline = check(COPILOT_PROVIDER_BASE_URL="http://127.0.0.1:1/v1", COPILOT_OFFLINE="true")
    assert offline["copilot_auth"].level == "info" and "offline" in offline["copilot_auth"].message
