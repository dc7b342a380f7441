"""The relay as a systemd system service: ``agent-bridge relay service install|status|uninstall``
(docs/operations.md, "The relay as a service").

A system unit, not a user one: only the system manager can hand a process the one capability
it needs to listen on ports 80 and 443 (CAP_NET_BIND_SERVICE) while it runs as an ordinary
user. ``install`` writes ``/etc/systemd/system/agent-bridge-relay.service`` (so it runs under
sudo) for the user who called sudo, with this installation's ``agent-bridge`` and the relay
directory spelled out; the unit helpers and systemctl calls are the daemon's
(bridge/cli/service.py).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.cli import service

UNIT_NAME = "agent-bridge-relay.service"
SYSTEM_UNIT_DIR = "/etc/systemd/system"
SCOPE = "--system"

_UNIT_TEMPLATE = """\
# The agent-bridge relay (`agent-bridge relay serve`) as a systemd system service, written by
# `agent-bridge relay service install`. Why each option is here: docs/operations.md.

[Unit]
Description=agent-bridge relay: NATS, its WebSocket and the web client for remote access
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
Type=simple
User={user}
ExecStart={exec_start}
{environment}\
{restart_policy}\
# SIGTERM goes to relay serve alone, which stops nats-server; SIGKILL for what is left.
KillMode=mixed
TimeoutStopSec=30
SyslogIdentifier=agent-bridge-relay
# One descriptor per phone's connection, two while relay serve copies it to nats-server: the
# default 1,024 runs out under a crowd of idle sockets. relay serve bounds those it keeps
# waiting to a share of this (its front door), and nats-server has the same limit.
LimitNOFILE=65536

# Ports below 1024 (80 for the ACME challenge, 443) without running as root: this capability
# and no other, for the relay and the nats-server it starts.
AmbientCapabilities=CAP_NET_BIND_SERVICE
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectSystem=strict
ProtectHome=read-only
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
# The relay directory is the only place it writes (its state, nats.conf, the certificates).
ReadWritePaths={relay_dir}

[Install]
WantedBy=multi-user.target
"""


def render_unit(user: str, exec_argv: Sequence[str], relay_dir: Path) -> str:
    return _UNIT_TEMPLATE.format(
        user=user,
        exec_start=" ".join(service._quote_arg(a) for a in exec_argv),
        environment=service._environment_line(
            "PATH", service._dedupe_path(os.environ.get("PATH", "")) or "/usr/bin:/bin"
        ),
        relay_dir=service._quote_arg(str(relay_dir)),
        restart_policy=service.RESTART_POLICY,
    )


def _target_user(args: argparse.Namespace) -> pwd.struct_passwd:
    name = args.user or os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SystemExit(f"agent-bridge: no user {name} on this machine (--user)") from None


def _relay_dir(args: argparse.Namespace, user: pwd.struct_passwd) -> Path:
    if args.dir:
        return Path(args.dir).expanduser().resolve()
    if user.pw_uid == os.getuid():
        from bridge.relay.natsserver import default_dir

        return default_dir().resolve()
    return Path(user.pw_dir) / ".local" / "state" / "agent-bridge" / "relay-server"


def _make_dir(relay_dir: Path, user: pwd.struct_passwd) -> None:
    """The unit's ReadWritePaths must exist before it starts, owned by the user it runs as."""
    if relay_dir.exists():
        return
    relay_dir.mkdir(parents=True, mode=0o700)
    if os.getuid() == 0 and user.pw_uid != 0:
        for part in [relay_dir, *relay_dir.parents]:
            if part == Path(user.pw_dir) or not str(part).startswith(user.pw_dir):
                break
            os.chown(part, user.pw_uid, user.pw_gid)


def unit_path(args: argparse.Namespace) -> Path:
    return Path(args.unit_dir or SYSTEM_UNIT_DIR) / UNIT_NAME


