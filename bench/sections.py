"""The loop thread's CPU per paced delta, by function (docs/benchmarks.md, "The price of a
streamed delta").

``python -m bench.sections [--n 1000] [--subscribers 1 5] [--store sqlite|memory]`` starts a
daemon with ``sections_hook`` on its path and runs T12's paced stream (100 deltas a second of
32 bytes). In the daemon, SIGUSR1 wraps the functions of ``SECTIONS`` (and the store's
connection's ``execute``) in timers of the calling thread's CPU (``time.thread_time_ns``) and
SIGUSR2 writes what they took, as JSON lines, to ``BENCH_SECTIONS_OUT``. Unlike cProfile it
times only those few functions, so the rest runs at its own speed; each timer adds about a
microsecond. Nested functions are counted in their callers too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

HOOK = Path(__file__).with_name("sections_hook")
#: (module, class or "", function): what is timed.
SECTIONS = (
    ("asyncio.base_events", "BaseEventLoop", "_run_once"),
    ("selectors", "EpollSelector", "select"),
    ("bridge.store.store", "SqliteStore", "release"),
    ("bridge.store.store", "SqliteStore", "_hand_over"),
    ("bridge.store.store", "SqliteStore", "_commit"),
    ("bridge.store.store", "SqliteStore", "_committed"),
    ("bridge.store.store", "", "chunk_rows"),
    ("bridge.store.derived", "Derived", "rows"),
    ("bridge.hub.fanout", "Fanout", "emit"),
    ("bridge.hub.turns", "TurnRunner", "accept"),
    ("bridge.hub.state", "Subscription", "offer_run"),
    ("bridge.server.connection", "Connection", "_write_now"),
    ("asyncio.selector_events", "_SelectorSocketTransport", "write"),
)


class _Timers:
    def __init__(self) -> None:
        self.on = False
        self.spent: dict[str, list[int]] = {}
        self.cpu0 = 0
        self.sqlite_timed = False

    def wrap(self, owner: Any, name: str, key: str) -> None:
        original = getattr(owner, name)
        spent = self.spent.setdefault(key, [0, 0])
        clock = time.thread_time_ns

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return original(*args, **kwargs)
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                spent[0] += clock() - start
                spent[1] += 1

        setattr(owner, name, timed)

    def start(self) -> None:
        for module, cls, name in SECTIONS:
            key = f"{cls}.{name}" if cls else name
            if key in self.spent:
                continue
            with contextlib.suppress(ImportError, AttributeError):
                mod = importlib.import_module(module)
                self.wrap(getattr(mod, cls) if cls else mod, name, key)
        self._time_sqlite()
        for spent in self.spent.values():
            spent[0] = spent[1] = 0
        self.cpu0 = time.thread_time_ns()
        self.on = True

    def _time_sqlite(self) -> None:
        if self.sqlite_timed:
            return
        self.sqlite_timed = True
        import gc

        from bridge.store.store import SqliteStore

        spent = self.spent.setdefault("sqlite3 execute", [0, 0])
        clock = time.thread_time_ns
        timers = self

        class Timed:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, *args: Any) -> Any:
                if not timers.on:
                    return self._conn.execute(*args)
                start = clock()
                try:
                    return self._conn.execute(*args)
                finally:
                    spent[0] += clock() - start
                    spent[1] += 1

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

        for obj in gc.get_objects():
            inline = getattr(obj, "_inline", None) if isinstance(obj, SqliteStore) else None
            if inline is not None:
                obj._inline = Timed(inline)

    def stop(self, out: str) -> None:
        self.on = False
        spent = {k: v for k, v in self.spent.items() if v[1]}
        spent["(the loop thread, all)"] = [time.thread_time_ns() - self.cpu0, 0]
        with open(out, "a") as f:
            f.write(json.dumps(spent) + "\n")


def install() -> None:
    """Called by the hook at interpreter start when BENCH_SECTIONS_OUT is set."""
    out = os.environ["BENCH_SECTIONS_OUT"]
    timers = _Timers()
    signal.signal(signal.SIGUSR1, lambda *_: timers.start())
    signal.signal(signal.SIGUSR2, lambda *_: timers.stop(out))


async def _run(n: int, subscribers: list[int], store: str) -> None:
    from bench import scenarios
    from bench.targets import ROOT, DaemonTarget

    out = Path(tempfile.mkdtemp(prefix="bench-sections-")) / "sections.jsonl"
    path = os.pathsep.join(p for p in (str(HOOK), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    daemon = await DaemonTarget(
        store=store, env={"PYTHONPATH": path, "BENCH_SECTIONS_OUT": str(out)}
    ).start()
    try:
        for done, subs in enumerate(subscribers, 1):
            os.kill(daemon.pid, signal.SIGUSR1)
            paced = await scenarios.paced_cpu(daemon, n, 100, 32, subs)
            os.kill(daemon.pid, signal.SIGUSR2)
            for _ in range(100):  # the daemon writes its line on the signal, at once
                if out.exists() and len(out.read_text().splitlines()) >= done:
                    break
                await asyncio.sleep(0.05)
            spent = json.loads(out.read_text().splitlines()[-1])
            print(
                f"{n} deltas to {subs} client(s): the process {paced.cpu_s_per_10k * 100:.0f} µs "
                "of CPU per delta; the loop thread, by function (µs per delta, calls):"
            )
            for key, (ns, calls) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
                print(f"  {ns / 1000 / n:8.1f}  {calls:6d}  {key}")
    finally:
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="deltas per run")
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()
    asyncio.run(_run(args.n, args.subscribers, args.store))


if __name__ == "__main__":
    main()
