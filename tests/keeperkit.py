"""A drop-in adapter with a real process, for the tests of resident agents: ``keeper`` starts a
``sleep`` child, notes each start and stop in ``keeper.log`` (in ``$KEEPER_DIR``), refuses to
start while a file ``fail`` is there, and holds a turn whose text starts with "hold" until a
file ``release`` appears. :class:`Keepers` reads its notes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.wsclient import Client

ADAPTER = """
import asyncio, json, os, uuid
from pathlib import Path
from bridge.adapters.base import BaseAdapter
from bridge.blocks import SessionEndBlock, TextBlock

HERE = Path(os.environ["KEEPER_DIR"])


def note(**fields):
    with open(HERE / "keeper.log", "a") as fh:
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
        if (HERE / "fail").exists():
            raise RuntimeError("the keeper refuses to start")
        self.proc = await asyncio.create_subprocess_exec("sleep", "600")
        note(event="start", resume=self.sid, pid=self.proc.pid)
        if self.on_session_id:
            self.on_session_id(self.sid)
        return self.make_agent_info()

    async def send(self, text, attachments=None):
        self.text = text

    async def stream(self):
        while self.text.startswith("hold") and not (HERE / "release").exists():
            await asyncio.sleep(0.05)
        yield TextBlock(id="t", text="echo " + self.text, done=True)
        yield SessionEndBlock(reason="completed", agent_session_id=self.sid)

    async def stop(self):
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        note(event="stop", resume=self.sid)
"""


class Keepers:
    """The drop-in's notes: which agent processes it started and stopped."""

    def __init__(self, here: Path) -> None:
        self.here = here

    def log(self) -> list[dict[str, Any]]:
        path = self.here / "keeper.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def starts(self, sid: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.log() if e["event"] == "start" and sid in (None, e["resume"])]

    def stops(self, sid: str) -> list[dict[str, Any]]:
        return [e for e in self.log() if e["event"] == "stop" and e["resume"] == sid]

    def alive(self, sid: str | None = None) -> list[int]:
        """Pids of the sleeps still running (for one agent session, or all)."""
        return [e["pid"] for e in self.starts(sid) if alive_pid(e["pid"])]


def alive_pid(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def listed(c: Client) -> dict[str, dict[str, Any]]:
    got = await c.request("sessions.list", include_external=False)
    return {s["session"]: s for s in got["sessions"]}


def keeper_daemon(factory: Any, tmp_path: Path, config: str) -> tuple[DaemonProcess, Keepers]:
    here = tmp_path / "keeper"
    here.mkdir()
    d: DaemonProcess = factory(config=config, env={"KEEPER_DIR": str(here)})
    adapters = d.config_dir / "adapters"
    adapters.mkdir(parents=True, mode=0o700)
    (adapters / "keeper.py").write_text(ADAPTER)
    os.chmod(adapters / "keeper.py", 0o600)
    return d.start(), Keepers(here)
