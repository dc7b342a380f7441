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
from collections.abc import Mapping
from typing import Any

from bridge.handoff import procscan
from tests import handoffstory as story
from tests import realcli_handoff

pytestmark = realcli_handoff.handoff_marks("codex")


def kill_strays(marker: str) -> None:
    """End Codex helpers this test's processes left behind (found by their CODEX_HOME)."""
    for pid in procscan.pids():
        if any(marker in arg for arg in procscan.argv_of(pid)):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


def strays(env: Mapping[str, str]) -> None:
    kill_strays(env["CODEX_HOME"])


world = realcli_handoff.world_fixture("codex", ("CODEX_HOME", "FAKE_API_KEY"), cleanup=strays)


async def test_codex_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv, _, term, app = realcli_handoff.parts(world)

    # 1. A thread started in the terminal is listed, owned while the TUI has it loaded.
    external = await realcli_handoff.first_terminal_turn(
        world, ["codex", "--no-daemon"], "Ask Codex"
    )
    assert external["title"] == "first terminal prompt"
    sid = external["agent_session_id"]

    # 2. Attach: parked, and the terminal's next turn reaches the app through the mirror.
    session = await realcli_handoff.attach_mirrored(world, sid)

    # 3. The app's message waits while the TUI holds the thread.
    await story.app_message_waits(app, srv, session, client_msg_id="app-1")

    # 4. The TUI exits: the bridge resumes the thread and answers, with the history.
    await realcli_handoff.quit_tui(term)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["reason"] == "completed"

    # 5. Continue in a terminal with the command the bridge gives; the app mirrors it.
    argv = ["codex", "--no-daemon", "resume", sid]
    await realcli_handoff.resume_in_terminal(world, session, argv)
    await term.shows("Ask Codex", 60)
    await asyncio.sleep(1)  # keys typed while the TUI still loads are lost
    term.type("after the handoff")
    await term.shows("Terminal answer four.", 60)
    await story.terminal_turn_after_handoff(app, srv, session)
    await realcli_handoff.quit_tui(term)
    await app.state(session, "idle", "bridge")
