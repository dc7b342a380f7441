"""The reference adapter (ext_adapters_example/) works when copied into a running daemon.

First its parser is checked against toy-agent output recorded in ext_adapters_example/recorded/
(the way docs/writing-an-adapter.md tells authors to test theirs). Then the two files are
copied, exactly as the README says, into the adapters directory of a daemon that is already
running, and a WebSocket client drives every feature: detection, checks, models, turns that
resume, a permission, /model, interrupt, a failing agent, and a handoff to the terminal chat
and back.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.blocks import block_to_json
from bridge.invariants import TurnGuard
from tests.daemon import ROOT, DaemonProcess
from tests.wsclient import Client, blocks, text_of

EXAMPLE = ROOT / "ext_adapters_example"
RECORDED = EXAMPLE / "recorded"


def load_example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("toy_example_under_test", EXAMPLE / "toy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


toy = load_example()


# ---- the parser on recorded output ---------------------------------------------------------------


def replay(name: str, exit_code: int | None = 0, stderr: str = "") -> list[Any]:
    parser = toy.ToyParser()
    out: list[Any] = []
    for line in (RECORDED / name).read_bytes().splitlines():
        out += parser.feed(line)
    out += parser.finish(exit_code, stderr, interrupted=False)
    return out


def kinds(out: list[Any]) -> list[str]:
    return [type(b).__name__ for b in out]


def test_parser_on_a_recorded_turn() -> None:
    out = replay("turn.jsonl")
    assert kinds(out)[0] == "ThinkingBlock" and kinds(out)[-1] == "SessionEndBlock"
    end = out[-1]
    assert end.reason == "completed" and end.agent_session_id.startswith("toy-")
    text = "".join(b.text for b in out if type(b).__name__ == "TextBlock")
    assert text.startswith("You said: hello there.") and "turn 1 of session" in text
    # The hub's invariant checker finds nothing to repair: the parser's stream is correct.
    guard = TurnGuard()
    repaired = [b for block in out for b in guard.feed(block)]
    assert [block_to_json(b) for b in repaired] == [block_to_json(b) for b in out]


def test_parser_on_a_recorded_permission_turn() -> None:
    out = replay("write_turn.jsonl")
    names = kinds(out)
    assert "PermissionRequestBlock" in names and "DiffBlock" in names
    perm = out[names.index("PermissionRequestBlock")]
    assert perm.tool_call_id == "t2" and {o.id for o in perm.options} == {"allow", "deny"}
    diff = out[names.index("DiffBlock")]
    assert diff.path == "toy.txt" and diff.new_text == "hi there\n" and diff.old_text is None
    statuses = [(b.id, b.status) for b in out if type(b).__name__ == "ToolCallBlock"]
    assert statuses == [("t1", "running"), ("t1", "done"), ("t2", "running"), ("t2", "done")]
    usage = next(b for b in out if type(b).__name__ == "UsageBlock")
    assert usage.input_tokens == 23 and usage.output_tokens == 17


def test_parser_when_the_agent_fails() -> None:
    out = replay("fail_turn.jsonl", exit_code=3, stderr="toy-agent: failing on request\n")
    error = next(b for b in out if type(b).__name__ == "ErrorBlock")
    assert error.code == "agent_error" and error.detail == "toy-agent: failing on request"
    assert error.retryable is False and error.message == "toy-agent exited with code 3"
    assert out[-1].reason == "error" and out[-1].exit_code == 3


def test_parser_classifies_what_the_agent_reports() -> None:
    """The example uses classify_failure: a kill is a crash (retryable), a 429 a rate limit."""
    out = replay("fail_turn.jsonl", exit_code=-9)
    crash = next(b for b in out if type(b).__name__ == "ErrorBlock")
    assert (crash.code, crash.retryable) == ("agent_crashed", True) and crash.hint
    out = replay("fail_turn.jsonl", exit_code=1, stderr="toy-agent: HTTP 429 Too Many Requests\n")
    limited = next(b for b in out if type(b).__name__ == "ErrorBlock")
    assert (limited.code, limited.retryable) == ("rate_limited", True)


def test_parser_treats_output_as_data() -> None:
    parser = toy.ToyParser()
    odd = parser.feed(b"not json at all")
    assert kinds(odd) == ["SystemBlock"] and odd[0].code == "unparsed_output"
    assert parser.feed(b'{"type": "from_a_newer_version", "x": 1}') == []
    assert parser.feed(b"[1, 2]") == []


# ---- copied into a running daemon ----------------------------------------------------------------


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("example")
    (home / "config" / "agent-bridge" / "adapters").mkdir(parents=True, mode=0o700)
    d = DaemonProcess(home, env={"TOY_AGENT_HOME": str(home / "toy-home")}).start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def installed(running: DaemonProcess) -> DaemonProcess:
    """Copy the two files as the README says; the daemon picks them up on its own."""

    async def copy_and_wait() -> None:
        c = await Client.open(running.url, running.token)
        target = running.config_dir / "adapters"
        for name in ("_toy_agent.py", "toy.py"):
            shutil.copy(EXAMPLE / name, target / name)
            (target / name).chmod(0o644)  # the README's `chmod go-w`
        while True:
            frame = await c.next_push(20)
            if frame["t"] == "agents_changed":
                break
        await c.close()

    asyncio.run(copy_and_wait())
    return running


@pytest.fixture
async def toy_session(installed: DaemonProcess, project: Path) -> AsyncIterator[tuple[Client, str]]:
    """A client and a new toy session in ``project`` it is subscribed to; closed after."""
    c = await Client.open(installed.url, installed.token)
    result = await c.request("session.create", agent="toy", cwd=str(project))
    assert result["info"]["agent"] == "toy"
    session = str(result["session"]["session"])
    await c.request("session.subscribe", session=session)
    yield c, session
    await c.close()


async def say(c: Client, session: str, text: str) -> list[dict[str, Any]]:
    await c.request("session.send", session=session, text=text)
    return await c.turn(session, timeout=60)


async def test_it_is_detected_checked_and_lists_models(installed: DaemonProcess) -> None:
    c = await Client.open(installed.url, installed.token)
    agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
    toy_agent = agents["toy"]
    assert toy_agent["available"] and toy_agent["source"] == "external"
    assert toy_agent["version"] == "toy-agent 1.2.0"
    assert toy_agent["file"] == str(installed.config_dir / "adapters" / "toy.py")
    assert toy_agent["handoff"] == "per_turn" and "**Use when**" in toy_agent["doc"]
    assert toy_agent["capabilities"]["permissions"] and toy_agent["capabilities"]["interrupt"]
    assert "_toy_agent" not in agents  # the helper program is not mistaken for an adapter
    check = await c.request("agents.check", agent="toy")
    assert check["status"] == "pass", check
    models = (await c.request("models.list", agent="toy"))["models"]
    assert [m["id"] for m in models] == ["toy-small", "toy-large"]
    await c.close()


async def test_turns_stream_every_block_and_resume_the_session(
    toy_session: tuple[Client, str],
) -> None:
    c, session = toy_session
    frames = await say(c, session, "hello")
    types_seen = [b["type"] for b in blocks(frames)]
    for kind in ("user", "thinking", "tool_call", "tool_result", "text", "usage", "session_end"):
        assert kind in types_seen
    assert "README.md" in blocks(frames, "tool_result")[0]["content"]
    end = blocks(frames, "session_end")[-1]
    sid = end["agent_session_id"]
    assert end["reason"] == "completed" and sid.startswith("toy-")
    assert f"This is turn 1 of session {sid}" in text_of(frames)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    assert next(s for s in listed if s["session"] == session)["agent_session_id"] == sid
    frames = await say(c, session, "again")
    assert f"This is turn 2 of session {sid}" in text_of(frames)
    await c.request("session.send", session=session, text="/model toy-large")
    assert text_of(await say(c, session, "bigger")).startswith("[toy-large] You said: bigger")


async def test_permission_diff_interrupt_and_failure(
    toy_session: tuple[Client, str], project: Path
) -> None:
    c, session = toy_session
    await c.request("session.send", session=session, text="write from the phone")
    frames = await c.events_until(lambda b: b["type"] == "permission_request", session=session)
    request = blocks(frames, "permission_request")[-1]
    await c.request(
        "session.permission", session=session, request_id=request["id"], option_id="allow"
    )
    frames += await c.turn(session)
    diff = blocks(frames, "diff")[0]
    assert diff["path"] == "toy.txt" and diff["new_text"] == "from the phone\n"
    assert (project / "toy.txt").read_text() == "from the phone\n"

    await c.request("session.send", session=session, text="sleep 60")
    await c.events_until(
        lambda b: b.get("code") == "state" and b["data"]["state"] == "running", session=session
    )
    await asyncio.sleep(0.5)
    await c.request("session.interrupt", session=session)
    frames = await c.turn(session, timeout=30)
    assert blocks(frames, "session_end")[-1]["reason"] == "interrupted"
    assert not blocks(frames, "error")  # the adapter stopped the agent itself, not forced

    frames = await say(c, session, "fail")
    error = blocks(frames, "error")[0]
    assert error["code"] == "agent_error" and "failing on request" in error["detail"]
    assert blocks(frames, "session_end")[-1] == {
        **blocks(frames, "session_end")[-1],
        "reason": "error",
        "exit_code": 3,
    }


async def test_handoff_to_the_terminal_chat_and_back(
    installed: DaemonProcess, project: Path, toy_session: tuple[Client, str]
) -> None:
    c, session = toy_session
    frames = await say(c, session, "before the handoff")
    sid = blocks(frames, "session_end")[-1]["agent_session_id"]
    command = await c.request("session.handoff", session=session)
    assert command["argv"][-2:] == ["--resume", sid] and command["cwd"] == str(project)
    env = {**os.environ, "TOY_AGENT_HOME": installed.env["TOY_AGENT_HOME"]}
    terminal = subprocess.Popen(
        command["argv"],
        cwd=command["cwd"],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        await c.events_until(
            lambda b: b.get("code") == "state" and b["data"]["writer"] == "terminal",
            session=session,
        )
        assert terminal.stdin is not None
        terminal.stdin.write("typed in the terminal\n")
        terminal.stdin.flush()
        mirrored = await c.events_until(lambda b: b["type"] == "text", session=session)
        user = blocks(mirrored, "user")[-1]
        assert user["text"] == "typed in the terminal" and user["source"] == "terminal"
        assert f"turn 2 of session {sid}" in text_of(mirrored)
        listed = (await c.request("sessions.list"))["sessions"]
        assert next(s for s in listed if s["session"] == session)["state"] == "parked"
    finally:
        if terminal.stdin is not None:
            terminal.stdin.close()
        terminal.wait(15)
    released = await c.events_until(
        lambda b: b.get("code") == "state" and b["data"]["state"] == "idle",
        session=session,
        timeout=30,
    )
    # The terminal's turn got its answer: it ended normally, though toy-agent's file marks
    # no turn end (it was labelled `interrupted` when the mirror stopped).
    assert [b["reason"] for b in blocks(released, "session_end")] == ["completed"]
    frames = await say(c, session, "back in the app")
    assert f"This is turn 3 of session {sid}" in text_of(frames)


async def test_a_terminal_only_session_is_listed(installed: DaemonProcess, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "TOY_AGENT_HOME": installed.env["TOY_AGENT_HOME"]}
    subprocess.run(
        [sys.executable, str(installed.config_dir / "adapters" / "_toy_agent.py")],
        input="started in a terminal\n",
        text=True,
        cwd=elsewhere,
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )
    c = await Client.open(installed.url, installed.token)
    for _ in range(40):  # the daemon caches the external scan for a few seconds
        listed = (await c.request("sessions.list"))["sessions"]
        mine = [s for s in listed if s["external"] and s["cwd"] == str(elsewhere)]
        if mine:
            break
        await asyncio.sleep(0.5)
    assert mine and mine[0]["agent"] == "toy" and mine[0]["title"] == "started in a terminal"
    await c.close()


# ---- the documented imports ----------------------------------------------------------------------

#: A drop-in that imports every name docs/writing-an-adapter.md tells authors to import, from
#: where it says; the layout of bridge/ may change, these imports may not.
DOCUMENTED_IMPORTS_DROPIN = """
from typing import ClassVar

