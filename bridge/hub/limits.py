"""The latest ``limits`` block of each agent, per window (``agents.list`` shows them as
``limits``): what the agent last reported, also before a restart (the store keeps each
session's latest, bridge/store/limitrows.py); an agent that reports nothing has none."""

from __future__ import annotations

import contextlib

from bridge.blocks import LimitsBlock, block_from_json


class AgentLimits:
    def __init__(self) -> None:
        self._latest: dict[str, dict[str, LimitsBlock]] = {}

    def see(self, agent: str, block: LimitsBlock) -> None:
        self._latest.setdefault(agent, {})[block.window] = block

    def restore(self, stored: list[tuple[str, bytes]]) -> None:
        """What the store kept (read at start-up, before any turn reports anew)."""
        for agent, data in stored:
            with contextlib.suppress(Exception):
                block = block_from_json(data)
                if isinstance(block, LimitsBlock):
                    self._latest.setdefault(agent, {}).setdefault(block.window, block)

    def of(self, agent: str) -> list[LimitsBlock]:
        return list(self._latest.get(agent, {}).values())
