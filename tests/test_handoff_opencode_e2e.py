"""One OpenCode conversation moving between the real interactive TUI and the app.

OpenCode keeps sessions in SQLite; the mirror polls it read-only (woken by the database's WAL
file changing). There is no lock or registry: an ``opencode`` process (not the daemon's) in the
session's directory owns it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeChat, Reply
from tests.fakes.core import RecordedRequest
from tests.handoffapp import App
from tests.tmuxterm import Tmux, available
from tests.wsclient import Client

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(realcli.opencode_bin() is None, reason=realcli.missing_reason("opencode")),
    pytest.mark.skipif(not available(), reason="tmux is not installed"),
]


def said(words: str) -> Callable[[RecordedRequest], bool]:
    return lambda r: words in r.view.last_user_text


def requests_for(srv: FakeChat, words: str) -> list[RecordedRequest]:
    return [r for r in srv.agent_requests if words in r.view.last_user_text]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    async with FakeChat() as srv:
        srv.script(
            Reply(text="Terminal answer one.", when=said("first terminal prompt")),
            Reply(text="Terminal answer two.", when=said("second terminal prompt")),
            Reply(text="Bridge answer three.", when=said("queued from the app")),
            Reply(text="Terminal answer four.", when=said("after the handoff")),
        )
        env = realcli.opencode_env(tmp_path / "user", srv.base_url)
        opencode = realcli.opencode_bin()
        assert opencode is not None
        bindir = tmp_path / "bin"
        bindir.mkdir()
        os.symlink(opencode, bindir / "opencode")
        env["PATH"] = f"{bindir}:{env['PATH']}"
        xdg = {k: v for k, v in env.items() if k.startswith("XDG_")}
        agent_env = ", ".join(f'{k} = "{v}"' for k, v in xdg.items())
        daemon = DaemonProcess(
            tmp_path / "daemon",
            config=(
                f'[agents.opencode]\nbinary = "{opencode}"\nmodel = "fake/{realcli.MODEL}"\n'
                f"env = {{ {agent_env} }}\n"
            ),
            # The handoff hooks read the database where the user's OpenCode keeps it.
            env={"XDG_DATA_HOME": env["XDG_DATA_HOME"]}
            | {k: v for k, v in env.items() if k.startswith("OPENCODE_")},
        ).start()
        term = Tmux.unique("opencode")
        app = App(await Client.open(daemon.url, daemon.token))
        try:
            yield {"srv": srv, "env": env, "work": work, "term": term, "app": app}
        finally:
            await app.c.close()
            term.kill()
            daemon.stop()


async def quit_tui(term: Tmux) -> None:
    term.keys("C-c")
    await asyncio.sleep(0.5)
    if not term.dead():
        term.keys("C-c")
    term.wait_exit(30)


async def test_opencode_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv: FakeChat = world["srv"]
    env, work, term = world["env"], world["work"], world["term"]
    app: App = world["app"]

    term.start(["opencode"], env=env, cwd=work)
    term.wait_for("ctrl+p", 60)
    await asyncio.sleep(1)
    term.type("first terminal prompt")
    term.wait_for("Terminal answer one.", 90)
    external = await app.listed("opencode", str(work))
    assert (external["state"], external["writer"]) == ("parked", "terminal")
    sid = external["agent_session_id"]

    attached = await app.request(
        "session.attach", agent="opencode", agent_session_id=sid, cwd=str(work)
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

    sent = await app.request("session.send", session=session, text="queued from the app")
    assert sent == {"queued": True}
    await asyncio.sleep(3)
    assert requests_for(srv, "queued from the app") == []

    await quit_tui(term)
    await app.state(session, "idle", "bridge")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end", timeout=120)
    assert app.text(mark) == "Bridge answer three." and end["agent_session_id"] == sid
    (request,) = requests_for(srv, "queued from the app")
    assert request.contains("first terminal prompt") and request.contains("Terminal answer two.")

    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["opencode", "-s", sid] and command["cwd"] == str(work)
    await app.state(session, "parked", "none")
    term.respawn(command["argv"], env=env, cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    term.wait_for("Bridge answer three.", 60)
    await asyncio.sleep(1)
    term.type("after the handoff")
    await app.until(session, lambda b: b["type"] == "user" and b["text"] == "after the handoff")
    mark = app.mark()
    await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer four."
    (request,) = requests_for(srv, "after the handoff")
    assert request.contains("queued from the app") and request.contains("Bridge answer three.")
    await quit_tui(term)
    await app.state(session, "idle", "bridge")
