"""Clients that replay a long history and read nothing: how long the daemon keeps them, and
what they cost it in memory.

A real daemon (subprocess) whose store holds ``--history-mib`` of one session's history in
64 KiB text blocks, written straight into the store before it starts
(``tests/daemonkit.py seed_history``). ``--clients`` raw sockets (``tests/rawws.py``) send
hello and ``session.subscribe`` with ``after_seq: 0`` and then never read. Measured: the
daemon's RSS before they subscribe and at its peak, when the daemon logged each cut-off
(``client_stalled``/``client_too_slow``), and when the daemon's end of each connection stopped
being ESTABLISHED (/proc/net/tcp): the moment it let go of the socket and what it held for it.

Run alone: ``python -m bench.stalled_replay [--clients 5] [--history-mib 160]
[--write-stall-s 30] [--watch 61] [--json]``.
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

from bench.procstats import rss_kib
from tests.daemon import DaemonProcess
from tests.daemonkit import seed_history
from tests.rawws import RawWebSocket

MiB = 1024 * 1024


async def run(clients: int, history_mib: int, stall_s: float, watch_s: float) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-stalled-"))
    project = home / "project"
    project.mkdir()
    d = DaemonProcess(
        home,
        config=f'[server]\nunix_socket = "off"\n[limits]\nwrite_stall_s = {stall_s}\n',
    )
    session = await seed_history(d, project, history_mib * MiB)
    d.start()
    assert d.proc is not None
    pid = d.proc.pid
    try:
        await asyncio.sleep(1.0)
        rss_before = rss_kib(pid)
        started = time.monotonic()
        socks = []
        for _ in range(clients):
            raw = RawWebSocket(d.port)
            raw.send_json({"t": "hello", "id": 1, "protocol": 1, "token": d.token})
            raw.send_json({"t": "session.subscribe", "id": 2, "session": session, "after_seq": 0})
            socks.append(raw)
        peak = rss_before
        dropped: list[float | None] = [None] * clients
        logged: list[float] = []
        while time.monotonic() - started < watch_s:
            now = time.monotonic() - started
            peak = max(peak, rss_kib(pid))
            text = d.log_text()
            cut = text.count("client_stalled") + text.count("client_too_slow")
            logged += [now] * (cut - len(logged))
            for i, raw in enumerate(socks):
                if dropped[i] is None and not raw.server_holds_it():
                    dropped[i] = now
            if all(t is not None for t in dropped):
                break
            await asyncio.sleep(0.1)
        rss_end = rss_kib(pid)
        for raw in socks:
            raw.close()
    finally:
        d.stop()
    return {
        "clients": clients,
        "history_mib": history_mib,
        "write_stall_s": stall_s,
        "watched_s": watch_s,
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_end_mib": round(rss_end / 1024, 1),
        "cut_off_logged_s": [round(t, 1) for t in logged],
        "dropped_s": [None if t is None else round(t, 1) for t in dropped],
        "still_connected": sum(t is None for t in dropped),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--history-mib", type=int, default=160)
    parser.add_argument("--write-stall-s", type=float, default=30.0)
    parser.add_argument("--watch", type=float, default=61.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.clients, args.history_mib, args.write_stall_s, args.watch))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{result['clients']} clients x {result['history_mib']} MiB history, "
        f"write_stall_s {result['write_stall_s']:g}, watched {result['watched_s']:g} s"
    )
    print(
        f"RSS: {result['rss_before_mib']} MiB before, {result['rss_peak_mib']} MiB peak, "
        f"{result['rss_end_mib']} MiB at the end"
    )
    print(f"cut-offs logged at (s): {result['cut_off_logged_s']}")
    print(f"connections dropped at (s): {result['dropped_s']}")
    print(f"still connected: {result['still_connected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
