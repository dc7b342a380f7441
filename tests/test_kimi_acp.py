"""Kimi Code adapter specifics that run everywhere (no Python >= 3.12 needed): its recorded ACP
traffic through the mapper, its tool calls named and given their input, its failures read from
its log, detection of the archived kimi-cli, its check, and its login hint.

The real CLI runs end to end in tests/test_kimi_e2e.py (skipped without a Python >= 3.12).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bridge.adapters.acp import rpc_failure
from bridge.adapters.base import AdapterConfig, contract_problems, instantiate
from bridge.adapters.kimi import (
    ARCHIVED_ERROR,
    KimiAdapter,
    step_failure,
    streamed_arguments,
)
from bridge.blocks import (
    DiffBlock,
    PermissionRequestBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.loading.registry import load_builtin_classes
from bridge.parsers.jsonrpc import RpcError
from tests.test_acp_parser import replay_file

KIMI = Path(__file__).parent / "fixtures" / "captured" / "kimi"
FAKE_AGENT = Path(__file__).parent / "fixtures" / "acp" / "fake_agent.py"
SID = "9b838917-f08d-40b2-a4f0-aead532a3e60"
#: a line of kimi.log as Kimi Code 1.51.0 wrote it for a model call refused with 401
LOG_401 = (
    "2026-12-06 08:46:41.995 | ERROR    | kimi_cli.soul.kimisoul:_agent_loop:1049 | "
    f"{SID} - Agent step 1 failed: APIStatusError: Error code: 401 - {{'error': {{'message': "
    "'Invalid Authentication', 'type': 'invalid_api_key', 'param': None, 'code': "
    "'invalid_api_key'}}\n"
)


def of(blocks: list[Any], kind: type[Any]) -> list[Any]:
    return [b for b in blocks if isinstance(b, kind)]


def test_contract_command_line_and_registry() -> None:
    assert contract_problems(KimiAdapter) == []
    assert KimiAdapter in load_builtin_classes()
    adapter = instantiate(KimiAdapter, {"binary": "/opt/kimi/bin/kimi"})
    assert isinstance(adapter, KimiAdapter)
    assert adapter.command_line() == ["/opt/kimi/bin/kimi", "acp"]
    caps = KimiAdapter.capabilities()
    assert caps["permissions"] and caps["interrupt"] and caps["images"]


def test_recorded_turns_stream_text_and_thinking_and_a_named_tool_call() -> None:
    kimi = KimiAdapter(cwd="/tmp")
    replay = replay_file(KIMI / "acp_tool.stdout.jsonl", preprocess=kimi.preprocess_update)
    hello, tool = replay.turns
    assert "".join(b.text for b in of(hello, ThinkingBlock)) == "Greeting."
    assert "".join(b.text for b in of(hello, TextBlock)) == "Hello! I am the fake model."
    calls = of(tool, ToolCallBlock)
    # announced, then once its arguments were whole JSON; the half-written ones are skipped
    assert [c.status for c in calls] == ["running", "running", "done"]
    assert {c.name for c in calls} == {"Shell"}
    assert calls[-1].input == {"command": "echo hello-from-tool"}
    assert calls[-1].title == "Shell: echo hello-from-tool"
    (result,) = of(tool, ToolResultBlock)
    assert result.content == "hello-from-tool\n" and not result.is_error
    assert of(tool, PermissionRequestBlock)


def test_recorded_write_asks_with_its_diff_and_a_rejection_fails_the_call() -> None:
    kimi = KimiAdapter(cwd="/tmp")
    (turn,) = replay_file(
        KIMI / "acp_permission.stdout.jsonl", preprocess=kimi.preprocess_update
    ).turns
    (diff,) = of(turn, DiffBlock)
    assert diff.path.endswith("/work/notes.txt") and diff.new_text == "hello"
    (asked,) = of(turn, PermissionRequestBlock)
    assert {o.kind for o in asked.options} == {"allow_once", "allow_always", "reject_once"}
    calls = of(turn, ToolCallBlock)
    assert calls[-1].status == "error" and calls[-1].name == "WriteFile"
    assert of(turn, ToolResultBlock)[0].is_error


def test_an_unknown_session_is_refused_with_invalid_params() -> None:
    lines = (KIMI / "acp_load_unknown.stdout.jsonl").read_text().splitlines()
    error = json.loads(lines[-1])["error"]
    assert error["code"] == -32602 and error["data"] == {"session_id": "Session not found"}


def test_streamed_arguments_are_taken_once_whole() -> None:
    def content(text: Any) -> list[dict[str, Any]]:
        return [{"type": "content", "content": {"type": "text", "text": text}}]

    assert streamed_arguments(content("")) is False
    assert streamed_arguments(content('{"command": "ec')) is False
    assert streamed_arguments(content('{"command": "echo"}')) == {"command": "echo"}
    assert streamed_arguments(content("[1]")) is None
    assert streamed_arguments(content(5)) is None
    assert streamed_arguments([{"type": "diff", "path": "x"}]) is None
    assert streamed_arguments("nonsense") is None
    kimi = KimiAdapter()
    half = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t",
        "status": "in_progress",
        "title": "Shell: ec",
        "content": content('{"command": "ec'),
    }
    assert kimi.preprocess_update(half) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t",
        "status": "in_progress",
    }
    done = {**half, "status": "completed", "content": content("out")}
    assert kimi.preprocess_update(done)["content"] == content("out")
    assert kimi.preprocess_update(done)["_meta"] == {"toolName": "Shell"}


def test_a_failed_model_call_is_read_from_its_log(tmp_path: Path) -> None:
    assert step_failure(LOG_401, SID) is not None
    assert step_failure(LOG_401, "another-session") is None
    assert step_failure("garbage\n - Agent step x failed\n", SID) is None

    share = tmp_path / ".kimi"
    log = share / "logs" / "kimi.log"
    log.parent.mkdir(parents=True)
    log.write_text(LOG_401)  # an earlier turn's failure: not this turn's
    kimi = KimiAdapter(cwd=str(tmp_path), env={"KIMI_SHARE_DIR": str(share)})
    kimi._session_id = SID
    kimi._log_offset = log.stat().st_size
    assert kimi.reported_failure() is None
    with log.open("a") as fh:
        fh.write("2026-12-06 08:47:00.000 | INFO | x | - something else\n" + LOG_401)
    error = kimi.reported_failure()
    assert error is not None and error.code == "auth_required" and not error.retryable
    assert error.hint is not None and "kimi login" in error.hint
    assert "Error code: 401" in error.message
    rate = LOG_401.replace("Error code: 401", "Error code: 429").replace("invalid_api_key", "x")
    with log.open("a") as fh:
        fh.write(rate)
    error = kimi.reported_failure()
    assert error is not None and error.code == "rate_limited" and kimi.agent_retried(error)


def test_auth_required_from_its_acp_server_names_kimi_login() -> None:
    # what `kimi acp` answers session/new without a login (JSON-RPC -32000 AUTH_REQUIRED)
    error = RpcError(-32000, "Authentication required", {"authMethods": [{"id": "login"}]})
    block = rpc_failure("kimi", "Kimi Code", error)
    assert block.code == "auth_required" and "kimi login" in (block.hint or "")


async def test_a_session_refused_for_its_login_fails_to_start_with_the_hint(
    tmp_path: Path,
) -> None:
    class Refused(KimiAdapter):
        def command_line(self) -> list[str]:
            return [sys.executable, str(FAKE_AGENT)]

    adapter = instantiate(
        Refused, {"cwd": str(tmp_path), "env": {"FAKE_ACP_NEW_ERROR": "Authentication required"}}
    )
    with pytest.raises(RuntimeError, match="kimi login"):
        await adapter.start("s")


def fake_kimi(tmp_path: Path, output: str) -> str:
    path = tmp_path / "kimi"
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {json.dumps(output)}\n")
    path.chmod(0o755)
    return str(path)


def test_detection_refuses_the_archived_package_that_only_prints_a_notice(
    tmp_path: Path,
) -> None:
    notice = (
        "kimi, version 1.52.0\nkimi-cli is no longer maintained. Please use the new Kimi Code "
        "CLI. Install: curl -fsSL https://code.kimi.com/kimi-code/install.sh | bash"
    )
    found = KimiAdapter.detect(fake_kimi(tmp_path, notice))
    assert found is not None and not found.available and found.error == ARCHIVED_ERROR
    working = tmp_path / "ok"
    working.mkdir()
    found = KimiAdapter.detect(fake_kimi(working, "kimi, version 1.51.0"))
    assert found is not None and found.available and found.version == "kimi, version 1.51.0"


def test_the_check_wants_a_login(tmp_path: Path) -> None:
    binary = fake_kimi(tmp_path, "kimi, version 1.51.0")
    share = tmp_path / "share"
    config = AdapterConfig(binary=binary, env={"KIMI_SHARE_DIR": str(share)})
    checks = {c.code: c for c in KimiAdapter.check_environment(config)}
    assert checks["kimi_login"].level == "warn" and checks["kimi_login"].hint == (
        "run `kimi login` once in a terminal"
    )
    assert checks["kimi_config"].level == "info"
    (share / "credentials").mkdir(parents=True)
    (share / "credentials" / "kimi-code.json").write_text("{}")
    (share / "config.toml").write_text("")
    checks = {c.code: c for c in KimiAdapter.check_environment(config)}
    assert checks["kimi_login"].level == "info" and "kimi_config" not in checks
    assert msgspec.to_builtins(checks["kimi_login"])["message"].startswith("logged in")
    # the new Kimi Code CLI's login, one file per profile under $KIMI_CODE_HOME
    code_home = tmp_path / "code-home"
    newer = AdapterConfig(
        binary=binary,
        env={"KIMI_SHARE_DIR": str(tmp_path / "none"), "KIMI_CODE_HOME": str(code_home)},
    )
    checks = {c.code: c for c in KimiAdapter.check_environment(newer)}
    assert checks["kimi_login"].level == "warn"
    (code_home / "credentials").mkdir(parents=True)
    (code_home / "credentials" / "default.json").write_text("{}")
    checks = {c.code: c for c in KimiAdapter.check_environment(newer)}
    assert checks["kimi_login"].level == "info" and "default.json" in checks["kimi_login"].message
