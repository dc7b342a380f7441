"""Measurements, each run the same way against the daemon and against the baseline."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.client import LeanClient, decode_event, stamp_of
from bench.procstats import rss_kib
from bench.targets import Target
from bench.wakeups import thread_cpu, thread_switches

SIZE = 64


@dataclass
class Collector:
    """What one client saw of one streaming turn."""

    latencies: bool = False
    count: int = 0
    first_stamp: int = 0
    last_recv: int = 0
    last_seq: int = 0
    lat_ns: list[int] = field(default_factory=list)
    #: each latency's yield stamp (monotonic ns), when latencies are kept
    stamps: list[int] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, payload: bytes) -> None:
        recv = time.monotonic_ns()
        ev = decode_event(payload)
        if ev.t != "event":
            return
        self.last_seq = ev.seq
        kind = ev.block.get("type")
        if kind == "text":
            stamp = stamp_of(ev.block)
            if stamp is None:
                return
            self.count += 1
            self.last_recv = recv
            if not self.first_stamp:
                self.first_stamp = stamp
            if self.latencies:
                self.lat_ns.append(recv - stamp)
                self.stamps.append(stamp)
        elif kind == "session_end":
            self.done.set()


@dataclass
class Counter:
    """A cheaper collector for fan-out: counts frames, parses only the first."""

    count: int = 0
    first_stamp: int = 0
    last_recv: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, payload: bytes) -> None:
        if b'"type":"text"' in payload and b'"done":false' in payload:
            self.count += 1
            self.last_recv = time.monotonic_ns()
            if not self.first_stamp:
                stamp = stamp_of(decode_event(payload).block)
                self.first_stamp = stamp or 0
        elif b'"session_end"' in payload:
            self.done.set()


async def _clients(target: Target, n: int, concurrency: int = 50) -> list[LeanClient]:
    out: list[LeanClient] = []
    for i in range(0, n, concurrency):
        out += await asyncio.gather(*(target.client() for _ in range(min(concurrency, n - i))))
    return out


async def _until_done(
    sinks: list[Collector] | list[Counter] | list[Collector | Counter],
    clients: list[LeanClient],
    timeout: float,
) -> None:
    """Wait for every client's session_end; fail at once if the daemon closed one."""

    async def one(sink: Collector | Counter, client: LeanClient) -> None:
        waits = {
            asyncio.ensure_future(sink.done.wait()),
            asyncio.ensure_future(client.closed.wait()),
        }
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if not sink.done.is_set():
            raise RuntimeError(f"the server closed a client ({client.close_code}) mid-stream")

    await asyncio.wait_for(
        asyncio.gather(*(one(s, c) for s, c in zip(sinks, clients, strict=True))), timeout
    )


