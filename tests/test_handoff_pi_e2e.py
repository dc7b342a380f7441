"""One Pi conversation moving between the real interactive TUI and the app.

Pi keeps no lock or registry, so a ``pi`` process (not the daemon's) in the session's directory
owns it; Pi's per-turn ``pi --mode json --session <id>`` continues the same session file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    external = await realcli_handoff.first_terminal_turn(world, ["pi"], realcli.MODEL, settle=1)
    assert external["title"] == "first terminal prompt"
    sid = external["agent_session_id"]

    session = await realcli_handoff.attach_mirrored(world, sid)

    argv = ["pi", "--session", sid]
    await realcli_handoff.queued_then_handed_off(world, session, sid, argv, pause=0.3)
