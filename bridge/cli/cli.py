"""The ``agent-bridge`` command. ``serve`` runs the daemon; the rest are protocol clients."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import uuid
from collections.abc import Callable
from typing import Any

from bridge import __version__, paths
from bridge.cli.common import (
    CONFIG_HELP,
    IntermixedParser,
    ask_daemon,
    config_of,
    connect,
    run_client,
)
from bridge.config import ConfigError
from bridge.server.netaddr import is_loopback
from bridge.util.exits import fail

Handler = Callable[[argparse.Namespace], int]

FIRST_STEPS = """\
first steps (with `agent-bridge serve` running in another terminal):
  agent-bridge agents                   which agents are installed
  agent-bridge new demo "hello"         create a session, print its id, send a first message
                                        and follow the turn (answer permissions with keys)
  agent-bridge sessions                 list sessions and their ids
  agent-bridge send SESSION TEXT        send another message
  agent-bridge watch SESSION            follow a session live
  agent-bridge permission SESSION REQUEST_ID OPTION_ID
                                        answer a permission request from a script
  agent-bridge resume SESSION           continue the session in this terminal
  agent-bridge pair                     connect a phone or a browser
"""


# ---- serve ---------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from bridge.daemon import ServeOptions, serve
    from bridge.logs import configure_logging

    config = config_of(args)
    configure_logging(config.log.level, config.log.format)
    options = ServeOptions(host=args.host, port=args.port, unix=args.unix, insecure=args.insecure)
    return serve(config, options)


# ---- token and pairing -----------------------------------------------------------------------


def cmd_token(args: argparse.Namespace) -> int:
    from bridge.server.auth import load_or_create_token

    print(load_or_create_token(paths.token_file()))
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    from bridge.cli.client import read_runtime_info
    from bridge.server.auth import load_or_create_token, rotate_token
    from bridge.server.pairing import pairing_host, pairing_url, qr_text, web_url

    if args.relay:
        from bridge.relay.pairlink import pairing_link

        return pairing_link(args)
    config = config_of(args)
    token = (
        rotate_token(paths.token_file())
        if args.rotate
        else load_or_create_token(paths.token_file())
    )
    info = read_runtime_info() or {}
    host = str(info.get("host") or config.server.host)
    port = int(info.get("port") or config.server.port)
    tls = bool(info.get("tls", bool(config.server.tls_cert)))
    shown = args.host or pairing_host(host)
    url = pairing_url(shown, port, token, tls)
    if args.json:
        print(
            json.dumps(
                {
                    "url": url,
                    "web": web_url(shown, port, token, tls),
                    "host": shown,
                    "port": port,
                    "tls": tls,
                    "rotated": args.rotate,
                    "loopback": is_loopback(shown),
                }
            )
        )
        return 0
    if args.rotate:
        print("A new token was made; clients holding the old one are disconnected.")
    if not info:
        print("(the daemon is not running; showing the configured address)")
    print(url)
    print(f"web client: {web_url(shown, port, token, tls)}")
    if is_loopback(shown):
        print(LOOPBACK_NOTE.format(host=shown))
    if not args.no_qr:
        print(qr_text(url))
    if config.relay.enabled:
        print(RELAY_NOTE)
    return 0


RELAY_NOTE = """\
A phone away from home pairs through the relay instead: `agent-bridge pair --relay`."""


LOOPBACK_NOTE = """\
note: {host} is this computer only. A browser here can use these links; a phone cannot
reach this address. To pair a phone, either:
  - listen on your network with TLS: set server.host and server.tls_cert/tls_key (a
    certificate the phone trusts), then run `agent-bridge pair` again; or
  - reach this computer over a private network you already run (Tailscale, WireGuard,
    an SSH tunnel) and pair with that address.
