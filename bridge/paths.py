"""Where agent-bridge keeps its files, following the XDG base directory rules."""

from __future__ import annotations

import os
from pathlib import Path

APP = "agent-bridge"


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / APP


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / APP


def runtime_dir() -> Path:
    value = os.environ.get("XDG_RUNTIME_DIR")
    if value and os.path.isabs(value):
        return Path(value) / APP
    return state_dir() / "run"


def config_file() -> Path:
    return config_dir() / "config.toml"


def token_file() -> Path:
    return config_dir() / "token"


def adapters_dir() -> Path:
    return config_dir() / "adapters"


def default_db() -> Path:
    return state_dir() / "bridge.sqlite3"


def default_unix_socket() -> Path:
    return runtime_dir() / "bridge.sock"
