"""``agent-bridge preview SESSION PORT``: show a dev server a session started (on this
machine's loopback) through the daemon, and print the URL that opens it
(docs/protocol.md, "Preview")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bridge.cli.common import ask_daemon, run_client


def cmd_preview(args: argparse.Namespace) -> int:
    async def go() -> int:
        if args.close:
            await ask_daemon("preview.close", preview=args.close)
            print(f"closed {args.close}")
            return 0
        if args.session is None or args.port is None:
            for p in (await ask_daemon("preview.list"))["previews"]:
                print(f"{p['id']}  port {p['port']}  until {p['expires_at']}  {p['url']}")
            return 0
        got = await ask_daemon("preview.open", session=args.session, port=args.port, path=args.path)
        print(got["preview"]["url"])
        return 0

    return run_client(go())


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add(
        "preview",
        cmd_preview,
        "Show a session's dev server (localhost:PORT) through the daemon; print its URL",
    )
    p.add_argument("session", nargs="?", help="the session whose directory runs the server")
    p.add_argument("port", nargs="?", type=int, help="the port it listens on, on localhost")
    p.add_argument("--path", default="/", help="the page to open first (default /)")
    p.add_argument("--close", metavar="ID", help="close this preview instead")
