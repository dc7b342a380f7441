"""Where the SQLite store commits: small batches on the event loop's thread while the writer
thread holds nothing, the rest on the writer thread; either way in order, and on disk before
anyone hears of them."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

from bridge.adapters.base import BaseAdapter, DetectedAgent
from bridge.blocks import AgentInfoBlock, Block, SessionEndBlock, TextBlock
from bridge.store import inline
from bridge.store import store as store_module
from bridge.store.memory import MemoryStore
from bridge.store.records import StoredEvent
from bridge.store.store import SqliteStore


def _event(session: str, seq: int) -> StoredEvent:
    return StoredEvent(session, seq, "t", b'{"type":"text","text":"x"}')


async def test_commits_keep_their_order_whichever_thread_makes_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Batches small enough for the event loop's thread and batches too large for it, one
    right after the other: each session's events reach ``on_commit`` in seq order, once."""
    monkeypatch.setattr(inline, "GAP_S", 0.0)  # inline whenever allowed
    store = SqliteStore(tmp_path / "bridge.sqlite3")
    store.open(asyncio.get_running_loop())
    seen: dict[str, list[int]] = {"a": [], "b": []}
    store.on_commit = lambda batch: [seen[ev.session].append(ev.seq) for ev in batch]
    sent = {"a": 0, "b": 0}
    rng = random.Random(7)
    try:
        for _ in range(300):
            session = rng.choice("ab")
            # 1 event: the loop's thread may commit it; 600: the writer thread must.
            for _ in range(rng.choice((1, 1, 2, inline.OPS + 88))):
                sent[session] += 1
                store.append_event(_event(session, sent[session]))
            if rng.random() < 0.5:
                await asyncio.sleep(0)
        await store.barrier()
        for session, count in sent.items():
            assert seen[session] == list(range(1, count + 1)), f"session {session} out of order"
            stored = await store.read_events(session, 0, count + 10)
            assert [ev.seq for ev in stored] == list(range(1, count + 1))
    finally:
        await store.close()


async def test_a_database_locked_elsewhere_does_not_hold_the_event_loop(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A commit on the event loop's thread does not wait for a lock another process holds (its
    busy timeout would stop the loop for seconds): it goes to the writer thread, which waits
    and retries, and nothing is handed on before it is committed."""
    monkeypatch.setattr(inline, "GAP_S", 0.0)  # inline whenever allowed
    db = tmp_path / "bridge.sqlite3"
    store = SqliteStore(db)
    loop = asyncio.get_running_loop()
    store.open(loop)
    committed: list[int] = []
    store.on_commit = lambda batch: committed.extend(ev.seq for ev in batch)
    holder = sqlite3.connect(db, isolation_level=None, timeout=0.1)
    try:
        store.append_event(_event("s", 1))
        await store.barrier()
        holder.execute("BEGIN IMMEDIATE")
        store.append_event(_event("s", 2))
        started = time.monotonic()
        for _ in range(3):  # the hand-over runs in one of these passes
            await asyncio.sleep(0)
        held = time.monotonic() - started
        assert held < store_module.BUSY_TIMEOUT_MS / 1000 / 2, f"the loop waited {held:.1f} s"
        assert committed == [1], "an event was handed on before it was committed"
        holder.execute("ROLLBACK")
        await asyncio.wait_for(store.barrier(), 30)
        assert committed == [1, 2]
        assert [ev.seq for ev in await store.read_events("s", 0, 10)] == [1, 2]
    finally:
        holder.close()
        await store.close()


async def test_a_held_event_is_on_disk_and_handed_on_at_release(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A turn holds the store while it emits one block's events: at ``release`` a batch the
    loop's thread commits is committed there and then (no pass of the event loop between the
    emit and the push), and is on disk before ``on_commit`` hears of it. A stream faster than
    ``inline.GAP_S`` keeps its blocks together: released one by one, they are committed as one
    batch on the next pass."""
    db = tmp_path / "bridge.sqlite3"
    store = SqliteStore(db)
    store.open(asyncio.get_running_loop())
    reader = sqlite3.connect(db, isolation_level=None)
    batches: list[tuple[list[int], list[int]]] = []

    def on_commit(batch: list[StoredEvent]) -> None:
        on_disk = [row[0] for row in reader.execute("SELECT last_seq FROM event_chunks")]
        batches.append(([ev.seq for ev in batch], on_disk))

    store.on_commit = on_commit
    try:
        monkeypatch.setattr(inline, "GAP_S", 0.0)
        store.hold()
        store.append_event(_event("s", 1))
        assert batches == [], "a held event went out before its release"
        store.release()
        assert batches == [([1], [1])]
        monkeypatch.setattr(inline, "GAP_S", 3600.0)  # from now on, a fast stream
        for seq in (2, 3, 4):
            store.hold()
            store.append_event(_event("s", seq))
            store.release()
        assert batches == [([1], [1])], "a fast stream's block was committed alone"
        await store.barrier()
        assert batches[1][0] == [2, 3, 4]
        assert batches[1][1] == [1, 4]
    finally:
        await store.close()
        reader.close()