def cmd_install(args: argparse.Namespace) -> int:
    user = _target_user(args)
    relay_dir = _relay_dir(args, user)
    serve_args = shlex.split(args.serve_args)
    argv = [*service.agent_bridge_argv()[:-1], "relay", "serve", "--dir", str(relay_dir)]
    argv += serve_args
    text = render_unit(user.pw_name, argv, relay_dir)
    target = unit_path(args)
    previous = target.read_text(encoding="utf-8") if target.is_file() else None
    if previous == text:
        print(f"{target} is up to date")
    else:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
        except PermissionError:
            print(f"agent-bridge: cannot write {target}: run it with sudo", flush=True)
            return 1
        print(f"{'updated' if previous is not None else 'wrote'} {target}")
    _make_dir(relay_dir, user)
    print(f"  User={user.pw_name}")
    print(f"  ExecStart={' '.join(argv)}")
    if user.pw_uid == 0:
        print("warning: the relay would run as root; --user NAME runs it as that user")
    commands = [["daemon-reload"], ["enable", "--now", UNIT_NAME]]
    if previous is not None and previous != text:
        commands.append(["restart", UNIT_NAME])
    if args.now:
        return service._run_commands(commands, SCOPE)
    print("Start it now and at every boot with:")
    service._print_commands(commands, SCOPE)
    print("Follow its log with:")
    print(f"  journalctl -u {UNIT_NAME} -f")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    target = unit_path(args)
    stop = [["disable", "--now", UNIT_NAME]]
    if args.now and target.exists() and service._run_commands(stop, SCOPE) != 0:
        print("agent-bridge: could not stop the service; the unit file is left in place")
        return 1
    if not target.exists():
        print(f"{target} is not installed")
        return 0
    try:
        target.unlink()
    except PermissionError:
        print(f"agent-bridge: cannot remove {target}: run it with sudo")
        return 1
    print(f"removed {target}")
    if args.now:
        return service._run_commands([["daemon-reload"]], SCOPE)
    print("If it was enabled, stop it and let systemd forget it with:")
    service._print_commands([*stop, ["daemon-reload"]], SCOPE)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    target = unit_path(args)
    if not target.is_file():
        print(f"not installed ({target} does not exist); install it with:")
        print("  sudo agent-bridge relay service install")
        return 3
    print(f"installed: {target}")
    program = service.exec_start_of(target.read_text(encoding="utf-8"))
    if program and not os.access(program[0], os.X_OK):
        print(
            f"warning: ExecStart program {program[0]} is missing; run `agent-bridge relay "
            "service install` again from the installation you want to run"
        )
    result = service._systemctl("status", "--no-pager", "--lines=10", UNIT_NAME, scope=SCOPE)
    if result is None:
        print("systemctl is not installed here, so the service's state cannot be shown.")
        print(f"Where systemd runs, use: systemctl status {UNIT_NAME}")
        return 0
    return result.returncode


def register(relay_actions: Any) -> None:
    """``relay service install|status|uninstall`` under ``relay``'s actions."""
    from bridge.cli.cli import command_adder

    parent = relay_actions.add_parser(
        "service", help="Install, remove or inspect the relay's systemd service"
    )
    parent.set_defaults(handler=lambda _a: parent.print_help() or 2)
    actions = parent.add_subparsers(dest="relay_service_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    unit_dir_help = f"where the unit goes (default {SYSTEM_UNIT_DIR})"
    p = action("install", cmd_install, f"Write {SYSTEM_UNIT_DIR}/{UNIT_NAME} (with sudo)")
    p.add_argument("--user", help="the user it runs as (default: the one who ran sudo)")
    p.add_argument("--dir", help="the relay's directory (default: that user's)")
    p.add_argument("--unit-dir", dest="unit_dir", help=unit_dir_help)
    p.add_argument("--now", action="store_true", help="also run systemctl daemon-reload, enable")
    p.add_argument(
        "--serve-args",
        dest="serve_args",
        default="",
        help='`relay serve` options for the unit, one string: "--public-host relay.example.org '
        '--acme-email me@example.org --host 0.0.0.0 --web-port 443"',
    )
    p = action("uninstall", cmd_uninstall, "Remove the unit file")
    p.add_argument("--unit-dir", dest="unit_dir", help=unit_dir_help)
    p.add_argument("--now", action="store_true", help="first run systemctl disable --now")
    p = action("status", cmd_status, "Show whether the unit is installed and how it runs")
    p.add_argument("--unit-dir", dest="unit_dir", help=unit_dir_help)
