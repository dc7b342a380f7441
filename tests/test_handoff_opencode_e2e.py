"""One OpenCode conversation moving between the real interactive TUI and the app.

OpenCode keeps sessions in SQLite; the mirror polls it read-only (woken by the database's WAL
file changing). There is no lock or registry: an ``opencode`` process (not the daemon's) in the
session's directory owns it.
"""

from __future__ import annotations

from typing import Any

from tests import realcli_handoff

pytestmark = realcli_handoff.handoff_marks("opencode")


# The handoff hooks read the database where the user's OpenCode keeps it.
world = realcli_handoff.world_fixture("opencode", ("XDG_DATA_HOME", "OPENCODE_"))


async def test_opencode_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    external = await realcli_handoff.first_terminal_turn(world, ["opencode"], "ctrl+p", settle=1)
    sid = external["agent_session_id"]

    session = await realcli_handoff.attach_mirrored(world, sid)

    await realcli_handoff.queued_then_handed_off(world, session, sid, ["opencode", "-s", sid])
