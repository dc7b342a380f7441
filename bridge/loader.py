"""External adapters from the adapters directory (filled in by the loader work)."""

from __future__ import annotations

from bridge.config import Config
from bridge.registry import Registry


class AdapterLoader:
    async def close(self) -> None:
        return None


async def start(registry: Registry, config: Config) -> AdapterLoader:
    return AdapterLoader()
