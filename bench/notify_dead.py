"""A push to a working device while other subscriptions' push services are dead.

A real daemon (subprocess) with ``--dead N`` Web Push subscriptions whose endpoint accepts the
connection and never answers (``SilentService``), subscribed first, and one whose push service
works (``FakePushService``: it checks the VAPID JWT and decrypts). The demo agent ends a turn;
the figure is the time from a subscribed client receiving the turn's ``session_end`` to the
working service receiving its push, for each of ``--rounds`` turns (each in its own session: the
rate limit is per session and kind), against the same with no dead subscription.

Run alone: ``python -m bench.notify_dead [--dead N] [--rounds N] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.notify_fakes import FakePushService, SilentService
from tests.wsclient import Client

WAIT_S = 200.0


async def pushes(
    d: DaemonProcess, push: FakePushService, silent: SilentService, dead: int, rounds: int
) -> list[float]:
    c = await Client.open(d.url, d.token)
    out = []
    try:
        push.vapid_public = (await c.request("webpush.key"))["public_key"]
        for i in range(dead):
            sub = push.subscription(f"dead{i}") | {"endpoint": silent.endpoint(str(i))}
            await c.request("webpush.subscribe", subscription=sub)
        await c.request("webpush.subscribe", subscription=push.subscription("phone"))
        for i in range(rounds):
            sid = (await c.request("session.create", agent="demo", cwd=str(d.home)))["session"]
            await c.request("session.subscribe", session=sid["session"])
            await c.request("session.send", session=sid["session"], text=f"echo {i}")
            await c.turn(sid["session"])
            seen = time.monotonic()
            await asyncio.to_thread(push.wait, i + 1, WAIT_S)
            out.append(float(push.messages[i]["at"]) - seen)
    finally:
        await c.close()
    return out


def run(dead: int, rounds: int) -> list[float]:
    push, silent = FakePushService(), SilentService()
    with tempfile.TemporaryDirectory(prefix="bench-notify-dead-") as tmp:
        d = DaemonProcess(Path(tmp) / "home", config="[notify]\nmin_turn_s = 0\n").start()
        try:
            return asyncio.run(pushes(d, push, silent, dead, rounds))
        finally:
            d.stop()
            push.close()
            silent.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_dead")
    parser.add_argument("--dead", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "dead": args.dead,
        "alone_s": run(0, args.rounds),
        "with_dead_s": run(args.dead, args.rounds),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("a push to a working device, from the client seeing the turn end (each round):")
    rows = (("alone", "alone_s"), (f"with {args.dead} dead push services", "with_dead_s"))
    for name, key in rows:
        shown = ", ".join(f"{t * 1000:.1f} ms" for t in result[key])
        print(f"  {name:30} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
