"""The ACP conformance kit against the real pinned ACP agents, offline against fake model servers.

Gemini CLI, Hermes, Kimi Code and GitHub Copilot CLI through their built-in adapters, Qwen
Code, OpenCode and Kilo through ``[acp.<name>]`` tables (``qwen --acp --approval-mode
default``, ``opencode acp``, ``kilo acp``) as a person would configure them. The fake model
answers the kit's prompts: a short streamed answer, a ``write`` tool call (so the agent asks
before it), and a long answer that stalls until released (cancelled mid-stream). Each agent's
expected report is what its pinned version does (docs/adapters.md, "ACP conformance kit"); a
change in it fails here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.adapters.acp import AcpBase
from bridge.adapters.acp_check import check_adapter
from bridge.adapters.copilot import CopilotAdapter
from bridge.adapters.gemini import GeminiAdapter
from bridge.adapters.hermes import HermesAdapter
from bridge.adapters.kimi import KimiAdapter
from bridge.config import AcpAgentConfig
from bridge.loading.acp_config import adapter_class
from bridge.parsers import acp_conformance as kit
from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeServer, Reply
from tests.harness import after_tool, user

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(400)]

ASK_EDITS = {"permission": {"edit": "ask", "bash": "ask"}}


@dataclass
class Agent:
    name: str
    #: the adapter class, given the binary
    adapter: Callable[[str], type[AcpBase]]
    #: the write tool and the argument naming its file
    write_tool: str
    path_key: str
    #: the argument holding the file's text
    content_key: str = "content"
    #: the adapter's keywords besides binary and env
    values: dict[str, Any] = field(default_factory=dict)
    env_options: dict[str, Any] = field(default_factory=dict)
    #: the report the pinned version gives: step → status (and a word of the reason)
    expected: dict[str, str] = field(default_factory=dict)


def configured(name: str, *args: str) -> Callable[[str], type[AcpBase]]:
    """The class an ``[acp.<name>]`` table with ``command = [binary, *args]`` makes."""

    def make(binary: str) -> type[AcpBase]:
        cls = adapter_class(name, AcpAgentConfig(command=[binary, *args]))
        assert issubclass(cls, AcpBase)
        return cls

    return make


ALL_OK = {step.name: "ok" for step in kit.STEPS}

AGENTS = {
    a.name: a
    for a in (
        Agent(
            "gemini",
            lambda _b: GeminiAdapter,
            "write_file",
            "file_path",
            values={"model": realcli.GEMINI_MODEL},
            expected=ALL_OK,
        ),
        Agent("hermes", lambda _b: HermesAdapter, "write_file", "path", expected=ALL_OK),
        Agent(
            "qwen",
            configured("qwen", "--acp", "--approval-mode", "default"),
            "write_file",
            "file_path",
            expected=ALL_OK,
        ),
        Agent("kimi", lambda _b: KimiAdapter, "WriteFile", "path", expected=ALL_OK),
        Agent(
            "copilot",
            lambda _b: CopilotAdapter,
            "create",
            "path",
            content_key="file_text",
            values={"model": realcli.MODEL},
            expected=ALL_OK,
        ),
        Agent(
            "opencode",
            configured("opencode-acp", "acp"),
            "write",
            "filePath",
            env_options={"config": ASK_EDITS},
            expected=ALL_OK,
        ),
        Agent(
            "kilo",
            configured("kilo-acp", "acp"),
            "write",
            "filePath",
            env_options={"config": ASK_EDITS},
            expected=ALL_OK,
        ),
    )
}


@pytest.fixture(params=list(AGENTS))
def agent(request: pytest.FixtureRequest) -> Agent:
    spec = AGENTS[request.param]
    if realcli.cli_bin(spec.name) is None:
        pytest.skip(realcli.missing_reason(spec.name))
    return spec


@pytest.fixture
def fake(agent: Agent) -> Iterator[FakeServer]:
    server = realcli_session.fake_server(agent.name).start()
    yield server
    server.release()
    server.stop()


async def test_the_kit_against_the_real_agent(
    agent: Agent, fake: FakeServer, tmp_path: Path
) -> None:
    binary = realcli.cli_bin(agent.name)
    assert binary is not None
    env = realcli.ENVS[agent.name](tmp_path / "cli", fake.base_url, **agent.env_options)
    work = tmp_path / "work"
    work.mkdir()
    # an absolute path, as the tools of Qwen and Gemini want it
    write_args = {agent.path_key: str(work / "acp-check.txt"), agent.content_key: "ok\n"}
    fake.script(
        Reply(text="Hello from the fake model.", chunks=4, when=user("Reply with")),
        CallTool(agent.write_tool, write_args, when=user("Create a file")),
        Reply(text="I was not allowed to.", when=after_tool("Create a file")),
        realcli_session.stalling("1 is one. " * 40, "Count slowly", 20, 2),
    )
    outcomes = await check_adapter(
        agent.adapter(binary),
        {"binary": binary, "env": env, **agent.values},
        step_timeout=120,
        cwd=str(work),
    )
    report = "\n".join(o.line() for o in outcomes)
    print(f"\n{agent.name} {realcli.VERSIONS[agent.name]}:\n{report}")
    assert {o.step: o.status for o in outcomes} == agent.expected, report
    assert not (work / "acp-check.txt").exists()  # the kit rejected the write
