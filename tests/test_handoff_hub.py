"""The hub's single-writer state machine, against a real daemon and a terminal the test controls.

The drop-in adapter ``fixtures/handoff/fake_term_adapter.py`` reads ownership, transcripts and
the lineage head from a directory this test writes; a "terminal" is a ``sleep`` process whose
pid owns a session until the test kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from bridge.store.records import SessionRecord
from tests.daemon import DaemonProcess
from tests.handoffapp import App, Terminal, app_of, new_session, with_fake_term
from tests.wsclient import RequestFailed

#: The hub's poll intervals, shortened (the defaults are 1 s and 3 s): a wait below that
#: proves "nothing happens" lasts a few polls or sweeps, not a few seconds.
PARK_POLL, SWEEP = 0.1, 0.2
HUB_ENV = {
    "AGENT_BRIDGE_HUB_PARK_POLL": str(PARK_POLL),
    "AGENT_BRIDGE_HUB_SWEEP_INTERVAL": str(SWEEP),
    "AGENT_BRIDGE_HUB_EXTERNAL_CACHE": "0.5",
}


@pytest.fixture
def fake_dir(tmp_path: Path) -> Path:
    path = tmp_path / "fake"
    path.mkdir()
    return path


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for t in made:
        if t.proc.poll() is None:
            t.exit()


def make_daemon(tmp_path: Path, fake_dir: Path) -> DaemonProcess:
    env = {"HANDOFF_FAKE_DIR": str(fake_dir), **HUB_ENV}
    return with_fake_term(DaemonProcess(tmp_path / "home", env=env))


def bridge_log(root: Path) -> list[dict[str, str]]:
    path = root / "bridge.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class World:
    """A daemon with the fake terminal adapter, an app connected to it, the directory the
    adapter reads (``dir``), a project, and the terminals started (killed at the end)."""

    d: DaemonProcess
    app: App
    dir: Path
    project: Path
    terms: list[Terminal]

    async def session(self) -> tuple[str, str]:
        """A bridge session of the project that ran one turn; (session, agent session id)."""
        return await new_session(self.app, self.project)

    def terminal(self, sid: str) -> Terminal:
        """A terminal that owns ``sid`` from now on."""
        term = Terminal(self.dir, sid)
        self.terms.append(term)
        return term

    async def busy_session(self) -> tuple[str, str]:
        """:meth:`session`, then running a bridge turn that lasts until interrupted."""
        session, sid = await self.session()
        await self.app.request("session.send", session=session, text="slow")
        await self.app.until(session, lambda b: b["type"] == "text" and b["text"] == "working")
        return session, sid

    async def let_go(self, term: Terminal, session: str) -> None:
        """``term`` exits; the bridge takes ``session`` back."""
        term.exit()
        await self.app.state(session, "idle", "bridge")

    def log(self) -> list[dict[str, str]]:
        """Every message the bridge's side wrote to the agent: (sid, text)."""
        return bridge_log(self.dir)


@pytest.fixture
async def world(tmp_path: Path, fake_dir: Path, terminals: list[Terminal]) -> AsyncIterator[World]:
    project = tmp_path / "project"
    project.mkdir()
    d = make_daemon(tmp_path, fake_dir)
    async with app_of(d) as app:
        yield World(d, app, fake_dir, project, terminals)


async def test_handoff_mid_turn_holds_the_queue_until_the_terminal_lets_go(
    world: World,
) -> None:
    app = world.app
    session, sid = await world.busy_session()
    assert (await app.request("session.send", session=session, text="next"))["queued"]

    command = await app.request("session.handoff", session=session)
    assert command["argv"] == ["fake-term", "--resume", sid]
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert end["reason"] == "handoff"  # the bridge's turn ended because of the handoff
    await app.state(session, "parked", "none")
    await asyncio.sleep(5 * PARK_POLL)
    assert [e["text"] for e in world.log()] == ["hello", "slow"]  # "next" waits
    # Asked again (a lost answer): the same command, nothing else happens.
    assert await app.request("session.handoff", session=session) == command

    term = world.terminal(sid)
    await app.state(session, "parked", "terminal")
    term.turn("typed in the terminal", "terminal answer")
    user = await app.until(session, lambda b: b["type"] == "user" and b["source"] == "terminal")
    assert user["text"] == "typed in the terminal"
    await app.until(session, lambda b: b["type"] == "session_end")
    await world.let_go(term, session)
    await app.until(session, lambda b: b["type"] == "text" and b["text"] == "bridge says: next")
    assert [e["text"] for e in world.log()] == ["hello", "slow", "next"]
    assert {e["sid"] for e in world.log()} == {sid}


