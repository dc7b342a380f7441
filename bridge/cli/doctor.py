"""``agent-bridge doctor``: can the daemon run here, and can each agent?

The daemon's own checks (config, token file, state directory, listen address and port,
adapters directory) live in :func:`daemon_checks` so the running server can answer
``agents.check`` for the reserved pseudo-agent ``daemon`` with the same findings. Each adapter's
``check_environment`` runs through the same :class:`~bridge.loading.registry.Registry` the daemon
builds (built-ins, ACP agents from the config, the adapters directory and packaged adapters).

Exit status: 0 when every finding is ``info``, 1 with a ``warn``, 2 with an ``error``. Only the
daemon's own problems are errors: an agent that cannot run makes that agent unavailable, not
the daemon, so its findings count as warnings at most (``agents.check`` keeps its own levels).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import socket
import ssl
import stat
import sys
import tempfile
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bridge import paths
from bridge.config import Config, ConfigError, load_config
from bridge.server.netaddr import is_loopback
from bridge.wire.agent_types import DAEMON_AGENT, Check, overall_status

PROBE_TIMEOUT_S = 2.0
MIN_TOKEN_CHARS = 32  # what a user-made token should at least have; ours has 43
EXIT_CODES = {"pass": 0, "warn": 1, "fail": 2}


# ---- the daemon's own checks -----------------------------------------------------------------


def daemon_checks(
    config: Config,
    *,
    config_file: Path | None = None,
    config_error: str | None = None,
    listening: str | None = None,
    online: bool = False,
) -> list[Check]:
    """Findings about the daemon's files and address. ``listening``: the running server's URL."""
    checks = [_config_check(config_file, config_error, running=listening is not None)]
    checks += _config_dir_checks(config)
    checks.append(_token_check(paths.token_file()))
    checks += _state_checks(config)
    checks += _bind_checks(config)
    if listening is not None:
        checks.append(Check(code="listening", message=f"listening on {listening}"))
    else:
        checks += _port_checks(config)
        if not any(c.code == "daemon_running" for c in checks):
            checks.append(_not_running_check())
    checks += _relay_config_checks(config)
    checks += _adapters_dir_checks(config.adapters_dir)
    from bridge.attention.cli import channel_checks

    checks += channel_checks(config, online=online)
    return checks


def _config_check(file: Path | None, error: str | None, *, running: bool) -> Check:
    if error is not None:
        return Check(
            code="config_invalid",
            level="error",
            message=error,
            hint="fix the key named above; the other checks use the defaults meanwhile",
        )
    if running:
        return Check(code="config_valid", message="the running daemon's configuration is valid")
    if file is None or not file.exists():
        shown = file or paths.config_file()
        return Check(code="config_valid", message=f"no {shown}: every setting has its default")
    return Check(code="config_valid", message=f"{file} is valid")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _config_dir_checks(config: Config) -> list[Check]:
    directory = paths.config_dir()
    if not directory.is_dir():
        return []
    if _mode(directory) & 0o022:
        return [
            Check(
                code="config_dir_permissions",
                level="error",
                message=f"{directory} is writable by others (mode {_mode(directory):04o}): they "
                "could replace the token, the config or an adapter",
                hint=f"chmod go-w {directory}",
            )
        ]
    return []


def _token_check(path: Path) -> Check:
    try:
        st = path.stat()
    except FileNotFoundError:
        return Check(
            code="token_missing",
            message=f"no token yet; the first start (or `agent-bridge token`) creates {path}",
        )
    except OSError as exc:
        return Check(code="token_unreadable", level="error", message=f"{path}: {exc}")
    if not stat.S_ISREG(st.st_mode):
        return Check(code="token_unreadable", level="error", message=f"{path} is not a file")
    if st.st_uid != os.getuid():
        return Check(
            code="token_owner",
            level="error",
            message=f"{path} belongs to another user (uid {st.st_uid})",
            hint=f"remove it; the next start makes a new one: rm {path}",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Check(
            code="token_permissions",
            level="warn",
            message=f"{path} is readable by others (mode {mode:04o}); the daemon tightens it to "
            "0600 at start, but anyone who read it can connect",
            hint=f"chmod 600 {path} && agent-bridge pair --rotate",
        )
    try:
        size = len(path.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError) as exc:
        return Check(code="token_unreadable", level="error", message=f"{path}: {exc}")
    if 0 < size < MIN_TOKEN_CHARS:
        return Check(
            code="token_weak",
            level="warn",
            message=f"the token in {path} has only {size} characters",
            hint="make a strong one: agent-bridge pair --rotate",
        )
    return Check(code="token_ok", message=f"{path} is private (0600)")


def _writable_problem(directory: Path) -> str | None:
    """Why the daemon could not create files in ``directory`` (made if missing), or None."""
    existing = directory
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != directory:
        # Would be created at start: the nearest existing parent must take a new entry.
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{directory} cannot be created: {existing} is not writable"
        return None
    try:
        fd, name = tempfile.mkstemp(prefix=".doctor-", dir=directory)
    except OSError as exc:
        return f"{directory} is not writable: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(name)
    return None


def _state_checks(config: Config) -> list[Check]:
    if config.store.backend == "memory":
        return [Check(code="store_memory", message="store.backend is memory: nothing is kept")]
    db = config.db_path
    directory = db.parent
    problem = _writable_problem(directory)
    if problem is not None:
        return [
            Check(
                code="state_dir_unwritable",
                level="error",
                message=problem,
                hint="the session store lives there: fix the permissions, or set "
                "XDG_STATE_HOME or store.path",
            )
        ]
    if db.exists() and (not db.is_file() or not os.access(db, os.R_OK | os.W_OK)):
        return [
            Check(
                code="state_dir_unwritable",
                level="error",
                message=f"{db} is not a writable file",
                hint=f"fix its permissions (chmod 600 {db}) or move it away",
            )
        ]
    checks = [Check(code="state_dir_ok", message=f"{directory} is writable")]
    if directory.is_dir() and _mode(directory) & 0o077:
        checks.append(
            Check(
                code="state_dir_permissions",
                level="warn",
                message=f"{directory} is open to others (mode {_mode(directory):04o}); it holds "
                "every session's transcript",
                hint=f"chmod 700 {directory}",
            )
        )
    return checks


def _bind_checks(config: Config) -> list[Check]:
    conf = config.server
    checks: list[Check] = []
    if conf.tls_cert:
        for label, name in (("certificate", conf.tls_cert), ("key", conf.tls_key)):
            file = Path(name).expanduser()
            if not os.access(file, os.R_OK) or not file.is_file():
                checks.append(
                    Check(
                        code="tls_files",
                        level="error",
                        message=f"the TLS {label} {file} cannot be read",
                        hint=f"fix server.tls_{'cert' if label == 'certificate' else 'key'}",
                    )
                )
            elif label == "key" and _mode(file) & 0o077:
                checks.append(
                    Check(
                        code="tls_key_permissions",
                        level="warn",
                        message=f"the TLS key {file} is readable by others "
                        f"(mode {_mode(file):04o})",
                        hint=f"chmod 600 {file}",
                    )
                )
    if is_loopback(conf.host):
        checks.append(Check(code="bind_loopback", message=f"listens on {conf.host} only"))
    elif conf.tls_cert:
        checks.append(Check(code="bind_tls", message=f"listens on {conf.host} with TLS"))
    elif conf.insecure:
        checks.append(
            Check(
                code="bind_insecure",
                level="warn",
                message=f"listens on {conf.host} without TLS (server.insecure): the token and "
                "every transcript cross the network readable",
                hint="set server.tls_cert and server.tls_key (docs/operations.md)",
            )
        )
    else:
        checks.append(
            Check(
                code="bind_refused",
                level="error",
                message=f"the daemon refuses to listen on {conf.host} without TLS",
                hint="set server.tls_cert and server.tls_key, or listen on 127.0.0.1",
            )
        )
    return checks


def probe_health(host: str, port: int, tls: bool) -> dict[str, Any] | None:
    """``GET /healthz`` of an agent-bridge daemon; None if nothing like one answers."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104
    conn: http.client.HTTPConnection
    if tls:
        # A liveness probe of our own daemon, often with a self-signed certificate.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(target, port, timeout=PROBE_TIMEOUT_S, context=ctx)
    else:
        conn = http.client.HTTPConnection(target, port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        body = json.loads(response.read(4096) or b"null")
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    if response.status == 200 and isinstance(body, dict) and body.get("ok") is True:
        return body
    return None


def _not_running_check() -> Check:
    return Check(
        code="daemon_not_running",
        level="warn",
        message="the daemon is not running: apps and the other commands cannot reach it",
        hint="start it with `agent-bridge serve` (or `./dev serve` in a clone); "
        "`agent-bridge service install` keeps it running",
    )


def _port_free(host: str, port: int) -> str | None:
    """None if the daemon could listen on host:port now, else why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As asyncio's server does, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _port_checks(config: Config) -> list[Check]:
    from bridge.cli.client import read_runtime_info

    conf = config.server
    checks: list[Check] = []
    info = read_runtime_info()
    running_port: int | None = None
    if info:
        host, port = str(info.get("host") or conf.host), int(info.get("port") or 0)
        health = probe_health(host, port, bool(info.get("tls")))
        if health is not None:
            running_port = port
            checks.append(
                Check(
                    code="daemon_running",
                    message=f"agent-bridge {health.get('version')} is running at "
                    f"{info.get('url')} (pid {info.get('pid')})",
                )
            )
            checks += _relay_status_checks(health)
        else:
            checks.append(
                Check(
                    code="daemon_stale",
                    message=f"a daemon (pid {info.get('pid')}) last listened on port {port} but "
                    "does not answer; it stopped without cleaning up",
                )
            )
    if conf.port == 0:
        checks.append(
            Check(
                code="port_dynamic",
                message="server.port is 0: each start picks a free port, so a paired phone "
                "must pair again after a restart",
            )
        )
    elif conf.port != running_port:
        problem = _port_free(conf.host, conf.port)
        if problem is None:
            checks.append(Check(code="port_free", message=f"port {conf.port} is free"))
        elif probe_health(conf.host, conf.port, bool(conf.tls_cert)) is not None:
            checks.append(
                Check(code="daemon_running", message=f"agent-bridge answers on port {conf.port}")
            )
        else:
            checks.append(
                Check(
                    code="port_in_use",
                    level="error",
                    message=f"cannot listen on {conf.host}:{conf.port}: {problem}",
                    hint="stop the program using it, or set server.port (AGENT_BRIDGE_SERVER_PORT)",
                )
            )
    return checks


def _relay_config_checks(config: Config) -> list[Check]:
    """``[relay]``: its account or credentials files are readable and private."""
    if not config.relay.enabled:
        return []
    from bridge.config import ConfigError
    from bridge.relay.account import resolve

    try:
        settings = resolve(config.relay)
    except ConfigError as exc:
        return [
            Check(
                code="relay_config",
                level="error",
                message=f"relay: {exc}",
                hint="fix [relay] in config.toml (docs/remote-access.md)",
            )
        ]
    assert settings is not None
    return [
        Check(
            code="relay_config",
            message=f"relay: {settings.shown_url} as workstation {settings.host_id}"
            + (f", NATS user {settings.user_key}" if settings.user_key else ""),
        )
    ]


def _relay_status_checks(health: dict[str, Any]) -> list[Check]:
    """What the running daemon's ``/healthz`` says of its link to the relay."""
    status = health.get("relay")
    if status in (None, "off"):
        return []
    dropped = _relay_dropped_checks(health.get("relay_dropped"))
    dropped += _relay_set_aside_checks(health.get("relay_queue_set_aside"))
    if status == "connected":
        queue = _relay_queue_checks(health.get("relay_queue"))
        return [Check(code="relay_connected", message="relay: connected"), *queue, *dropped]
    reason = health.get("relay_reason")
    if isinstance(reason, str) and reason:
        said, _, fix = reason.partition(". Fix: ")
        return [
            *dropped,
            Check(
                code="relay_certificate_untrusted",
                level="error",
                message=f"relay: {status}: {said}: phones cannot reach this daemon through "
                "the relay",
                hint=f'{fix} (docs/remote-access.md, "Trusting a private or staging CA")',
            ),
        ]
    return [
        *dropped,
        Check(
            code="relay_disconnected",
            level="warn",
            message=f"relay: {status}: phones cannot reach this daemon through the relay",
            hint="is the relay running and its url right? the daemon keeps reconnecting; "
            "see its log (relay_error)",
        ),
    ]


def _relay_dropped_checks(dropped: Any) -> list[Check]:
    """Unauthenticated input the relay link dropped since the daemon started (``/healthz``)."""
    if not isinstance(dropped, dict):
        return []
    frames, requests = dropped.get("frames", 0), dropped.get("requests", 0)
    queued = dropped.get("queued", 0)
    if not frames and not requests and not queued:
        return []
    return [
        Check(
            code="relay_dropped",
            level="warn",
            message=f"relay: dropped {frames} forged or replayed frames, {requests} requests "
            f"with a foreign reply subject and {queued} queued messages that were unreadable or "
            "not a paired phone's since the daemon started",
            hint="someone with the relay's client login sends them (a revoked phone's?); they "
            "changed nothing; see the daemon's log (relay_frame_dropped, relay_request_dropped, "
            "relay_queued_dropped)",
        )
    ]


def _relay_set_aside_checks(set_aside: Any) -> list[Check]:
    """Queued messages the daemon failed to store at every attempt and set aside, so that the
    ones after them went on (docs/protocol.md, "The relay's work queue")."""
    if not isinstance(set_aside, dict) or not set_aside.get("count"):
        return []
    last = set_aside.get("last") or [{}]
    why = last[-1].get("why", "?") if isinstance(last[-1], dict) else "?"
    return [
        Check(
            code="relay_queue_set_aside",
            level="warn",
            message=f"relay: {set_aside['count']} queued messages set aside since the daemon "
            f"started: each failed every attempt to store it (the last: {why})",
            hint="the page that sent one keeps it in its outbox and sends it again itself when "
            "it is next open; /healthz relay_queue_set_aside has the client, session and reason "
            "of the last few, the daemon's log more (relay_queued_not_now, "
            "relay_queued_set_aside)",
        )
    ]


def _relay_queue_checks(status: Any) -> list[Check]:
    """The relay's work queue (docs/protocol.md, "The relay's work queue")."""
    if status != "unavailable":
        return []
    return [
        Check(
            code="relay_queue_unavailable",
            message="relay: no work queue: what a phone sends while this daemon is away waits "
            "on the phone, not on the relay",
            hint="the relay has no JetStream for this workstation (an older `relay serve`, or a "
            "hosted account without it: docs/remote-access.md); see the daemon's log "
            "(relay_queue_unavailable)",
        )
    ]


def _adapters_dir_checks(directory: Path) -> list[Check]:
    from bridge.loading import loader  # its rules decide what gets loaded; say the same here

    if not directory.exists():
        return [
            Check(
                code="adapters_dir_missing",
                message=f"no {directory}: create it (mode 0700) to add your own adapters",
            )
        ]
    if not directory.is_dir():
        return [Check(code="adapters_dir_bad", level="error", message=f"{directory} is not a dir")]
    problems = [loader.permission_problem(directory, what="adapters directory")]
    with contextlib.suppress(OSError):
        problems += [
            loader.permission_problem(path, what="adapter file")
            for path in sorted(directory.iterdir())
            if loader.is_adapter_file(path) and path.is_file()
        ]
    found = [p for p in problems if p]
    if found:
        return [
            Check(
                code="adapters_dir_permissions",
                level="error",
                message=found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""),
                hint=f"chmod go-w {directory} {directory}/*.py; an adapter is code that runs as "
                "you, so the daemon skips what others can change",
            )
        ]
    return [Check(code="adapters_dir_ok", message=f"{directory} is writable only by you")]


