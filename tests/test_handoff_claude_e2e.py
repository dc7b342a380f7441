"""One Claude Code conversation moving between the real interactive TUI and the app.

The real ``claude`` TUI runs under a private tmux server, the daemon runs as users start it,
the app is a real WebSocket client, and every model call goes to the fake Anthropic server,
which records the requests: "the bridge continued the same conversation" is checked on what
Claude actually sent to the model.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeAnthropic, Reply
from tests.fakes.core import RecordedRequest
from tests.handoffapp import App
from tests.tmuxterm import Tmux, available
from tests.wsclient import Client

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(realcli.claude_bin() is None, reason=realcli.missing_reason("claude")),
    pytest.mark.skipif(not available(), reason="tmux is not installed"),
]

#: What the daemon needs from the user's Claude environment (the fake endpoint, the config dir).
AGENT_ENV = ("ANTHROPIC_", "CLAUDE_", "DISABLE_")


def said(words: str) -> Callable[[RecordedRequest], bool]:
    return lambda r: words in r.view.last_user_text


def requests_for(srv: FakeAnthropic, words: str) -> list[RecordedRequest]:
    return [r for r in srv.agent_requests if words in r.view.last_user_text]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    async with FakeAnthropic() as srv:
        srv.script(
            Reply(text="Terminal answer one.", when=said("first terminal prompt")),
            Reply(text="Terminal answer two.", when=said("second terminal prompt")),
            Reply(text="Bridge answer three.", when=said("queued from the app")),
            Reply(text="Terminal answer four.", when=said("after the handoff")),
        )
        env = realcli.claude_env(tmp_path / "user", srv.base_url, cwd=work)
        claude = realcli.claude_bin()
        assert claude is not None
        bindir = tmp_path / "bin"  # `claude` on the user's PATH, for the resume command
        bindir.mkdir()
        os.symlink(claude, bindir / "claude")
        env["PATH"] = f"{bindir}:{env['PATH']}"
        daemon = DaemonProcess(
            tmp_path / "daemon",
            config=f'[agents.claude]\nbinary = "{claude}"\n',
            env={k: v for k, v in env.items() if k.startswith(AGENT_ENV)},
        ).start()
        term = Tmux.unique("claude")
        app = App(await Client.open(daemon.url, daemon.token))
        try:
            yield {"srv": srv, "env": env, "work": work, "term": term, "app": app}
        finally:
            await app.c.close()
            term.kill()
            daemon.stop()


async def test_claude_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv: FakeAnthropic = world["srv"]
    env, work, term = world["env"], world["work"], world["term"]
    app: App = world["app"]

    # 1. A session started in the terminal shows up in sessions.list, owned by the terminal.
    term.start(["claude"], env=env, cwd=work)
    term.wait_for("auto mode", 60)
    term.type("first terminal prompt")
    term.wait_for("Terminal answer one.", 90)
    external = await app.listed("claude", str(work))
    assert external["title"] == "first terminal prompt"
    assert (external["state"], external["writer"]) == ("parked", "terminal")
    sid = external["agent_session_id"]

    # 2. Attaching parks it; the app sees the terminal's next turn live through the mirror.
    attached = await app.request(
        "session.attach", agent="claude", agent_session_id=sid, cwd=str(work)
    )
    session = attached["session"]["session"]
    assert (attached["session"]["state"], attached["session"]["writer"]) == ("parked", "terminal")
    await app.request("session.subscribe", session=session)
    await app.until(session, lambda b: b["type"] == "system" and b["code"] == "attached")
    term.type("second terminal prompt")
    user = await app.until(session, lambda b: b["type"] == "user")
    assert (user["text"], user["source"]) == ("second terminal prompt", "terminal")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer two." and end["agent_session_id"] == sid

    # 3. A message from the app while the terminal owns the session waits; nothing is written.
    sent = await app.request(
        "session.send", session=session, text="queued from the app", client_msg_id="app-1"
    )
    assert sent == {"queued": True}
    await app.state(session, "parked", "terminal")  # the pushed state now counts it
    await asyncio.sleep(3)
    assert requests_for(srv, "queued from the app") == []
    listed = (await app.request("sessions.list", include_external=False))["sessions"]
    mine = next(s for s in listed if s["session"] == session)
    assert (mine["state"], mine["writer"], mine["queued"]) == ("parked", "terminal", 1)

    # 4. The terminal exits: the bridge resumes the same conversation, answers the message.
    term.type("/exit")
    term.wait_exit(30)
    await app.state(session, "idle", "bridge")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Bridge answer three."
    assert end["agent_session_id"] == sid  # resumed, not a new conversation
    (request,) = requests_for(srv, "queued from the app")
    assert request.contains("first terminal prompt") and request.contains("second terminal prompt")
    assert request.contains("Terminal answer two.")
    assert [b["id"] for b in app.blocks("user") if b["source"] == "bridge"] == ["app-1"]

    # 5. session.handoff gives the command; run in a terminal it continues the conversation,
    #    which the app sees through the mirror, and the bridge takes it back at exit.
    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["claude", "--resume", sid] and command["cwd"] == str(work)
    assert command["command"] == shlex.join(command["argv"])
    await app.state(session, "parked", "none")  # handed off; no terminal has it yet
    term.respawn(command["argv"], env=env, cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    term.wait_for("Bridge answer three.", 60)  # the resumed history is on screen
    term.type("after the handoff")
    await app.until(session, lambda b: b["type"] == "user" and b["text"] == "after the handoff")
    mark = app.mark()
    await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer four."
    (request,) = requests_for(srv, "after the handoff")
    assert request.contains("queued from the app") and request.contains("Bridge answer three.")

    # 6. /clear in the terminal starts a new session in the same process: the mirror and the
    #    bridge follow it (the lineage head), and the bridge continues that one.
    term.type("/clear")
    await asyncio.sleep(2)
    term.type("after clear")
    lineage = await app.until(session, lambda b: b["type"] == "system" and b["code"] == "lineage")
    new_sid = lineage["data"]["agent_session_id"]
    assert new_sid != sid
    await app.until(session, lambda b: b["type"] == "user" and b["text"] == "after clear")
    await app.until(session, lambda b: b["type"] == "session_end")
    term.type("/exit")
    term.wait_exit(30)
    await app.state(session, "idle", "bridge")
    listed = (await app.request("sessions.list", include_external=False))["sessions"]
    assert next(s for s in listed if s["session"] == session)["agent_session_id"] == new_sid
    await app.request("session.send", session=session, text="last from the app")
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert end["agent_session_id"] == new_sid
    (request,) = requests_for(srv, "last from the app")
    assert request.contains("after clear") and not request.contains("first terminal prompt")
    states = [b["text"] for b in app.blocks("system") if b["code"] == "state"]
    assert any("the terminal took the session" in t for t in states)
    assert any("the terminal released it" in t for t in states)
