"""The hub in process: every transition of its table, replay order, the queue, parking.

No daemon subprocess: a MemoryStore, the demo adapter and ``Term`` (tests/hubkit.py), fake
subscribers, and poll intervals of milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.blocks import SessionEndBlock, TextBlock, UserBlock
from bridge.hub import Hub, HubError, Session, Subscription
from bridge.hub import fanout as hub_fanout
from bridge.hub.state import (
    LIVE,
    PARKED,
    TRANSITIONS,
    TransitionError,
    key_of,
    transition,
)
from bridge.store.memory import MemoryStore
from bridge.store.records import MessageRecord, SessionRecord
from bridge.wire.protocol import EncodedEvent
from tests.hubkit import (
    PreloadedStore,
    Sub,
    Term,
    Transitions,
    World,
    make_config,
    make_hub,
    project_dir,
    subscribed_session,
    until,
)

#: Every transition some test below drives through the hub (checked against the table).
COVERED: set[tuple[Any, ...]] = set()


def covers(*keys: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
    COVERED.update(keys)
    return keys


@pytest.fixture(autouse=True)
def world() -> Iterator[World]:
    Term.world = World()
    Term.release = asyncio.Event()
    yield Term.world
    Term.release.set()


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Transitions:
    spy = Transitions()
    monkeypatch.setattr(hub_fanout, "transition", spy)
    return spy


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    h, _ = await make_hub()
    yield h
    await h.shutdown()


@pytest.fixture
async def quiet_hub() -> AsyncIterator[Hub]:
    """A hub whose terminal sweep never runs: every ownership check a test counts (and gates,
    ``World.check_gate``) is one a send or a turn asked for."""
    h, _ = await make_hub(config=make_config(sweep_interval=3600.0))
    yield h
    await h.shutdown()


async def session(hub: Hub, tmp_path: Path, agent: str = "term") -> tuple[str, Sub]:
    return await subscribed_session(hub, tmp_path, agent)


async def turn(hub: Hub, sid: str, sub: Sub, text: str) -> None:
    ends = len(sub.blocks("session_end"))
    await hub.send(sid, text, [], None)
    await until(lambda: len(sub.blocks("session_end")) > ends, what=f"the end of {text!r}")
    await until(lambda: hub.get(sid).rec.state != "running", what="idle after the turn")


async def after_hello(hub: Hub, tmp_path: Path) -> tuple[str, Sub]:
    """A ``term`` session that ran one turn, ``hello``, and its subscriber."""
    sid, sub = await session(hub, tmp_path)
    await turn(hub, sid, sub, "hello")
    return sid, sub


async def slow_turn(hub: Hub, sid: str, sub: Sub) -> None:
    """Start a turn that runs until interrupted; return once it shows its text."""
    texts = len(sub.blocks("text"))
    await hub.send(sid, "slow", [], None)
    await until(lambda: len(sub.blocks("text")) > texts)


def agent_sid(hub: Hub, sid: str) -> str:
    value = hub.get(sid).rec.agent_session_id
    assert value is not None
    return value


# ---- the table itself -------------------------------------------------------------------------


def test_an_event_the_table_does_not_list_raises_and_changes_nothing() -> None:
    states = ("idle", "running", "parked", "ended")
    writers = ("bridge", "terminal", "none")
    events = {key[3] for key in TRANSITIONS}
    for state, writer, intent, event in itertools.product(
        states, writers, (None, "handoff"), events
    ):
        rec = SessionRecord(id="s", agent="a", cwd="/", state=state, writer=writer, intent=intent)
        allowed = TRANSITIONS.get((state, writer, intent, event))
        if allowed is None:
            with pytest.raises(TransitionError):
                transition(rec, event)  # type: ignore[arg-type]
            assert key_of(rec) == (state, writer, intent)
        else:
            transition(rec, event)  # type: ignore[arg-type]
            assert key_of(rec) == allowed


def test_every_state_but_ended_can_be_closed_and_nothing_leaves_ended() -> None:
    for key in (*LIVE, *PARKED):
        assert TRANSITIONS[(*key, "close")][:2] == ("ended", "none")
    assert not [k for k in TRANSITIONS if k[0] == "ended"]


def test_every_transition_in_the_table_is_driven_by_a_test_below() -> None:
    assert set(TRANSITIONS) == COVERED


# ---- turns, queue, replay -----------------------------------------------------------------------

TURN = covers(("idle", "bridge", None, "turn_start"), ("running", "bridge", None, "turn_end"))


async def test_a_turn_streams_in_order_and_replays_the_same_way(
    hub: Hub, tmp_path: Path, seen: Transitions
) -> None:
    sid, sub = await session(hub, tmp_path, "demo")
    await turn(hub, sid, sub, "echo hello there")
    assert seen.seen == list(TURN)
    seqs = [seq for seq, _ in sub.events()]
    assert seqs == list(range(1, len(seqs) + 1))
    kinds = [b["type"] for b in sub.blocks()]
    assert kinds[:3] == ["agent_info", "user", "system"] and kinds[-2:] == ["session_end", "system"]
    assert "".join(b.get("text", "") for b in sub.blocks("text")) == "You said: hello there"
    assert sub.states() == [("running", "bridge"), ("idle", "bridge")]
    # Each state frame comes right after the event that records its change.
    items = sub.items
    for i, item in enumerate(items):
        if not hasattr(item, "seq"):
            assert items[i - 1].block_json.startswith(b'{"type":"system"')  # type: ignore[union-attr]

    late = Sub()
    _, begin = await hub.subscribe(sid, late, 2)
    begin()
    await until(lambda: hub.get(sid).subs[id(late)].live)
    assert [seq for seq, _ in late.events()] == seqs[2:]
    assert late.states() == []  # the frames of the past are not replayed, the events are
    await turn(hub, sid, sub, "echo again")
    assert [seq for seq, _ in late.events()] == [seq for seq, _ in sub.events()][2:]


async def test_messages_queue_behind_a_turn_and_run_in_order(hub: Hub, tmp_path: Path) -> None:
    sid, sub = await session(hub, tmp_path)
    assert not await hub.send(sid, "slow", [], "m1")
    await until(lambda: sub.blocks("text"))
    assert await hub.send(sid, "second", [], "m2")
    assert await hub.send(sid, "third", [], "m3")
    assert await hub.send(sid, "second", [], "m2")  # a retransmit: same answer, not queued again
    assert hub.session_object(hub.get(sid)).queued == 2
    await hub.interrupt(sid)
    await until(lambda: len(sub.blocks("session_end")) == 3)
    ends = [b["reason"] for b in sub.blocks("session_end")]
    assert ends == ["interrupted", "completed", "completed"]
    assert [t for _, t in Term.world.sent] == ["slow", "second", "third"]


async def test_sends_reach_the_agent_in_arrival_order_while_the_ownership_check_is_slow(
    quiet_hub: Hub, tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = quiet_hub
    """Queue-or-start is decided once, in arrival order: while the ownership check for A (to
    an idle session) is slow, B must not overtake A, and only A starts at once. A starts
    straight from the send; only B, which waited, is read back from the store."""
    sid, sub = await after_hello(hub, tmp_path)
    read_back: list[str] = []
    unspill = hub.store.unspill

    async def spy(record: MessageRecord) -> MessageRecord:
        read_back.append(record.client_msg_id)
        return await unspill(record)

    monkeypatch.setattr(hub.store, "unspill", spy)
    gate = world.hold_check(1)  # the first ownership check (A's) waits for the gate
    first = asyncio.create_task(hub.send(sid, "A", [], "a"))
    await until(lambda: world.checks >= 1, what="A's ownership check")
    second = await hub.send(sid, "B", [], "b")
    again = asyncio.create_task(hub.send(sid, "A", [], "a"))  # A retransmitted meanwhile
    gate.set()
    answers = [await first, second, await again]
    assert answers == [False, True, False]  # exactly A started at once; its retransmit agrees
    await until(lambda: len(sub.blocks("session_end")) == 3, what="the turns of A and B")
    assert [t for _, t in world.sent] == ["hello", "A", "B"]
    assert [b["text"] for b in sub.blocks("user")] == ["hello", "A", "B"]
    assert read_back == ["b"]


async def test_a_close_during_the_check_of_a_send_refuses_it(
    quiet_hub: Hub, tmp_path: Path, world: World
) -> None:
    hub = quiet_hub
    sid, _ = await after_hello(hub, tmp_path)
    gate = world.hold_check(1)
    send = asyncio.create_task(hub.send(sid, "never", [], "n"))
    await until(lambda: world.checks >= 1, what="the ownership check")
    await hub.close(sid)
    gate.set()
    with pytest.raises(HubError) as err:
        await send
    assert err.value.code == "conflict"
    assert [t for _, t in world.sent] == ["hello"]


async def test_a_shutdown_during_the_check_of_a_send_keeps_it_queued(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon stops while a send waits for its answer: stored as queued and answered
    so, it runs after the restart."""
    h, store = await make_hub(config=make_config(sweep_interval=3600.0))
    saved: list[tuple[str, str, bool | None]] = []
    save = store.save_message

    def spy(record: MessageRecord) -> None:
        saved.append((record.client_msg_id, record.status, record.answered_queued))
        save(record)

    monkeypatch.setattr(store, "save_message", spy)
    sid, _ = await after_hello(h, tmp_path)
    gate = world.hold_check(1)
    send = asyncio.create_task(h.send(sid, "after the restart", [], "r"))
    await until(lambda: world.checks >= 1, what="the ownership check")
    stopping = asyncio.create_task(h.shutdown())
    await until(lambda: send.done(), what="the answer")
    gate.set()
    await stopping
    assert await send
    assert saved[-1] == ("r", "queued", True)
    assert [m.client_msg_id for m in h.get(sid).queue] == ["r"]


