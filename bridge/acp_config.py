"""ACP agents declared in config.toml by name and command (filled in by the ACP work)."""

from __future__ import annotations

from bridge.adapters.base import BaseAdapter
from bridge.config import Config


def adapters_from_config(config: Config) -> list[type[BaseAdapter]]:
    return []
