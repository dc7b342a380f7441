"""One OpenCode conversation moving between the real interactive TUI and the app.

OpenCode keeps sessions in SQLite; the mirror polls it read-only (woken by the database's WAL
file changing). There is no lock or registry: an ``opencode`` process (not the daemon's) in the
session's directory owns it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests import handoffstory as story
from tests import realcli_handoff
from tests.tmuxterm import Tmux

pytestmark = realcli_handoff.handoff_marks("opencode")


# The handoff hooks read the database where the user's OpenCode keeps it.
world = realcli_handoff.world_fixture("opencode", ("XDG_DATA_HOME", "OPENCODE_"))


async def quit_tui(term: Tmux) -> None:
    term.keys("C-c")
    await asyncio.sleep(0.5)
    if not term.dead():
        term.keys("C-c")
    term.wait_exit(30)


async def test_opencode_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv, _, term, app = realcli_handoff.parts(world)

    external = await realcli_handoff.first_terminal_turn(world, ["opencode"], "ctrl+p", settle=1)
    sid = external["agent_session_id"]

    session = await realcli_handoff.attach_mirrored(world, sid)

    await story.app_message_waits(app, srv, session)

    await quit_tui(term)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["agent_session_id"] == sid

    await realcli_handoff.resume_in_terminal(world, session, ["opencode", "-s", sid])
    await asyncio.sleep(1)
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)
    await quit_tui(term)
    await app.state(session, "idle", "bridge")