async def _close(clients: list[LeanClient]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


@dataclass
class Throughput:
    blocks_per_s: float  # per session, adapter yield to the last client's receive
    frames_per_s: float  # delivered to all subscribers
    seconds: float


async def throughput(target: Target, n: int, subscribers: int = 1) -> Throughput:
    clients = await _clients(target, subscribers)
    try:
        session = await target.new_session(clients[0])
        sinks: list[Collector | Counter] = []
        for c in clients:
            sink: Collector | Counter = Collector() if subscribers == 1 else Counter()
            c.on_frame = sink
            sinks.append(sink)
            await c.request("session.subscribe", session=session)
        await target.stream(clients[0], session, n, 0, SIZE, subscribers)
        await _until_done(sinks, clients, 300)
        first = min(s.first_stamp for s in sinks)
        last = max(s.last_recv for s in sinks)
        total = sum(s.count for s in sinks)
        if any(s.count != n for s in sinks):
            raise RuntimeError(f"lost frames: {[s.count for s in sinks]} of {n}")
        seconds = (last - first) / 1e9
        return Throughput(n / seconds, total / seconds, seconds)
    finally:
        await _close(clients)


@dataclass
class Latency:
    p50_ms: float
    p99_ms: float
    samples: int
    #: times the store's WAL was reset during the run (checkpointed whole, then truncated or
    #: started over)
    wal_truncations: int = 0
    #: the latest event, yield to receive, of those yielded around a reset (ms)
    truncation_max_ms: float | None = None
    #: the same for the events yielded away from every reset (the run's own noise)
    elsewhere_max_ms: float | None = None
    wal_peak_mib: float = 0.0


#: Events yielded this long before a reset was seen, and after, count as around it: the
#: checkpoint that ends in the reset runs before it shows.
AROUND_BEFORE_NS = 500_000_000
AROUND_AFTER_NS = 100_000_000


class WalWatch:
    """Polls a WAL file from a thread; it was reset when it shrank (truncated) or its header's
    salts changed (SQLite started it over, writing it again from its start)."""

    def __init__(self, path: Path, every_s: float = 0.002) -> None:
        self.path = path
        self.every_s = every_s
        self.shrinks: list[int] = []
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-watch", daemon=True)

    def __enter__(self) -> WalWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        last = -1
        salts = b""
        while not self._stop.wait(self.every_s):
            try:
                with open(self.path, "rb") as wal:
                    head = wal.read(32)
                    size = os.fstat(wal.fileno()).st_size
            except OSError:
                continue
            now = time.monotonic_ns()
            if 0 <= size < last or (len(head) == 32 and salts and head[16:24] != salts):
                self.shrinks.append(now)
            if len(head) == 32:
                salts = head[16:24]
            self.peak = max(self.peak, size)
            last = size


def _around(stamps: list[int], lat: list[int], shrinks: list[int]) -> tuple[int, int]:
    """The largest latency of events yielded around a truncation, and away from all."""
    near = far = 0
    for stamp, ns in zip(stamps, lat, strict=True):
        if any(t - AROUND_BEFORE_NS <= stamp <= t + AROUND_AFTER_NS for t in shrinks):
            near = max(near, ns)
        else:
            far = max(far, ns)
    return near, far


async def latency(
    target: Target, sessions: int, rate: float, seconds: float, wal: Path | None = None
) -> Latency:
    clients = await _clients(target, sessions)
    n = int(rate * seconds)
    watch = WalWatch(wal) if wal is not None else None
    try:
        sinks: list[Collector] = []
        names: list[str] = []
        for c in clients:
            session = await target.new_session(c)
            sink = Collector(latencies=True)
            c.on_frame = sink
            await c.request("session.subscribe", session=session)
            sinks.append(sink)
            names.append(session)
        with watch or contextlib.nullcontext():
            await asyncio.gather(
                *(
                    target.stream(c, s, n, rate, SIZE, 1)
                    for c, s in zip(clients, names, strict=True)
                )
            )
            await _until_done(sinks, clients, seconds * 5 + 60)
        lat = sorted(x for s in sinks for x in s.lat_ns)
        if len(lat) != n * sessions:
            raise RuntimeError(f"lost frames: {len(lat)} of {n * sessions}")
        q = statistics.quantiles(lat, n=100, method="inclusive")
        result = Latency(q[49] / 1e6, q[98] / 1e6, len(lat))
        if watch is not None:
            result.wal_truncations = len(watch.shrinks)
            result.wal_peak_mib = watch.peak / 2**20
            near, far = _around(
                [x for s in sinks for x in s.stamps],
                [x for s in sinks for x in s.lat_ns],
                watch.shrinks,
            )
            result.elsewhere_max_ms = far / 1e6
            if watch.shrinks:
                result.truncation_max_ms = near / 1e6
        return result
    finally:
        await _close(clients)


@dataclass
class Idle:
    rss_mb: float
    list_p50_ms: float
    list_max_ms: float


async def idle(target: Target, count: int, *, sessions: bool = True) -> Idle:
    clients = await _clients(target, count)
    try:

        async def prepare(c: LeanClient) -> None:
            session = await target.new_session(c)
            await c.request("session.subscribe", session=session)

        for i in range(0, count, 50):
            await asyncio.gather(*(prepare(c) for c in clients[i : i + 50]))
        await asyncio.sleep(1.0)
        rss = rss_kib(target.pid) / 1024
        times: list[float] = []
        if sessions:
            await clients[0].request("sessions.list")  # warm-up (starts the external scan)
            for _ in range(20):
                t0 = time.perf_counter()
                got = await clients[0].request("sessions.list")
                times.append((time.perf_counter() - t0) * 1000)
                if len(got["sessions"]) < count:
                    raise RuntimeError(f"sessions.list listed {len(got['sessions'])}")
        else:
            times = [0.0]
        return Idle(rss, statistics.median(times), max(times))
    finally:
        await _close(clients)


@dataclass
class Replay:
    seconds: float
    events: int


async def replay(target: Target, missed: int) -> Replay:
    """A client sees a few events, goes away while ``missed`` more happen, then comes back."""
    a = await target.client()
    watcher = await target.client()
    try:
        session = await target.new_session(a)
        first = Collector()
        a.on_frame = first
        await a.request("session.subscribe", session=session)
        await target.stream(a, session, 10, 0, SIZE, 1)
        await asyncio.wait_for(first.done.wait(), 60)
        await a.close()
        seen = first.last_seq
        # Another subscriber tells when the missed stretch is stored and published.
        gone = Collector()
        watcher.on_frame = gone
        await watcher.request("session.subscribe", session=session, after_seq=seen)
        await target.stream(watcher, session, missed, 0, SIZE, 1)
        await asyncio.wait_for(gone.done.wait(), 120)
        await asyncio.sleep(0.5)  # let the state change after the turn land too
        back = await target.client()
        try:
            done = asyncio.Event()
            got = {"n": 0, "last": 0}
            target_seq = 0

            def on_frame(payload: bytes) -> None:
                ev = decode_event(payload)
                if ev.t == "event":
                    got["n"] += 1
                    got["last"] = ev.seq
                    if target_seq and ev.seq >= target_seq:
                        done.set()

            back.on_frame = on_frame
            t0 = time.monotonic()
            result = await back.request("session.subscribe", session=session, after_seq=seen)
            target_seq = int(result["last_seq"])
            if got["last"] >= target_seq:
                done.set()
            await asyncio.wait_for(done.wait(), 60)
            seconds = time.monotonic() - t0
            if got["n"] != target_seq - seen:
                raise RuntimeError(f"replayed {got['n']} of {target_seq - seen}")
            return Replay(seconds, got["n"])
        finally:
            await back.close()
    finally:
        await watcher.close()
        await a.close()


@dataclass
class NonReaders:
    alone_s: float  # the healthy client's turn, no one else subscribed
    with_s: float  # the same turn with ``readers`` subscribers that never read
    readers: int
    cut_off: int  # non-readers the daemon closed (4408) during the turn
    reading_s: float  # the same turn with ``readers`` subscribers that do read (fan-out cost)


async def _healthy_turn(
    target: Target, n: int, stalled: int, *, read: bool = False
) -> tuple[float, int]:
    """One client reads a turn of ``n`` blocks while ``stalled`` subscribers never read
    (or, with ``read``, read everything)."""
    healthy = await target.client()
    others = await _clients(target, stalled) if stalled else []
    try:
        session = await target.new_session(healthy)
        sink = Collector()
        healthy.on_frame = sink
        await healthy.request("session.subscribe", session=session)
        for c in others:
            await c.request("session.subscribe", session=session)
            if not read:
                # Stop reading: the socket's buffers fill, then the daemon's outbox for it.
                # The transport too stops reading the socket: else asyncio would go on moving
                # bytes into the reader's buffer (up to 2 MiB, LeanClient's limit), and the
                # kernel would grow the receive buffer, as for a client that reads.
                c._task.cancel()
                c.writer.transport.pause_reading()
        await target.stream(healthy, session, n, 0, SIZE, 1)
        await _until_done([sink], [healthy], 600)
        if sink.count != n:
            raise RuntimeError(f"lost frames: {sink.count} of {n}")
        seconds = (sink.last_recv - sink.first_stamp) / 1e9
        if not read:
            # Read again, to see which of them the daemon closed with 4408 (the close frame
            # waits behind what their sockets hold).
            for c in others:
                c.on_frame = None
                c.writer.transport.resume_reading()
                c._task = asyncio.get_running_loop().create_task(c._read())
        await asyncio.sleep(2.0)
        cut = 0
        for c in others:
            with contextlib.suppress(Exception):
                cut += c.close_code == 4408
        return seconds, cut
    finally:
        await _close([healthy, *others])


async def non_readers(target: Target, n: int, readers: int) -> NonReaders:
    """Issue 15, item 8: a subscriber that stopped reading must not pace the turn."""
    alone, _ = await _healthy_turn(target, n, 0)
    with_, cut = await _healthy_turn(target, n, readers)
    reading, _ = await _healthy_turn(target, n, readers, read=True)
    return NonReaders(alone, with_, readers, cut, reading)


@dataclass
class AckLatency:
    send_p50_ms: float
    send_p99_ms: float
    ping_p50_ms: float
    ping_p99_ms: float
    samples: int


async def ack_latency(target: Target, count: int) -> AckLatency:
    """``session.send`` -> ``ok`` (the answer waits for the commit), next to ``ping`` -> ``ok``
    on the same connection (no store involved)."""
    c = await target.client()
    try:
        session = await target.new_session(c)
        sink = Collector()
        c.on_frame = sink
        await c.request("session.subscribe", session=session)
        sends: list[float] = []
        pings: list[float] = []
        for _ in range(count):
            sink.done.clear()
            t0 = time.perf_counter()
            await target.stream(c, session, 1, 0, SIZE, 1)
            sends.append((time.perf_counter() - t0) * 1000)
            await asyncio.wait_for(sink.done.wait(), 30)
            await asyncio.sleep(0.01)  # the turn's state change lands; the session is idle
            t0 = time.perf_counter()
            await c.request("ping")
            pings.append((time.perf_counter() - t0) * 1000)
        qs = statistics.quantiles(sends, n=100, method="inclusive")
        qp = statistics.quantiles(pings, n=100, method="inclusive")
        return AckLatency(qs[49], qs[98], qp[49], qp[98], count)
    finally:
        await c.close()


@dataclass
class PacedCpu:
    """What a stream paced like an agent's costs the server, per delta delivered."""

    cpu_s_per_10k: float  # CPU seconds of the server process per 10,000 deltas
    switches_per_delta: float  # context switches of all its threads per delta
    deltas: int
    subscribers: int
    seconds: float
    #: CPU seconds per 10,000 deltas of each thread that used any ("tid name")
    per_thread: dict[str, float] = field(default_factory=dict)


async def paced_cpu(target: Target, n: int, rate: float, size: int, subscribers: int) -> PacedCpu:
    """One session streams ``n`` deltas of ``size`` bytes at ``rate`` per second to
    ``subscribers`` clients; the server's CPU time (all threads, the scheduler's count in
    /proc) while it does."""
    clients = await _clients(target, subscribers)
    try:
        session = await target.new_session(clients[0])
        sinks: list[Counter] = []
        for c in clients:
            sink = Counter()
            c.on_frame = sink
            sinks.append(sink)
            await c.request("session.subscribe", session=session)
        await asyncio.sleep(0.5)  # what set-up started settles first
        sw0, t0 = thread_switches(target.pid), time.monotonic()
        threads0 = thread_cpu(target.pid)
        await target.stream(clients[0], session, n, rate, size, subscribers)
        await _until_done(sinks, clients, n / rate * 3 + 60)
        seconds = time.monotonic() - t0
        threads1 = thread_cpu(target.pid)
        cpu = sum(v - threads0.get(k, 0.0) for k, v in threads1.items())
        sw1 = thread_switches(target.pid)
        switches = sum(v - sw0.get(k, 0) for k, v in sw1.items())
        threads = {
            k: round((v - threads0.get(k, 0.0)) * 10_000 / n, 2)
            for k, v in threads1.items()
            if v - threads0.get(k, 0.0) >= 0.001
        }
        if any(s.count != n for s in sinks):
            raise RuntimeError(f"lost frames: {[s.count for s in sinks]} of {n}")
        return PacedCpu(cpu * 10_000 / n, switches / n, n, subscribers, seconds, threads)
    finally:
        await _close(clients)
