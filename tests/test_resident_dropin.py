"""A drop-in adapter that says ``persistent_process = True`` gets the same treatment as the
built-in ones: stopped when idle, restarted with ``resume_session_id`` at the next turn, shown
as SESSION ``resident``. Its process is a real ``sleep`` child, so "stopped" is checked on the
process itself."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.keeperkit import alive_pid, keeper_daemon
from tests.wsclient import Client


async def _resident(c: Client, session: str) -> bool:
    got = await c.request("sessions.list", include_external=False)
    return bool(next(s for s in got["sessions"] if s["session"] == session)["resident"])


async def test_a_dropin_persistent_adapter_is_stopped_when_idle_and_resumed(
    daemon_factory,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    project: Path,
) -> None:
    d, keepers = keeper_daemon(daemon_factory, tmp_path, "[adapters]\nidle_stop_s = 1\n")
    c = await Client.open(d.url, d.token)
    try:
        created = await c.request("session.create", agent="keeper", cwd=str(project))
        session = created["session"]["session"]
        assert created["session"]["resident"] is True  # its process started with the session
        await c.request("session.subscribe", session=session, after_seq=0)
        await c.request("session.send", session=session, text="one")
        await c.turn(session)
        (first,) = [e for e in keepers.log() if e["event"] == "start"]

        # The child is reaped (and the session no longer resident) a moment before the
        # adapter's stop() returns and writes its note, so all three are waited for.
        deadline = time.monotonic() + 30
        while await _resident(c, session) or alive_pid(first["pid"]) or len(keepers.log()) < 2:
            assert time.monotonic() < deadline, keepers.log()
            await asyncio.sleep(0.1)
        assert [e["event"] for e in keepers.log()] == ["start", "stop"]

        await c.request("session.send", session=session, text="two")
        frames = await c.turn(session)
        assert any(f["block"].get("text") == "echo two" for f in frames)
        starts = [e for e in keepers.log() if e["event"] == "start"]
        assert len(starts) == 2 and starts[1]["resume"] == first["resume"]
        assert await _resident(c, session)
    finally:
        await c.close()
