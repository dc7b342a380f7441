"""Adapter classes made on the spot, for the tests of the adapter contract.

``BaseAdapter`` checks its contract when a subclass is created, so a test that wants to see a
declaration refused (or a problem reported) needs a whole class with only one thing changed.
:func:`adapter_class` makes one: a minimal adapter that keeps the contract, with the given
attributes and methods put in place of (or next to) the defaults.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from bridge.adapters.base import BaseAdapter
from bridge.blocks import AgentInfoBlock, Block, SessionEndBlock


async def _start(self: BaseAdapter, session_id: str) -> AgentInfoBlock:
    return self.make_agent_info()


async def _send(self: BaseAdapter, text: str, attachments: list[Any] | None = None) -> None:
    pass


async def _stream(self: BaseAdapter) -> AsyncIterator[Block]:
    yield SessionEndBlock()


async def _stop(self: BaseAdapter) -> None:
    pass


def adapter_class(name: str, *, abstract: bool = False, **body: Any) -> type[BaseAdapter]:
    """Create the adapter class ``name`` (agent id: the name in lower case) as a ``class``
    statement would, so the contract checks run; ``body`` overrides or adds attributes."""
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "agent_id": name.lower(),
        "display_name": name,
        "provides_models": False,
        "provides_usage": False,
        "start": _start,
        "send": _send,
        "stream": _stream,
        "stop": _stop,
        **body,
    }
    return type(name, (BaseAdapter,), namespace, abstract=abstract)
