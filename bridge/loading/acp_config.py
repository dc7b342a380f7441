"""ACP agents declared in config.toml by name and command line, without writing Python.

Each ``[acp.<name>]`` table becomes one adapter class with ``agent_id = <name>``::

    [acp.qwen]
    command = ["qwen", "--acp"]
    display_name = "Qwen Code"
    env = { OPENAI_BASE_URL = "http://127.0.0.1:8080/v1" }
    model = "qwen3-coder-plus"

``[agents.<name>]`` still applies to it (``binary`` replaces ``command[0]``, ``env`` adds to
the table's, ``model``, ``options``, timeouts). A name that is not a valid agent id or that
belongs to a built-in adapter is skipped with a logged error.
"""

from __future__ import annotations

from typing import Any

from bridge.adapters.acp import AcpBase
from bridge.adapters.base import BaseAdapter
from bridge.config import AcpAgentConfig, Config
from bridge.loading.registry import BUILTIN_ADAPTERS
from bridge.logs import get_logger

log = get_logger("bridge.acp_config")


def _builtin_ids() -> set[str]:
    # "bridge.adapters.<id>:<Class>": the module name is the agent id, without importing it.
    ids = {spec.partition(":")[0].rsplit(".", 1)[-1] for spec in BUILTIN_ADAPTERS}
    return ids | {"acp"}


def _valid_id(name: str) -> bool:
    return bool(name) and name.replace("-", "_").isidentifier()


def adapter_class(name: str, table: AcpAgentConfig) -> type[BaseAdapter]:
    """The adapter class for one ``[acp.<name>]`` table."""
    title = table.display_name or name
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": f"AcpConfigAdapter[{name}]",
        "agent_id": name,
        "display_name": title,
        "cli_binary": table.command[0],
        "acp_args": tuple(table.command[1:]),
        "default_env": dict(table.env),
        "default_model": table.model,
        "doc": (
            f"# {title}\n\n"
            f"**Use when** you want {title}, an ACP agent added in config.toml "
            f"(`[acp.{name}]`), started as `{' '.join(table.command)}`.\n\n"
            "**Don't use when** the command is not installed on this machine."
        ),
    }
    return type(f"AcpConfigAdapter_{name.replace('-', '_')}", (AcpBase,), attrs)


def adapters_from_config(config: Config) -> list[type[BaseAdapter]]:
    taken = _builtin_ids()
    classes: list[type[BaseAdapter]] = []
    for name, table in config.acp.items():
        if not _valid_id(name):
            log.error("acp_config_skipped", name=name, error="not a valid agent id")
            continue
        if name in taken:
            log.error("acp_config_skipped", name=name, error="the name of a built-in adapter")
            continue
        try:
            classes.append(adapter_class(name, table))
        except (TypeError, ValueError, IndexError) as exc:
            log.error("acp_config_skipped", name=name, error=str(exc))
    return classes
