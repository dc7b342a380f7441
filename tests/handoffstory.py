"""What the terminal-and-app handoff tests of every agent share (tests/test_handoff_*_e2e.py).

The fake model's script (:func:`script_replies`), the agent's binary on the user's ``PATH``
(:func:`on_path`), the world of one daemon, one tmux terminal and one app
(:func:`handoff_world`), and the steps every agent goes through: attach while the terminal owns
the session (:func:`attach_parked`), a terminal turn seen through the mirror
(:func:`terminal_turn_mirrored`), an app message that waits (:func:`app_message_waits`), the
bridge answering it once the terminal lets go (:func:`bridge_answers_queued`), and a turn in
the handed-off terminal (:func:`terminal_turn_after_handoff`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.fakes import Reply
from tests.fakes.core import FakeServer, RecordedRequest
from tests.handoffapp import App, app_of
from tests.tmuxterm import Tmux


def said(words: str) -> Callable[[RecordedRequest], bool]:
    return lambda r: words in r.view.last_user_text


def requests_for(srv: FakeServer, words: str) -> list[RecordedRequest]:
    return [r for r in srv.agent_requests if words in r.view.last_user_text]


def script_replies(srv: FakeServer) -> None:
    """The four answers of the handoff story: two terminal turns, the app's, one after."""
    srv.script(
        Reply(text="Terminal answer one.", when=said("first terminal prompt")),
        Reply(text="Terminal answer two.", when=said("second terminal prompt")),
        Reply(text="Bridge answer three.", when=said("queued from the app")),
        Reply(text="Terminal answer four.", when=said("after the handoff")),
    )


def on_path(tmp_path: Path, binary: str | None, name: str, env: dict[str, str]) -> str:
    """``binary`` as ``name`` first on ``env``'s PATH (for the resume command); its path."""
    assert binary is not None
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(binary, bindir / name)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    return binary


@contextlib.asynccontextmanager
async def handoff_world(
    srv: FakeServer, env: dict[str, str], work: Path, daemon: DaemonProcess, name: str
) -> AsyncIterator[dict[str, Any]]:
    """``daemon`` started, a tmux terminal and an app connected; all stopped afterwards."""
    async with app_of(daemon) as app:
        term = Tmux.unique(name)
        try:
            yield {"srv": srv, "env": env, "work": work, "term": term, "app": app}
        finally:
            term.kill()


async def attach_parked(app: App, agent: str, sid: str, work: Path) -> tuple[str, dict[str, Any]]:
    """Attach the terminal's session from the app (it stays parked) and subscribe to it."""
    attached = await app.request("session.attach", agent=agent, agent_session_id=sid, cwd=str(work))
    session: str = attached["session"]["session"]
    assert attached["session"]["state"] == "parked"
    await app.request("session.subscribe", session=session)
    return session, attached


async def terminal_turn_mirrored(app: App, term: Tmux, session: str) -> dict[str, Any]:
    """The terminal's next prompt and answer reach the app through the mirror; the end."""
    term.type("second terminal prompt")
    user = await app.until(session, lambda b: b["type"] == "user")
    assert (user["text"], user["source"]) == ("second terminal prompt", "terminal")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer two."
    return end


async def app_message_waits(app: App, srv: FakeServer, session: str, **fields: Any) -> None:
    """A message from the app while the terminal owns the session is queued, not written."""
    sent = await app.request("session.send", session=session, text="queued from the app", **fields)
    assert sent == {"queued": True}
    await asyncio.sleep(3)
    assert requests_for(srv, "queued from the app") == []


async def bridge_answers_queued(
    app: App, srv: FakeServer, session: str, timeout: float = 120.0
) -> dict[str, Any]:
    """Once the terminal let go, the bridge answers the queued message with the history."""
    await app.state(session, "idle", "bridge")
    mark = app.mark()
    end = await app.until(session, lambda b: b["type"] == "session_end", timeout=timeout)
    assert app.text(mark) == "Bridge answer three."
    (request,) = requests_for(srv, "queued from the app")
    assert request.contains("first terminal prompt") and request.contains("Terminal answer two.")
    return end


async def terminal_turn_after_handoff(app: App, srv: FakeServer, session: str) -> None:
    """The turn typed in the handed-off terminal reaches the app, with the whole history."""
    await app.until(session, lambda b: b["type"] == "user" and b["text"] == "after the handoff")
    mark = app.mark()
    await app.until(session, lambda b: b["type"] == "session_end")
    assert app.text(mark) == "Terminal answer four."
    (request,) = requests_for(srv, "after the handoff")
    assert request.contains("queued from the app") and request.contains("Bridge answer three.")
