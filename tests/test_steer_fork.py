"""Steering a running turn (``session.send`` ``steer``) and forking a session
(``session.fork``), in process: the hub with the demo agent (steers, forks by replay) and
``Term`` (cannot steer), a MemoryStore, fake subscribers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bridge.adapters import demo_terminal as term
from bridge.blocks import Block, SessionEndBlock, TextBlock, UserBlock
from bridge.hub import Hub, HubError
from bridge.hub.fork import ForkCut, context_message
from bridge.wire.agent_types import split_fork_context
from tests.hubkit import Sub, Term, World, make_hub, subscribed_session, until


@pytest.fixture(autouse=True)
def world() -> Iterator[World]:
    Term.world = World()
    Term.release = asyncio.Event()
    yield Term.world
    Term.release.set()


@pytest.fixture
async def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    h, _ = await make_hub()
    yield h
    await h.shutdown()


async def turn(hub: Hub, sid: str, sub: Sub, text: str) -> None:
    ends = len(sub.blocks("session_end"))
    await hub.send(sid, text, [], None)
    await until(lambda: len(sub.blocks("session_end")) > ends, what=f"the end of {text!r}")
    await until(lambda: hub.get(sid).rec.state != "running", what="idle after the turn")


def answer(sub: Sub) -> str:
    return "".join(b.get("text", "") for b in sub.blocks("text"))


# ---- steer ---------------------------------------------------------------------------------------


async def test_a_steered_message_enters_the_running_turn_once(hub: Hub, tmp_path: Path) -> None:
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    assert await hub.deliver(sid, "slow write it", [], "m1") == (False, False)
    await until(lambda: sub.blocks("thinking"), what="the turn's thinking")
    assert await hub.deliver(sid, "use French", [], "m2", steer=True) == (False, True)
    # A retransmit (a reconnect) steers once: same answer, nothing recorded again.
    assert await hub.deliver(sid, "use French", [], "m2", steer=True) == (False, True)
    await until(lambda: sub.blocks("permission_request"), what="the write's question")
    await hub.permission(sid, sub.blocks("permission_request")[0]["id"], "allow")
    await until(lambda: sub.blocks("session_end"), what="the turn's end")
    users = sub.blocks("user")
    assert [(u["text"], u["steer"]) for u in users] == [
        ("slow write it", False),
        ("use French", True),
    ]
    events = sub.events()
    steer_seq = next(seq for seq, b in events if b["type"] == "user" and b["steer"])
    end_seq = next(seq for seq, b in events if b["type"] == "session_end")
    assert steer_seq < end_seq, "recorded inside the turn it entered"
    assert len(sub.blocks("session_end")) == 1, "no new turn"
    assert "Noted: use French" in answer(sub)
    assert "(and then: use French)" in answer(sub)
    assert hub.session_object(hub.get(sid)).queued == 0


async def test_steer_with_no_turn_running_starts_one(hub: Hub, tmp_path: Path) -> None:
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    assert await hub.deliver(sid, "echo hi", [], "m1", steer=True) == (False, False)
    await until(lambda: sub.blocks("session_end"))
    assert [u["steer"] for u in sub.blocks("user")] == [False]


async def test_an_agent_that_cannot_take_input_mid_turn_queues_it(hub: Hub, tmp_path: Path) -> None:
    sid, sub = await subscribed_session(hub, tmp_path, "term")
    assert not await hub.send(sid, "slow", [], "m1")
    await until(lambda: sub.blocks("text"))
    assert await hub.deliver(sid, "after", [], "m2", steer=True) == (True, False)
    assert await hub.deliver(sid, "after", [], "m2", steer=True) == (True, False)
    await hub.interrupt(sid)
    await until(lambda: len(sub.blocks("session_end")) == 2)
    assert [t for _, t in Term.world.sent] == ["slow", "after"]
    assert [u["steer"] for u in sub.blocks("user")] == [False, False]


async def test_a_steer_the_agent_refuses_waits_for_the_next_turn(hub: Hub, tmp_path: Path) -> None:
    """The demo takes nothing once its answer began: the message queues, nothing is lost."""
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    await hub.send(sid, "slow answer slowly with many words to stream", [], "m1")
    await until(lambda: sub.blocks("permission_request"))
    await hub.permission(sid, sub.blocks("permission_request")[0]["id"], "deny")
    await until(lambda: any(b["id"].startswith("msg-") for b in sub.blocks("text")))
    assert await hub.deliver(sid, "echo late", [], "m2", steer=True) == (True, False)
    await until(lambda: len(sub.blocks("session_end")) == 2)
    assert [(u["text"], u["steer"]) for u in sub.blocks("user")][1] == ("echo late", False)


# ---- fork ----------------------------------------------------------------------------------------


async def test_a_fork_at_the_first_of_two_turns_carries_that_turn_only(
    hub: Hub, tmp_path: Path
) -> None:
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    await turn(hub, sid, sub, "echo apples")
    first_end = next(seq for seq, b in sub.events() if b["type"] == "session_end")
    first_user = next(seq for seq, b in sub.events() if b["type"] == "user")
    await turn(hub, sid, sub, "echo bananas")
    parent_before = [b for _, b in sub.events()]

    fork = await hub.fork(sid, first_user)  # inside the first turn: the fork keeps it whole
    assert fork.forked_from is not None
    assert (fork.forked_from.session, fork.forked_from.seq) == (sid, first_end)
    assert fork.cwd == hub.get(sid).rec.cwd
    fsub = Sub()
    _, begin = await hub.subscribe(fork.session, fsub, 0)
    begin()
    await until(lambda: fsub.blocks("agent_info") and len(fsub.events()) >= first_end + 2)
    blocks = fsub.blocks()
    assert blocks[0]["type"] == "system" and blocks[0]["code"] == "forked"
    assert blocks[0]["data"] == {"session": sid, "seq": first_end, "fork": "replay", "turns": 1}
    assert blocks[1 : first_end + 1] == parent_before[:first_end]
    assert [u["text"] for u in fsub.blocks("user")] == ["echo apples"]

    await turn(hub, fork.session, fsub, "echo cherries")
    got = [
        r["text"]
        for r in term.read_records(term.sessions_dir(), hub.get(fork.session).rec.agent_session_id)
        if r.get("type") == "user"
    ]
    history, message = split_fork_context(got[-1])
    assert message == "echo cherries"
    assert history is not None and "apples" in history and "bananas" not in history
    assert fsub.blocks("user")[-1]["text"] == "echo cherries", "the block shows the message alone"
    assert "I was given the earlier conversation" in answer(fsub)
    # Only the first turn carries the context.
    await turn(hub, fork.session, fsub, "echo dates")
    records = term.read_records(term.sessions_dir(), hub.get(fork.session).rec.agent_session_id)
    assert split_fork_context(records[-2]["text"]) == (None, "echo dates")

    # The parent is unchanged, and goes on.
    assert hub.get(sid).rec.fork is None


async def test_a_fork_inside_the_running_turn_forks_at_its_start(hub: Hub, tmp_path: Path) -> None:
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    await turn(hub, sid, sub, "echo one")
    await hub.send(sid, "slow two", [], None)
    await until(lambda: sub.blocks("thinking"))
    start = next(seq for seq, b in sub.events() if b["type"] == "user" and b["text"] == "slow two")
    fork = await hub.fork(sid)  # the last event, inside the running turn
    assert fork.forked_from is not None and fork.forked_from.seq == start - 1
    await hub.interrupt(sid)


async def test_fork_errors(hub: Hub, tmp_path: Path) -> None:
    sid, _sub = await subscribed_session(hub, tmp_path, "demo")
    last = hub.get(sid).next_seq - 1
    with pytest.raises(HubError) as err:
        await hub.fork(sid, last + 1)
    assert err.value.code == "bad_request"
    with pytest.raises(HubError) as err:
        await hub.fork(sid, -1)
    assert err.value.code == "bad_request"
    with pytest.raises(HubError) as err:
        await hub.fork("s_nope")
    assert err.value.code == "not_found"
    # Before any turn: an empty fork, nothing to give the agent.
    fork = await hub.fork(sid, 0)
    assert fork.forked_from is not None and fork.forked_from.seq == 0
    rec = hub.get(fork.session).rec
    assert rec.fork is not None and rec.fork.replay_seq is None


# ---- the pieces ----------------------------------------------------------------------------------


def _turns(*texts: str) -> list[tuple[int, Block]]:
    out: list[Block] = []
    for text in texts:
        out += [
            UserBlock(id=text, text=text),
            TextBlock(id=f"a-{text}", text=f"re {text}", done=True),
            SessionEndBlock(),
        ]
    return list(enumerate(out, start=1))


@pytest.mark.parametrize(
    ("at", "running", "seq", "turns"),
    [
        (0, False, 0, 0),
        (1, False, 3, 1),  # a user block: its turn, whole
        (3, False, 3, 1),
        (4, False, 6, 2),
        (6, False, 6, 2),
        (5, True, 3, 1),  # inside the running turn: at its start
        (6, True, 3, 1),
    ],
)
def test_a_fork_cut_falls_on_a_turns_boundary(at: int, running: bool, seq: int, turns: int) -> None:
    events = _turns("a", "b")
    if running:
        events = events[:-1]  # the second turn has not ended
    cut = ForkCut(at_seq=at)
    for s, block in events:
        cut.feed(s, block)
        if cut.done:
            break
    cut.finish()
    assert (cut.seq, cut.turns) == (seq, turns)


def test_slash_commands_and_steers_do_not_start_turns() -> None:
    blocks: list[Block] = [
        UserBlock(id="c", text="/status"),
        UserBlock(id="u", text="go"),
        UserBlock(id="s", text="also this", steer=True),
        SessionEndBlock(),
    ]
    cut = ForkCut(at_seq=1)
    for s, block in enumerate(blocks, start=1):
        cut.feed(s, block)
    cut.finish()
    assert (cut.seq, cut.turns) == (1, 0)
    text = context_message([b for b in blocks if not isinstance(b, SessionEndBlock)], "next")
    history, message = split_fork_context(text)
    assert message == "next"
    assert history is not None and "User (added during the turn): also this" in history


async def test_a_retransmit_after_a_restart_gets_the_steered_answer(tmp_path: Path) -> None:
    """The answer is stored with the message (status ``steered``): a daemon restarted on its
    store answers a retransmit the same, and nothing is sent again."""
    from bridge.store.records import MessageRecord, SessionRecord
    from tests.hubkit import PreloadedStore

    rec = SessionRecord(id="s_steered", agent="demo", cwd=str(tmp_path))
    steered = MessageRecord(
        session=rec.id, client_msg_id="m2", text="", status="steered", answered_queued=False
    )
    hub, _ = await make_hub(PreloadedStore([rec], [steered]))
    try:
        assert await hub.deliver(rec.id, "use French", [], "m2", steer=True) == (False, True)
        assert not hub.get(rec.id).queue and hub.get(rec.id).rec.state == "idle"
    finally:
        await hub.shutdown()


def test_the_contract_checks_cap_fork_and_capabilities_report_it() -> None:
    from typing import Any

    from bridge.adapters.base import BaseAdapter
    from bridge.adapters.claude import ClaudeAdapter
    from bridge.adapters.codex import CodexAdapter
    from bridge.adapters.demo import DemoAdapter

    def adapter(**attrs: Any) -> type:
        body: dict[str, Any] = {
            "agent_id": "x",
            "display_name": "X",
            "provides_models": False,
            "provides_usage": False,
            "__init__": lambda self, cwd=None: None,
            "start": _coroutine,
            "send": _coroutine,
            "stop": _coroutine,
            "stream": _stream,
            **attrs,
        }
        return type("X", (BaseAdapter,), body)

    with pytest.raises(TypeError, match="takes no `fork` keyword"):
        adapter(cap_fork="native")
    with pytest.raises(TypeError, match="`cap_fork` must be"):
        adapter(cap_fork="sometimes")
    assert adapter(cap_fork=False).capabilities()["fork"] is False
    assert DemoAdapter.capabilities()["fork"] == "replay"
    assert DemoAdapter.capabilities()["input_during_turn"] is True
    for native in (ClaudeAdapter, CodexAdapter):
        assert native.capabilities()["fork"] == "native"
        assert native.capabilities()["input_during_turn"] is True


async def _coroutine(self: object, *args: object) -> None:
    return None


async def _stream(self: object) -> AsyncIterator[Block]:
    yield SessionEndBlock()


async def test_a_native_fork_hands_the_agent_its_fork_point_or_is_a_conflict(
    hub: Hub, tmp_path: Path
) -> None:
    from typing import Any

    from bridge.adapters.demo import DemoAdapter
    from bridge.wire.agent_types import ForkPoint

    class NativeDemo(DemoAdapter):
        agent_id = "nativedemo"
        cap_fork = "native"

        def __init__(
            self,
            cwd: str | None = None,
            resume_session_id: str | None = None,
            on_session_id: Any = None,
            mode: str | None = None,
            fork: ForkPoint | None = None,
        ) -> None:
            super().__init__(
                cwd=cwd, mode=mode, resume_session_id=resume_session_id, on_session_id=on_session_id
            )
            self.fork_point = fork

    hub.registry.register(NativeDemo, notify=False)
    await hub.registry.wait_detected(5.0)
    sid, sub = await subscribed_session(hub, tmp_path, "nativedemo")
    await turn(hub, sid, sub, "echo one")
    parent = hub.get(sid).rec
    own, parent.agent_session_id = parent.agent_session_id, None
    with pytest.raises(HubError) as err:
        await hub.fork(sid)
    assert err.value.code == "conflict"
    parent.agent_session_id = own
    fork = await hub.fork(sid)
    adapter = hub.get(fork.session).adapter
    assert isinstance(adapter, NativeDemo)
    assert adapter.fork_point == ForkPoint(agent_session_id=str(own), turns=1)
    rec = hub.get(fork.session).rec
    assert rec.fork is not None and rec.fork.replay_seq is None  # no replay: the agent forks
