"""``python -m bench``: run every benchmark target, print the table (or ``--json``).

Each figure of the daemon is measured next to the baseline (a bare ``websockets`` server
pushing the same pre-encoded frames to the same clients) in the same run, on the same
machine, and throughput figures are the best of ``--repeat`` runs for both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import loopprofile, resident, scenarios, startup
from bench import search as search_bench
from bench.targets import ROOT, BaselineTarget, DaemonTarget


@dataclass
class Row:
    id: str
    what: str
    target: str
    value: str
    baseline: str
    ratio: str
    ok: bool | None  # None: could not be measured
    note: str = ""
    data: dict[str, Any] | None = None


def machine_facts() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kib = 0
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    versions = {}
    for dist in ("websockets", "msgspec", "agent-bridge"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "?"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "commit": commit,
        "loadavg_at_start": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def _best(results: list[scenarios.Throughput]) -> scenarios.Throughput:
    return max(results, key=lambda r: r.blocks_per_s)


async def _interleaved(coro_fns: list[Any], times: int) -> list[scenarios.Throughput]:
    """The best of ``times`` runs of each, taken in turns: on a shared machine a busy moment
    then hits the daemon and what it is compared with alike."""
    runs: list[list[scenarios.Throughput]] = [[] for _ in coro_fns]
    for _ in range(times):
        for fn, results in zip(coro_fns, runs, strict=True):
            results.append(await fn())
    return [_best(results) for results in runs]


def _fmt(x: float, unit: str = "") -> str:
    if x >= 100:
        text = f"{x:,.0f}"
    elif x >= 10:
        text = f"{x:.1f}"
    else:
        text = f"{x:.2f}"
    return text + unit


def py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).exists() else None


def daemon_env(folder: str | None) -> dict[str, str] | None:
    """A daemon to profile without py-spy carries bench/loopprofile.py."""
    if not folder or py_spy():
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return loopprofile.env(folder)


@contextlib.contextmanager
def profiled(folder: str | None, name: str, pid: int) -> Iterator[None]:
    """Record the daemon with py-spy (``pip install -e '.[bench]'``) while a scenario runs;
    without py-spy, with bench/loopprofile.py (the daemon was started with ``daemon_env``)."""
    if not folder:
        yield
        return
    spy = py_spy()
    if spy is None:
        os.kill(pid, signal.SIGUSR1)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGUSR2)
            _progress(f"profile of {name}: {loopprofile.collect(folder, name, pid)}")
        return
    out = Path(folder) / f"{name}.speedscope.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--gil",
            "--rate",
            "250",
            "--format",
            "speedscope",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        _progress(f"profile of {name}: {out}")


def _progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Row]]:
    scale = 0.2 if args.quick else 1.0
    rep = 1 if args.quick else args.repeat
    n1 = int(50_000 * scale)
    n2 = int(5_000 * scale)
    idle_n = int(1000 * scale) if args.quick else 1000
    missed = 10_000
    rows: list[Row] = []
    facts = machine_facts()

    # T6, T8 and T9 start their own daemons: run alone, they need neither of these.
    paired = not args.only or bool(set(args.only) & PAIRED)
    base = await BaselineTarget().start() if paired else None
    daemon = await DaemonTarget(env=daemon_env(args.profile)).start() if paired else None
    memory = None
    try:
        wanted = set(args.only) if args.only else None

        def want(tid: str) -> bool:
            return wanted is None or tid in wanted

        # ---- T1 and T7: one session, one client, as fast as possible -----------------------
        t1 = t1b = None
        t7: list[scenarios.Throughput] = []
        t14: list[scenarios.Throughput] = []
        if want("T1") or want("T7") or want("T14"):
            _progress("T1 (and T7): one session to one client, in turns with the baseline")
            runs = [
                lambda: scenarios.throughput(base, n1),
                lambda: scenarios.throughput(daemon, n1),
            ]
            if want("T7"):
                memory = await DaemonTarget(store="memory").start()
                mem = memory
                runs.append(lambda: scenarios.throughput(mem, n1))
            if want("T14"):
                # the same daemon with a store that writes no search index (bench/noindex)
                plain = os.pathsep.join([str(NOINDEX), os.environ.get("PYTHONPATH", "")])
                unindexed = await DaemonTarget(env={"PYTHONPATH": plain}).start()
                runs.append(lambda: scenarios.throughput(unindexed, n1))
            with profiled(args.profile, "T1", daemon.pid):
                t1b, t1, *more = await _interleaved(runs, rep)
            t7 = more[:1] if want("T7") else []
            t14 = more[-1:] if want("T14") else []
            if want("T14"):
                unindexed.stop()
            if memory is not None:
                memory.stop()
                memory = None
            ratio = t1.blocks_per_s / t1b.blocks_per_s
            rows.append(
                Row(
                    "T1",
                    "1 session -> 1 client, blocks/s (store on)",
                    ">= 20,000/s and >= 50% of baseline",
                    _fmt(t1.blocks_per_s, "/s"),
                    _fmt(t1b.blocks_per_s, "/s"),
                    f"{ratio:.0%}",
                    t1.blocks_per_s >= 20_000 and ratio >= 0.5,
                    f"{n1:,} blocks of {scenarios.SIZE} B, best of {rep}",
                    {"daemon": asdict(t1), "baseline": asdict(t1b)},
                )
            )
        # ---- T2: fan-out to 100 subscribers -----------------------------------------------
        if want("T2"):
            _progress("T2: one session to 100 subscribers")
            with profiled(args.profile, "T2", daemon.pid):
                t2b, t2 = await _interleaved(
                    [
                        lambda: scenarios.throughput(base, n2, 100),
                        lambda: scenarios.throughput(daemon, n2, 100),
                    ],
                    rep,
                )
            ratio = t2.frames_per_s / t2b.frames_per_s
            rows.append(
                Row(
                    "T2",
                    "1 session -> 100 subscribers, frames delivered/s",
                    ">= 100,000/s",
                    _fmt(t2.frames_per_s, "/s"),
                    _fmt(t2b.frames_per_s, "/s"),
                    f"{ratio:.0%}",
                    t2.frames_per_s >= 100_000,
                    f"{n2:,} blocks x 100 clients, best of {rep}",
                    {"daemon": asdict(t2), "baseline": asdict(t2b)},
                )
            )
        # ---- T3: latency ----------------------------------------------------------------------
        if want("T3"):
            _progress("T3: latency, 1 session")
            secs = 2.0 if args.quick else 5.0
            l1b = await scenarios.latency(base, 1, 200, secs)
            l1 = await scenarios.latency(daemon, 1, 200, secs)
            _progress("T3: latency, 100 sessions x 100 blocks/s")
            lnb = await scenarios.latency(base, 100, 100, secs)
            with profiled(args.profile, "T3b", daemon.pid):
                ln = await scenarios.latency(daemon, 100, 100, secs, daemon.wal)
            rows.append(
                Row(
                    "T3a",
                    "latency, yield -> receive, 1 session at 200 blocks/s",
                    "p50 <= 1 ms, p99 <= 5 ms",
                    f"p50 {l1.p50_ms:.2f} / p99 {l1.p99_ms:.2f} ms",
                    f"p50 {l1b.p50_ms:.2f} / p99 {l1b.p99_ms:.2f} ms",
                    "",
                    l1.p50_ms <= 1 and l1.p99_ms <= 5,
                    f"{l1.samples:,} samples",
                    {"daemon": asdict(l1), "baseline": asdict(l1b)},
                )
            )
            rows.append(
                Row(
                    "T3b",
                    "latency, 100 sessions each at 100 blocks/s",
                    "p99 <= 20 ms",
                    f"p50 {ln.p50_ms:.2f} / p99 {ln.p99_ms:.2f} ms",
                    f"p50 {lnb.p50_ms:.2f} / p99 {lnb.p99_ms:.2f} ms",
                    "",
                    ln.p99_ms <= 20,
                    f"{ln.samples:,} samples; the WAL was reset {ln.wal_truncations} times "
                    f"(its file at most {ln.wal_peak_mib:.0f} MiB)",
                    {"daemon": asdict(ln), "baseline": asdict(lnb)},
                )
            )
            near = ln.truncation_max_ms
            rows.append(
                Row(
                    "T13",
                    "longest stall of a session's events while the WAL is reset (T3b's load)",
                    "<= 20 ms",
                    "no reset" if near is None else f"{near:.2f} ms",
                    f"{ln.elsewhere_max_ms:.2f} ms away from resets",
                    "",
                    None if near is None else near <= 20,
                    "the latest event, yield -> receive, of those yielded from "
                    f"{scenarios.AROUND_BEFORE_NS // 1_000_000} ms before a reset of the WAL "
                    f"(truncated, or started over) was seen to "
                    f"{scenarios.AROUND_AFTER_NS // 1_000_000} ms after; baseline: the latest of "
                    "the others in the same run",
                    asdict(ln),
                )
            )
        # ---- T5: replay ------------------------------------------------------------------------
        if want("T5"):
            _progress("T5: replay of 10,000 missed events")
            r = await scenarios.replay(daemon, missed)
            rb = await scenarios.throughput(base, r.events)
            rows.append(
                Row(
                    "T5",
                    "reconnect that missed 10,000 events: all replayed",
                    "<= 1 s",
                    _fmt(r.seconds, " s"),
                    _fmt(rb.seconds, " s"),
                    f"{rb.seconds / r.seconds:.0%}",
                    r.seconds <= 1.0,
                    f"{r.events:,} events from the store; baseline pushes as many live",
                    {"daemon": asdict(r), "baseline": asdict(rb)},
                )
            )
        # ---- T7: store cost ------------------------------------------------------------------
        if want("T7") and t7:
            # Measured with T1, in turns with it: the same as T1 with an in-memory store.
            (tm,) = t7
            ratio = t1.blocks_per_s / tm.blocks_per_s
            rows.append(
                Row(
                    "T7",
                    "durable store cost: T1 with SQLite vs in-memory store",
                    ">= 70%",
                    _fmt(t1.blocks_per_s, "/s"),
                    _fmt(tm.blocks_per_s, "/s (memory)"),
                    f"{ratio:.0%}",
                    ratio >= 0.7,
                    "ratio = SQLite / memory",
                    {"sqlite": asdict(t1), "memory": asdict(tm)},
                )
            )
        # ---- T14: search over a large store; what the index costs the writes ---------------
        if want("T14") and t14:
            (tn,) = t14
            sessions = 1000 if args.quick else args.search_sessions
            _progress(f"T14: a store of {sessions:,} sessions x 50 turns, then searches")
            workdir = Path(tempfile.mkdtemp(prefix="bench-search-"))
            try:
                r = await asyncio.to_thread(search_bench.run, workdir, sessions)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            writes = t1.blocks_per_s / tn.blocks_per_s
            rows.append(
                Row(
                    "T14",
                    f"search: {sessions:,} sessions x 50 turns: sessions.search p95; the index's "
                    "share of the store; T1 with the index vs without",
                    "p95 <= 50 ms; index <= 35%; writes >= 90%",
                    f"p95 {r.p95_ms:.1f} ms (p50 {r.p50_ms:.1f}); index {r.index_share:.0%} "
                    f"of {r.file_bytes / 2**20:,.0f} MiB; T1 {_fmt(t1.blocks_per_s, '/s')}",
                    f"T1 without the index {_fmt(tn.blocks_per_s, '/s')}",
                    f"writes {writes:.0%}",
                    r.p95_ms <= 50 and r.index_share <= 0.35 and writes >= 0.9,
                    f"{r.events:,} events built in {r.build_s:.0f} s; {r.queries} queries (a "
                    "rare word, two words, a phrase, a common word and a rare one), "
                    f"{r.mean_hits:.1f} hits each on average; T1 runs of both daemons "
                    "interleaved, best of each",
                    {"search": asdict(r), "indexed": asdict(t1), "unindexed": asdict(tn)},
                )
            )
        # ---- T4: many idle sessions and clients --------------------------------------------
        if want("T4"):
            _progress(f"T4: {idle_n} idle sessions and clients")
            ib = await scenarios.idle(base, idle_n, sessions=False)
            i4 = await scenarios.idle(daemon, idle_n)
            rows.append(
                Row(
                    "T4",
                    f"{idle_n:,} idle sessions + {idle_n:,} clients: RSS; sessions.list",
                    "RSS <= 300 MB; list <= 50 ms",
                    f"{i4.rss_mb:.0f} MB; {i4.list_p50_ms:.1f} ms (max {i4.list_max_ms:.1f})",
                    f"{ib.rss_mb:.0f} MB",
                    "",
                    i4.rss_mb <= 300 and i4.list_p50_ms <= 50,
                    "RSS after start-up, sessions, subscriptions; sessions.list: median (max) "
                    "of 20 calls",
                    {"daemon": asdict(i4), "baseline": asdict(ib)},
                )
            )
        # ---- T10: subscribers that never read --------------------------------------------------
        if want("T10"):
            readers = 20
            n8 = int(50_000 * scale)
            _progress(f"T10: one turn of {n8:,} blocks, alone and with {readers} non-readers")
            nr = await scenarios.non_readers(daemon, n8, readers)
            ratio = nr.with_s / nr.alone_s
            rows.append(
                Row(
                    "T10",
                    f"healthy client's turn with {readers} subscribers that never read",
                    "<= 1.5x its time alone",
                    _fmt(nr.with_s, " s"),
                    _fmt(nr.alone_s, " s alone"),
                    f"{ratio:.2f}x",
                    ratio <= 1.5,
                    f"{n8:,} blocks; {nr.cut_off} of {readers} non-readers cut off (4408); "
                    f"with {readers} subscribers that read: {nr.reading_s:.2f} s",
                    asdict(nr),
                )
            )
        # ---- T12: CPU per delta of a stream paced like an agent's ---------------------------
        if want("T12"):
            n12 = 300 if args.quick else 1000
            for subs in (1, 5):
                _progress(f"T12: {n12} deltas of 32 B at 100/s to {subs} client(s), CPU")
                with profiled(args.profile, f"T12-{subs}", daemon.pid):
                    pd = await scenarios.paced_cpu(daemon, n12, 100, 32, subs)
                pb = await scenarios.paced_cpu(base, n12, 100, 32, subs)
                ratio = pd.cpu_s_per_10k / pb.cpu_s_per_10k
                rows.append(
                    Row(
                        f"T12-{subs}",
                        f"paced stream, 100 deltas/s of 32 B to {subs} client(s): "
                        "CPU s per 10,000 deltas",
                        "<= 2x baseline",
                        f"{pd.cpu_s_per_10k:.2f} s ({pd.switches_per_delta:.1f} switches/delta)",
                        f"{pb.cpu_s_per_10k:.2f} s ({pb.switches_per_delta:.1f} switches/delta)",
                        f"{ratio:.2f}x",
                        ratio <= 2,
                        f"{n12:,} deltas; the server process's CPU (all threads, schedstat) "
                        "from the send to the last client's session_end",
                        {"daemon": asdict(pd), "baseline": asdict(pb)},
                    )
                )
        # ---- T11: acknowledgement latency -----------------------------------------------------
        if want("T11"):
            count = 100 if args.quick else 300
            _progress(f"T11: session.send -> ok, {count} sends, SQLite and in-memory store")
            ack = await scenarios.ack_latency(daemon, count)
            memory = await DaemonTarget(store="memory").start()
            ackm = await scenarios.ack_latency(memory, count)
            memory.stop()
            memory = None
            rows.append(
                Row(
                    "T11",
                    "session.send -> ok (answered after the commit), p50 / p99",
                    "report",
                    f"{ack.send_p50_ms:.2f} / {ack.send_p99_ms:.2f} ms",
                    f"{ackm.send_p50_ms:.2f} / {ackm.send_p99_ms:.2f} ms (memory store)",
                    f"{ack.send_p50_ms / ackm.send_p50_ms:.2f}x",
                    None,
                    f"ping -> ok on the same connection: {ack.ping_p50_ms:.2f} / "
                    f"{ack.ping_p99_ms:.2f} ms; {count} sends, one at a time",
                    {"sqlite": asdict(ack), "memory": asdict(ackm)},
                )
            )
    finally:
        if base is not None:
            base.stop()
        if daemon is not None:
            daemon.stop()
        if memory is not None:
            memory.stop()

    # ---- T6: start-up with 50 external adapters -----------------------------------------------
    if not args.only or "T6" in args.only:
        _progress("T6: start-up with 50 external adapters, slow --version probes")
        s = await startup.measure(adapters=50, probe_s=3.0, runs=1 if args.quick else 3)
        rows.append(
            Row(
                "T6",
                "start to /healthz ready, 50 external adapters (slow --version)",
                "<= 1 s",
                _fmt(s.ready_s, " s"),
                f"{s.empty_s:.2f} s with none; {s.fast_s:.2f} s with fast --version",
                "",
                None if s.loaded < 50 else s.ready_s <= 1.0,
                s.note,
                asdict(s),
            )
        )
    rows += await resident_rows(args)
    facts["loadavg_at_end"] = os.getloadavg()
    ids = (
        "T1",
        "T2",
        "T3a",
        "T3b",
        "T13",
        "T4",
        "T5",
        "T6",
        "T7",
        "T8",
        "T9",
        "T10",
        "T11",
        "T12-1",
        "T12-5",
        "T14",
    )
    order = {r: i for i, r in enumerate(ids)}
    rows.sort(key=lambda r: order.get(r.id, 99))
    return facts, rows


PAIRED = {"T1", "T2", "T3", "T4", "T5", "T7", "T10", "T11", "T12", "T14"}
#: the PYTHONPATH folder of T14's daemon without a search index
NOINDEX = Path(__file__).resolve().parent / "noindex"


async def resident_rows(args: argparse.Namespace) -> list[Row]:
    """T8 (idle daemon) and T9 (resident Claude Code processes), each with its own daemon."""
    rows: list[Row] = []
    if not args.only or "T8" in args.only:
        secs = 20.0 if args.quick else 60.0
        _progress(f"T8: an idle daemon (no session, no client) for {secs:.0f} s")
        i8 = await resident.idle_daemon(secs)
        rows.append(
            Row(
                "T8",
                "idle daemon, no sessions, no clients: wakeups/s; CPU s/min",
                "<= 2 wakeups/s; <= 0.1 s CPU/min",
                f"{i8.wakeups_per_s:.2f}/s; {i8.cpu_s_per_min:.3f} s",
                f"{i8.baseline_wakeups_per_s:.2f}/s; {i8.baseline_cpu_s_per_min:.3f} s",
                "",
                i8.wakeups_per_s <= 2 and i8.cpu_s_per_min <= 0.1,
                f"context switches of every thread from /proc over {i8.seconds:.0f} s; "
                "baseline: the bare websockets server, same window",
                asdict(i8),
            )
        )
    if not args.only or "T9" in args.only:
        n = 5 if args.quick else 20
        _progress(f"T9: {n} Claude Code sessions, idle_stop_s = {resident.IDLE_STOP_S:g}")
        r9 = await resident.claude_sessions(n)
        if r9 is None:
            rows.append(Row("T9", "resident agents", "", "", "", "", None, "claude not installed"))
        else:
            opened = r9.opened_p50 / r9.warm_p50
            ok = (
                r9.left_after_10s == 0
                and r9.resumed_same_conversation == n
                and r9.warm_p50 <= 0.1
                and opened <= 2
            )
            rows.append(
                Row(
                    "T9",
                    f"{n} Claude Code sessions, one turn each, idle_stop_s = "
                    f"{resident.IDLE_STOP_S:g}: processes left 5 s after the last idle stop; "
                    "next turns resumed; prompt -> first text",
                    "0 left; all resumed; warm <= 0.1 s; opened 5 s before <= 2x warm",
                    f"{r9.left_after_10s} left (of {r9.peak_processes}); "
                    f"{r9.resumed_same_conversation}/{n} resumed; warm {r9.warm_p50:.3f} s; "
                    f"opened 5 s before {r9.opened_p50:.3f} s",
                    f"after an idle stop {r9.cold_p50:.2f} s",
                    f"opened {opened:.1f}x warm; cold {r9.cold_p50 / r9.warm_p50:.0f}x",
                    ok,
                    "medians over the sessions; opened = the first turn after the idle stop, "
                    "sent 5 s after session.subscribe (its agent started in the background); "
                    "warm = the turn right after it; cold = a turn after the next idle stop, "
                    "the session open all along (a new claude process resuming its session)",
                    asdict(r9),
                )
            )
    return rows


def render(facts: dict[str, Any], rows: list[Row]) -> str:
    head = ["#", "what", "target", "agent-bridge", "baseline", "ratio", "result"]
    body = [
        [
            r.id,
            r.what,
            r.target,
            r.value,
            r.baseline,
            r.ratio,
            "n/a" if r.ok is None else ("met" if r.ok else "MISSED"),
        ]
        for r in rows
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    notes = [f"- {r.id}: {r.note}" for r in rows if r.note]
    v = facts["versions"]
    machine = (
        f"Machine: {facts['cpu']}, {facts['cores']} cores, {facts['memory_gib']} GiB, "
        f"Linux {facts['kernel']}, Python {facts['python']}, websockets {v['websockets']}, "
        f"msgspec {v['msgspec']}; agent-bridge {v['agent-bridge']} at {facts['commit']}; "
        f"load average {facts['loadavg_at_start'][0]:.2f} at start, "
        f"{facts['loadavg_at_end'][0]:.2f} at end; {facts['time']}."
    )
    return "\n".join([*lines, "", *notes, "", machine])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs, best kept")
    parser.add_argument(
        "--search-sessions", type=int, default=10_000, help="T14's store: sessions of 50 turns"
    )
    parser.add_argument(
        "--only", nargs="*", help="run only these targets (T1 ... T14; T3 also measures T13)"
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="record the daemon (py-spy, else bench/loopprofile.py) during T1, T2, T3b, T12",
    )
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    facts, rows = asyncio.run(run(args))
    if args.json:
        print(json.dumps({"machine": facts, "results": [asdict(r) for r in rows]}, indent=2))
    else:
        print(render(facts, rows))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
