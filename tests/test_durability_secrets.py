"""Secrets in logs: redacted before any cut, every agent env value, any piece of the token."""

from __future__ import annotations

import io
import json
import secrets
import string
import sys
from pathlib import Path

import pytest

from bridge.logs import configure_logging, get_logger
from bridge.parsers import jsonrpc
from bridge.process import ChildProcess, build_env
from bridge.server.auth import load_or_create_token
from bridge.util.redact import FRAGMENT_LEN, redact, remember_env_secrets
from tests.daemon import DaemonProcess
from tests.daemonkit import install_dropin
from tests.loaderkit import new_session, say
from tests.wsclient import Client, RequestFailed, text_of

FAKE_ACP = Path(__file__).parent / "fixtures" / "acp" / "fake_agent.py"

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


def test_a_piece_cut_at_a_truncation_boundary_is_masked() -> None:
    value = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))
    remember_env_secrets({"SOME_SERVICE_PAT": value})
    for cut in range(FRAGMENT_LEN, len(value) + 1):
        # What a call site that shortens a message before logging it leaves of the value.
        assert value[:cut] not in redact(f"error: {value[:cut]}"), cut
        assert value[-cut:] not in redact(f"{value[-cut:]}…"), cut
    assert redact(f"x{value[:30]}") == "x***"
    # A name that does not look secret is not collected; shorter values are never pieces.
    remember_env_secrets({"COMPATIBLE_MODE": "ordinary-text-here", "API_KEY": "short1"})
    assert redact("ordinary-text-here") == "ordinary-text-here"
    assert redact("a short1 word") == "a *** word"
    assert redact("short") == "short"
    # A path in a secret-named variable is masked whole, its pieces are not (other paths
    # share them).
    remember_env_secrets({"GNOME_KEYRING_CONTROL": "/run/user/1000/keyring"})
    assert redact("at /run/user/1000/keyring") == "at ***"
    assert redact("/run/user/1000/agent-bridge/bridge.sock") == (
        "/run/user/1000/agent-bridge/bridge.sock"
    )


DROPIN_RAISES = """
import os
raise RuntimeError("cannot reach the API with " + os.environ["GITHUB_PAT"])
"""

DROPIN_START_RAISES = """
import os
from bridge.adapters.base import BaseAdapter


class Refuses(BaseAdapter):
    agent_id = "refuses"
    display_name = "Refuses"
    provides_models = False
    provides_usage = False

    def __init__(self, model=None):
        pass

    async def start(self, session_id):
        # Cut, as a message shortened before it is raised would be.
        raise RuntimeError("bad credentials " + os.environ["GITHUB_PAT"][:30])

    async def send(self, text, attachments=None):
        pass

    async def stream(self):
        yield None

    async def stop(self):
        pass
"""


async def test_a_secret_in_the_daemons_environment_never_reaches_its_log(tmp_path: Path) -> None:
    value = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))
    config = (
        '[log]\nlevel = "debug"\nformat = "json"\n\n'
        f"[acp.fake]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_ACP))}]\n"
        'display_name = "Fake"\n'
    )
    install_dropin(tmp_path, "leaky.py", DROPIN_RAISES)
    install_dropin(tmp_path, "refuses.py", DROPIN_START_RAISES)
    d = DaemonProcess(tmp_path, config=config, env={"GITHUB_PAT": value})
    cwd = tmp_path / "work"
    cwd.mkdir()
    d.start()
    try:
        c = await Client.open(d.url, d.token)
        try:
            session = await new_session(c, "fake", cwd)
            assert "garbled" in text_of(await say(c, session, "garble GITHUB_PAT"))
            with pytest.raises(RequestFailed):
                await c.request("session.create", agent="refuses", cwd=str(cwd))
        finally:
            await c.close()
    finally:
        d.stop()
    log = d.log_text()
    events = {json.loads(line).get("event") for line in log.splitlines() if line.startswith("{")}
    assert {"adapter_file_failed", "adapter_start_failed", "acp_invalid_line"} <= events, log
    leaked = [p for p in _pieces(value) if p in log]
    assert not leaked, log
