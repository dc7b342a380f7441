"""One Codex conversation moving between the real interactive TUI and the app.

Codex 0.171's TUI runs here under tmux with ``--no-daemon`` (without it, the TUI hands the
thread to a shared background app-server that keeps it for about a minute after the TUI
exits; the handoff's resume command uses ``--no-daemon`` for that reason). Codex locks a thread
while a process has it loaded; that lock is the ownership signal (bridge/handoff/codex.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.handoff import procscan
from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeResponses, Reply
from tests.fakes.core import RecordedRequest
from tests.handoffapp import App
from tests.tmuxterm import Tmux, available
from tests.wsclient import Client

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(realcli.codex_bin() is None, reason=realcli.missing_reason("codex")),
    pytest.mark.skipif(not available(), reason="tmux is not installed"),
]


def said(words: str) -> Callable[[RecordedRequest], bool]:
    return lambda r: words in r.view.last_user_text


def requests_for(srv: FakeResponses, words: str) -> list[RecordedRequest]:
    return [r for r in srv.agent_requests if words in r.view.last_user_text]


def kill_strays(marker: str) -> None:
    """End Codex helpers this test's processes left behind (found by their CODEX_HOME)."""
    for pid in procscan.pids():
        if any(marker in arg for arg in procscan.argv_of(pid)):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


async def quit_tui(term: Tmux) -> None:
    term.keys("C-c")
    await asyncio.sleep(0.5)
    term.keys("C-c")
    term.wait_exit(30)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    async with FakeResponses() as srv:
        srv.script(
            Reply(text="Terminal answer one.", when=said("first terminal prompt")),
            Reply(text="Terminal answer two.", when=said("second terminal prompt")),
            Reply(text="Bridge answer three.", when=said("queued from the app")),
            Reply(text="Terminal answer four.", when=said("after the handoff")),
        )
        env = realcli.codex_env(tmp_path / "user", srv.base_url)
        codex = realcli.codex_bin()
        assert codex is not None
        bindir = tmp_path / "bin"  # `codex` on the user's PATH, for the resume command
        bindir.mkdir()
        os.symlink(codex, bindir / "codex")
        env["PATH"] = f"{bindir}:{env['PATH']}"
        daemon = DaemonProcess(
            tmp_path / "daemon",
            config=f'[agents.codex]\nbinary = "{codex}"\n',
            env={"CODEX_HOME": env["CODEX_HOME"], "FAKE_API_KEY": env["FAKE_API_KEY"]},
        ).start()
        term = Tmux.unique("codex")
        app = App(await Client.open(daemon.url, daemon.token))
        try:
            yield {"srv": srv, "env": env, "work": work, "term": term, "app": app}
        finally:
            await app.c.close()
            term.kill()
            daemon.stop()
            kill_strays(env["CODEX_HOME"])


async def test_codex_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv: FakeResponses = world["srv"]
    env, work, term = world["env"], world["work"], world["term"]
    app: App = world["app"]

    # 1. A thread started in the terminal is listed, owned while the TUI has it loaded.
    term.start(["codex", "--no-daemon"], env=env, cwd=work)
    term.wait_for("Ask Codex", 60)
    term.type("first terminal prompt")
    term.wait_for("Terminal answer one.", 90)
    external = await app.listed("codex", str(work))
    assert external["title"] == "first terminal prompt"
    assert (external["state"], external["writer"]) == ("parked", "terminal")
    sid = external["agent_session_id"]

    # 2. Attach: parked, and the terminal's next turn reaches the app through the mirror.
    attached = await app.request(
        "session.attach", agent="codex", agent_session_id=sid, cwd=str(work)
    )
    session = attached["session"]["session"]
    assert attached["session"]["state"] == "parked"
    await app.request("session.subscribe", session=session)
    term.type("second terminal prompt")
    user = await app.until(session, lambda b: b["type"] == "user")
    assert (user["text"], user["source"]) == ("second terminal prompt", "terminal")
    mark = app.mark()
    await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer two."

    # 3. The app's message waits while the TUI holds the thread.
    sent = await app.request(
        "session.send", session=session, text="queued from the app", client_msg_id="app-1"
    )
    assert sent == {"queued": True}
    await asyncio.sleep(3)
    assert requests_for(srv, "queued from the app") == []

    # 4. The TUI exits: the bridge resumes the thread and answers, with the history.
    await quit_tui(term)
    await app.state(session, "idle", "bridge")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end", timeout=120)
    assert app.text(mark) == "Bridge answer three."
    assert end["reason"] == "completed"
    (request,) = requests_for(srv, "queued from the app")
    assert request.contains("first terminal prompt") and request.contains("Terminal answer two.")

    # 5. Continue in a terminal with the command the bridge gives; the app mirrors it.
    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["codex", "--no-daemon", "resume", sid]
    assert command["cwd"] == str(work) and command["command"] == shlex.join(command["argv"])
    await app.state(session, "parked", "none")
    term.respawn(command["argv"], env=env, cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    term.wait_for("Bridge answer three.", 60)  # the resumed history is on screen
    term.wait_for("Ask Codex", 60)
    await asyncio.sleep(1)  # keys typed while the TUI still loads are lost
    term.type("after the handoff")
    term.wait_for("Terminal answer four.", 60)
    await app.until(session, lambda b: b["type"] == "user" and b["text"] == "after the handoff")
    mark = app.mark()
    await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer four."
    (request,) = requests_for(srv, "after the handoff")
    assert request.contains("queued from the app") and request.contains("Bridge answer three.")
    await quit_tui(term)
    await app.state(session, "idle", "bridge")
