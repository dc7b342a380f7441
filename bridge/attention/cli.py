"""``agent-bridge notify test`` and the channel checks of ``agent-bridge doctor``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bridge.adapters.base import Check
from bridge.cli.common import CONFIG_HELP, ask_daemon, config_of
from bridge.config import NOTIFY_KINDS, Config

REACH_TIMEOUT_S = 5.0


def channel_checks(config: Config, *, online: bool = False) -> list[Check]:
    """Each ``[[notify.targets]]`` URL parses (and, ``online``, its service answers a TCP
    connection); the findings name channels only by their masked URL."""
    from bridge.attention.channels import Channel, ChannelError

    checks: list[Check] = []
    channels: list[Channel] = []
    for i, target in enumerate(config.notify.targets):
        try:
            channel = Channel(target, i)
        except ChannelError as exc:
            checks.append(
                Check(
                    code="notify_channel_invalid",
                    level="warn",
                    message=str(exc),
                    hint="fix the URL in config.toml; the daemon skips this channel",
                )
            )
            continue
        channels.append(channel)
        kinds = ", ".join(sorted(channel.kinds))
        checks.append(
            Check(code="notify_channel", message=f"notification channel {channel.name} ({kinds})")
        )
    if online and channels:
        with ThreadPoolExecutor(min(8, len(channels))) as pool:
            problems = list(pool.map(lambda c: c.reach(REACH_TIMEOUT_S), channels))
        for channel, problem in zip(channels, problems, strict=True):
            if problem is None:
                checks.append(
                    Check(code="notify_reachable", message=f"{channel.name}: service reachable")
                )
            else:
                checks.append(
                    Check(
                        code="notify_unreachable",
                        level="warn",
                        message=f"{channel.name}: {problem}",
                        hint="check the host in the URL, the network, or a firewall",
                    )
                )
    return checks


def _local_test(config: Config, kind: str) -> list[dict[str, Any]]:
    """No daemon running: send through the config's channels from here (no Web Push)."""
    from bridge.attention.channels import build_channels
    from bridge.attention.detect import sample_notice, workstation_name

    channels, problems = build_channels(config.notify.targets)
    notice = sample_notice(kind, "", workstation_name(config.relay.name))
    results = [{"channel": "config", "ok": False, "answer": p} for p in problems]
    if channels:
        with ThreadPoolExecutor(min(8, len(channels))) as pool:
            answers = list(pool.map(lambda c: c.send(notice.title, notice.body), channels))
        for channel, answer in zip(channels, answers, strict=True):
            results.append({"channel": channel.name, "ok": answer.ok, "answer": answer.text})
    return results


def cmd_notify_test(args: argparse.Namespace) -> int:
    from bridge.cli.client import ClientError, DaemonNotRunning
    from bridge.logs import configure_logging

    config = config_of(args)
    # What a channel said is in its answer line; the log stays out of stdout.
    configure_logging("error", config.log.format, sys.stderr)
    via = "daemon"

    async def ask() -> list[dict[str, Any]]:
        result = await ask_daemon("notify.test", kind=args.kind)
        return list(result["results"])

    try:
        results = asyncio.run(ask())
    except DaemonNotRunning:
        via = "config"
        results = _local_test(config, args.kind)
    except ClientError as exc:
        print(f"agent-bridge: {exc.message}")
        return 1
    if args.json:
        print(json.dumps({"via": via, "results": results}, indent=2))
    elif not results:
        print(
            "no notification channel: add [[notify.targets]] to config.toml, or turn "
            "notifications on in the web client (docs/notifications.md)"
        )
    else:
        if via == "config":
            print("(the daemon is not running: sent from here, Web Push devices not included)")
        for r in results:
            mark = "ok    " if r["ok"] else "FAILED"
            print(f"{mark} {r['channel']}: {r['answer']}")
    return 0 if results and all(r["ok"] for r in results) else 1


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("notify", _notify_usage, "Notifications: test the configured channels")
    notify_sub = p.add_subparsers(dest="notify_command", metavar="COMMAND")
    t = notify_sub.add_parser(
        "test",
        help="send a test notification through every channel and say what each answered",
        description="Send a test notification through every channel (the daemon's, with its "
        "Web Push devices, when it runs; else the config's) and say what each answered.",
    )
    t.add_argument("--config", help=CONFIG_HELP)
    t.add_argument("--kind", choices=NOTIFY_KINDS, default="turn_end")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.set_defaults(handler=cmd_notify_test)


def _notify_usage(args: argparse.Namespace) -> int:
    print("usage: agent-bridge notify test [--kind KIND] [--json]")
    return 2
