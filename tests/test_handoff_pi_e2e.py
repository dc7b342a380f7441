"""One Pi conversation moving between the real interactive TUI and the app.

Pi keeps no lock or registry, so a ``pi`` process (not the daemon's) in the session's directory
owns it; Pi's per-turn ``pi --mode json --session <id>`` continues the same session file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests import handoffstory as story
from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeChat
from tests.handoffapp import App
from tests.tmuxterm import available

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(realcli.pi_bin() is None, reason=realcli.missing_reason("pi")),
    pytest.mark.skipif(not available(), reason="tmux is not installed"),
]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    async with FakeChat() as srv:
        story.script_replies(srv)
        env = realcli.pi_env(tmp_path / "user", srv.base_url)
        agent_dir = Path(env["PI_CODING_AGENT_DIR"])
        # A terminal `pi` (and the handoff's `pi --session <id>`) uses the fake model.
        (agent_dir / "settings.json").write_text(
            json.dumps({"defaultProvider": "fake", "defaultModel": realcli.MODEL})
        )
        pi = story.on_path(tmp_path, realcli.pi_bin(), "pi", env)
        daemon = DaemonProcess(
            tmp_path / "daemon",
            config=f'[agents.pi]\nbinary = "{pi}"\nmodel = "fake/{realcli.MODEL}"\n',
            env={"PI_CODING_AGENT_DIR": str(agent_dir), "PATH": env["PATH"]},
        )
        async with story.handoff_world(srv, env, work, daemon, "pi") as world:
            yield world


async def test_pi_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv: FakeChat = world["srv"]
    env, work, term = world["env"], world["work"], world["term"]
    app: App = world["app"]

    term.start(["pi"], env=env, cwd=work)
    term.wait_for(realcli.MODEL, 60)
    await asyncio.sleep(1)
    term.type("first terminal prompt")
    term.wait_for("Terminal answer one.", 90)
    external = await app.listed("pi", str(work))
    assert external["title"] == "first terminal prompt"
    assert (external["state"], external["writer"]) == ("parked", "terminal")
    sid = external["agent_session_id"]

    session, _ = await story.attach_parked(app, "pi", sid, work)
    await story.terminal_turn_mirrored(app, term, session)

    await story.app_message_waits(app, srv, session)

    term.keys("C-c")
    await asyncio.sleep(0.3)
    term.keys("C-c")
    term.wait_exit(30)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["agent_session_id"] == sid

    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["pi", "--session", sid] and command["cwd"] == str(work)
    await app.state(session, "parked", "none")
    term.respawn(command["argv"], env=env, cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    term.wait_for("Bridge answer three.", 60)
    await asyncio.sleep(1)
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)
    term.keys("C-c")
    await asyncio.sleep(0.3)
    term.keys("C-c")
    term.wait_exit(30)
    await app.state(session, "idle", "bridge")