Each way, step by step: docs/remote-access.md"""


# ---- client commands -------------------------------------------------------------------------


def cmd_agents(args: argparse.Namespace) -> int:
    async def go() -> int:
        result = await ask_daemon("agents.list")
        agents = result["agents"]
        if args.json:
            print(json.dumps(agents, indent=2))
            return 0
        print_agents_table(agents)
        return 0

    return run_client(go())


def agent_state(agent: dict[str, Any]) -> str:
    """One word for the AGENTS table: ready, warning, loading or unavailable."""
    error = agent.get("error") or ""
    if error.startswith("still loading") or error == "detection in progress":
        return "loading"
    if not agent.get("available"):
        return "unavailable"
    return "warning" if error else "ready"


def agent_reason(agent: dict[str, Any]) -> str:
    """The whole reason behind a state other than ready ("" for none)."""
    error = str(agent.get("error") or "")
    if not error and not agent.get("available"):
        # Found but not offered: the config turned it off (the daemon gives no other reason).
        return "disabled in config.toml (`enabled = false`); `agent-bridge doctor` checks it"
    if error and agent.get("available") and agent.get("source") == "external":
        error += " (the last version of the file that loaded stays in use)"
    return error


def print_agents_table(agents: list[dict[str, Any]]) -> None:
    import shutil
    import textwrap

    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    print(f"{'AGENT':<12} {'STATE':<11} {'VERSION':<28} {'HANDOFF':<10} CAPABILITIES")
    for a in agents:
        caps = ",".join(k for k, v in a["capabilities"].items() if v) or "-"
        version = str(a.get("version") or "-")
        print(f"{a['agent']:<12} {agent_state(a):<11} {version:<28} {a['handoff']:<10} {caps}")
        reason = agent_reason(a)
        if reason:
            for line in textwrap.wrap(
                reason, width - 1, initial_indent="  why: ", subsequent_indent="       "
            ):
                print(line)


def cmd_sessions(args: argparse.Namespace) -> int:
    async def go() -> int:
        fields: dict[str, Any] = {"include_external": not args.no_external}
        if args.limit is not None:
            fields["limit"] = args.limit
        result = await ask_daemon("sessions.list", **fields)
        sessions = result["sessions"]
        while args.all and result.get("next_cursor"):  # the older pages, one after another
            result = await ask_daemon("sessions.list", **fields, cursor=result["next_cursor"])
            sessions += result["sessions"]
        if args.json:
            print(json.dumps(sessions, indent=2))
            return 0
        print(f"{'SESSION':<38} {'AGENT':<9} {'STATE':<8} {'SEQ':>6}  TITLE / CWD")
        for s in sessions:
            title = s.get("title") or "-"
            state = "NEEDS-YOU" if s.get("needs") else s["state"]
            print(
                f"{s['session']:<38} {s['agent']:<9} {state:<8} {s['last_seq']:>6}  "
                f"{title[:40]}  {s['cwd']}"
            )
        return 0

    return run_client(go())


def cmd_projects(args: argparse.Namespace) -> int:
    async def go() -> int:
        result = await ask_daemon("projects.list")
        projects = result["projects"]
        if args.json:
            print(json.dumps(projects, indent=2, ensure_ascii=False))
            return 0
        print(f"{'LAST USED':<17} {'SESS':>4}  {'BRANCH':<24} {'STATE':<11} PATH")
        for p in projects:
            used = (p.get("last_used") or "-")[:16].replace("T", " ")
            g = p.get("git")
            branch, state = "-", "-"
            if g:
                branch = (g.get("branch") or "(detached)")[:24]
                marks = ["dirty" if g.get("dirty") else "clean"]
                marks += [f"+{g['ahead']}"] if g.get("ahead") else []
                marks += [f"-{g['behind']}"] if g.get("behind") else []
                state = " ".join(marks)
            print(f"{used:<17} {p['sessions']:>4}  {branch:<24} {state:<11} {p['path']}")
        return 0

    return run_client(go())


def cmd_send(args: argparse.Namespace) -> int:
    async def go() -> int:
        # ``steer`` goes only when asked: a daemon from before it ignores the field anyway.
        extra = {"steer": True} if args.steer else {}
        result = await ask_daemon(
            "session.send",
            session=args.session,
            text=args.text,
            client_msg_id=args.client_msg_id or f"cli-{uuid.uuid4().hex[:12]}",
            **extra,
        )
        print("steered" if result.get("steered") else "queued" if result["queued"] else "sent")
        return 0

    return run_client(go())


def cmd_watch(args: argparse.Namespace) -> int:
    from bridge.cli.render import Renderer
    from bridge.cli.session import follow, stdin_is_terminal

    renderer = Renderer(color=not args.no_color and sys.stdout.isatty())

    async def go() -> int:
        client = await connect()
        try:
            result = await client.request(
                "session.subscribe", session=args.session, after_seq=args.after_seq
            )
            if sys.stdout.isatty():
                # Someone watches it on a terminal: no notifications for it meanwhile (said
                # before the header, so once the header shows the daemon knows it).
                await client.request("client.presence", visible=True, session=args.session)
            sys.stdout.write(
                renderer.paint(
                    "dim", f"-- {args.session}: {result['state']}, {result['last_seq']} events\n"
                )
            )
            return await follow(client, args.session, renderer, keys=stdin_is_terminal())
        finally:
            await client.close()

    return run_client(go())


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a bridge session in this terminal: hand it off, then exec the agent's CLI."""

    async def go() -> dict[str, Any]:
        # --print-only asks with dry_run: the daemon answers the command and hands nothing off.
        extra = {"dry_run": True} if args.print_only else {}
        result: dict[str, Any] = await ask_daemon("session.handoff", session=args.session, **extra)
        return result

    from bridge.cli.client import ClientError

    try:
        result = asyncio.run(go())
    except ClientError as exc:
        return fail(exc.message)
    argv = [str(a) for a in result["argv"]]
    if args.print_only:
        print(f"cd {shlex.quote(result['cwd'])} && {shlex.join(argv)}")
        return 0
    print(f"cd {shlex.quote(result['cwd'])} && {shlex.join(argv)}", file=sys.stderr)
    os.chdir(result["cwd"])
    os.execvp(argv[0], argv)  # noqa: S606 - the agent's own CLI, argv from the daemon


