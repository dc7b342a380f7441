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
from bridge.wire.agent_types import AdapterConfig

ENV_PREFIX = "AGENT_BRIDGE_"
MiB = 1024 * 1024
KiB = 1024


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
    #: Bytes queued per connection before it is cut off (4408), like send_queue_frames.
    send_queue_bytes: int = 16 * MiB
    #: A connection whose socket has taken no byte this long while data waits is closed (4408).
    write_stall_s: float = 30.0
    #: The kernel's send buffer of each accepted connection (SO_SNDBUF; Linux doubles it).
    #: Fixed, so a client that stopped reading stops taking bytes early (bridge/server/sockbuf.py).
    socket_send_buffer: int = 256 * KiB
    auth_failures_per_minute: int = 10
    #: Persistent agent processes kept running at once; beyond that the longest-idle stops.
    max_agent_processes: int = 8
    #: TCP handshakes that have not authenticated yet, held at once (bridge/server/admission.py).
    max_unauthenticated: int = 64


class StoreConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: "sqlite" (durable, default) or "memory" (lost at exit; for tests and benchmarks).
    backend: str = "sqlite"
    path: str = ""
    max_events_per_session: int = 100_000
    max_age_days: float = 30.0
    #: An ended session last changed this many days ago is removed whole; 0 (default): never.
    ended_max_age_days: float = 0.0
    #: Writes failing this long interrupt running turns (docs/protocol.md, durability).
    fail_after_s: float = 30.0


class AdaptersConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    dir: str = ""
    turn_timeout: float = 3600.0
    idle_timeout: float = 600.0
    stop_grace: float = 3.0
    start_timeout: float = 60.0
    detect_timeout: float = 10.0
    import_timeout: float = 5.0
    watch: bool = True
    #: Seconds a persistent agent process may sit without a turn before it is stopped (0: never).
    idle_stop_s: float = 600.0
    #: A client opening (subscribing to) a session whose agent process was stopped starts it
    #: again in the background, within ``limits.max_agent_processes`` (bridge/hub/warm.py).
    warm_on_open: bool = True
    #: Times a turn that ended with a retryable failure is tried again (bridge/hub/retry.py).
    retry_max: int = 2


class HubConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How often the hub looks at terminals and caches (tests shorten these)."""

    park_poll: float = 1.0
    sweep_interval: float = 3.0
    sweep_max: int = 32
    handoff_wait: float = 300.0
    mirror_drain: float = 5.0
    external_cache: float = 5.0


class AcpAgentConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An ACP agent added by name and command line, without Python."""

    command: list[str]
    display_name: str = ""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    model: str | None = None


#: directory names ``projects.list`` never descends into
DEFAULT_PROJECT_IGNORE = [
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    "target",
    "dist",
    "build",
    "vendor",
    ".tox",
    ".cache",
]


class ProjectsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: directories searched for git repositories (none by default)
    roots: list[str] = msgspec.field(default_factory=list)
    #: levels below a root searched for repositories
    max_depth: int = 3
    ignore: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_PROJECT_IGNORE))
    #: seconds a repository's git state is reused when no file watch covers it
    git_cache_s: float = 10.0
    #: watch the roots with watchfiles (inotify) to refresh git state on changes
    watch: bool = True


class WorkspaceConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Sessions in worktrees of their own (``session.create`` ``worktree``)."""

    #: where worktrees go: "" = beside each repository, in ``<repo>.worktrees/<branch>``;
    #: else ``<this>/<repo name>/<branch>``
    worktrees: str = ""
    #: a command run in each new worktree before its session starts (argv, no shell), e.g.
    #: ``["npm", "ci"]``; a repository's own executable ``.agent-bridge/worktree-setup`` runs
    #: when this is empty, and only when trusted (bridge/workspace/setuptrust.py)
    setup: list[str] = msgspec.field(default_factory=list)
    #: seconds the setup may take
    setup_timeout_s: float = 300.0
    #: seconds between two asks of a branch's pending CI checks (the notification when done)
    checks_poll_s: float = 30.0


class LogConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    level: str = "info"
    #: "auto" (human on a TTY, JSON lines otherwise), "console" or "json".
    format: str = "auto"


NOTIFY_KINDS = ("permission", "turn_end", "error", "handoff", "checks", "limit")


class NotifyTarget(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One ``[[notify.targets]]`` table: an Apprise URL and the kinds it gets."""

    url: str
    kinds: list[str] = msgspec.field(default_factory=lambda: list(NOTIFY_KINDS))
    #: Shown in `notify test`, the settings panel and logs instead of the (masked) URL.
    name: str = ""


class NotifyConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Attention: when nobody is looking at a session, tell the person (docs/notifications.md)."""

    #: A turn that ran at least this long notifies when it ends.
    min_turn_s: float = 20.0
    #: Kinds sent to the web client's Web Push subscriptions.
    webpush_kinds: list[str] = msgspec.field(default_factory=lambda: list(NOTIFY_KINDS))
    #: How long a push service keeps an undelivered Web Push message (the TTL header, seconds).
    webpush_ttl: int = 3600
    #: The VAPID ``sub`` claim: a contact for push services (mailto: or https: URL).
    vapid_subject: str = "mailto:agent-bridge@localhost"
    #: Base URL of the web client in notification links; "" = this daemon's own address.
    web_url: str = ""
    targets: list[NotifyTarget] = msgspec.field(default_factory=list)


class RelayConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The end-to-end encrypted relay over NATS (docs/remote-access.md). Off unless
    ``account`` or ``url`` is set."""

    #: Account file written by `agent-bridge relay serve` / `relay add` (mode 0600).
    account: str = ""
    #: NATS URL the daemon dials (nats:// or tls://); overrides the account's.
    url: str = ""
    #: This workstation's namespace on the relay, [a-z0-9-]{1,40}; overrides the account's.
    host_id: str = ""
    #: A hosted NATS: the daemon's NATS credentials file (JWT + seed), mode 0600.
    creds: str = ""
    #: A hosted NATS: the daemon's NKey seed file, mode 0600.
    nkey: str = ""
    #: The name the relay's TLS certificate is checked against when ``url`` reaches it by
    #: another (an SSH tunnel to 127.0.0.1, a LAN address); "" = the url's host.
    tls_server_name: str = ""
    #: PEM file of the CA roots the relay's TLS certificate may chain to, besides the
    #: system's: a private CA, or a staging one (Let's Encrypt's staging, pebble).
    ca_file: str = ""
    #: The NATS WebSocket URL paired clients dial (wss://...); overrides the account's.
    client_url: str = ""
    #: JSON file {"user": ..., "password": ...} put in pairing links (mode 0600); optional.
    client_auth: str = ""
    #: Web client URL in pairing links; "" = the account's (the page `relay serve` serves),
    #: else this daemon's own http(s) address.
    web_url: str = ""
    #: The workstation's name shown to clients; "" = its account's name (host_id, the
    #: `relay add` name), so two machines with one host name stay apart.
    name: str = ""
    #: Keep what phones send while this daemon is away in a JetStream work queue on the relay
    #: (sealed to its key), and take it when back; false turns it off.
    queue: bool = True
    #: The relay drops a queued message older than this (the phone still holds it).
    queue_max_age_s: float = 7 * 86400.0
    #: Bytes the workstation's queue may hold; a message beyond is refused to its phone.
    queue_max_bytes: int = 64 * MiB
    #: Messages one phone may have waiting in the queue; one more is refused to it.
    queue_max_per_client: int = 100

    @property
    def enabled(self) -> bool:
        return bool(self.account or self.url)


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    relay: RelayConfig = msgspec.field(default_factory=RelayConfig)
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    adapters: AdaptersConfig = msgspec.field(default_factory=AdaptersConfig)
    agents: dict[str, AdapterConfig] = msgspec.field(default_factory=dict)
    acp: dict[str, AcpAgentConfig] = msgspec.field(default_factory=dict)
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    projects: ProjectsConfig = msgspec.field(default_factory=ProjectsConfig)
    notify: NotifyConfig = msgspec.field(default_factory=NotifyConfig)
    hub: HubConfig = msgspec.field(default_factory=HubConfig)
    workspace: WorkspaceConfig = msgspec.field(default_factory=WorkspaceConfig)

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


