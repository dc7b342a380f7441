"""Gemini CLI adapter specifics: its command line, its quirks and its environment check.

The adapter runs end to end in tests/test_acp_realcli.py; these are the pieces that need no CLI.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bridge.adapters.acp import rpc_failure
from bridge.adapters.base import AdapterConfig, classify_failure, contract_problems, instantiate
from bridge.adapters.gemini import GeminiAdapter, sidestep_same_minute
from bridge.parsers.jsonrpc import RpcError

NOW = datetime(2026, 12, 2, 12, 1, 30, tzinfo=UTC)
FAKE_AGENT = Path(__file__).parent / "fixtures" / "acp" / "fake_agent.py"
SID = "2479941a-34d2-4d78-880a-f7e9b0878e0e"


def test_contract_and_command_line() -> None:
    assert contract_problems(GeminiAdapter) == []
    caps = GeminiAdapter.capabilities()
    assert caps["permissions"] and caps["interrupt"] and caps["thinking"] and caps["images"]
    adapter = instantiate(GeminiAdapter, {"model": "gemini-2.5-pro", "binary": "/opt/gemini"})
    assert isinstance(adapter, GeminiAdapter)
    assert adapter.command_line() == ["/opt/gemini", "--acp", "--debug", "-m", "gemini-2.5-pro"]
    plain = instantiate(GeminiAdapter, {"options": {"debug": False}})
    assert isinstance(plain, GeminiAdapter) and plain.command_line() == ["gemini", "--acp"]
    # no client file system: Gemini 0.61 cannot create files through one
    assert plain._fs is False
    assert (
        isinstance(fs := instantiate(GeminiAdapter, {"options": {"fs": True}}), GeminiAdapter)
        and fs._fs
    )


def test_quirky_updates_are_rewritten() -> None:
    g = GeminiAdapter()
    mode = g.preprocess_update(
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "[MODE_UPDATE] autoEdit"},
        }
    )
    assert mode == {"sessionUpdate": "current_mode_update", "currentModeId": "autoEdit"}
    thought = g.preprocess_update(
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "****\nPlan"}}
    )
    assert thought["content"]["text"] == "Plan"
    named = g.preprocess_update(
        {"sessionUpdate": "tool_call", "toolCallId": "write_file__call_7", "kind": "edit"}
    )
    assert named["_meta"] == {"toolName": "write_file"}
    text = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "[MODE_UPDATE] is a word"},
    }
    assert g.preprocess_update(text) is text
    own = {"sessionUpdate": "tool_call", "toolCallId": "a__b", "_meta": {"toolName": "x"}}
    assert g.preprocess_update(own) is own


def _chat(home: Path, minute: str, sid: str, project: str = "work") -> Path:
    chats = home / ".gemini" / "tmp" / project / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / f"session-2026-12-02T{minute}-{sid[:8]}.jsonl"
    path.write_text(json.dumps({"sessionId": sid, "projectHash": "h"}) + '\n{"$set":{}}\n')
    return path


def test_same_minute_chat_file_is_moved_out_of_the_way(tmp_path: Path) -> None:
    mine = _chat(tmp_path, "12-01", SID)
    older = _chat(tmp_path, "11-58", "aaaaaaaa-0000-0000-0000-000000000000")
    stranger = _chat(tmp_path, "12-01", SID[:8] + "-ffff-ffff-ffff-ffffffffffff", "other")
    moved = sidestep_same_minute(tmp_path, SID, NOW)
    assert moved == [mine.with_name(f"session-2026-12-02T12-00-{SID[:8]}.jsonl")]
    assert moved[0].read_text().startswith(json.dumps({"sessionId": SID, "projectHash": "h"}))
    assert not mine.exists() and older.exists() and stranger.exists()
    # nothing to do a minute later, and an existing target is never overwritten
    assert sidestep_same_minute(tmp_path, SID, NOW.replace(minute=2)) == []
    again = _chat(tmp_path, "12-01", SID)
    assert sidestep_same_minute(tmp_path, SID, NOW) == [] and again.exists()
    assert sidestep_same_minute(tmp_path / "nowhere", SID, NOW) == []
    assert sidestep_same_minute(tmp_path, "../../etc", NOW) == []


def test_environment_check_reports_the_auth_setup(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    fake = tmp_path / "gemini"
    fake.write_text("#!/bin/sh\necho 0.61.0\n")
    fake.chmod(0o755)
    config = AdapterConfig(binary=str(fake))
    checks = {c.code: c for c in GeminiAdapter.check_environment(config)}
    assert checks["binary_found"].detail == "0.61.0"
    assert checks["gemini_auth"].level == "warn" and "no login" in checks["gemini_auth"].message
    with_key = AdapterConfig(binary=str(fake), env={"GEMINI_API_KEY": "k"})
    auth = {c.code: c for c in GeminiAdapter.check_environment(with_key)}["gemini_auth"]
    assert auth.level == "warn" and "selectedType" in (auth.hint or "")
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    auth = {c.code: c for c in GeminiAdapter.check_environment(with_key)}["gemini_auth"]
    assert auth.level == "info" and "gemini-api-key" in auth.message
    missing = GeminiAdapter.check_environment(AdapterConfig(binary=str(tmp_path / "none")))
    assert missing[0].code == "binary_missing" and missing[0].level == "error"


#: Gemini CLI's words when Google refuses a personal Google login (since 2026-06-18): the Code
#: Assist server's ``UNSUPPORTED_CLIENT`` reason message, which the CLI raises as an
#: ``IneligibleTierError`` (bundle/chunk-*.js, ``throwIneligibleOrProjectIdError``) and its
#: sign-in dialog shows after "Failed to sign in. Message:" (as users reported it from 0.49-0.59).
REFUSED = (
    "This client is no longer supported for Gemini Code Assist for individuals. To continue "
    "using Gemini, please migrate to the Antigravity suite of products: https://antigravity.google"
)


def test_a_refused_personal_login_is_auth_required_with_the_date_and_what_to_use() -> None:
    reports = [
        # the JSON-RPC error of session/new or session/prompt in ACP mode
        rpc_failure(
            "gemini", "Gemini CLI", RpcError(-32603, "Internal error", {"details": REFUSED})
        ),
        # the sign-in dialog's words on stderr, the error's name and reason code in a body
        classify_failure(
            "gemini", "Gemini CLI failed", stderr=f"Failed to sign in. Message: {REFUSED}"
        ),
        classify_failure(
            "gemini",
            "IneligibleTierError",
            body={"ineligibleTiers": [{"reasonCode": "UNSUPPORTED_CLIENT", "tierId": "free-tier"}]},
        ),
    ]
    for block in reports:
        assert block.code == "auth_required" and not block.retryable
        assert block.hint is not None and "2026-06-18" in block.hint
        assert "GEMINI_API_KEY" in block.hint and "GOOGLE_CLOUD_PROJECT" in block.hint
    # other agents' and other Gemini login failures keep their own hint
    other = classify_failure("gemini", "Gemini CLI: API key not valid.")
    assert other.code == "auth_required" and "2026-06-18" not in (other.hint or "")


def test_the_check_warns_about_a_personal_google_login(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}}))
    fake = tmp_path / "gemini"
    fake.write_text("#!/bin/sh\necho 0.61.0\n")
    fake.chmod(0o755)
    checks = {c.code: c for c in GeminiAdapter.check_environment(AdapterConfig(binary=str(fake)))}
    found = checks["gemini_personal_login"]
    assert found.level == "warn" and "2026-06-18" in found.message
    assert found.hint is not None and "GEMINI_API_KEY" in found.hint
    # an organization's account (a Cloud project set) keeps Login with Google
    work = AdapterConfig(binary=str(fake), env={"GOOGLE_CLOUD_PROJECT": "acme-dev"})
    checks = {c.code: c for c in GeminiAdapter.check_environment(work)}
    assert "gemini_personal_login" not in checks
    assert checks["gemini_auth"].message == "authentication: oauth-personal"


async def test_a_session_that_cannot_start_for_a_refused_login_says_what_to_do(
    tmp_path: Path,
) -> None:
    class RefusedGemini(GeminiAdapter):
        """Gemini's adapter on the scripted ACP agent, whose session/new is refused."""

        def command_line(self) -> list[str]:
            return [sys.executable, str(FAKE_AGENT)]

    adapter = instantiate(
        RefusedGemini, {"cwd": str(tmp_path), "env": {"FAKE_ACP_NEW_ERROR": REFUSED}}
    )
    with pytest.raises(RuntimeError) as refused:
        await adapter.start("s")
    assert "no longer supported" in str(refused.value) and "2026-06-18" in str(refused.value)
    assert not adapter.process_running()
