"""Run the daemon as a systemd user service: ``agent-bridge service install|uninstall|status``.

The unit text lives here, in one place: ``install`` renders it with the ``agent-bridge`` that
is running (so a venv or pipx install starts the same code) and the caller's ``PATH`` (the user
manager's own is minimal, and agents installed under ``~/.local`` or by nvm would vanish);
``systemd/agent-bridge.service`` in the repository is the same text rendered with the pipx
default path, and a test keeps the two equal. Nothing here needs systemd to be running:
``install`` writes a file and prints the ``systemctl --user`` commands unless asked to run them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

UNIT_NAME = "agent-bridge.service"
#: What pipx installs; used for the unit shipped in the repository.
DEFAULT_EXEC = "%h/.local/bin/agent-bridge"
SYSTEMCTL_TIMEOUT_S = 30.0

#: How both units restart (the daemon's and the relay's).
RESTART_POLICY = """\
Restart=on-failure
RestartSec=5
# Exit status 2 is a configuration error: restarting cannot fix it.
RestartPreventExitStatus=2
"""

_UNIT_TEMPLATE = """\
# agent-bridge as a systemd user service. Install it with `agent-bridge service install`
# (which fills in ExecStart and PATH for your installation) or copy it to
# ~/.config/systemd/user/ and adjust ExecStart. Why each option is (or is not) here:
# systemd/README.md and docs/operations.md.

[Unit]
Description=agent-bridge: coding agents on your phone over WebSocket
# Five failed starts in five minutes and systemd gives up instead of looping.
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
# The daemon says READY=1 once it listens and its store is open, STATUS= with session counts,
# WATCHDOG=1 every WatchdogSec/2, and STOPPING=1 when it shuts down.
Type=notify
NotifyAccess=main
WatchdogSec=30
ExecStart={exec_start}
{environment}\
{restart_policy}\
# SIGTERM goes to the daemon alone, which interrupts turns and stops every agent's process
# group within adapters.stop_grace; whatever is left after that (or after a crash) gets SIGKILL.
KillMode=mixed
TimeoutStopSec=60
SyslogIdentifier=agent-bridge

# Hardening that leaves agents their normal working world (home, /tmp, network, tools):
# no privilege gain through setuid binaries (so no sudo from an agent), no creating setuid
# files, no personality or realtime tricks. Options that hide or remount parts of the file
# system (ProtectHome, ProtectSystem, PrivateTmp) are left out on purpose: agents edit code
# under your home, use /tmp, and share sockets there with your terminal.
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes

[Install]
WantedBy=default.target
"""


# ---- rendering -----------------------------------------------------------------------------------


def _quote_arg(arg: str) -> str:
    """One ExecStart word: specifiers and variables escaped, quoted when it has spaces."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if text and not re.search(r"[\s\"'\\;]", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _environment_line(name: str, value: str) -> str:
    text = f"{name}={value}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return f'Environment="{text}"\n'


def render_unit(exec_argv: Sequence[str] | None = None, path_env: str | None = None) -> str:
    """The unit file text; ``exec_argv`` None gives the pipx default (``%h`` kept as is)."""
    if exec_argv is None:
        exec_start = f"{DEFAULT_EXEC} serve"
    else:
        exec_start = " ".join(_quote_arg(a) for a in exec_argv)
    environment = _environment_line("PATH", path_env) if path_env else ""
    return _UNIT_TEMPLATE.format(
        exec_start=exec_start, environment=environment, restart_policy=RESTART_POLICY
    )


def agent_bridge_argv(config: str | None = None) -> list[str]:
    """How to start this very installation: its ``agent-bridge`` script, else ``python -m``."""
    candidates = []
    if Path(sys.argv[0]).name == "agent-bridge":
        candidates.append(Path(os.path.abspath(sys.argv[0])))
    candidates.append(Path(sys.executable).parent / "agent-bridge")
    argv: list[str] | None = None
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            argv = [str(candidate), "serve"]
            break
    if argv is None:
        argv = [os.path.abspath(sys.executable), "-m", "bridge", "serve"]
    if config:
        argv += ["--config", str(Path(config).expanduser().resolve())]
    return argv


def unit_dir() -> Path:
    value = os.environ.get("XDG_CONFIG_HOME")
    base = Path(value) if value and os.path.isabs(value) else Path.home() / ".config"
    return base / "systemd" / "user"


def unit_path() -> Path:
    return unit_dir() / UNIT_NAME


def exec_start_of(unit_text: str) -> list[str]:
    """The ExecStart words of an installed unit, enough to see whether its program exists."""
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            value = line[len("ExecStart=") :]
            words = re.findall(r'"((?:[^"\\]|\\.)*)"|(\S+)', value)
            return [_unescape(q) if q else _unescape(w) for q, w in words]
    return []


def _unescape(word: str) -> str:
    word = word.replace('\\"', '"').replace("\\\\", "\\")
    return word.replace("%%", "%").replace("$$", "$")


# ---- systemctl -----------------------------------------------------------------------------------


def _systemctl(
    *args: str, capture: bool = False, scope: str = "--user"
) -> subprocess.CompletedProcess[str] | None:
    """``systemctl --user ARGS`` (``scope`` "--system": the relay's system unit,
    bridge/relay/service.py); None when systemctl is not installed."""
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        return subprocess.run(
            [exe, scope, *args],
            capture_output=capture,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"agent-bridge: systemctl {scope} {' '.join(args)}: {exc}", file=sys.stderr)
        return subprocess.CompletedProcess([exe, *args], 1, "", str(exc))


def _print_commands(commands: list[list[str]], scope: str = "--user") -> None:
    for command in commands:
        print(f"  {_shown(scope)}" + " ".join(command))


def _shown(scope: str) -> str:
    return "systemctl --user " if scope == "--user" else "sudo systemctl "


def _run_commands(commands: list[list[str]], scope: str = "--user") -> int:
    if shutil.which("systemctl") is None:
        print("agent-bridge: systemctl is not installed here; run these where systemd runs:")
        _print_commands(commands, scope)
        return 1
    for command in commands:
        print(f"+ systemctl {scope} " + " ".join(command), flush=True)
        result = _systemctl(*command, scope=scope)
        if result is None or result.returncode != 0:
            return 1
    return 0


# ---- commands ------------------------------------------------------------------------------------


def cmd_install(args: argparse.Namespace) -> int:
    argv = agent_bridge_argv(args.config)
    path_env = None if args.no_path else _dedupe_path(os.environ.get("PATH", ""))
    text = render_unit(argv, path_env)
    target = unit_path()
    previous = target.read_text(encoding="utf-8") if target.is_file() else None
    if previous == text:
        print(f"{target} is up to date")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
        print(f"{'updated' if previous is not None else 'wrote'} {target}")
    print(f"  ExecStart={' '.join(argv)}")
    commands = [["daemon-reload"], ["enable", "--now", UNIT_NAME]]
    if previous is not None and previous != text:
        commands.append(["restart", UNIT_NAME])
    if args.now:
        return _run_commands(commands)
    print("Start it now and at every login with:")
    _print_commands(commands)
    print("Keep it running when you are logged out (and start it at boot) with:")
    print(f"  loginctl enable-linger {_user()}")
    print("Follow its log with:")
    print(f"  journalctl --user -u {UNIT_NAME} -f")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    target = unit_path()
    stop = [["disable", "--now", UNIT_NAME]]
    if args.now and target.exists() and _run_commands(stop) != 0:
        print("agent-bridge: could not stop the service; the unit file is left in place")
        return 1
    if not target.exists():
        print(f"{target} is not installed")
        return 0
    target.unlink()
    print(f"removed {target}")
    if args.now:
        return _run_commands([["daemon-reload"]])
    print("If it was enabled, stop it and let systemd forget it with:")
    _print_commands([*stop, ["daemon-reload"]])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    target = unit_path()
    if not target.is_file():
        print(f"not installed ({target} does not exist); install it with:")
        print("  agent-bridge service install")
        return 3
    print(f"installed: {target}")
    program = exec_start_of(target.read_text(encoding="utf-8"))
    if program and not (program[0].startswith("%") or os.access(program[0], os.X_OK)):
        print(
            f"warning: ExecStart program {program[0]} is missing; run `agent-bridge service "
            "install` again from the installation you want to run"
        )
    result = _systemctl("status", "--no-pager", "--lines=10", UNIT_NAME)
    if result is None:
        print("systemctl is not installed here, so the service's state cannot be shown.")
        print("Where systemd runs, use: systemctl --user status " + UNIT_NAME)
        return 0
    # systemctl's own exit status: 0 running, 3 stopped, other values for errors.
    return result.returncode


def _dedupe_path(value: str) -> str | None:
    seen: list[str] = []
    for part in value.split(os.pathsep):
        if part and os.path.isabs(part) and part not in seen:
            seen.append(part)
    return os.pathsep.join(seen) or None


def _user() -> str:
    for name in ("USER", "LOGNAME"):
        if os.environ.get(name):
            return os.environ[name]
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


# ---- CLI -----------------------------------------------------------------------------------------


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    from bridge.cli.cli import command_adder
    from bridge.cli.common import group_usage

    parser = add(
        "service",
        group_usage(sub, "service"),
        "Install, remove or inspect the systemd user service",
    )
    actions = parser.add_subparsers(dest="service_action", metavar="ACTION")
    action = command_adder(actions, "config file the service should use", under_command=True)

    p = action("install", cmd_install, f"Write ~/.config/systemd/user/{UNIT_NAME}")
    p.add_argument(
        "--now", action="store_true", help="also run systemctl --user daemon-reload, enable --now"
    )
    p.add_argument(
        "--no-path", action="store_true", help="don't copy this shell's PATH into the unit"
    )
    p = action("uninstall", cmd_uninstall, "Remove the unit file")
    p.add_argument("--now", action="store_true", help="first run systemctl --user disable --now")
    action("status", cmd_status, "Show whether the unit is installed and how it runs")
