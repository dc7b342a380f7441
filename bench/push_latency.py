"""Web Push from a workstation reached through the relay: from the event to the push service.

A real nats-server on 127.0.0.1 is the relay; a daemon (demo agent, ``[notify] min_turn_s = 0``)
is linked to it; a client pairs through it, opens a virtual connection and subscribes a browser
push subscription there with the browser's own VAPID key (``webpush.subscribe`` ``vapid_key``,
``ws``), as the web client does. A local push service checks each push's signature against that
key and decrypts it. Then, ``--count`` times, a fresh session's turn asks a permission (nobody
watching) and the push's arrival is timed from the ``permission_request`` event: from its
``ts`` (the daemon's clock, to the millisecond) and from its arrival at the client (this
process's monotonic clock). The request is then answered, so the turn ends.

    .venv/bin/python -m bench.push_latency [--count 50] [--json]

Target: p99 within 1 s of the event.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bridge.relay.sealing import unb64
from tests.daemonkit import run_bridge
from tests.notify_fakes import FakePushService
from tests.relaykit import Relay, RelayClient, decode_link, events_until, relayed_daemon

TARGET_P99_S = 1.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def browser_key() -> tuple[str, str]:
    """A VAPID key pair as the web client makes one: (public, private), base64url."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return _b64(public), _b64(key.private_numbers().private_value.to_bytes(32, "big"))


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


async def run(count: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-push-"))
    relay = Relay(home / "relay", names=("ws-a",)).start()
    push = FakePushService()
    config = (
        f'[relay]\naccount = "{relay.rdir.account_file("ws-a")}"\n'
        '[notify]\nmin_turn_s = 0\nwebpush_kinds = ["permission"]\n'
    )
    daemon = relayed_daemon(home / "home", config)
    try:
        out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
        info = decode_link(json.loads(out.stdout)["link"])
        client = RelayClient(await relay.connect("ws-a"), "ws-a", unb64(info["pk"]))
        assert (await client.pair(info["secret"], name="bench phone"))["ok"]
        vc = await client.open()
        await vc.hello()
        public, private = browser_key()
        push.server_keys["phone"] = public
        sub = push.subscription("phone")
        await vc.request("webpush.subscribe", subscription=sub, vapid_key=private, ws="relay:ws-a")
        cwd = home / "project"
        cwd.mkdir()
        from_ts: list[float] = []
        from_client: list[float] = []
        for _ in range(count):
            made = await vc.request("session.create", agent="demo", cwd=str(cwd))
            session = made["session"]["session"]
            await vc.request("session.subscribe", session=session)
            before = len(push.messages)
            await vc.request("session.send", session=session, text="write the file")
            frames = await events_until(
                vc, lambda b: b["type"] == "permission_request", session=session
            )
            seen = time.monotonic()
            event = frames[-1]
            deadline = time.monotonic() + 10
            while len(push.messages) == before and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            if push.problems or len(push.messages) == before:
                raise RuntimeError(f"no push: {push.problems}")
            got = push.messages[before]
            assert got["payload"]["ws"] == "relay:ws-a", got["payload"]
            emitted = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
            from_ts.append(got["wall"] - emitted)
            from_client.append(got["at"] - seen)
            block = event["block"]
            deny = next(o["id"] for o in block["options"] if "reject" in o["kind"])
            await vc.request(
                "session.permission", session=session, request_id=block["id"], option_id=deny
            )
            await events_until(vc, lambda b: b["type"] == "session_end", session=session)
        await client.nc.close()
        result = {
            "count": count,
            "event_ts_to_push": _ms(from_ts),
            "client_saw_event_to_push": _ms(from_client),
        }
        result["met"] = result["event_ts_to_push"]["p99_ms"] <= TARGET_P99_S * 1000
        return result
    finally:
        daemon.stop()
        push.close()
        relay.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.count))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    a, b = result["event_ts_to_push"], result["client_saw_event_to_push"]
    print(f"{args.count} permission pushes from a relay workstation:")
    print(f"  event ts -> push service: p50 {a['p50_ms']:.1f} ms, p99 {a['p99_ms']:.1f} ms")
    print(f"  client saw the event -> push: p50 {b['p50_ms']:.1f} ms, p99 {b['p99_ms']:.1f} ms")
    print(f"  target p99 <= {TARGET_P99_S * 1000:.0f} ms: {'met' if result['met'] else 'MISSED'}")


if __name__ == "__main__":
    main()