async def test_the_memory_store_hands_a_held_event_on_at_release(monkeypatch: Any) -> None:
    """The same in memory: a rare block now, a stream's blocks together on the next pass."""
    store = MemoryStore()
    store.open(asyncio.get_running_loop())
    batches: list[list[int]] = []
    store.on_commit = lambda batch: batches.append([ev.seq for ev in batch])
    for seq in (1, 2, 3):
        store.hold()
        store.append_event(_event("s", seq))
        store.release()
        monkeypatch.setattr(inline, "GAP_S", 3600.0)  # after the first: a fast stream
    assert batches == [[1]]
    await asyncio.sleep(0)
    assert batches == [[1], [2, 3]]


class _Paced(BaseAdapter):
    """Yields a few text deltas, one per step of the turn, and notes, each time the turn asks
    for the next one, how many the subscriber has received."""

    agent_id = "paced-test"
    display_name = "Paced (test)"
    cli_binary = None
    provides_models = False
    provides_usage = False
    handoff = "none"
    #: set by the test: how many text blocks the subscriber has
    received: Callable[[], int] = staticmethod(lambda: 0)
    #: set by the test once the store's writer thread holds nothing
    go: asyncio.Event
    seen: ClassVar[list[int]] = []

    def __init__(self, cwd: str | None = None) -> None:
        pass

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        return DetectedAgent(available=True, version="1")

    async def start(self, session_id: str) -> AgentInfoBlock:
        return self.make_agent_info(name=self.display_name, version="1")

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        pass

    async def interrupt(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def stream(self) -> AsyncIterator[Block]:
        await type(self).go.wait()
        for i in range(4):
            yield TextBlock(id="m", text=f"delta {i} ")
            type(self).seen.append(type(self).received())
        yield TextBlock(id="m", done=True)
        yield SessionEndBlock(reason="completed")


async def test_a_paced_delta_reaches_its_subscriber_before_the_agent_is_asked_for_more(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A turn's delta that the loop's thread commits is stored and pushed within the step of
    the turn that emitted it: when the agent is asked for its next block, the subscriber has
    the last one already (on the loop's next pass, it had one less)."""
    from bridge.hub import Hub
    from bridge.loading.registry import Registry
    from tests.hubkit import Sub, make_config, project_dir, until

    monkeypatch.setattr(inline, "GAP_S", 0.0)  # every small batch may go on the loop's thread
    config = make_config()
    registry = Registry(config)
    registry.register(_Paced, notify=False)
    await registry.wait_detected(5.0)
    store = SqliteStore(tmp_path / "state" / "bridge.sqlite3")
    hub = Hub(config, registry, store)
    store.open(asyncio.get_running_loop())
    await hub.start()
    sub = Sub()
    _Paced.received = staticmethod(lambda: len(sub.blocks("text")))
    _Paced.go = asyncio.Event()
    _Paced.seen = []
    try:
        created, _ = await hub.create("paced-test", project_dir(tmp_path))
        _, begin = await hub.subscribe(created.session, sub, 0)
        begin()
        await asyncio.wait_for(hub.send(created.session, "go", [], "m-1"), 10)
        subs = hub.get(created.session).subs.values()
        await until(lambda: all(x.live for x in subs), what="the replay's end")
        await store.barrier()  # what the turn's start stored is committed: the writer is idle
        _Paced.go.set()
        await until(lambda: bool(sub.blocks("session_end")), what="the turn's end")
        assert _Paced.seen == [1, 2, 3, 4]
    finally:
        await hub.shutdown()
        await store.close()
