"""``agent-bridge search QUERY`` and ``agent-bridge usage``: ``sessions.search`` and
``usage.summary`` of the running daemon, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bridge.cli.common import ask_daemon, run_client
from bridge.util.exits import fail

_RELATIVE = re.compile(r"^(\d+)\s*([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_time(value: str, now: float | None = None) -> str:
    """``7d``, ``12h``, ``30m``, ``2w`` (before now) or an ISO 8601 date or time, as the
    protocol's ISO 8601 time; ValueError for anything else."""
    found = _RELATIVE.match(value.strip())
    if found is not None:
        at = (time.time() if now is None else now) - int(found[1]) * _UNIT_S[found[2]]
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    datetime.fromisoformat(value)  # raises ValueError with its own words
    return value


def cmd_search(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {"query": args.query}
    for name in ("limit", "agent", "cwd"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.since is not None:
        try:
            fields["since"] = since_time(args.since)
        except ValueError:
            return fail(f"--since {args.since!r}: give 7d, 12h, 30m, 2w or an ISO 8601 time")

    async def go() -> int:
        hits = (await ask_daemon("sessions.search", **fields))["hits"]
        if args.json:
            print(json.dumps(hits, indent=2, ensure_ascii=False))
            return 0
        if not hits:
            print("no matches")
            return 0
        for h in hits:
            when = h["ts"][:16].replace("T", " ")
            print(f"{when}  {h['agent']:<9} {h['session']} #{h['seq']}  {h['title'][:40]}")
            print(f"    {' '.join(h['snippet'].split())}")
        return 0

    return run_client(go())


def cmd_usage(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {"group_by": args.by}
    try:
        fields["since"] = since_time(args.since)
    except ValueError:
        return fail(f"--since {args.since!r}: give 7d, 12h, 30m, 2w or an ISO 8601 time")

    async def go() -> int:
        result = await ask_daemon("usage.summary", **fields)
        rows = result["rows"]
        if args.json:
            print(json.dumps(rows, indent=2, ensure_ascii=False))
            return 0
        head = args.by.upper()
        print(f"{head:<38} {'TURNS':>6} {'INPUT':>12} {'OUTPUT':>10} {'CACHED':>12} {'COST':>10}")
        total = {"turns": 0, "input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0}
        cost = 0.0
        for r in [*rows, None]:
            if r is None:
                r = {"key": "total", **total, "cost_usd": cost}
            else:
                for k in total:
                    total[k] += r[k]
                cost += r["cost_usd"]
            print(
                f"{r['key'][:38]:<38} {r['turns']:>6} {r['input_tokens']:>12,} "
                f"{r['output_tokens']:>10,} {r['cached_input_tokens']:>12,} "
                f"{'$' + format(r['cost_usd'], '.2f'):>10}"
            )
        return 0

    return run_client(go())


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("search", cmd_search, "Find text in every session: your messages and agents' answers")
    p.add_argument("query", help='words and "quoted phrases", all of them required')
    p.add_argument("--limit", type=int, help="hits at most (daemon default 50, at most 500)")
    p.add_argument("--agent", help="only sessions of this agent")
    p.add_argument("--cwd", help="only sessions in this directory")
    p.add_argument("--since", help="only text from then on: 7d, 12h, or an ISO 8601 time")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("usage", cmd_usage, "What the agents cost: tokens and dollars, summed per turn")
    p.add_argument("--since", default="30d", help="from when: 7d, 12h, an ISO time (30d)")
    p.add_argument(
        "--by", choices=("day", "agent", "project", "session"), default="day", help="rows per"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