# ---- agents ---------------------------------------------------------------------------------


@dataclass
class Finding:
    """A check with where it came from: ``daemon`` or an agent id."""

    scope: str
    check: Check
    agent_level: str | None = None  # the adapter's own level when doctor capped it


class _LogCollector:
    """Turns warnings the loader logs (a broken adapter file, say) into findings."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, _logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        import structlog

        if method in ("warning", "error", "exception", "critical"):
            self.events.append(dict(event))
        raise structlog.DropEvent


async def agent_findings(config: Config) -> list[Finding]:
    """Every adapter the daemon would load, each with its environment check."""
    import structlog

    from bridge.loading import acp_config, loader
    from bridge.loading.registry import Registry, load_builtin_classes

    collector = _LogCollector()
    saved = structlog.get_config()
    structlog.configure(processors=[collector])
    registry = Registry(config)
    findings: list[Finding] = []
    try:
        for cls in load_builtin_classes():
            registry.register(cls, "builtin", notify=False)
        for cls in acp_config.adapters_from_config(config):
            registry.register(cls, "config", notify=False)
        external = await loader.start(registry, config)
        await external.close()
    except Exception as exc:
        findings.append(_loader_finding("adapters_load_failed", repr(exc)))
    finally:
        registry.cancel_detection()
        structlog.configure(**saved)
    entries = [e for e in registry.entries() if e.agent_id != DAEMON_AGENT]
    known = [e.error for e in entries if e.error]
    for event in collector.events:
        what = {k: v for k, v in event.items() if k not in ("event", "timestamp", "level")}
        detail = ", ".join(f"{k}={v}" for k, v in what.items())
        if not any(error in detail for error in known):  # else its agent's line says it
            findings.append(_loader_finding(str(event.get("event")), detail))
    findings += _unknown_agent_findings(config, {e.agent_id for e in entries})
    results = await asyncio.gather(*(_entry_findings(registry, config, e) for e in entries))
    for found in results:
        findings += found
    return findings


def _unknown_agent_findings(config: Config, known: set[str]) -> list[Finding]:
    from bridge.config import unknown_agent_ids, unknown_agent_message

    return [
        Finding(
            "config",
            Check(
                code="unknown_agent",
                level="warn",
                message=unknown_agent_message(name, suggestion),
                hint="rename the table, or remove it; `agent-bridge agents` lists the ids",
            ),
        )
        for name, suggestion in unknown_agent_ids(config, known)
    ]


def _loader_finding(code: str, detail: str) -> Finding:
    return Finding(
        "adapters",
        Check(code=code, level="warn", message=f"{code.replace('_', ' ')}: {detail}"),
    )


async def _entry_findings(registry: Any, config: Config, entry: Any) -> list[Finding]:
    agent_id = entry.agent_id
    explicit = agent_id in config.agents or entry.source != "builtin"
    if not entry.config.enabled:
        return [Finding(agent_id, Check(code="disabled", message="disabled in the config"))]
    if entry.error:
        # Not loaded (or an older version kept): the reason is what matters, not its CLI.
        return [Finding(agent_id, Check(code="adapter_error", level="warn", message=entry.error))]
    findings: list[Finding] = []
    checks = await registry.check(agent_id)
    missing = [c for c in checks if c.code == "binary_missing"]
    if missing and not explicit:
        # A built-in agent nobody configured and nobody installed is simply not in use.
        found = msgspec.structs.replace(
            missing[0], level="info", message=f"not installed (optional): {missing[0].message}"
        )
        return [*findings, Finding(agent_id, found)]
    for check in checks:
        if check.level == "error":
            capped = msgspec.structs.replace(check, level="warn")
            findings.append(Finding(agent_id, capped, agent_level="error"))
        else:
            findings.append(Finding(agent_id, check))
    return findings


# ---- report ---------------------------------------------------------------------------------

_COLORS = {"info": "32", "warn": "33", "error": "31"}


def status_of(findings: list[Finding]) -> str:
    return overall_status([f.check for f in findings])


def render_line(finding: Finding, color: bool) -> str:
    check = finding.check
    label = f"{check.level:<5}"
    if color:
        label = f"\x1b[{_COLORS[check.level]}m{label}\x1b[0m"
    text = check.message
    if check.detail and "\n" not in check.detail and len(check.detail) < 80:
        text += f" ({check.detail})"
    if check.hint:
        hint = f"hint: {check.hint}"
        text += "  " + (f"\x1b[2m{hint}\x1b[0m" if color else hint)
    return f"{label} {finding.scope:<10} {text}"


def report_json(findings: list[Finding]) -> dict[str, Any]:
    status = status_of(findings)
    rows = []
    for f in findings:
        row: dict[str, Any] = {"scope": f.scope, **msgspec.to_builtins(f.check)}
        for key in ("detail", "hint"):
            row.setdefault(key, None)
        if f.agent_level is not None:
            row["agent_level"] = f.agent_level
        rows.append(row)
    return {"status": status, "exit_code": EXIT_CODES[status], "checks": rows}


def cmd_doctor(args: argparse.Namespace) -> int:
    path = Path(args.config).expanduser() if args.config else None
    error: str | None = None
    try:
        config = load_config(path, required=path is not None)
    except ConfigError as exc:
        config, error = Config(), str(exc)
    findings = [
        Finding("daemon", c)
        for c in daemon_checks(
            config,
            config_file=path or paths.config_file(),
            config_error=error,
            online=args.online,
        )
    ]
    if not args.no_agents:
        findings += asyncio.run(agent_findings(config))
    status = status_of(findings)
    if args.json:
        print(json.dumps(report_json(findings), indent=2))
        return EXIT_CODES[status]
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    for finding in findings:
        print(render_line(finding, color))
    counts = {level: 0 for level in ("info", "warn", "error")}
    for finding in findings:
        counts[finding.check.level] += 1
    summary = ", ".join(f"{n} {level}" for level, n in counts.items())
    print(f"doctor: {status} ({summary})")
    return EXIT_CODES[status]


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("doctor", cmd_doctor, "Check that the daemon and each agent can run here")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--no-agents", action="store_true", help="check only the daemon itself")
    p.add_argument(
        "--online", action="store_true", help="also check that notification services answer"
    )