async def test_a_full_queue_refuses_with_rate_limited(tmp_path: Path) -> None:
    config = make_config()
    config.limits.max_queued_messages = 2
    h, _ = await make_hub(config=config)
    try:
        sid, sub = await session(h, tmp_path)
        await h.send(sid, "slow", [], None)
        await until(lambda: sub.blocks("text"))
        await h.send(sid, "a", [], None)
        await h.send(sid, "b", [], None)
        with pytest.raises(HubError) as err:
            await h.send(sid, "c", [], None)
        assert err.value.code == "rate_limited"
    finally:
        await h.shutdown()


async def test_adapter_calls_a_client_waits_for_are_contained(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adapter that calls sys.exit() in respond_permission, get_usage or list_models
    fails that request; the daemon's loop goes on."""
    from bridge.adapters.demo import DemoAdapter

    def leave(*_: object) -> Any:
        async def exit_now() -> None:
            sys.exit(3)

        return exit_now()

    sid, sub = await session(hub, tmp_path, "demo")
    await hub.send(sid, "please write", [], None)
    await until(lambda: sub.blocks("permission_request"))
    request = sub.blocks("permission_request")[0]["id"]
    monkeypatch.setattr(DemoAdapter, "respond_permission", leave)
    monkeypatch.setattr(DemoAdapter, "get_usage", leave)
    monkeypatch.setattr(DemoAdapter, "list_models", leave)
    with pytest.raises(HubError) as err:
        await hub.permission(sid, request, "allow")
    assert err.value.code == "conflict" and "sys.exit(3)" in str(err.value)
    assert await hub.usage(sid) is None  # nothing reported yet: no usage, no crash
    with pytest.raises(HubError) as err:
        await hub.models("demo")
    assert err.value.code == "agent_unavailable"
    await hub.interrupt(sid)
    await until(lambda: sub.blocks("session_end"))


# ---- close -----------------------------------------------------------------------------------

CLOSE_IDLE = covers(("idle", "bridge", None, "close"))


async def test_close_drops_the_queue_and_ends_the_session(
    hub: Hub, tmp_path: Path, seen: Transitions
) -> None:
    sid, sub = await session(hub, tmp_path)
    await turn(hub, sid, sub, "one")
    seen.seen.clear()
    await hub.close(sid)
    assert seen.seen == list(CLOSE_IDLE)
    await until(lambda: sub.states()[-1:] == [("ended", "none")])
    with pytest.raises(HubError) as err:
        await hub.send(sid, "late", [], None)
    assert err.value.code == "conflict"
    await hub.close(sid)  # closing again is harmless


CLOSE_RUNNING = covers(
    ("running", "bridge", None, "handoff_asked"), ("running", "bridge", "handoff", "close")
)


async def test_close_of_a_turn_that_will_not_stop_ends_it_anyway(
    hub: Hub, tmp_path: Path, seen: Transitions
) -> None:
    sid, sub = await session(hub, tmp_path)
    await turn(hub, sid, sub, "one")
    await hub.send(sid, "stubborn", [], None)
    await until(lambda: sub.blocks("text")[1:])
    seen.seen.clear()
    handoff = asyncio.create_task(hub.handoff(sid))
    await until(lambda: hub.get(sid).rec.intent == "handoff")
    await hub.close(sid)  # the turn ignores its interrupt: the close does not wait forever
    assert seen.seen == list(CLOSE_RUNNING)
    await handoff
    assert key_of(hub.get(sid).rec) == ("ended", "none", "handoff")
    Term.release.set()  # type: ignore[union-attr]
    await until(lambda: hub.get(sid).turn is None)
    assert key_of(hub.get(sid).rec) == ("ended", "none", "handoff")  # the turn's end keeps it


CLOSE_PLAIN_RUNNING = covers(("running", "bridge", None, "close"))


async def test_close_during_a_stubborn_turn(hub: Hub, tmp_path: Path, seen: Transitions) -> None:
    sid, sub = await session(hub, tmp_path)
    await hub.send(sid, "stubborn", [], None)
    await until(lambda: sub.blocks("text"))
    await hub.close(sid)
    assert seen.seen[-1] == CLOSE_PLAIN_RUNNING[0]
    await until(lambda: sub.states()[-1:] == [("ended", "none")])
    Term.release.set()  # type: ignore[union-attr]
    await until(lambda: hub.get(sid).turn is None)
    assert hub.get(sid).rec.state == "ended"


# ---- handoff -----------------------------------------------------------------------------------

HANDOFF_MID_TURN = covers(
    ("running", "bridge", "handoff", "turn_end"),
    ("idle", "bridge", "handoff", "handed_off"),
    ("parked", "none", "handoff", "terminal_took"),
    ("parked", "terminal", None, "reattach"),
)


async def test_handoff_mid_turn_waits_for_the_terminal_then_runs_the_queue(
    hub: Hub, tmp_path: Path, world: World, seen: Transitions
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    agent = agent_sid(hub, sid)
    await slow_turn(hub, sid, sub)
    assert await hub.send(sid, "next", [], None)  # queued behind the turn
    seen.seen.clear()
    command = await hub.handoff(sid)
    assert command.argv == ["term", "--resume", agent]
    assert sub.blocks("session_end")[-1]["reason"] == "handoff"
    await until(lambda: sub.states()[-1:] == [("parked", "none")])
    assert await hub.handoff(sid) == command  # asked again: the same command, nothing stops

    world.owned.add(agent)
    await until(lambda: sub.states()[-1] == ("parked", "terminal"))
    world.say(agent, UserBlock(id="u1", text="typed", source="terminal"))
    world.say(agent, TextBlock(id="t1", text="from the terminal", done=True))
    world.say(agent, SessionEndBlock(reason="completed"))
    await until(lambda: sub.blocks("session_end")[-1].get("reason") == "completed")
    assert sub.blocks("user")[-1] == {
        "type": "user",
        "id": "u1",
        "text": "typed",
        "attachments": [],
        "source": "terminal",
        "steer": False,
    }
    assert [t for _, t in world.sent] == ["hello", "slow"]  # "next" waited
    world.owned.clear()
    await until(lambda: [t for _, t in world.sent][-1:] == ["next"])
    await until(lambda: sub.states()[-1] == ("idle", "bridge") and hub.get(sid).turn is None)
    assert seen.seen[: len(HANDOFF_MID_TURN) + 1] == [
        ("running", "bridge", None, "handoff_asked"),
        *HANDOFF_MID_TURN,
    ]
    assert world.sent[-1] == (agent, "next")


HANDOFF_IDLE = covers(
    ("idle", "bridge", None, "handoff_asked"),
    ("parked", "none", "handoff", "reattach"),
)


async def test_a_handoff_no_terminal_takes_comes_back_after_the_wait(
    tmp_path: Path, seen: Transitions
) -> None:
    h, _ = await make_hub(config=make_config(handoff_wait=0.2))
    try:
        sid, sub = await session(h, tmp_path)
        await turn(h, sid, sub, "hello")
        seen.seen.clear()
        await h.handoff(sid)
        await until(lambda: sub.states()[-1] == ("idle", "bridge"))
        parked = ("idle", "bridge", "handoff", "handed_off")
        assert seen.seen == [HANDOFF_IDLE[0], parked, HANDOFF_IDLE[1]]
    finally:
        await h.shutdown()


CLOSE_PENDING = covers(("parked", "none", "handoff", "close"))


async def test_a_pending_handoff_queues_messages_and_can_be_closed(
    hub: Hub, tmp_path: Path, world: World, seen: Transitions
) -> None:
    sid, _ = await after_hello(hub, tmp_path)
    await hub.handoff(sid)
    assert await hub.send(sid, "meanwhile", [], None)
    await hub.interrupt(sid)  # nothing runs; harmless
    await hub.close(sid)
    assert seen.seen[-1] == CLOSE_PENDING[0]
    assert [t for _, t in world.sent] == ["hello"]


CLOSE_DURING_HANDOFF = covers(("idle", "bridge", "handoff", "close"))


async def test_a_close_while_a_handoff_stops_the_agent_wins(
    hub: Hub, tmp_path: Path, world: World, seen: Transitions
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    world.stop_gate = asyncio.Event()
    handoff = asyncio.create_task(hub.handoff(sid))
    await until(lambda: hub.get(sid).rec.intent == "handoff" and hub.get(sid).adapter is None)
    await hub.close(sid)
    world.stop_gate.set()
    await handoff
    assert seen.seen[-1] == CLOSE_DURING_HANDOFF[0]
    await until(lambda: sub.states()[-1:] == [("ended", "none")])  # not parked after the close


async def test_a_handoff_during_the_check_before_a_turn_keeps_the_message_queued(
    quiet_hub: Hub, tmp_path: Path, world: World
) -> None:
    hub = quiet_hub
    """The queue runner asks whether a terminal owns the session before each turn; a
    handoff that parks the session meanwhile must leave the message queued, not run it."""
    sid, _ = await after_hello(hub, tmp_path)
    gate = world.hold_check(1)  # the queue runner's, the one check before a turn
    send = asyncio.create_task(hub.send(sid, "later", [], None))
    await until(lambda: world.checks == 1)
    await hub.handoff(sid)
    gate.set()
    assert await send  # the answer: it waits
    await until(lambda: not hub.get(sid).running_queue)
    assert key_of(hub.get(sid).rec) == ("parked", "none", "handoff")
    assert [t for _, t in world.sent] == ["hello"]
    assert [m.text for m in hub.get(sid).queue] == ["later"]


HANDOFF_STUBBORN = covers(("running", "bridge", "handoff", "handed_off"))


@pytest.mark.timeout(60)
async def test_a_handoff_parks_even_when_the_turn_will_not_stop(
    hub: Hub, tmp_path: Path, seen: Transitions
) -> None:
    sid, sub = await session(hub, tmp_path)
    await hub.send(sid, "stubborn", [], None)
    await until(lambda: sub.blocks("text"))
    await hub.handoff(sid)  # waits stop_grace + 5 s for the turn, then parks
    assert seen.seen[-1] == HANDOFF_STUBBORN[0]
    Term.release.set()  # type: ignore[union-attr]
    await until(lambda: hub.get(sid).turn is None)
    assert key_of(hub.get(sid).rec)[:2] == ("parked", "none")  # the turn's end leaves it parked


# ---- terminals taking sessions on their own ------------------------------------------------

PARK = covers(("idle", "bridge", None, "park"), ("parked", "terminal", None, "close"))


async def test_a_message_to_a_session_a_terminal_owns_parks_it(
    hub: Hub, tmp_path: Path, world: World, seen: Transitions
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    world.owned.add(agent_sid(hub, sid))
    # The sweep may park it first; either way the message waits for the terminal.
    assert await hub.send(sid, "wait for me", [], None)
    await until(lambda: sub.states()[-1:] == [("parked", "terminal")])
    await hub.close(sid)
    assert seen.seen[-2:] == list(PARK)
    assert [t for _, t in world.sent] == ["hello"]


async def test_the_sweep_parks_an_idle_session_a_terminal_resumed(
    hub: Hub, tmp_path: Path, world: World
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    agent = agent_sid(hub, sid)
    world.owned.add(agent)
    await until(lambda: sub.states()[-1:] == [("parked", "terminal")])
    world.say(agent, UserBlock(id="u", text="unasked", source="bridge"))
    await until(lambda: sub.blocks("user")[-1]["text"] == "unasked")
    assert sub.blocks("user")[-1]["source"] == "terminal"
    world.owned.clear()
    await until(lambda: sub.states()[-1:] == [("idle", "bridge")])
    # The mirror closed the terminal's open turn when it stopped.
    assert sub.blocks("session_end")[-1]["reason"] == "interrupted"


async def test_a_terminal_taking_a_session_mid_turn_stops_the_bridges_turn(
    hub: Hub, tmp_path: Path, world: World
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    await slow_turn(hub, sid, sub)
    world.owned.add(agent_sid(hub, sid))
    await until(lambda: sub.blocks("session_end")[1:])
    warn = sub.notices("terminal_took_over")
    assert len(warn) == 1 and "stopped" in warn[0]["text"]
    assert sub.blocks("session_end")[-1]["reason"] == "handoff"
    await until(lambda: sub.states()[-1:] == [("parked", "terminal")])


async def test_a_directory_level_signal_warns_once_and_lets_the_turn_run(
    hub: Hub, tmp_path: Path, world: World
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    world.cwd_level = True
    await slow_turn(hub, sid, sub)
    world.owned.add("another-session")
    await until(lambda: sub.notices("terminal_took_over"))
    for _ in range(10):  # more sweeps: said once, and the turn goes on
        await asyncio.sleep(hub.config.hub.sweep_interval)
    warnings = sub.notices("terminal_took_over")
    assert len(warnings) == 1 and "stopped" not in warnings[0]["text"]
    assert len(sub.blocks("session_end")) == 1
    await hub.interrupt(sid)
    await until(lambda: len(sub.blocks("session_end")) == 2)
    assert sub.blocks("session_end")[-1]["reason"] == "interrupted"
    await until(lambda: sub.states()[-1:] == [("parked", "terminal")])


async def test_reattach_follows_the_lineage_and_never_takes_an_owned_head(
    hub: Hub, tmp_path: Path, world: World
) -> None:
    sid, sub = await after_hello(hub, tmp_path)
    first = agent_sid(hub, sid)
    world.owned.add(first)
    assert await hub.send(sid, "queued", [], None)
    world.owned.add("sid-next")
    world.head = "sid-next"
    world.owned.discard(first)
    await until(lambda: sub.notices("lineage"))
    states = len(sub.states())
    for _ in range(10):
        await asyncio.sleep(hub.config.hub.park_poll)
    assert len(sub.states()) == states  # still parked: the head is owned too; no flapping
    assert [t for _, t in world.sent] == ["hello"]
    world.owned.clear()
    await until(lambda: world.sent[-1:] == [("sid-next", "queued")])


async def test_attaching_a_session_a_terminal_owns_parks_it(
    hub: Hub, tmp_path: Path, world: World
) -> None:
    world.owned.add("term-1")
    obj = await hub.attach("term", "term-1", project_dir(tmp_path))
    assert (obj.state, obj.writer, obj.external) == ("parked", "terminal", True)
    assert (await hub.attach("term", "term-1", project_dir(tmp_path))).session == obj.session


# ---- recovery ------------------------------------------------------------------------------------

RECOVERY = covers(("running", "bridge", None, "turn_end"))


async def test_a_restart_closes_the_turn_it_died_in_and_runs_the_queue(
    tmp_path: Path, world: World, seen: Transitions
) -> None:
    rec = SessionRecord(
        id="s_dead", agent="term", cwd=project_dir(tmp_path), state="running", agent_session_id="a1"
    )
    queued = MessageRecord(session="s_dead", client_msg_id="m9", text="after", status="queued")
    h, store = await make_hub(PreloadedStore([rec], [queued]))
    try:
        await until(lambda: world.sent == [("a1", "after")])
        await until(lambda: h.get("s_dead").rec.state == "idle")
        blocks = [e.block_json for e in await store.read_events("s_dead", 0, 100)]
        assert b'"daemon_restarted"' in blocks[0]
        assert seen.seen[:2] == [RECOVERY[0], ("idle", "bridge", None, "turn_start")]
    finally:
        await h.shutdown()


async def test_a_handoff_recorded_before_a_crash_is_carried_out_after_restart(
    tmp_path: Path, world: World, seen: Transitions
) -> None:
    rec = SessionRecord(
        id="s_h", agent="term", cwd=project_dir(tmp_path), agent_session_id="a2", intent="handoff"
    )
    h, _ = await make_hub(PreloadedStore([rec], []))
    try:
        assert key_of(h.get("s_h").rec) == ("parked", "none", "handoff")
        world.owned.add("a2")
        await until(lambda: key_of(h.get("s_h").rec) == ("parked", "terminal", None))
        assert seen.seen == [
            ("idle", "bridge", "handoff", "handed_off"),
            ("parked", "none", "handoff", "terminal_took"),
        ]
    finally:
        await h.shutdown()


async def test_a_memory_store_hub_starts_empty() -> None:
    h, store = await make_hub(MemoryStore())
    assert h.sessions == {} and isinstance(store, MemoryStore)
    await h.shutdown()


def test_a_replay_whose_backlog_overflows_is_cut_off_not_reordered() -> None:
    conn = Sub()
    sub = Subscription(conn=conn, session=Session(rec=SessionRecord(id="s", agent="a", cwd="/")))
    live = [EncodedEvent("s", seq, "t", b"{}") for seq in range(100, 104)]
    for ev in live[:3]:
        sub.offer(ev, ev.seq, backlog_limit=3)
    assert not conn.cut and conn.items == []  # held back while the replay runs
    sub.offer(live[3], 103, backlog_limit=3)
    # Pushed now it would land amid replayed events: the client is told it is too far behind.
    assert conn.cut and conn.items == []
