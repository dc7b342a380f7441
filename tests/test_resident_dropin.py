"""A drop-in adapter that says ``persistent_process = True`` gets the same treatment as the
built-in ones: stopped when idle, restarted with ``resume_session_id`` at the next turn, shown
as SESSION ``resident``. Its process is a real ``sleep`` child, so "stopped" is checked on the
process itself."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.wsclient import Client

ADAPTER = """
import asyncio, json, os, uuid
from bridge.adapters.base import BaseAdapter
from bridge.blocks import SessionEndBlock, TextBlock

LOG = os.environ["RESIDENT_TEST_LOG"]


def note(**fields):
    with open(LOG, "a") as fh:
        fh.write(json.dumps(fields) + "\\n")


class Keeper(BaseAdapter):
    agent_id = "keeper"
    display_name = "Keeper"
    provides_models = False
    provides_usage = False
    persistent_process = True

    def __init__(self, resume_session_id=None, on_session_id=None):
        self.sid = resume_session_id or uuid.uuid4().hex
        self.on_session_id = on_session_id
        self.proc = None

    def process_running(self):
        return self.proc is not None and self.proc.returncode is None

    async def start(self, session_id):
        self.proc = await asyncio.create_subprocess_exec("sleep", "600")
        note(event="start", resume=self.sid, pid=self.proc.pid)
        if self.on_session_id:
            self.on_session_id(self.sid)
        return self.make_agent_info()

    async def send(self, text, attachments=None):
        self.text = text

    async def stream(self):
        yield TextBlock(id="t", text="echo " + self.text, done=True)
        yield SessionEndBlock(reason="completed", agent_session_id=self.sid)

    async def stop(self):
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        note(event="stop", resume=self.sid)
"""


def _log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _resident(c: Client, session: str) -> bool:
    got = await c.request("sessions.list", include_external=False)
    return bool(next(s for s in got["sessions"] if s["session"] == session)["resident"])


async def test_a_dropin_persistent_adapter_is_stopped_when_idle_and_resumed(
    daemon_factory,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    project: Path,
) -> None:
    log = tmp_path / "keeper.log"
    d: DaemonProcess = daemon_factory(
        config="[adapters]\nidle_stop_s = 1\n", env={"RESIDENT_TEST_LOG": str(log)}
    )
    adapters = d.config_dir / "adapters"
    adapters.mkdir(parents=True, mode=0o700)
    (adapters / "keeper.py").write_text(ADAPTER)
    os.chmod(adapters / "keeper.py", 0o600)
    d.start()
    c = await Client.open(d.url, d.token)
    try:
        created = await c.request("session.create", agent="keeper", cwd=str(project))
        session = created["session"]["session"]
        assert created["session"]["resident"] is True  # its process started with the session
        await c.request("session.subscribe", session=session, after_seq=0)
        await c.request("session.send", session=session, text="one")
        await c.turn(session)
        (first,) = [e for e in _log(log) if e["event"] == "start"]

        # The child is reaped (and the session no longer resident) a moment before the
        # adapter's stop() returns and writes its note, so all three are waited for.
        deadline = time.monotonic() + 30
        while await _resident(c, session) or _alive(first["pid"]) or len(_log(log)) < 2:
            assert time.monotonic() < deadline, _log(log)
            await asyncio.sleep(0.1)
        assert [e["event"] for e in _log(log)] == ["start", "stop"]

        await c.request("session.send", session=session, text="two")
        frames = await c.turn(session)
        assert any(f["block"].get("text") == "echo two" for f in frames)
        starts = [e for e in _log(log) if e["event"] == "start"]
        assert len(starts) == 2 and starts[1]["resume"] == first["resume"]
        assert await _resident(c, session)
    finally:
        await c.close()
