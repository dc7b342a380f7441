"""What the loader tests share: the source of a minimal drop-in adapter, a daemon home's drop-in
folder, one turn, writing a file with a mode, and the loader with a registry in process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bridge.adapters.demo import DemoAdapter
from bridge.config import AdaptersConfig, Config
from bridge.loading import loader
from bridge.loading.registry import Registry
from tests.wsclient import Client

#: The start of a test drop-in module: an abstract adapter that queues what it is sent, for
#: ``stream`` to answer. A test appends the classes that name an agent and say how it answers.
QUEUE_ADAPTER = """
import asyncio
from bridge.adapters.base import BaseAdapter
from bridge.blocks import SessionEndBlock, TextBlock


class QueueAdapter(BaseAdapter, abstract=True):
    provides_models = False
    provides_usage = False
    agent_version = "1"

    def __init__(self, model=None):
        self.q = asyncio.Queue()

    async def start(self, session_id):
        return self.make_agent_info(version=self.agent_version)

    async def send(self, text, attachments=None):
        await self.q.put(text)

    async def stop(self):
        pass
"""


def adapter_source(agent_id: str, reply: str = "hello", cls: str = "Echo") -> str:
    """A drop-in module with one adapter that answers ``<reply>: <what it was sent>``."""
    return (
        QUEUE_ADAPTER
        + f'''

class {cls}(QueueAdapter):
    agent_id = {agent_id!r}
    display_name = "{cls} agent"

    async def stream(self):
        text = await self.q.get()
        yield TextBlock(id="m1", text={reply!r} + ": " + text, done=True)
        yield SessionEndBlock(reason="completed")
'''
    )


async def new_session(c: Client, agent: str, cwd: Path) -> str:
    result = await c.request("session.create", agent=agent, cwd=str(cwd))
    session = str(result["session"]["session"])
    await c.request("session.subscribe", session=session)
    return session


async def say(c: Client, session: str, text: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    await c.request("session.send", session=session, text=text)
    return await c.turn(session, timeout=timeout)


def adapters_dir(home: Path) -> Path:
    """The drop-in folder of a daemon whose HOME is ``home`` (made, owner-only, if missing)."""
    path = home / "config" / "agent-bridge" / "adapters"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def drop_in(home: Path, name: str, source: str) -> Path:
    """Put the drop-in file ``name`` into ``home``'s adapters folder, owner-only whatever the
    umask (the loader refuses files others may write)."""
    return write(adapters_dir(home) / name, source, 0o600)


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


class LoaderHarness:
    """The drop-in loader with a registry, in process (no daemon)."""

    def __init__(self, tmp_path: Path, import_timeout: float = 5.0) -> None:
        self.dir = tmp_path / "adapters"
        self.dir.mkdir(mode=0o755, exist_ok=True)
        config = Config(
            adapters=AdaptersConfig(dir=str(self.dir), watch=False, import_timeout=import_timeout)
        )
        self.registry = Registry(config)
        self.registry.register(DemoAdapter, "builtin", notify=False)
        self.changes = 0
        self.registry.on_change(self._bump)
        self.loader = loader.AdapterLoader(self.registry, config)

    def _bump(self) -> None:
        self.changes += 1

    async def start(self) -> None:
        await self.loader.start()
        await self.registry.wait_detected(10)
        await asyncio.sleep(0)  # change notifications go out once per loop pass

    async def rescan(self) -> None:
        await self.loader.rescan()
        await self.registry.wait_detected(10)
        await asyncio.sleep(0)

    def agent(self, agent_id: str) -> dict[str, object]:
        entry = self.registry.get(agent_id)
        assert entry is not None, f"{agent_id} is not registered"
        obj = self.registry.agent_object(entry)
        return {
            "cls": entry.cls,
            "error": obj.error,
            "file": obj.file,
            "source": obj.source,
            "display_name": obj.display_name,
        }

    async def reply(self, agent_id: str) -> str:
        entry = self.registry.get(agent_id)
        assert entry is not None
        adapter = entry.cls()  # type: ignore[call-arg]
        await adapter.start("s")
        await adapter.send("hi")
        async for block in adapter.stream():
            return str(block.text)  # type: ignore[union-attr]
        raise AssertionError("no block")
