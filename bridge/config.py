"""config.toml: typed, validated at start, overridable by environment variables.

Every key has a default, so an absent file is a valid configuration. A bad key or a wrong
type stops the daemon with a message naming the key. ``AGENT_BRIDGE_<SECTION>_<KEY>``
environment variables override the file (``AGENT_BRIDGE_SERVER_PORT=9000``).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from bridge import paths
from bridge.adapters.base import AdapterConfig

ENV_PREFIX = "AGENT_BRIDGE_"
MiB = 1024 * 1024


class ConfigError(Exception):
    """The configuration is invalid; the message names the file and the key."""


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8765
    #: Unix socket path; "" means the default in the runtime dir, "off" disables it.
    unix_socket: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    #: Browser origins allowed to connect; the daemon's own web client is always allowed.
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    insecure: bool = False
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    hello_timeout: float = 5.0
    serve_web: bool = True


class LimitsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    max_frame_bytes: int = 16 * MiB
    max_connections: int = 2000
    max_sessions: int = 2000
    max_subscribers_per_session: int = 256
    max_queued_messages: int = 100
    max_attachments: int = 10
    max_attachment_bytes: int = 10 * MiB
    requests_per_second: float = 200.0
    request_burst: int = 400
    send_queue_frames: int = 20000
    auth_failures_per_minute: int = 10


class StoreConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: "sqlite" (durable, default) or "memory" (lost at exit; for tests and benchmarks).
    backend: str = "sqlite"
    path: str = ""
    max_events_per_session: int = 100_000
    max_age_days: float = 30.0


class AdaptersConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    dir: str = ""
    turn_timeout: float = 3600.0
    idle_timeout: float = 600.0
    stop_grace: float = 3.0
    start_timeout: float = 60.0
    detect_timeout: float = 10.0
    import_timeout: float = 5.0
    watch: bool = True
    retry_max: int = 2


class AcpAgentConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An ACP agent added by name and command line, without Python."""

    command: list[str]
    display_name: str = ""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    model: str | None = None


class LogConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    level: str = "info"
    #: "auto" (human on a TTY, JSON lines otherwise), "console" or "json".
    format: str = "auto"


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    adapters: AdaptersConfig = msgspec.field(default_factory=AdaptersConfig)
    agents: dict[str, AdapterConfig] = msgspec.field(default_factory=dict)
    acp: dict[str, AcpAgentConfig] = msgspec.field(default_factory=dict)
    log: LogConfig = msgspec.field(default_factory=LogConfig)

    @property
    def adapters_dir(self) -> Path:
        return Path(self.adapters.dir).expanduser() if self.adapters.dir else paths.adapters_dir()

    @property
    def db_path(self) -> Path:
        return Path(self.store.path).expanduser() if self.store.path else paths.default_db()

    @property
    def unix_socket_path(self) -> Path | None:
        value = self.server.unix_socket
        if value.lower() in ("off", "false", "no", "none"):
            return None
        return Path(value).expanduser() if value else paths.default_unix_socket()

    def agent(self, agent_id: str) -> AdapterConfig:
        return self.agents.get(agent_id) or AdapterConfig()


_SECTIONS = ("server", "limits", "store", "adapters", "log")


def _env_overrides(raw: dict[str, Any], environ: dict[str, str]) -> None:
    for section in _SECTIONS:
        prefix = f"{ENV_PREFIX}{section.upper()}_"
        for name, value in environ.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :].lower()
            raw.setdefault(section, {})[key] = _parse_env_value(value)


def _parse_env_value(value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if isinstance(parsed, int | float | list) else value


def _describe(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    # msgspec says "... - at `$.server.port`": turn the JSON path into a TOML key.
    if " - at `$." in text:
        message, _, where = text.partition(" - at `$.")
        return f"key `{where.rstrip('`')}`: {message}"
    if "unknown field" in text:
        return text.replace("Object contains unknown field", "unknown key")
    return text


def load_config(
    path: Path | None = None, environ: dict[str, str] | None = None, *, required: bool = False
) -> Config:
    """Read, merge with the environment, and validate the configuration."""
    file = path or paths.config_file()
    raw: dict[str, Any] = {}
    if file.exists():
        try:
            raw = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{file}: cannot be read: {exc}") from exc
    elif required:
        raise ConfigError(f"{file}: no such file")
    _env_overrides(raw, dict(os.environ if environ is None else environ))
    try:
        config = msgspec.convert(raw, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{file}: {_describe(exc)}") from exc
    _validate(config, file)
    return config


def _validate(config: Config, file: Path) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{file}: key `{key}`: {why}")

    if not 0 <= config.server.port <= 65535:
        raise bad("server.port", "must be between 0 and 65535")
    if bool(config.server.tls_cert) != bool(config.server.tls_key):
        raise bad("server.tls_cert", "tls_cert and tls_key must be set together")
    if config.store.backend not in ("sqlite", "memory"):
        raise bad("store.backend", "must be 'sqlite' or 'memory'")
    if config.log.format not in ("auto", "console", "json"):
        raise bad("log.format", "must be 'auto', 'console' or 'json'")
    if config.log.level.lower() not in ("debug", "info", "warning", "error"):
        raise bad("log.level", "must be debug, info, warning or error")
    for name, value in msgspec.structs.asdict(config.limits).items():
        if value <= 0:
            raise bad(f"limits.{name}", "must be greater than 0")
    if not 0 <= config.adapters.retry_max <= 10:
        raise bad("adapters.retry_max", "must be between 0 and 10")
    for name, acp in config.acp.items():
        if not acp.command:
            raise bad(f"acp.{name}.command", "must name the agent's command line")
