"""Hermes Agent adapter specifics: its command line, its quirks and its environment check.

The adapter runs end to end in tests/test_acp_realcli.py; these are the pieces that need no CLI.
"""

from __future__ import annotations

from pathlib import Path

from bridge.adapters.base import AdapterConfig, contract_problems, instantiate
from bridge.adapters.hermes import HermesAdapter


def test_contract_and_command_line() -> None:
    assert contract_problems(HermesAdapter) == []
    adapter = instantiate(HermesAdapter, {"binary": "/venv/bin/hermes"})
    assert isinstance(adapter, HermesAdapter) and adapter.command_line() == [
        "/venv/bin/hermes",
        "acp",
    ]
    assert HermesAdapter.cumulative_usage


def test_unknown_session_answers_count_as_unknown() -> None:
    h = HermesAdapter()
    assert h.load_failed({}) and h.load_failed(None) and h.load_failed([])
    assert h.load_failed({"models": {}, "modes": {}}) is None


def test_tool_names_come_from_titles_and_approvals_stand_alone() -> None:
    h = HermesAdapter()
    named = h.preprocess_update({"sessionUpdate": "tool_call", "title": "terminal: echo hi"})
    assert named["_meta"] == {"toolName": "terminal"}
    question = {"sessionUpdate": "tool_call", "title": "Approve edit: /a"}
    assert h.preprocess_update(question) is question
    assert h.approval_only("edit-approval-3") and not h.approval_only("tc-1234")


def test_environment_check_finds_the_config(tmp_path: Path) -> None:
    fake = tmp_path / "hermes"
    fake.write_text("#!/bin/sh\necho 'Hermes Agent v0.19.0 (2026.7.20)'\n")
    fake.chmod(0o755)
    home = tmp_path / ".hermes"
    config = AdapterConfig(binary=str(fake), env={"HERMES_HOME": str(home)})
    checks = {c.code: c for c in HermesAdapter.check_environment(config)}
    assert "0.19.0" in (checks["binary_found"].detail or "")
    assert checks["hermes_config"].level == "warn" and "hermes setup" in (
        checks["hermes_config"].hint or ""
    )
    home.mkdir()
    (home / "config.yaml").write_text("model: {provider: custom}\n")
    checks = {c.code: c for c in HermesAdapter.check_environment(config)}
    assert checks["hermes_config"].level == "info"
