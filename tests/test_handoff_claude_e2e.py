"""One Claude Code conversation moving between the real interactive TUI and the app.

The real ``claude`` TUI runs under a private tmux server, the daemon runs as users start it,
the app is a real WebSocket client, and every model call goes to the fake Anthropic server,
which records the requests: "the bridge continued the same conversation" is checked on what
Claude actually sent to the model.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests import handoffstory as story
from tests import realcli_handoff

pytestmark = realcli_handoff.handoff_marks("claude")

#: What the daemon needs from the user's Claude environment (the fake endpoint, the config dir).
AGENT_ENV = ("ANTHROPIC_", "CLAUDE_", "DISABLE_")


world = realcli_handoff.world_fixture("claude", AGENT_ENV, model=False)


async def test_claude_terminal_and_app_take_turns_on_one_conversation(
    world: dict[str, Any],
) -> None:
    srv, work, term, app = realcli_handoff.parts(world)

    # 1. A session started in the terminal shows up in sessions.list, owned by the terminal.
    external = await realcli_handoff.first_terminal_turn(world, ["claude"], "auto mode")
    assert external["title"] == "first terminal prompt"
    sid = external["agent_session_id"]

    # 2. Attaching parks it; the app sees the terminal's next turn live through the mirror.
    session, attached = await story.attach_parked(app, "claude", sid, work)
    assert attached["session"]["writer"] == "terminal"
    await app.until(session, lambda b: b["type"] == "system" and b["code"] == "attached")
    end = await story.terminal_turn_mirrored(app, term, session)
    assert end["agent_session_id"] == sid

    # 3. A message from the app while the terminal owns the session waits; nothing is written.
    sent = await app.request(
        "session.send", session=session, text="queued from the app", client_msg_id="app-1"
    )
    assert sent == {"queued": True}
    await app.state(session, "parked", "terminal")  # the pushed state now counts it
    await asyncio.sleep(3)
    assert story.requests_for(srv, "queued from the app") == []
    listed = (await app.request("sessions.list", include_external=False))["sessions"]
    mine = next(s for s in listed if s["session"] == session)
    assert (mine["state"], mine["writer"], mine["queued"]) == ("parked", "terminal", 1)

    # 4. The terminal exits: the bridge resumes the same conversation, answers the message.
    term.type("/exit")
    await term.exits(30)
    end = await story.bridge_answers_queued(app, srv, session, timeout=90)
    assert end["agent_session_id"] == sid  # resumed, not a new conversation
    (request,) = story.requests_for(srv, "queued from the app")
    assert request.contains("second terminal prompt")
    assert [b["id"] for b in app.blocks("user") if b["source"] == "bridge"] == ["app-1"]

    # 5. session.handoff gives the command; run in a terminal it continues the conversation,
    #    which the app sees through the mirror, and the bridge takes it back at exit.
    await realcli_handoff.resume_in_terminal(world, session, ["claude", "--resume", sid])
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)

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
    await term.exits(30)
    await app.state(session, "idle", "bridge")
    listed = (await app.request("sessions.list", include_external=False))["sessions"]
    assert next(s for s in listed if s["session"] == session)["agent_session_id"] == new_sid
    await app.request("session.send", session=session, text="last from the app")
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert end["agent_session_id"] == new_sid
    (request,) = story.requests_for(srv, "last from the app")
    assert request.contains("after clear") and not request.contains("first terminal prompt")
    states = [b["text"] for b in app.blocks("system") if b["code"] == "state"]
    assert any("the terminal took the session" in t for t in states)
    assert any("the terminal released it" in t for t in states)
