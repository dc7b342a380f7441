"""The setup and the first and handed-off terminal steps that the handoff suites of the real CLIs
share (tests/test_handoff_*_e2e.py), on top of tests/handoffstory.py.

:func:`handoff_setup` starts the agent's fake model server with the story's script, writes the
user's CLI environment, puts the binary on its ``PATH`` and opens the story's world (one daemon,
one tmux terminal, one app) for the suite's ``world`` fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests import handoffstory as story
from tests import realcli
from tests.daemon import DaemonProcess
from tests.fakes import FakeServer
from tests.handoffapp import App
from tests.realcli_session import daemon_config, fake_server
from tests.tmuxterm import Tmux, available


def handoff_marks(agent: str) -> list[pytest.MarkDecorator]:
    """A handoff suite's marks: slow real-CLI tests, skipped without ``agent``'s CLI or tmux."""
    return [
        pytest.mark.realcli,
        pytest.mark.slow,
        pytest.mark.timeout(420),
        pytest.mark.skipif(realcli.cli_bin(agent) is None, reason=realcli.missing_reason(agent)),
        pytest.mark.skipif(not available(), reason="tmux is not installed"),
    ]


@contextlib.asynccontextmanager
async def handoff_setup(
    tmp_path: Path,
    agent: str,
    daemon_keeps: tuple[str, ...],
    *,
    model: bool = True,
    prepare: Callable[[dict[str, str]], None] | None = None,
    cleanup: Callable[[Mapping[str, str]], None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The handoff world of ``agent`` in ``tmp_path``: the user's environment under ``user``
    (``prepare`` may add to it), the project ``work``, a daemon whose environment keeps the
    user's variables named by (or starting with) ``daemon_keeps`` and whose table names the
    agent's model unless ``model`` is false. ``cleanup`` gets the user's environment at the end,
    however the test ended."""
    work = tmp_path / "work"
    work.mkdir()
    async with fake_server(agent) as srv:
        story.script_replies(srv)
        trusted = {"cwd": work} if agent == "claude" else {}  # Claude asks to trust a folder
        env = realcli.ENVS[agent](tmp_path / "user", srv.base_url, **trusted)
        try:
            if prepare is not None:
                prepare(env)
            binary = story.on_path(tmp_path, realcli.cli_bin(agent), agent, env)
            daemon = DaemonProcess(
                tmp_path / "daemon",
                config=daemon_config(agent, binary, env, model=model),
                env={k: v for k, v in env.items() if k.startswith(daemon_keeps)},
            )
            async with story.handoff_world(srv, env, work, daemon, agent) as world:
                yield world | {"agent": agent}
        finally:
            if cleanup is not None:
                cleanup(env)


def world_fixture(agent: str, daemon_keeps: tuple[str, ...], **options: Any) -> Any:
    """A suite's ``world`` fixture: :func:`handoff_setup` of ``agent`` in the test's
    ``tmp_path`` (``options`` go to it)."""

    @pytest.fixture(name="world")
    async def fixture(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
        async with handoff_setup(tmp_path, agent, daemon_keeps, **options) as world:
            yield world

    return fixture


def parts(world: dict[str, Any]) -> tuple[FakeServer, Path, Tmux, App]:
    """The world's fake model server, project, terminal and app."""
    return world["srv"], world["work"], world["term"], world["app"]


async def first_terminal_turn(
    world: dict[str, Any], argv: list[str], ready: str, settle: float = 0.0
) -> dict[str, Any]:
    """``argv`` started in the terminal in the project, ready once ``ready`` is on screen
    (then ``settle`` seconds more: keys typed while a TUI still loads are lost); its first
    prompt is answered, and the session shows up in ``sessions.list`` parked, owned by the
    terminal. Returns its entry."""
    app: App = world["app"]
    term: Tmux = world["term"]
    term.start(argv, env=world["env"], cwd=world["work"])
    await term.shows(ready, 60)
    await asyncio.sleep(settle)
    term.type("first terminal prompt")
    await term.shows("Terminal answer one.", 90)
    external = await app.listed(world["agent"], str(world["work"]))
    assert (external["state"], external["writer"]) == ("parked", "terminal")
    return external


async def attach_mirrored(world: dict[str, Any], sid: str) -> str:
    """Attach the terminal's session ``sid`` from the app (parked), and see the terminal's next
    turn through the mirror; the bridge session."""
    session, _ = await story.attach_parked(world["app"], world["agent"], sid, world["work"])
    await story.terminal_turn_mirrored(world["app"], world["term"], session)
    return session


async def resume_in_terminal(world: dict[str, Any], session: str, argv: list[str]) -> None:
    """``session.handoff`` gives the command ``argv`` (in the project); while no terminal has
    it the session is parked, then the terminal running it owns it and shows the history."""
    app: App = world["app"]
    command = await app.request("session.handoff", session=session)
    assert command["argv"] == argv and command["cwd"] == str(world["work"])
    assert command["command"] == shlex.join(command["argv"])
    await app.state(session, "parked", "none")  # handed off; no terminal has it yet
    world["term"].respawn(command["argv"], env=world["env"], cwd=command["cwd"])
    await app.state(session, "parked", "terminal")
    await world["term"].shows("Bridge answer three.", 60)  # the resumed history is on screen


async def quit_tui(term: Tmux, pause: float = 0.5) -> None:
    """Quit the TUI with Ctrl-C (twice, ``pause`` seconds apart, unless it is gone already),
    pressed again while it keeps running: on a loaded machine the two presses can land farther
    apart than the TUI's window for "press again to exit", and each only clears the input."""
    for attempt in range(4):
        term.keys("C-c")
        await asyncio.sleep(pause)
        if not term.dead():
            term.keys("C-c")
        try:
            await term.exits(30 if attempt == 3 else 8)
            return
        except TimeoutError:
            if attempt == 3:
                raise


async def queued_then_handed_off(
    world: dict[str, Any], session: str, sid: str, argv: list[str], pause: float = 0.5
) -> None:
    """The rest of the story for a TUI that keeps no lock: the app's message waits while the
    terminal has the session; once the TUI quits the bridge answers it in the same agent session;
    the handoff's command ``argv`` continues it in the terminal, seen through the mirror; once
    that quits, the bridge has the session back."""
    srv, _, term, app = parts(world)
    await story.app_message_waits(app, srv, session)
    await quit_tui(term, pause)
    end = await story.bridge_answers_queued(app, srv, session)
    assert end["agent_session_id"] == sid
    await resume_in_terminal(world, session, argv)
    await asyncio.sleep(1)  # keys typed while the TUI still loads are lost
    term.type("after the handoff")
    await story.terminal_turn_after_handoff(app, srv, session)
    await quit_tui(term, pause)
    await app.state(session, "idle", "bridge")