async def test_a_pending_handoff_queues_messages_and_can_be_closed(
    world: World,
) -> None:
    app = world.app
    session, _ = await world.session()
    await app.request("session.handoff", session=session)
    await app.state(session, "parked", "none")
    assert (await app.request("session.send", session=session, text="meanwhile"))["queued"]
    err = await app.c.call("session.interrupt", session=session)
    assert err["t"] == "ok"  # nothing runs; interrupting is harmless
    frame = await app.c.call("session.close", session=session)
    assert frame["t"] == "ok"
    await app.state(session, "ended", "none")
    assert [e["text"] for e in world.log()] == ["hello"]


async def test_terminal_started_session_is_listed_attached_and_returned(
    world: World,
) -> None:
    app, root, project = world.app, world.dir, world.project
    sid = "term-1"
    (root / f"{sid}.cwd").write_text(str(project))
    term = world.terminal(sid)
    term.turn("before the app looked", "old answer")

    external = await app.listed("fake_term", str(project))
    assert (external["agent_session_id"], external["state"], external["writer"]) == (
        sid,
        "parked",
        "terminal",
    )
    with pytest.raises(RequestFailed) as bad:
        await app.request("session.attach", agent="fake_term", agent_session_id=sid, cwd=str(root))
    assert bad.value.frame["code"] == "bad_request"  # it belongs to another directory

    attached = (
        await app.request(
            "session.attach", agent="fake_term", agent_session_id=sid, cwd=str(project)
        )
    )["session"]
    session = attached["session"]
    assert attached["title"] == f"terminal {sid}"
    await app.request("session.subscribe", session=session)
    term.turn("after attach", "new answer")
    user = await app.until(session, lambda b: b["type"] == "user")
    assert user["text"] == "after attach"  # history before attaching is not replayed
    listed = (await app.request("sessions.list"))["sessions"]
    assert [s["session"] for s in listed if s.get("agent_session_id") == sid] == [session]

    assert (await app.request("session.send", session=session, text="from app"))["queued"]
    await asyncio.sleep(5 * PARK_POLL)
    assert world.log() == []
    await world.let_go(term, session)
    await app.until(session, lambda b: b["type"] == "text" and b["text"] == "bridge says: from app")
    assert world.log() == [{"sid": sid, "text": "from app"}]


async def test_reattach_follows_the_lineage_and_never_takes_an_owned_head(
    world: World,
) -> None:
    app = world.app
    session, sid = await world.session()
    first = world.terminal(sid)
    assert (await app.request("session.send", session=session, text="queued"))["queued"]
    await app.state(session, "parked", "terminal")
    # The terminal moved on to a new session (a /clear, a fork) that another process holds.
    second = world.terminal("sid-next")
    (world.dir / "head").write_text("sid-next")
    first.exit()
    lineage = await app.until(session, lambda b: b["type"] == "system" and b["code"] == "lineage")
    assert lineage["data"]["agent_session_id"] == "sid-next"
    mark = app.mark()
    await asyncio.sleep(5 * PARK_POLL)
    with contextlib.suppress(TimeoutError):
        await app.until(session, lambda b: False, timeout=0.5)  # collect what arrived
    assert world.log()[1:] == []  # still parked: the head is owned too
    assert [b for b in app.blocks("system", mark) if b["code"] == "state"] == []  # no flapping
    await world.let_go(second, session)
    await app.until(session, lambda b: b["type"] == "text" and b["text"] == "bridge says: queued")
    assert world.log()[-1] == {"sid": "sid-next", "text": "queued"}


