"""The relay's commands: ``relay serve``, ``relay add`` and ``relay rotate`` (a self-hosted relay),
``pair --relay`` (a pairing link), ``clients`` and ``clients revoke`` (docs/remote-access.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from bridge.util.exits import fail

HOW_TO_USE = """\
To use it on that workstation, copy it there (from that workstation, for example):

  scp {host}:{account} {workstation_account}
  chmod 600 {workstation_account}

put this in its config.toml and restart its daemon:

  [relay]
  account = "{workstation_account}"

then pair a phone there with `agent-bridge pair --relay`."""


def how_to_use(account: Path) -> str:
    """The workstation's side of the copy: it reaches the relay machine by the name daemons
    dial (``--public-host``, in the account's url), not by what this machine calls itself."""
    from urllib.parse import urlsplit

    from bridge.relay.account import WORKSTATION_ACCOUNT

    try:
        host = urlsplit(str(json.loads(account.read_text())["url"])).hostname or ""
    except (OSError, ValueError, KeyError, TypeError):
        host = ""
    host = host or socket.gethostname() or "RELAY"
    return HOW_TO_USE.format(
        host=f"[{host}]" if ":" in host else host,
        account=account,
        workstation_account=WORKSTATION_ACCOUNT,
    )


#: the first workstation's name when none is given: the relay machine cannot know the name
#: of the machine whose daemon will use it
FIRST_NAME = "workstation"


def _first_name(args: argparse.Namespace) -> str:
    """The first workstation's name: ``--name``, else asked for on a terminal, else
    FIRST_NAME (and how to choose another)."""
    if args.name:
        return str(args.name)
    if sys.stdin.isatty():
        try:
            answer = input(
                "Name of the first workstation (the computer whose daemon will use this relay; "
                f"Enter for {FIRST_NAME}): "
            )
        except EOFError:  # Ctrl-D: the default, as Enter
            answer = ""
        return answer.strip() or FIRST_NAME
    print(
        f"naming the first workstation {FIRST_NAME!r}; `relay serve --name NAME` chooses "
        "another (the computer whose daemon will use this relay)"
    )
    return FIRST_NAME


def _relay_dir(args: argparse.Namespace) -> Any:
    from bridge.relay.natsserver import RelayDir

    return RelayDir(Path(args.dir).expanduser() if args.dir else None)


def cmd_relay_serve(args: argparse.Namespace) -> int:
    from bridge.relay import natsserver
    from bridge.relay.natsserver import RelayServeError, RelayState

    rdir = _relay_dir(args)
    try:
        binary = natsserver.nats_server_binary()
        state = rdir.load() or RelayState()
        if not _take_cluster(args, state):
            return 2
        # asked first: not after a certificate is issued, and not while holding the lock
        first = None if state.workstations else _first_name(args)
        keys = ("host", "port", "ws_port", "web_port", "preview_port", "tls_cert", "tls_key")
        for key in (*keys, "public_host", "queue_max_bytes"):
            value = getattr(args, key, None)
            if value is not None:
                setattr(state, key, value)
        if bool(state.tls_cert) != bool(state.tls_key):
            return fail("--tls-cert and --tls-key go together", 2)
        # automatic TLS (bridge/relay/autotls.py): the listeners use the ACME files
        from bridge.relay import autotls

        try:
            acme = autotls.configure(args, rdir.dir, state)
        except autotls.AutoTLSError as exc:
            return fail(exc, 2)
        rdir.ensure_not_running()
        # nats-server's WebSocket listens on loopback behind relay serve's own ports
        state.ws_internal_port = natsserver.free_port()
        with rdir.locked():
            rdir.save(state)
            if first is not None:
                w = rdir.add(state, first)
                account = rdir.account_file(w.host_id)
                print(f"added workstation {w.host_id}; its account file: {account}")
                print(how_to_use(account))
    except (RelayServeError, OSError) as exc:
        return fail(exc)
    from bridge.relay import plainwarn

    for warning in (plainwarn.plain_ws_warning(state), plainwarn.plain_web_warning(state)):
        if warning:
            print(warning, file=sys.stderr, flush=True)
    from bridge.util.fdlimit import raise_open_files

    # before nats-server starts: it has the same limit
    open_files = raise_open_files()
    return asyncio.run(_serve(rdir, state, binary, acme, open_files))


def _take_cluster(args: argparse.Namespace, state: Any) -> bool:
    """``--join`` (another node's relay.json: its secrets, workstations and cluster) and the
    cluster flags into ``state``; False (said) when they do not make a cluster."""
    from bridge.relay import natsserver

    if getattr(args, "join", None):
        natsserver.join(state, natsserver.read_state(Path(args.join).expanduser()))
    c = state.cluster
    if getattr(args, "cluster_name", None):
        c.name = args.cluster_name
    if getattr(args, "cluster_port", None):
        c.port = args.cluster_port
    if getattr(args, "routes", None):
        c.routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if getattr(args, "server_name", None):
        c.server_name = args.server_name
    if getattr(args, "cluster_ca", None):
        c.ca_file = str(Path(args.cluster_ca).expanduser().resolve())
    if not c.on:
        return True
    c.server_name = c.server_name or socket.gethostname()
    if not c.routes:
        fail("a cluster needs its nodes' routes: --routes nats://a:6222,nats://b:6222,...", 2)
        return False
    if state.queue_max_bytes <= 0:
        fail("a cluster keeps its logins in JetStream: --queue-max-bytes must not be 0", 2)
        return False
    return True


async def _serve(
    rdir: Any, state: Any, binary: Path, acme: Any = None, open_files: int = 1024
) -> int:
    """The web client's port (when on), nats-server and its admin service (the clients' own
    users), until SIGTERM/SIGINT or nats-server exits; all stop together. ``open_files``:
    the descriptors it may hold, which bound the connections its ports keep waiting."""
    from bridge.relay import natsserver, webserve
    from bridge.relay.admin import AdminService
    from bridge.relay.doorcap import PendingCap
    from bridge.relay.frontdoor import FrontDoor
    from bridge.relay.previeworigin import PreviewOrigin
    from bridge.util import logthrottle

    # out of descriptors, asyncio reports each failed accept: a line once in a while instead
    logthrottle.install(asyncio.get_running_loop())
    auto = None
    if acme is not None:  # automatic TLS: the first certificate before any listener needs it
        from bridge.relay import autotls

        https = natsserver.web_url(state)
        auto = autotls.AutoTLS(rdir.dir, acme, state.public_host, state.host, https)
        try:
            await auto.start()
        except autotls.AutoTLSError as exc:
            await auto.close()
            return fail(exc)
    previews = state.preview_port if state.web_port else 0
    web = webserve.relay_web(previews) if state.web_port else None
    origin = None
    if web is not None and previews:
        origin = PreviewOrigin("https" if state.tls_cert else "http", state.web_port)
    pending = PendingCap.for_descriptors(open_files)
    page_port = await web.start() if web is not None else None
    origin_port = await origin.start() if origin is not None else None
    door = FrontDoor(state.ws_internal_port, page_port, pending, origin_port)
    try:
        await door.start(
            state.host,
            state.ws_port,
            state.web_port,
            state.tls_cert,
            state.tls_key,
            preview_port=previews,
        )
    except (OSError, ValueError) as exc:
        await door.close()
        for site in (web, origin):
            if site is not None:
                await site.close()
        if auto is not None:
            await auto.close()
        ports = f"{state.ws_port}" + (f" and {state.web_port}" if web is not None else "")
        ports += f" and {previews}" if origin is not None else ""
        return fail(f"the relay's ports {state.host}:{ports}: {exc}")
    proc = natsserver.start(rdir, front_door=bool(state.ws_internal_port))
    admin = AdminService(rdir, state)
    stopping: list[int] = []
    if auto is not None:  # a renewed certificate: nats-server and the web listener reload it

        def installed() -> None:
            proc.send_signal(signal.SIGHUP)
            door.reload_tls(state.tls_cert, state.tls_key)

        auto.watch(installed)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    served = ""
    if web is not None:
        page = natsserver.web_url(state)
        served = f", web client on {page} (and the WebSocket at {page.rstrip('/')}/nats)"
        if origin is not None:
            served += f", previews' origin on port {previews}"
    try:
        try:
            await _start_admin(admin, proc)
        except Exception as exc:
            return fail(f"the relay's admin service cannot reach nats-server: {exc}")
        print(
            f"relay running ({binary}): NATS on {state.host}:{state.port}, "
            f"WebSocket on {state.host}:{state.ws_port}{served}; config {rdir.conf_file}",
            flush=True,
        )
        while not stopping:
            code = proc.poll()
            if code is not None:
                return fail(f"nats-server exited with status {code}")
            await asyncio.sleep(0.5)
        await admin.close()  # before nats-server goes: its connections end quietly
        natsserver.stop(proc)
        print("relay stopped", flush=True)
        return 0
    finally:
        if auto is not None:
            await auto.close()
        await admin.close()
        natsserver.stop(proc)
        await door.close()
        for site in (web, origin):
            if site is not None:
                await site.close()
        for sig, handler in old.items():
            signal.signal(sig, handler)


async def _start_admin(admin: Any, proc: Any) -> None:
    """The admin service logs in once nats-server listens (it has just been started; nats-py
    tries again until it does)."""
    start = asyncio.ensure_future(admin.start())
    deadline = time.monotonic() + 20
    while not start.done():
        if proc.poll() is not None or time.monotonic() > deadline:
            start.cancel()
            raise RuntimeError("nats-server did not start")
        await asyncio.wait({start}, timeout=0.1)
    start.result()


def _change_workstation(
    args: argparse.Namespace,
    change: Callable[[Any, Any, str], Any],
    missing: str,
    done: Callable[[str, Path], str],
) -> int:
    """``change(relay directory, its state, args.name)`` (``RelayDir.add`` or ``.rotate``)
    under the relay directory's lock; ``done(host id, its account file)`` says what was done,
    and what follows if no relay runs to read the new configuration."""
    from bridge.relay.natsserver import RelayServeError

    rdir = _relay_dir(args)
    try:
        with rdir.locked():
            state = rdir.load()
            if state is None:
                return fail(f"no relay in {rdir.dir}{missing}")
            w = change(rdir, state, args.name)
    except (RelayServeError, OSError) as exc:
        return fail(exc)
    if_stopped = done(w.host_id, rdir.account_file(w.host_id))
    if rdir.reload():
        print("the running relay has read the new configuration")
    elif if_stopped:
        print(if_stopped)
    return 0


def cmd_relay_add(args: argparse.Namespace) -> int:
    def done(host_id: str, account: Path) -> str:
        print(f"added workstation {host_id}; its account file: {account}")
        print(how_to_use(account))
        return (
            "the relay is not running: `agent-bridge relay serve` starts it with this workstation"
        )

    from bridge.relay.natsserver import RelayDir

    missing = ": start one with `agent-bridge relay serve` first"
    return _change_workstation(args, RelayDir.add, missing, done)


def cmd_relay_rotate(args: argparse.Namespace) -> int:
    def done(host_id: str, account: Path) -> str:
        print(f"new pairing login for {host_id}: every pairing link made before no longer works")
        print(f"Copy {account} to that workstation again (keep it mode 0600);")
        print("`agent-bridge pair --relay` there reads it at once, the daemon need not restart.")
        print("Paired clients with their own login are not affected.")
        return ""

    from bridge.relay.natsserver import RelayDir

    return _change_workstation(args, RelayDir.rotate, "", done)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def cmd_clients(args: argparse.Namespace) -> int:
    from bridge.relay.clients import ClientRegistry

    found = ClientRegistry().clients()
    if args.json:
        print(json.dumps([c.shown() for c in found]))
        return 0
    if not found:
        print(f"no paired relay clients ({_pair_hint(args)})")
        return 0
    width = max(4, min(NAME_WIDTH, max(len(c.name) for c in found)))
    print(f"{'ID':<12} {'NAME':<{width}} {'PAIRED':<17} {'LAST SEEN':<17} REVOKED")
    for c in found:
        revoked = _when(c.revoked_at) if c.revoked else "no"
        seen = _when(c.last_seen)
        name = shorten(c.name, width)
        print(f"{c.id:<12} {name:<{width}} {_when(c.paired_at):<17} {seen:<17} {revoked}")
    return 0


#: the widest NAME column `clients` prints
NAME_WIDTH = 40


def shorten(name: str, width: int) -> str:
    """``name`` in ``width`` characters: whole, else cut at a word with an ellipsis, and never
    inside a parenthesis (an unclosed one is dropped with what follows it)."""
    if len(name) <= width:
        return name
    cut = name[: width - 1]
    if " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    if cut.count("(") > cut.count(")"):
        cut = cut[: cut.rfind("(")]
    return cut.rstrip() + "…"


def _pair_hint(args: argparse.Namespace) -> str:
    """How to pair one: through the relay when one is configured, else directly."""
    from bridge.cli.common import config_of
    from bridge.config import ConfigError

    try:
        relay = config_of(args).relay.enabled
    except ConfigError:
        relay = False
    if relay:
        return "pair one with `agent-bridge pair --relay`"
    return "pair one with `agent-bridge pair`; through a relay, see docs/remote-access.md"


def cmd_clients_revoke(args: argparse.Namespace) -> int:
    from bridge.relay.clients import ClientRegistry

    client = ClientRegistry().revoke(args.id)
    if client is None:
        return fail(f"no relay client {args.id} (see `agent-bridge clients`)")
    print(f"revoked {client.id} ({client.name}); the daemon closes its connections")
    return 0


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    from bridge.cli.cli import command_adder
    from bridge.cli.common import group_usage

    relay = add(
        "relay", group_usage(sub, "relay"), "Run a self-hosted relay (NATS) for remote access"
    )
    actions = relay.add_subparsers(dest="relay_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    p = action("serve", cmd_relay_serve, "Run nats-server with a generated configuration")
    p.add_argument("--dir", help="the relay's directory (default: under the state dir)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="NATS client port (default 4222)")
    p.add_argument("--ws-port", dest="ws_port", type=int, help="WebSocket port (default 4280)")
    p.add_argument(
        "--web-port",
        dest="web_port",
        type=int,
        help="port serving the web client (default 4281; 0: off)",
    )
    p.add_argument(
        "--preview-port",
        dest="preview_port",
        type=int,
        help="port of the previews' own origin, beside the web client's (default 4282; 0: off)",
    )
    p.add_argument(
        "--queue-max-bytes",
        dest="queue_max_bytes",
        type=int,
        help="bytes the workstations' work queues may keep on disk together (default 1 GiB; "
        "0: no queue)",
    )
    p.add_argument("--tls-cert", dest="tls_cert", help="PEM certificate for every listener")
    p.add_argument("--tls-key", dest="tls_key", help="PEM key of --tls-cert")
    p.add_argument(
        "--public-host",
        dest="public_host",
        help="the name daemons and phones dial (default: the address, or the LAN address)",
    )
    p.add_argument(
        "--name",
        help="the first workstation's name, on its first run (asked on a terminal; default: "
        f"{FIRST_NAME}); each other one is named by `relay add NAME`",
    )
    p.add_argument(
        "--acme-email",
        dest="acme_email",
        help="obtain and renew a certificate for --public-host from an ACME CA (Let's Encrypt)",
    )
    p.add_argument(
        "--acme-directory",
        dest="acme_directory",
        help="the ACME CA's directory URL (default: Let's Encrypt; its staging one for tests)",
    )
    p.add_argument(
        "--acme-http-port",
        dest="acme_http_port",
        type=int,
        help="port answering the CA's HTTP-01 challenge (default 80: what the CA dials)",
    )
    p.add_argument(
        "--cluster-name",
        dest="cluster_name",
        help="make this relay a node of the named cluster (docs/remote-access.md)",
    )
    p.add_argument(
        "--cluster-port",
        dest="cluster_port",
        type=int,
        help="port the cluster's routes listen on (default 6222)",
    )
    p.add_argument(
        "--routes",
        help="every node's route URL, comma-separated: nats://a:6222,nats://b:6222,...",
    )
    p.add_argument(
        "--server-name",
        dest="server_name",
        help="this node's name in the cluster (default: this host's name)",
    )
    p.add_argument(
        "--cluster-ca",
        dest="cluster_ca",
        help="PEM file the nodes' certificates are checked against on the routes, with TLS "
        "(default: the system's roots)",
    )
    p.add_argument(
        "--join",
        help="another node's relay.json: this node takes its secrets, workstations and cluster",
    )
    p = action("add", cmd_relay_add, "Add a workstation: its users and account file")
    p.add_argument("name")
    p.add_argument("--dir", help="the relay's directory (default: under the state dir)")
    p = action("rotate", cmd_relay_rotate, "Give a workstation a new pairing login")
    p.add_argument("name")
    p.add_argument("--dir", help="the relay's directory (default: under the state dir)")
    from bridge.relay import service  # relay service install|status|uninstall

    service.register(actions)

    p = add("clients", cmd_clients, "List the clients paired through the relay")
    p.add_argument("--json", action="store_true")
    actions = p.add_subparsers(dest="clients_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    p = action("revoke", cmd_clients_revoke, "Revoke a client: its connections close")
    p.add_argument("id")
