"""Session churn soak: clients looping create -> one echo turn -> close, over direct WebSockets
and through the relay, against one daemon (SQLite store, the demo agent), while the daemon's RSS
and open file descriptors are sampled.

    .venv/bin/python -m bench.churn [--minutes 10] [--direct 4] [--relay 2] [--json]

Every session ends, so the daemon's memory should follow the few live sessions, not the
thousands ended (docs/benchmarks.md, "Session churn"). Target: the mean RSS of the last quarter
of the run within 20% of the first quarter's; open fds flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.procstats import open_fds, rss_kib
from bench.relay import relay_daemon
from bench.targets import Target

TURN_TIMEOUT_S = 30.0


@dataclass
class Counts:
    sessions: dict[str, int] = field(default_factory=lambda: {"direct": 0, "relay": 0})
    failures: int = 0
    last_error: str = ""


async def churn(target: Target, kind: str, cwd: str, stop_at: float, counts: Counts) -> None:
    """One client: create -> subscribe -> ``echo`` turn -> close, until ``stop_at``."""
    c: Any = await target.client()
    ended = asyncio.Event()
    current = b""

    def on_frame(payload: bytes) -> None:
        if b'"session_end"' in payload and current and current in payload:
            ended.set()

    c.on_frame = on_frame
    try:
        while time.monotonic() < stop_at:
            try:
                got = await c.request("session.create", agent="demo", cwd=cwd)
                sid = got["session"]["session"]
                current = sid.encode()
                ended.clear()
                await c.request("session.subscribe", session=sid)
                await c.request(
                    "session.send", session=sid, text="echo churn", client_msg_id=f"m-{sid}"
                )
                await asyncio.wait_for(ended.wait(), TURN_TIMEOUT_S)
                await c.request("session.unsubscribe", session=sid)
                await c.request("session.close", session=sid)
                counts.sessions[kind] += 1
            except Exception as exc:
                counts.failures += 1
                counts.last_error = f"{kind}: {exc!r}"
                await asyncio.sleep(0.5)
    finally:
        await c.close()


async def sample(
    pid: int, every_s: float, stop_at: float, out: list[tuple[float, int, int]]
) -> None:
    t0 = time.monotonic()
    while True:
        out.append((time.monotonic() - t0, rss_kib(pid), open_fds(pid)))
        if time.monotonic() >= stop_at:
            return
        await asyncio.sleep(min(every_s, max(0.0, stop_at - time.monotonic())))


def summarize(samples: list[tuple[float, int, int]], seconds: float) -> dict[str, Any]:
    first = [s for s in samples if s[0] <= seconds / 4]
    last = [s for s in samples if s[0] >= seconds * 3 / 4]
    rss_first = statistics.mean(s[1] for s in first) / 1024
    rss_last = statistics.mean(s[1] for s in last) / 1024
    return {
        "rss_mib_first_quarter": round(rss_first, 1),
        "rss_mib_last_quarter": round(rss_last, 1),
        "rss_ratio": round(rss_last / rss_first, 3),
        "rss_mib_start": round(samples[0][1] / 1024, 1),
        "rss_mib_peak": round(max(s[1] for s in samples) / 1024, 1),
        "fds_first_quarter": [min(s[2] for s in first), max(s[2] for s in first)],
        "fds_last_quarter": [min(s[2] for s in last), max(s[2] for s in last)],
        "met": rss_last <= rss_first * 1.2,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    daemon, via = await relay_daemon()
    try:
        seconds = args.minutes * 60
        stop_at = time.monotonic() + seconds
        counts = Counts()
        samples: list[tuple[float, int, int]] = []
        cwd = str(daemon.project)
        await asyncio.gather(
            sample(daemon.pid, args.sample_s, stop_at, samples),
            *(churn(daemon, "direct", cwd, stop_at, counts) for _ in range(args.direct)),
            *(churn(via, "relay", cwd, stop_at, counts) for _ in range(args.relay)),
        )
        return {
            "minutes": args.minutes,
            "clients": {"direct": args.direct, "relay": args.relay},
            "sessions": counts.sessions,
            "failures": counts.failures,
            "last_error": counts.last_error,
            **summarize(samples, seconds),
            "samples": samples,
        }
    finally:
        daemon.stop()
        via.relay.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--direct", type=int, default=4, help="direct WebSocket clients")
    parser.add_argument("--relay", type=int, default=2, help="clients through the relay")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    done = result["sessions"]
    print(
        f"{args.minutes:g} min, {args.direct} direct + {args.relay} relay clients: "
        f"{done['direct'] + done['relay']:,} sessions ({done['direct']:,} direct, "
        f"{done['relay']:,} relay), {result['failures']} failures {result['last_error']}"
    )
    print(
        f"RSS: start {result['rss_mib_start']} MiB, first quarter "
        f"{result['rss_mib_first_quarter']} MiB, last quarter {result['rss_mib_last_quarter']} "
        f"MiB (x{result['rss_ratio']}, target <= x1.2: {'met' if result['met'] else 'MISSED'}), "
        f"peak {result['rss_mib_peak']} MiB"
    )
    print(
        f"open fds: first quarter {result['fds_first_quarter']}, last {result['fds_last_quarter']}"
    )


if __name__ == "__main__":
    main()
