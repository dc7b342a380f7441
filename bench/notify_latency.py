"""Notification latency: from the event a client sees to the channel's POST arriving.

A real daemon (subprocess) with one Apprise ``json://`` channel pointing at a local receiver;
the demo agent ends a turn (``turn_end``, ``notify.min_turn_s = 0``) in a fresh session each
time (the rate limit is per session and kind), 100 times. Each latency is the receiver's arrival
time of the POST minus, first, the event's own ``ts`` (when the daemon emitted the turn's
``session_end``, before it was stored; wall clock, to the millisecond) and, second, the time a
subscribed WebSocket client received that event (this process's ``time.monotonic()``).

The baseline, measured in the same run, is a bare POST from this process to the same receiver
(``urllib``), which is the floor of any webhook delivery on this machine.

Run alone: ``python -m bench.notify_latency [--count N] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.notify_fakes import Receiver
from tests.wsclient import Client


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def baseline(receiver: Receiver, count: int) -> list[float]:
    url = f"http://127.0.0.1:{receiver.port}/hook"
    out = []
    for i in range(count):
        body = json.dumps({"title": "baseline", "message": str(i)}).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        start = time.monotonic()
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        out.append(receiver.hits[-1].at - start)
    return out


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=UTC).timestamp()


async def measure(
    d: DaemonProcess, receiver: Receiver, cwd: Path, count: int
) -> tuple[list[float], list[float]]:
    c = await Client.open(d.url, d.token)
    from_emit: list[float] = []
    latencies: list[float] = []
    try:
        for i in range(count):
            session = (await c.request("session.create", agent="demo", cwd=str(cwd)))["session"]
            sid = session["session"]
            await c.request("session.subscribe", session=sid)
            before = len(receiver.hits)
            await c.request("session.send", session=sid, text=f"echo notification {i}")
            frames = await c.turn(sid)
            seen = time.monotonic()
            hit = (await asyncio.to_thread(receiver.wait, before + 1, 30.0))[before]
            latencies.append(hit.at - seen)
            from_emit.append(hit.wall - epoch(frames[-1]["ts"]))
            await c.request("session.close", session=sid)
    finally:
        await c.close()
    return from_emit, latencies


def run(count: int) -> dict[str, Any]:
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        home = Path(tmp)
        cwd = home / "project"
        cwd.mkdir()
        config = (
            '[log]\nlevel = "warning"\n'
            "[notify]\nmin_turn_s = 0\n"
            f'[[notify.targets]]\nurl = "{receiver.url}"\nkinds = ["turn_end"]\n'
        )
        d = DaemonProcess(home / "home", config=config).start()
        try:
            base = baseline(receiver, count)
            receiver.hits.clear()
            emit, lat = asyncio.run(measure(d, receiver, cwd, count))
        finally:
            d.stop()
            receiver.close()
    ms = 1000.0
    result = {
        "count": count,
        "emit_p50_ms": percentile(emit, 0.5) * ms,
        "emit_p99_ms": percentile(emit, 0.99) * ms,
        "p50_ms": percentile(lat, 0.5) * ms,
        "p99_ms": percentile(lat, 0.99) * ms,
        "max_ms": max(lat) * ms,
        "mean_ms": statistics.fmean(lat) * ms,
        "baseline_p50_ms": percentile(base, 0.5) * ms,
        "baseline_p99_ms": percentile(base, 0.99) * ms,
    }
    result["ratio_p50"] = result["emit_p50_ms"] / result["baseline_p50_ms"]
    result["ratio_p99"] = result["emit_p99_ms"] / result["baseline_p99_ms"]
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_latency")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    r = run(args.count)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"notification latency, event -> receiver POST, {r['count']} notifications")
    print(
        f"  from the event's ts      p50 {r['emit_p50_ms']:7.1f} ms   "
        f"p99 {r['emit_p99_ms']:7.1f} ms"
    )
    print(
        f"  from a client seeing it  p50 {r['p50_ms']:7.1f} ms   p99 {r['p99_ms']:7.1f} ms   "
        f"max {r['max_ms']:7.1f} ms"
    )
    print(
        f"  baseline (a bare POST)   p50 {r['baseline_p50_ms']:7.1f} ms   "
        f"p99 {r['baseline_p99_ms']:7.1f} ms"
    )
    print(f"  event ts -> POST / baseline: p50 {r['ratio_p50']:.1f}x, p99 {r['ratio_p99']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