# ---- parser ----------------------------------------------------------------------------------


def command_adder(
    sub: Any, config_help: str = CONFIG_HELP, *, under_command: bool = False
) -> Callable[[str, Handler, str], argparse.ArgumentParser]:
    """``add(name, handler, text)``: a subcommand of ``sub`` with its help, ``--config`` and
    handler. An action under a command (``service install``) takes ``--config`` too, without
    resetting one given before it (``service --config X install``)."""
    default = argparse.SUPPRESS if under_command else None

    def add(name: str, handler: Handler, text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text)
        p.add_argument("--config", default=default, help=config_help)
        p.set_defaults(handler=handler)
        return p

    return add


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-bridge",
        description="Connect coding-agent CLIs to phone and desktop apps over WebSocket.",
        epilog=FIRST_STEPS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agent-bridge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=IntermixedParser)
    add = command_adder(sub)

    p = add("serve", cmd_serve, "Run the daemon in the foreground")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port (0 picks a free one)")
    p.add_argument("--unix", help="Unix socket path ('off' to disable)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without TLS (logs a warning)",
    )

    add("token", cmd_token, "Print the daemon's token, creating it if needed")

    p = add("pair", cmd_pair, "Print the URL and QR code a phone connects with")
    p.add_argument("--rotate", action="store_true", help="make a new token first")
    p.add_argument("--no-qr", action="store_true", help="print no QR code")
    p.add_argument(
        "--host",
        help="the address the phone uses, when it is not the one the daemon listens on "
        "(the DNS name on your certificate, a VPN address): see docs/remote-access.md",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--relay",
        action="store_true",
        help="a one-time link to pair through the relay ([relay] in config.toml)",
    )

    p = add("agents", cmd_agents, "List adapters, detection and capabilities")
    p.add_argument("--json", action="store_true")
    from bridge.cli.agents_check import add_check_command

    add_check_command(p, command_adder)

    p = add("sessions", cmd_sessions, "List sessions (bridge and terminal)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-external", action="store_true", help="hide terminal sessions")
    p.add_argument(
        "--limit", type=int, help="sessions per page, most recent first (daemon default 1000)"
    )
    p.add_argument("--all", action="store_true", help="every session, all pages")

    p = add("projects", cmd_projects, "List projects: repositories and session directories")
    p.add_argument("--json", action="store_true")

    from bridge.cli.session import add_commands

    add_commands(add)

    p = add("send", cmd_send, "Send a message to a session (ids: `new` prints one, `sessions`)")
    p.add_argument("session")
    p.add_argument("text")
    p.add_argument("--client-msg-id", help="idempotency key (a retry with it sends once)")
    p.add_argument(
        "--steer",
        action="store_true",
        help="into the turn running now, where the agent can take it (else as without)",
    )

    p = add(
        "watch",
        cmd_watch,
        "Watch a session live, history first; on a terminal, answer permissions with keys",
    )
    p.add_argument("session")
    p.add_argument("--after-seq", type=int, default=0, help="replay only events after this")
    p.add_argument("--no-color", action="store_true")

    p = add("resume", cmd_resume, "Continue a session in this terminal")
    p.add_argument("session")
    p.add_argument(
        "--print-only",
        action="store_true",
        help="print the command that would continue it; hand nothing off",
    )

    for extend in _EXTENSIONS:
        extend(sub, add)
    return parser


#: Other modules add subcommands here (adapters, doctor, service).
_EXTENSIONS: list[Callable[[Any, Callable[..., argparse.ArgumentParser]], None]] = []


def _load_extensions() -> None:
    import importlib

    for name in (
        "bridge.cli.adapters",
        "bridge.cli.doctor",
        "bridge.cli.service",
        "bridge.cli.webexport",
        "bridge.cli.ship",
        "bridge.cli.preview",
        "bridge.cli.find",
        "bridge.attention.cli",
        "bridge.relay.cli",
    ):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        register = getattr(module, "register_cli", None)
        if register is not None and register not in _EXTENSIONS:
            _EXTENSIONS.append(register)


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        return _closed_stdout()
    return code


def _closed_stdout() -> int:
    """The reader of stdout went away (`agent-bridge agents | head -1`): stop quietly, as
    a program killed by SIGPIPE does, without a traceback at exit."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141


def _main(argv: list[str] | None) -> int:
    _load_extensions()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except ConfigError as exc:
        return fail(exc, 2)


if __name__ == "__main__":
    sys.exit(main())
