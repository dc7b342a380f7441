"""What the ``agent-bridge`` commands share: the config a command reads, running a command that
talks to the daemon, and one request to the daemon. Below ``cli``, ``cli_session``,
``cli_adapters`` and ``attention.cli``, so none of them imports another for these."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from bridge.config import Config, load_config
from bridge.util.exits import fail

CONFIG_HELP = "config file (default: the XDG config dir)"


class IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser whose options may come before, between or after its positionals.

    Plain argparse matches positionals in runs: in ``new claude --cwd ~/p "fix the bug"`` the
    run ``claude`` fills both ``agent`` and the optional ``text`` (with nothing), and the
    message after ``--cwd`` is left over as an unrecognized argument. Intermixed parsing takes
    the options first and the positionals after, in any order. A command with subcommands of
    its own (``service install``) is parsed plainly: argparse cannot intermix those.
    """

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def config_of(args: argparse.Namespace) -> Config:
    """The config ``--config`` names (it must exist), else the one in the XDG config dir."""
    path = Path(args.config).expanduser() if getattr(args, "config", None) else None
    return load_config(path, required=path is not None)


def run_client(coro: Coroutine[Any, Any, int]) -> int:
    """Run a command's client coroutine: its exit status, a daemon's error as one line (1),
    Ctrl-C as 130."""
    from bridge.cli.client import ClientError

    try:
        return asyncio.run(coro)
    except ClientError as exc:
        # what git or a hook said, then what to do: the error's own line comes last
        if exc.output:
            print(exc.output.rstrip(), file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return fail(f"{exc.code}: {exc.message}" if exc.hint else exc.message)
    except KeyboardInterrupt:
        return 130


async def connect() -> Any:
    """A connection to the running daemon (``BridgeClient``)."""
    from bridge.cli.client import BridgeClient

    return await BridgeClient.connect()


async def ask_daemon(method: str, **params: Any) -> Any:
    """One request to the running daemon, on a connection of its own; its result."""
    client = await connect()
    try:
        return await client.request(method, **params)
    finally:
        await client.close()


def group_usage(sub: Any, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler of a command that only groups actions (``relay``, ``service``, …): its
    help, exit status 2."""

    def usage(_args: argparse.Namespace) -> int:
        sub.choices[name].print_help()
        return 2

    return usage
