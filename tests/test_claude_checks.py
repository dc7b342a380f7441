"""Claude Code's environment check: binary, version, auth source, cwd (no real CLI needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.adapters.base import AdapterConfig, overall_status
from bridge.adapters.claude import ClaudeAdapter
from tests.checkkit import by_code, version_only, without


@pytest.fixture
def fake_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `claude` that only answers --version, and a clean auth environment."""
    binary = version_only(tmp_path / "bin" / "claude", "2.1.332 (Claude Code)")
    without(
        monkeypatch,
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
    )
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "home" / ".claude"))
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    return binary


def login(home: Path) -> None:
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {}}')


def test_binary_version_and_missing_credentials(fake_claude: Path) -> None:
    checks = by_code(ClaudeAdapter.check_environment(AdapterConfig(binary=str(fake_claude))))
    assert checks["binary_found"].detail == "2.1.332 (Claude Code)"
    assert checks["claude_auth_missing"].level == "warn"
    assert checks["claude_cwd_valid"].level == "info"


def test_a_server_wide_api_key_overriding_a_login_is_a_warning(
    fake_claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login(fake_claude.parent.parent / "home")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-server-wide-key")
    checks = ClaudeAdapter.check_environment(AdapterConfig(binary=str(fake_claude)))
    warn = by_code(checks)["claude_api_key_overrides_subscription"]
    assert warn.level == "warn" and warn.detail == "set in the server environment"
    assert "Unset ANTHROPIC_API_KEY" in (warn.hint or "")
    assert overall_status(checks) == "warn"
    assert all("sk-ant-server-wide-key" not in (c.message + str(c.detail)) for c in checks)


def test_a_key_in_the_adapter_config_is_named_as_such(fake_claude: Path) -> None:
    config = AdapterConfig(binary=str(fake_claude), env={"ANTHROPIC_API_KEY": "sk-ant-config"})
    check = by_code(ClaudeAdapter.check_environment(config))["claude_auth_api_key"]
    assert check.level == "info" and check.detail == "set in the adapter config env"


def test_login_alone_and_token_auth(fake_claude: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    login(fake_claude.parent.parent / "home")
    config = AdapterConfig(binary=str(fake_claude))
    assert "claude_auth_login" in by_code(ClaudeAdapter.check_environment(config))
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "oauth-token-value")
    assert "claude_auth_token" in by_code(ClaudeAdapter.check_environment(config))


def test_missing_binary_and_bad_cwd_are_errors(fake_claude: Path, tmp_path: Path) -> None:
    config = AdapterConfig(
        binary=str(tmp_path / "nope" / "claude"), options={"cwd": str(tmp_path / "gone")}
    )
    checks = by_code(ClaudeAdapter.check_environment(config))
    assert checks["binary_missing"].level == "error"
    assert checks["claude_cwd_invalid"].level == "error"
    assert overall_status(list(checks.values())) == "fail"


async def test_start_reports_a_missing_binary_before_any_turn(tmp_path: Path) -> None:
    from bridge.process import SpawnError

    adapter = ClaudeAdapter(cwd=str(tmp_path), binary=str(tmp_path / "no-claude"))
    with pytest.raises(SpawnError) as err:
        await adapter.start("s1")
    assert err.value.code == "binary_missing" and "no-claude" in str(err.value)
    assert adapter.pid is None


async def test_models_and_doc() -> None:
    adapter = ClaudeAdapter()
    assert [m.id for m in await adapter.list_models()] == ["sonnet", "opus", "haiku"]
    assert "**Use when**" in ClaudeAdapter.doc and "**Don't use when**" in ClaudeAdapter.doc
    assert ClaudeAdapter.handoff == "persistent"
