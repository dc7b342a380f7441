"""The latest ``limits`` block of each agent, per window (``agents.list`` shows them as
``limits``): what the agent last reported since the daemon started; an agent that reports
nothing has none."""

from __future__ import annotations

from bridge.blocks import LimitsBlock


class AgentLimits:
    def __init__(self) -> None:
        self._latest: dict[str, dict[str, LimitsBlock]] = {}

    def see(self, agent: str, block: LimitsBlock) -> None:
        self._latest.setdefault(agent, {})[block.window] = block

    def of(self, agent: str) -> list[LimitsBlock]:
        return list(self._latest.get(agent, {}).values())
