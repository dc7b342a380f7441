"""One Pi conversation moving between the real interactive TUI and the app.

Pi keeps no lock or registry, so a ``pi`` process (not the daemon's) in the session's directory
owns it; Pi's per-turn ``pi --mode json --session <id>`` continues the same session file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests import handoffstory as story
from tests import realcli, realcli_handoff

pytestmark = realcli_handoff.handoff_marks("pi")


def default_to_the_fake_model(env: dict[str, str]) -> None:
    """A terminal `pi` (and the handoff's `pi --session <id>`) uses the fake model."""
    (Path(env["PI_CODING_AGENT_DIR"]) / "settings.json").write_text(
        json.dumps({"defaultProvider": "fake", "defaultModel": realcli.MODEL})
    )


world = realcli_handoff.world_fixture(
    "pi", ("PI_CODING_AGENT_DIR", "PATH"), prepare=default_to_the_fake_model
)


async def test_pi_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv, _, term, app = realcli_handoff.parts(world)

    external = await realcli_handoff.first_terminal_turn(world, ["pi"], realcli.MODEL, settle=1)
    assert external["title"] == "first terminal prompt"
    sid = external["agent_session_id"]

    session = await realcli_handoff.attach_mirrored(world, sid)

    await story.app_message_waits(app, srv, session)

    term.keys("C-c")
    await asyncio.sleep(0.3)
    term.keys("C-c")
    term.wait_exit(30)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["agent_session_id"] == sid

    await realcli_handoff.resume_in_terminal(world, session, ["pi", "--session", sid])
    await asyncio.sleep(1)
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)
    term.keys("C-c")
    await asyncio.sleep(0.3)
    term.keys("C-c")
    term.wait_exit(30)
    await app.state(session, "idle", "bridge")
