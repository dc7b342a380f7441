"""Codex's environment check: binary, version, auth source, cwd (no real CLI needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.adapters.base import AdapterConfig
from bridge.adapters.codex import CodexAdapter
from bridge.blocks import ErrorBlock, SessionEndBlock
from tests.checkkit import by_code, version_only, without


@pytest.fixture
def fake_codex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = version_only(tmp_path / "bin" / "codex", "codex-cli 0.171.0")
    without(monkeypatch, "OPENAI_API_KEY", "CODEX_API_KEY")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    (tmp_path / "codex-home").mkdir()
    return binary


def test_auth_sources_in_order(fake_codex: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_codex.parent.parent / "codex-home"
    config = AdapterConfig(binary=str(fake_codex))
    checks = by_code(CodexAdapter.check_environment(config))
    assert checks["binary_found"].detail == "codex-cli 0.171.0"
    assert checks["codex_auth_missing"].level == "warn"
    (home / "config.toml").write_text('model_provider = "fake"\n')
    assert "codex_auth_provider" in by_code(CodexAdapter.check_environment(config))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-server")
    key = by_code(CodexAdapter.check_environment(config))["codex_auth_api_key"]
    assert key.detail == "the server environment"
    (home / "auth.json").write_text("{}")
    assert "codex_auth_login" in by_code(CodexAdapter.check_environment(config))


def test_missing_binary_and_bad_cwd(fake_codex: Path, tmp_path: Path) -> None:
    config = AdapterConfig(binary=str(tmp_path / "none"), options={"cwd": str(tmp_path / "x")})
    checks = by_code(CodexAdapter.check_environment(config))
    assert checks["binary_missing"].level == "error"
    assert checks["codex_cwd_invalid"].level == "error"


async def test_a_spawn_failure_mid_session_is_an_error_block(
    fake_codex: Path, tmp_path: Path
) -> None:
    adapter = CodexAdapter(cwd=str(tmp_path), binary=str(fake_codex))
    info = await adapter.start("s1")
    assert info.version == "codex-cli 0.171.0" and CodexAdapter.handoff == "per_turn"
    fake_codex.unlink()
    await adapter.send("hello")
    error, end = [b async for b in adapter.stream()]
    assert isinstance(error, ErrorBlock) and error.code == "binary_missing"
    assert isinstance(end, SessionEndBlock) and end.reason == "error"
