"""An in-process hub for tests: MemoryStore, a registry, fake subscribers, and ``Term``, an
adapter whose "terminal" (ownership, transcript, lineage head) the test drives in memory.

Everything runs on the test's event loop with the hub's poll intervals shortened, so a turn,
a park or a reattach takes milliseconds instead of a daemon subprocess and fixed sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from bridge.adapters.base import ResumeCommand
from bridge.adapters.demo import DemoAdapter
from bridge.blocks import Block, SessionEndBlock, TextBlock
from bridge.config import Config, HubConfig
from bridge.hub import Hub
from bridge.hub import state as hub_state
from bridge.loading.registry import Registry
from bridge.store.memory import MemoryStore
from bridge.store.records import MessageRecord, SessionRecord
from bridge.wire.protocol import EncodedEvent, EncodedFrame, Outgoing, StateFrame
from tests.fixtures.handoff.fake_term_adapter import TerminalAgent


@dataclass
class World:
    """The terminal side of ``Term``: who owns what, and what each transcript says."""

    owned: set[str] = field(default_factory=set)
    #: Like CLIs without a lock: any owned session makes every id of the directory "owned".
    cwd_level: bool = False
    head: str | None = None
    mirrors: dict[str, list[asyncio.Queue[Block | None]]] = field(default_factory=dict)
    #: (agent session id, text) of every message the bridge's side was sent.
    sent: list[tuple[str, str]] = field(default_factory=list)
    #: stop() waits for this when set (a process slow to stop).
    stop_gate: asyncio.Event | None = None
    #: Ownership checks so far; the check numbered ``check_gate[0]`` waits for ``check_gate[1]``.
    checks: int = 0
    check_gate: tuple[int, threading.Event] | None = None

    def hold_check(self, number: int = 1) -> threading.Event:
        """Counts ownership checks from zero again; check ``number`` waits until the returned
        event is set."""
        gate = threading.Event()
        self.checks = 0
        self.check_gate = (number, gate)
        return gate

    def say(self, sid: str, *blocks: Block) -> None:
        """The terminal writes to its transcript; every running mirror reads it."""
        for q in self.mirrors.get(sid, []):
            for block in blocks:
                q.put_nowait(block)


class QueueMirror:
    def __init__(self, q: asyncio.Queue[Block | None]) -> None:
        self.q = q

    def __aiter__(self) -> QueueMirror:
        return self

    async def __anext__(self) -> Block:
        item = await self.q.get()
        if item is None:
            raise StopAsyncIteration
        return item

    def close_at_eof(self) -> None:
        self.q.put_nowait(None)


class Term(TerminalAgent):
    """``slow``: waits until interrupted. ``stubborn``: ignores interrupts and cancellation
    until ``Term.release`` is set. Anything else: one text block, then the end."""

    agent_id = "term"
    display_name = "Term"
    world: ClassVar[World] = World()
    release: ClassVar[asyncio.Event | None] = None

    def record(self, text: str) -> None:
        self.world.sent.append((self.sid, text))

    async def stream(self) -> AsyncIterator[Block]:
        if self.text == "slow":
            yield TextBlock(id="slow", text="working", done=True)
            await self.interrupted.wait()
            yield SessionEndBlock(reason="interrupted", agent_session_id=self.sid)
            return
        if self.text == "stubborn":
            yield TextBlock(id="stubborn", text="working", done=True)
            assert Term.release is not None
            while not Term.release.is_set():
                try:
                    await Term.release.wait()
                except asyncio.CancelledError:
                    continue
        yield TextBlock(id=uuid.uuid4().hex, text=f"said: {self.text}", done=True)
        yield SessionEndBlock(reason="completed", agent_session_id=self.sid)

    async def stop(self) -> None:
        await super().stop()
        if self.world.stop_gate is not None:
            await self.world.stop_gate.wait()

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        cls.world.checks += 1
        gate = cls.world.check_gate
        if gate is not None and gate[0] == cls.world.checks:
            gate[1].wait(5)
        if cls.world.cwd_level:
            return bool(cls.world.owned)
        return sid in cls.world.owned

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        q: asyncio.Queue[Block | None] = asyncio.Queue()
        cls.world.mirrors.setdefault(sid, []).append(q)
        return QueueMirror(q)

    @classmethod
    def latest_sid_for_cwd(cls, cwd: str) -> str | None:
        return cls.world.head

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=["term", "--resume", sid], cwd=cwd or "/")


class Sub:
    """A subscriber that reads everything at once and keeps it."""

    def __init__(self) -> None:
        self.items: list[Outgoing] = []
        self.cut = False
        self.behind = False

    def push(self, item: Outgoing) -> None:
        self.items.append(item)

    def push_many(self, items: list[Outgoing]) -> None:
        self.items.extend(items)

    async def put(self, item: Outgoing) -> None:
        self.items.append(item)

    async def catch_up(self, timeout: float) -> None:
        pass

    def cut_off(self) -> None:
        self.cut = True

    @property
    def closed(self) -> bool:
        return self.cut

    def events(self) -> list[tuple[int, dict[str, Any]]]:
        return [
            (i.seq, msgspec.json.decode(i.block_json))
            for i in self.items
            if isinstance(i, EncodedEvent)
        ]

    def blocks(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [b for _, b in self.events() if kind is None or b["type"] == kind]

    def notices(self, code: str) -> list[dict[str, Any]]:
        """The ``system`` blocks with that code."""
        return [b for b in self.blocks("system") if b["code"] == code]

    def states(self) -> list[tuple[str, str]]:
        return [
            (i.frame.state, i.frame.writer)
            for i in self.items
            if isinstance(i, EncodedFrame) and isinstance(i.frame, StateFrame)
        ]


class PreloadedStore(MemoryStore):
    """A MemoryStore that starts with records, as a daemon restarting on its database."""

    def __init__(self, sessions: list[SessionRecord], messages: list[MessageRecord]) -> None:
        super().__init__()
        self._preload = (sessions, messages)

    def load(self) -> tuple[list[SessionRecord], list[MessageRecord], dict[str, int]]:
        sessions, messages = self._preload
        for rec in sessions:
            self.save_session(rec)
        return sessions, messages, {}


FAST = HubConfig(
    park_poll=0.01, sweep_interval=0.02, handoff_wait=30.0, mirror_drain=1.0, external_cache=0.05
)


def make_config(**hub: float) -> Config:
    config = Config(hub=msgspec.structs.replace(FAST, **hub))
    config.adapters.stop_grace = 0.05
    return config


class Transitions:
    """Records every (state, writer, intent, event) the hub applies."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def __call__(self, rec: SessionRecord, event: hub_state.Event) -> hub_state.Key:
        key = (*hub_state.key_of(rec), event)
        old = hub_state.transition(rec, event)
        self.seen.append(key)
        return old


async def make_hub(
    store: MemoryStore | None = None, config: Config | None = None
) -> tuple[Hub, MemoryStore]:
    config = config or make_config()
    store = store or MemoryStore()
    registry = Registry(config)
    registry.register(DemoAdapter, notify=False)
    registry.register(Term, notify=False)
    await registry.wait_detected(5.0)
    hub = Hub(config, registry, store)
    store.open(asyncio.get_running_loop())
    await hub.start()
    return hub, store


async def until(pred: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``pred`` every few milliseconds until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise TimeoutError(f"never: {what or pred}")
        await asyncio.sleep(0.005)


async def subscribed_session(hub: Hub, tmp_path: Path, agent: str) -> tuple[str, Sub]:
    """A new ``agent`` session in a project under ``tmp_path``, and a subscriber from seq 0."""
    created, _ = await hub.create(agent, project_dir(tmp_path))
    sub = Sub()
    _, begin = await hub.subscribe(created.session, sub, 0)
    begin()
    return created.session, sub


def project_dir(tmp_path: Path) -> str:
    path = tmp_path / "project"
    path.mkdir(exist_ok=True)
    return str(path)