_SECTIONS = (
    "server",
    "limits",
    "store",
    "adapters",
    "log",
    "projects",
    "notify",
    "hub",
    "relay",
)


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


def _check_private(file: Path) -> None:
    """The configuration and its directory must be the user's alone (bridge/util/perms.py): they
    name the programs the daemon runs, and hold the token."""
    from bridge.util.perms import CONFIG_RUNS, permission_problem, real_path_problem

    for target, what in ((file.parent, "configuration directory"), (file, "configuration file")):
        if target.exists():
            problem = permission_problem(target, what=what, why=CONFIG_RUNS) or (
                real_path_problem(target, why=CONFIG_RUNS)
            )
            if problem:
                raise ConfigError(f"refusing to use the configuration: {problem}")


def load_config(
    path: Path | None = None, environ: dict[str, str] | None = None, *, required: bool = False
) -> Config:
    """Read, merge with the environment, and validate the configuration."""
    file = path or paths.config_file()
    raw: dict[str, Any] = {}
    _check_private(file)
    if file.exists():
        try:
            raw = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{file}: cannot be read: {exc}") from exc
    elif required:
        raise ConfigError(f"{file}: no such file")
    _check_file_types(raw, file)
    _env_overrides(raw, dict(os.environ if environ is None else environ))
    try:
        # Lax only for what the environment gave (its values are strings).
        config = msgspec.convert(raw, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{file}: {_describe(exc)}") from exc
    _validate(config, file)
    return config


def _check_file_types(raw: dict[str, Any], file: Path) -> None:
    """The file's values as written: ``port = "8797"`` is a string, refused like ``"abc"``.
    Each ``[agents.<id>]`` and ``[acp.<name>]`` table is checked on its own, so an error
    names it (msgspec would say ``agents[...]``)."""
    for section, struct in (("agents", AdapterConfig), ("acp", AcpAgentConfig)):
        tables = raw.get(section)
        if not isinstance(tables, dict):
            continue
        for name, table in tables.items():
            try:
                msgspec.convert(table, struct, strict=True)
            except msgspec.ValidationError as exc:
                text = _describe(exc).replace("key `", f"key `{section}.{name}.", 1)
                if not text.startswith(("key `", "unknown key `")):
                    text = f"[{section}.{name}]: {text}"
                raise ConfigError(f"{file}: {text}") from exc
    try:
        msgspec.convert(raw, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{file}: {_describe(exc)}") from exc


def unknown_agent_ids(config: Config, known: set[str]) -> list[tuple[str, str | None]]:
    """``[agents.<id>]`` tables that name no agent, each with the closest known id or None."""
    import difflib

    found = []
    for name in sorted(config.agents):
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            found.append((name, close[0] if close else None))
    return found


def unknown_agent_message(name: str, suggestion: str | None) -> str:
    hint = f"; did you mean `{suggestion}`?" if suggestion else ""
    return f"config.toml has [agents.{name}], but no agent is called `{name}`{hint}"


def _validate(config: Config, file: Path) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{file}: key `{key}`: {why}")

    if not 0 <= config.server.port <= 65535:
        raise bad("server.port", "must be between 0 and 65535")
    if bool(config.server.tls_cert) != bool(config.server.tls_key):
        raise bad("server.tls_cert", "tls_cert and tls_key must be set together")
    if config.store.backend not in ("sqlite", "memory"):
        raise bad("store.backend", "must be 'sqlite' or 'memory'")
    if not config.store.fail_after_s > 0:
        raise bad("store.fail_after_s", "must be more than 0")
    if config.log.format not in ("auto", "console", "json"):
        raise bad("log.format", "must be 'auto', 'console' or 'json'")
    if config.log.level.lower() not in ("debug", "info", "warning", "error"):
        raise bad("log.level", "must be debug, info, warning or error")
    for name, value in msgspec.structs.asdict(config.limits).items():
        if value <= 0:
            raise bad(f"limits.{name}", "must be greater than 0")
    relay = config.relay
    for key in ("queue_max_age_s", "queue_max_bytes", "queue_max_per_client"):
        if getattr(relay, key) <= 0:
            raise bad(f"relay.{key}", "must be greater than 0")
    if not 0 <= config.projects.max_depth <= 8:
        raise bad("projects.max_depth", "must be between 0 and 8")
    if config.projects.git_cache_s < 0:
        raise bad("projects.git_cache_s", "must not be negative")
    if config.adapters.idle_stop_s < 0:
        raise bad("adapters.idle_stop_s", "must be 0 (never) or more")
    for name, value in msgspec.structs.asdict(config.hub).items():
        if value <= 0:
            raise bad(f"hub.{name}", "must be greater than 0")
    if not 0 <= config.adapters.retry_max <= 10:
        raise bad("adapters.retry_max", "must be between 0 and 10")
    for name, acp in config.acp.items():
        if not acp.command:
            raise bad(f"acp.{name}.command", "must name the agent's command line")
    if config.workspace.checks_poll_s <= 0:
        raise bad("workspace.checks_poll_s", "must be greater than 0")
    _validate_notify(config, bad)
    _validate_relay(config.relay, bad)


HOST_ID_RE = r"[a-z0-9-]{1,40}"


def _validate_relay(relay: RelayConfig, bad: Any) -> None:
    import re

    if relay.url and not relay.url.startswith(("nats://", "tls://")):
        raise bad("relay.url", "must be a nats:// or tls:// URL")
    from bridge.util.redact import remember_url_login

    remember_url_login(relay.url)  # nats://user:PASSWORD@host: masked in every log line
    if relay.host_id and not re.fullmatch(HOST_ID_RE, relay.host_id):
        raise bad("relay.host_id", "must be 1 to 40 of a-z, 0-9 and -")
    if relay.client_url and not relay.client_url.startswith(("ws://", "wss://")):
        raise bad("relay.client_url", "must be a ws:// or wss:// URL")
    if relay.creds and relay.nkey:
        raise bad("relay.creds", "set creds or nkey, not both")
    if relay.url and not relay.account and not relay.host_id:
        raise bad("relay.host_id", "must be set when relay.url is (or use relay.account)")


def _validate_notify(config: Config, bad: Any) -> None:
    notify = config.notify
    if notify.min_turn_s < 0:
        raise bad("notify.min_turn_s", "must be 0 or more")
    if notify.webpush_ttl < 0:
        raise bad("notify.webpush_ttl", "must be 0 or more")
    if not notify.vapid_subject.startswith(("mailto:", "https:")):
        raise bad("notify.vapid_subject", "must be a mailto: or https: URL")
    for name in notify.webpush_kinds:
        if name not in NOTIFY_KINDS:
            raise bad("notify.webpush_kinds", f"unknown kind {name!r}: use {NOTIFY_KINDS}")
    for i, target in enumerate(notify.targets):
        if "://" not in target.url:
            raise bad(f"notify.targets[{i}].url", "must be an Apprise URL (scheme://...)")
        for name in target.kinds:
            if name not in NOTIFY_KINDS:
                why = f"unknown kind {name!r}: use {NOTIFY_KINDS}"
                raise bad(f"notify.targets[{i}].kinds", why)