async def test_a_handoff_recorded_before_a_crash_is_carried_out_after_restart(
    tmp_path: Path, fake_dir: Path, terminals: list[Terminal]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    d = make_daemon(tmp_path, fake_dir)
    async with app_of(d) as app:
        session, sid = await new_session(app, project)
    # The daemon died right after recording the intent, before it parked the session.
    db = sqlite3.connect(d.state_dir / "bridge.sqlite3")
    (blob,) = db.execute("SELECT data FROM sessions WHERE id = ?", (session,)).fetchone()
    rec = msgspec.msgpack.decode(blob, type=SessionRecord)
    rec.intent, rec.state, rec.writer = "handoff", "idle", "bridge"
    db.execute("UPDATE sessions SET data = ? WHERE id = ?", (msgspec.msgpack.encode(rec), session))
    db.commit()
    db.close()

    async with app_of(make_daemon(tmp_path, fake_dir)) as app:
        listed = (await app.request("sessions.list", include_external=False))["sessions"]
        mine = next(s for s in listed if s["session"] == session)
        assert (mine["state"], mine["writer"]) == ("parked", "none")
        await app.request("session.subscribe", session=session)
        assert (await app.request("session.send", session=session, text="later"))["queued"]
        term = Terminal(fake_dir, sid)
        terminals.append(term)
        await app.state(session, "parked", "terminal")
        term.exit()
        await app.state(session, "idle", "bridge")
        await app.until(
            session, lambda b: b["type"] == "text" and b["text"] == "bridge says: later"
        )


async def test_agent_bridge_resume_runs_the_command_in_this_terminal(
    world: World, tmp_path: Path
) -> None:
    app, d, root = world.app, world.d, world.dir
    session, sid = await world.session()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake_term = bindir / "fake-term"  # the agent's CLI: takes the session, then idles
    fake_term.write_text(f'#!/bin/sh\necho $$ > "{root}/$2.owner"\nexec sleep 300\n')
    fake_term.chmod(0o755)
    env = dict(d.env, PATH=f"{bindir}:{d.env['PATH']}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "resume", session],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await app.state(session, "parked", "terminal")
        assert (root / f"{sid}.owner").read_text().strip() == str(proc.pid)  # exec'd in place
        assert proc.stderr is not None
        told = proc.stderr.readline()
        assert told.strip() == f"cd {world.project} && fake-term --resume {sid}"
    finally:
        proc.kill()
        proc.wait()
    await app.state(session, "idle", "bridge")


async def test_a_terminal_resuming_an_idle_session_on_its_own_parks_it(
    world: World,
) -> None:
    app = world.app
    session, sid = await world.session()
    term = world.terminal(sid)  # the user ran the agent's resume in a terminal, unasked
    frame = await app.state(session, "parked", "terminal", timeout=20)
    assert frame["queued"] == 0
    term.turn("typed without a handoff", "seen live")
    user = await app.until(session, lambda b: b["type"] == "user" and b["source"] == "terminal")
    assert user["text"] == "typed without a handoff"
    await world.let_go(term, session)


async def test_a_terminal_taking_a_session_mid_turn_stops_the_bridges_turn(
    world: World,
) -> None:
    app = world.app
    session, sid = await world.busy_session()
    term = world.terminal(sid)
    warn = await app.until(session, lambda b: b["type"] == "system" and b["level"] == "warn")
    assert warn["code"] == "terminal_took_over"
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert end["reason"] == "handoff"
    await app.state(session, "parked", "terminal", timeout=20)
    await world.let_go(term, session)


async def test_with_only_a_directory_level_signal_the_running_turn_is_not_stopped(
    world: World,
) -> None:
    app = world.app
    (world.dir / "cwd-level").write_text("")
    session, _ = await world.busy_session()
    world.terminal("some-other-session")  # a terminal of the CLI, maybe not this one
    warn = await app.until(session, lambda b: b["type"] == "system" and b["level"] == "warn")
    assert warn["code"] == "terminal_took_over" and "stopped" not in warn["text"]
    await asyncio.sleep(5 * SWEEP)  # more sweeps: said once, and the turn goes on
    warnings = [b for b in app.blocks("system") if b["code"] == "terminal_took_over"]
    assert len(warnings) == 1 and not app.blocks("session_end")[1:]
    await app.request("session.interrupt", session=session)
    end = await app.until(session, lambda b: b["type"] == "session_end")
    assert end["reason"] == "interrupted"
    await app.state(session, "parked", "terminal", timeout=20)