from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    BaseAdapter,
    Check,
    DetectedAgent,
    ExternalSession,
    ModelInfo,
    ResumeCommand,
    classify_failure,
    cwd_matches,
)
from bridge.adapters.handoff_hooks import HandoffModule, ModuleHandoff
from bridge.blocks import SessionEndBlock, TextBlock
from bridge.handoff import claude as claude_handoff
from bridge.handoff import codex as codex_handoff
from bridge.handoff.procscan import is_own
from bridge.invariants import TurnGuard
from bridge.process import OWN_PIDS, ChildProcess

USED = (CONTINUE_PROMPT, AdapterConfig, Check, DetectedAgent, ExternalSession, ModelInfo,
        ResumeCommand, classify_failure, cwd_matches, HandoffModule, codex_handoff, is_own,
        TurnGuard, OWN_PIDS, ChildProcess)


class Documented(ModuleHandoff, BaseAdapter):
    agent_id = "documented"
    display_name = "Documented imports"
    provides_models = False
    provides_usage = False
    handoff_module: ClassVar[HandoffModule] = claude_handoff

    def __init__(self, model=None):
        self.sent = []

    async def start(self, session_id):
        return self.make_agent_info(version="1")

    async def send(self, text, attachments=None):
        self.sent.append(text)

    async def stream(self):
        for text in self.sent:
            yield TextBlock(text=text)
            yield SessionEndBlock(reason="completed")

    async def interrupt(self):
        pass

    async def stop(self):
        pass
"""


def adapters_check(home: Path, path: Path) -> subprocess.CompletedProcess[str]:
    """``agent-bridge adapters check``: the daemon's own import probe, in a subprocess."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")}
    return subprocess.run(
        [sys.executable, "-m", "bridge", "adapters", "check", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", ["toy.py", "documented.py"])
def test_a_drop_in_written_against_the_documented_imports_loads(tmp_path: Path, name: str) -> None:
    """The reference adapter, and a drop-in importing every name the guide gives from where it
    gives it, pass the checks the daemon's loader applies before it imports a file."""
    if name == "toy.py":
        path = tmp_path / name
        shutil.copy(EXAMPLE / name, path)
        shutil.copy(EXAMPLE / "_toy_agent.py", tmp_path / "_toy_agent.py")
    else:
        path = tmp_path / name
        path.write_text(DOCUMENTED_IMPORTS_DROPIN)
    path.chmod(0o600)
    run = adapters_check(tmp_path, path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{path}: ok" in run.stdout
