"""What the loader tests share: the source of a minimal drop-in adapter, and one turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.wsclient import Client


def adapter_source(agent_id: str, reply: str = "hello", cls: str = "Echo") -> str:
    return f'''
import asyncio
from bridge.adapters.base import BaseAdapter
from bridge.blocks import SessionEndBlock, TextBlock


class {cls}(BaseAdapter):
    agent_id = {agent_id!r}
    display_name = "{cls} agent"
    provides_models = False
    provides_usage = False

    def __init__(self):
        self.q = asyncio.Queue()

    async def start(self, session_id):
        return self.make_agent_info(version="1")

    async def send(self, text, attachments=None):
        await self.q.put(text)

    async def stream(self):
        text = await self.q.get()
        yield TextBlock(id="m1", text={reply!r} + ": " + text, done=True)
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        pass
'''


async def new_session(c: Client, agent: str, cwd: Path) -> str:
    result = await c.request("session.create", agent=agent, cwd=str(cwd))
    session = str(result["session"]["session"])
    await c.request("session.subscribe", session=session)
    return session


async def say(c: Client, session: str, text: str) -> list[dict[str, Any]]:
    await c.request("session.send", session=session, text=text)
    return await c.turn(session)
