"""Gemini CLI, Hermes Agent and Qwen Code end to end over ACP, each the real pinned CLI.

One daemon serves the module with ``[agents.gemini]``, ``[agents.hermes]`` and an
``[acp.qwen]`` table (Qwen has no built-in adapter: it comes in through config alone). Each
agent talks to its own fake model server (FakeGemini, FakeChat). A real WebSocket client
drives the sessions: a streamed answer, a shell tool call with its output, a file written as
a ``diff`` (after the app allows it), a second session resuming the first, an unknown session
reset, and the agent killed mid-turn (then the next turn brings it back).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeServer, Reply
from tests.harness import (
    Harness,
    after_tool,
    assert_tool_calls_paired,
    create,
    daemon_env,
    deltas,
    detected,
    finish_turn,
    kill_agent,
    of,
    run_turn,
    user,
)
from tests.wsclient import text_of

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(240)]
#: Qwen asks before tools (its default approval mode), as the others do
QWEN_ARGS = ("--acp", "--approval-mode", "default")

ANSWER = "The fake model says hello 4217."
WRITTEN = "made by the agent\n"


@dataclass
class Agent:
    name: str
    #: its shell tool
    shell_tool: str
    #: the argument of its ``write_file`` tool that names the file
    path_key: str

    @property
    def binary(self) -> str | None:
        return realcli.cli_bin(self.name)

    @property
    def shell(self) -> tuple[str, dict[str, Any]]:
        return self.shell_tool, {"command": "echo hello-from-tool"}

    def write(self, project: Path) -> tuple[str, dict[str, Any]]:
        return "write_file", {self.path_key: str(project / "made.txt"), "content": WRITTEN}


AGENTS = {
    agent.name: agent
    for agent in (
        Agent("gemini", "run_shell_command", "file_path"),
        Agent("hermes", "terminal", "path"),
        Agent("qwen", "run_shell_command", "file_path"),
    )
}
#: agent → (agent session id, project) of the first session, for the resume test
FIRST_SESSION: dict[str, tuple[str, Path]] = {}


def allow_once(request: dict[str, Any]) -> str:
    return realcli_session.option_of_kind(request, "allow_once")


def reject_once(request: dict[str, Any]) -> str:
    return realcli_session.option_of_kind(request, "reject_once")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeServer]]:
    servers = {name: realcli_session.fake_server(name).start() for name in AGENTS}
    yield servers
    for srv in servers.values():
        srv.stop()


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory, fakes: dict[str, FakeServer]
) -> Iterator[Harness]:
    root = tmp_path_factory.mktemp("acp-e2e")
    env: dict[str, str] = {}
    config = ""
    for name, agent in AGENTS.items():
        cli_env = realcli.ENVS[name](root / "cli", fakes[name].base_url)
        env.update(cli_env)  # one HOME, each CLI's own files
        if agent.binary:
            config += realcli_session.daemon_config(
                name, agent.binary, cli_env, qwen_args=QWEN_ARGS
            )
    h = Harness(root / "daemon", daemon_env(env), config)
    yield h
    h.stop()


@pytest.fixture(params=list(AGENTS))
def agent(request: pytest.FixtureRequest) -> Agent:
    spec = AGENTS[request.param]
    if spec.binary is None:
        pytest.skip(realcli.missing_reason(spec.name))
    return spec


async def test_streamed_answer_tool_call_and_edit_as_diff(
    agent: Agent, harness: Harness, fakes: dict[str, FakeServer], project: Path
) -> None:
    fake = fakes[agent.name]
    tool, args = agent.shell
    write_tool, write_args = agent.write(project)
    fake.script(
        Reply(text=ANSWER, thinking="Let me think about it.", chunks=4, when=user("Say hello")),
        CallTool(tool, args, when=user("Run echo")),
        Reply(text="It printed hello-from-tool.", when=after_tool("Run echo")),
        CallTool(write_tool, write_args, when=user("Try to write")),
        Reply(text="I was not allowed.", when=after_tool("Try to write")),
        CallTool(write_tool, write_args, when=user("Write made.txt")),
        Reply(text="Wrote made.txt.", when=after_tool("Write made.txt")),
    )
    async with harness.client() as c:
        entry = await detected(c, agent.name)
        assert entry["available"], entry
        assert realcli.VERSIONS[agent.name] in (entry["version"] or "")
        session, info = await create(c, agent.name, project)
        assert info["agent"] == agent.name and info["version"] == realcli.VERSIONS[agent.name]
        assert info["capabilities"]["permissions"] and info["capabilities"]["interrupt"]

        frames = await run_turn(c, session, "Say hello.", timeout=120)
        # (Gemini trims each thought chunk, so compare without the spaces)
        thought = "".join(b["text"] for b in of(frames, "thinking"))
        assert "".join(thought.split()) == "Letmethinkaboutit."
        parts = deltas(frames)
        assert text_of(frames) == ANSWER and len(parts) >= 2
        assert len({p["id"] for p in of(frames, "text")}) == 1
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]
        assert of(frames, "usage")[-1]["input_tokens"]
        FIRST_SESSION[agent.name] = (end["agent_session_id"], project)

        frames = await run_turn(c, session, "Run echo hello-from-tool.", answer=allow_once)
        assert_tool_calls_paired(frames)
        calls = of(frames, "tool_call")
        assert calls[0]["status"] == "running" and calls[-1]["status"] == "done"
        (result,) = of(frames, "tool_result")
        assert "hello-from-tool" in result["content"] and not result["is_error"]
        assert "hello-from-tool" in " ".join(fake.agent_requests[-1].view.tool_results)
        assert "It printed hello-from-tool." in text_of(frames)

        # declined from the app: the call fails and the file stays untouched (Gemini and Hermes
        # tell the model and go on; Qwen ends the turn there)
        frames = await run_turn(c, session, "Try to write made.txt.", answer=reject_once)
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request")
        assert of(frames, "tool_call")[-1]["status"] == "error"
        assert not (project / "made.txt").exists()
        if agent.name != "qwen":
            assert "I was not allowed." in text_of(frames)

        frames = await run_turn(c, session, "Write made.txt.", answer=allow_once)
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request"), "writing a file asks the app first"
        diffs = [d for d in of(frames, "diff") if d["path"].endswith("made.txt")]
        assert diffs and diffs[-1]["new_text"] == WRITTEN and diffs[-1]["unified"]
        assert (project / "made.txt").read_text() == WRITTEN
        assert of(frames, "session_end")[-1]["reason"] == "completed"
        await c.request("session.close", session=session)


async def test_resume_then_unknown_session_then_killed_mid_turn(
    agent: Agent, harness: Harness, fakes: dict[str, FakeServer]
) -> None:
    if agent.name not in FIRST_SESSION:
        pytest.skip("the first session did not run")
    first, project = FIRST_SESSION[agent.name]  # sessions resume in their own directory
    fake = fakes[agent.name]
    async with harness.client() as c:
        # a new bridge session resumes the agent's first session: the model sees its history
        fake.script(Reply(text="Resumed.", when=user("Again")))
        session, _ = await create(c, agent.name, project, resume=first)
        frames = await run_turn(c, session, "Again?", timeout=120)
        assert text_of(frames) == "Resumed."
        assert not [b for b in of(frames, "system") if b["code"] == "session_reset"]
        assert of(frames, "session_end")[-1]["agent_session_id"] == first
        assert fake.agent_requests[-1].contains(ANSWER)
        await c.request("session.close", session=session)

        # an id the agent does not know: a fresh session, and the app is told once
        fake.script(Reply(text="Fresh start.", when=user("Hello after reset")))
        session, frames, end = await realcli_session.reset_turn(
            c, agent.name, project, "Hello after reset.", timeout=120
        )
        assert text_of(frames) == "Fresh start."
        fresh = end["agent_session_id"]

        # interrupted from the app while the model streams: the agent stops the turn and lives on
        fake.script(realcli_session.stalling("A reply that goes on and on.", "Go on and on", 6, 2))
        try:
            frames = await realcli_session.send_until_streaming(
                c, session, "Go on and on.", timeout=120
            )
            frames += await realcli_session.interrupt(c, session, timeout=60)
        finally:
            fake.release()
        realcli_session.assert_interrupted(frames)

        # the agent is killed while it streams: the turn ends with an error, nothing hangs
        story = "This answer never finishes, sadly."
        fake.script(realcli_session.stalling(story, "Tell a long story", 6, 2))
        try:
            frames = await realcli_session.send_until_streaming(
                c, session, "Tell a long story.", timeout=120
            )
            assert agent.binary is not None
            await kill_agent(harness, agent.binary)
            frames += await finish_turn(c, session, timeout=60)
        finally:
            fake.release()
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "error"
        errors = realcli_session.crashed(frames)
        assert errors and "SIGKILL" in errors[0]["message"]
        assert_tool_calls_paired(frames)

        # the next turn starts the agent again on the same session
        fake.script(Reply(text="Back again.", when=user("Still there")))
        frames = await run_turn(c, session, "Still there?", timeout=120)
        assert [b for b in of(frames, "system") if b["code"] == "agent_restarted"]
        assert text_of(frames) == "Back again."
        assert of(frames, "session_end")[-1]["agent_session_id"] == fresh
        await c.request("session.close", session=session)
