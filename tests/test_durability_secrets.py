"""Secrets in logs: redacted before any cut, every agent env value, any piece of the token."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from bridge.auth import load_or_create_token
from bridge.logs import configure_logging, get_logger
from bridge.parsers import jsonrpc
from bridge.process import ChildProcess, build_env
from bridge.redact import FRAGMENT_LEN

PRINT_PAT = "import os, sys; sys.stderr.write('pat=' + os.environ['GITHUB_PAT'] + '\\n')"


def _logged(**fields: str) -> str:
    out = io.StringIO()
    configure_logging("debug", "json", out)
    try:
        get_logger("tests").warning("something", **fields)
    finally:
        configure_logging("info", "auto")
    return out.getvalue()


def _pieces(secret: str) -> list[str]:
    return [secret[i : i + FRAGMENT_LEN] for i in range(len(secret) - FRAGMENT_LEN + 1)]


def test_any_12_character_piece_of_the_token_is_masked(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path / "token")
    line = _logged(detail=f"cut: {token[5:31]}… and {token[-14:]} and {token[:FRAGMENT_LEN]}")
    assert not [p for p in _pieces(token) if p in line], line
    assert "***" in line


def test_acp_preview_redacts_before_it_cuts(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path / "token")
    # Not JSON, with the token across the preview's 200-character end.
    line = ("x" * 190 + token + " tail").encode()
    message = jsonrpc.decode(line)
    assert isinstance(message, jsonrpc.Invalid)
    logged = _logged(preview=message.preview)
    assert token[:6] not in message.preview and token[:6] not in logged, message.preview


async def test_every_value_passed_in_an_agent_env_is_masked_whatever_its_name() -> None:
    value = "ghp_plainnamedvalue4242"
    env = build_env({"GITHUB_PAT": value})  # a name that does not look secret
    child = await ChildProcess.spawn(
        [sys.executable, "-c", PRINT_PAT],
        env=env,
    )
    assert await child.read_line(timeout=30) is None
    await child.wait(30)
    assert value not in child.stderr_tail(4000)
    logged = _logged(detail=f"the agent said {value}")
    assert value not in logged and json.loads(logged)["detail"] == "the agent said ***"
