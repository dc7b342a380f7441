"""One OpenCode conversation moving between the real interactive TUI and the app.

OpenCode keeps sessions in SQLite; the mirror polls it read-only (woken by the database's WAL
file changing). There is no lock or registry: an ``opencode`` process (not the daemon's) in the
session's directory owns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests import handoffstory as story
from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeChat
from tests.handoffapp import App
from tests.tmuxterm import Tmux, available

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(realcli.opencode_bin() is None, reason=realcli.missing_reason("opencode")),
    pytest.mark.skipif(not available(), reason="tmux is not installed"),
]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    async with FakeChat() as srv:
        story.script_replies(srv)
        env = realcli.opencode_env(tmp_path / "user", srv.base_url)
        opencode = story.on_path(tmp_path, realcli.opencode_bin(), "opencode", env)
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
        )
        async with story.handoff_world(srv, env, work, daemon, "opencode") as world:
            yield world


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

    session, _ = await story.attach_parked(app, "opencode", sid, work)
    await story.terminal_turn_mirrored(app, term, session)

    await story.app_message_waits(app, srv, session)

    await quit_tui(term)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["agent_session_id"] == sid

    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["opencode", "-s", sid] and command["cwd"] == str(work)
    await app.state(session, "parked", "none")
    term.respawn(command["argv"], env=env, cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    term.wait_for("Bridge answer three.", 60)
    await asyncio.sleep(1)
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)
    await quit_tui(term)
    await app.state(session, "idle", "bridge")
