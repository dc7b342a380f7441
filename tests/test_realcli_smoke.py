"""Smoke tests: each pinned real agent CLI answers through its fake model server.

Skipped per CLI when it is not installed (``tests/clis/install.sh``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import realcli
from tests.fakes import FakeAnthropic, FakeChat, FakeGemini, FakeResponses, FakeServer, Reply

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120)]

ANSWER = "The fake model says hello 4217."
PROMPT = "Say hello."

Argv = Callable[[str], list[str]]

CASES: dict[str, tuple[type[FakeServer], Argv, str | None]] = {
    # name: (fake server, argv builder given the binary, stdin)
    "claude": (
        FakeAnthropic,
        realcli.claude_print_argv,
        json.dumps(
            {
                "type": "user",
                "message": {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
            }
        )
        + "\n",
    ),
    "codex": (
        FakeResponses,
        lambda b: [b, "exec", "--json", "--skip-git-repo-check", PROMPT],
        None,
    ),
    "gemini": (
        FakeGemini,
        lambda b: [
            b,
            "--skip-trust",
            "-m",
            realcli.GEMINI_MODEL,
            "-p",
            PROMPT,
            "-o",
            "stream-json",
        ],
        None,
    ),
    "opencode": (
        FakeChat,
        lambda b: [b, "run", "--format", "json", "-m", f"fake/{realcli.MODEL}", PROMPT],
        None,
    ),
    "kilo": (
        FakeChat,
        lambda b: [b, "run", "--format", "json", "-m", f"fake/{realcli.MODEL}", PROMPT],
        None,
    ),
    "pi": (
        FakeChat,
        lambda b: [
            b,
            "--provider",
            "fake",
            "--model",
            realcli.MODEL,
            "--mode",
            "json",
            "-p",
            PROMPT,
        ],
        None,
    ),
    "qwen": (FakeChat, lambda b: [b, "-p", PROMPT, "-o", "stream-json"], None),
    "droid": (
        FakeChat,
        lambda b: [b, "exec", "-o", "stream-json", "-m", f"custom:{realcli.MODEL}", PROMPT],
        None,
    ),
    "hermes": (FakeChat, lambda b: [b, "chat", "-q", PROMPT, "-Q"], None),
    "copilot": (
        FakeChat,
        lambda b: [b, "-p", PROMPT, "--model", realcli.MODEL, "--allow-all-tools"],
        None,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cli_answers_through_fake_server(name: str, tmp_path: Path) -> None:
    binary = realcli.cli_bin(name)
    if binary is None:
        pytest.skip(realcli.missing_reason(name))
    fake_cls, argv, stdin = CASES[name]
    with fake_cls() as srv:
        srv.script(Reply(text=ANSWER, chunks=1))
        env = realcli.ENVS[name](tmp_path, srv.base_url)
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        proc = realcli.run(argv(binary), env=env, cwd=work, input=stdin, timeout=90)
        detail = (
            f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
        assert proc.returncode == 0, detail
        assert ANSWER in proc.stdout, detail
        agent = srv.agent_requests
        assert len(agent) == 1, (agent, detail)
        assert PROMPT in agent[0].view.last_user_text
