"""Lone surrogates in an adapter's text become U+FFFD before numbering: no seq gap.

A drop-in adapter (loaded by a real daemon) streams text with a lone surrogate, a proper
surrogate pair, and a surrogate in a tool call's input key, as a parser's ``json.loads``
hands them over. The client gets every seq once, in order, with U+FFFD in place, and the
turn ends normally; after a restart the history is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.loaderkit import QUEUE_ADAPTER, drop_in
from tests.wsclient import Client

ADAPTER = (
    QUEUE_ADAPTER
    + """
import json
from bridge.blocks import ToolCallBlock


class Halves(QueueAdapter):
    agent_id = "halves"
    display_name = "Halves"

    async def stream(self):
        await self.q.get()
        yield TextBlock(id="m1", text="before ")
        yield TextBlock(id="m1", text=json.loads('"cut \\\\ud83d here, whole \\\\ud83d\\\\ude00"'))
        yield ToolCallBlock(id="t1", name="Bash", input={json.loads('"k\\\\udc80"'): "v"})
        yield TextBlock(id="m1", text=" after", done=True)
        yield SessionEndBlock(reason="completed")
"""
)


async def _turn(d: DaemonProcess, project: Path) -> tuple[str, list[dict[str, Any]]]:
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="halves", cwd=str(project)))["session"][
        "session"
    ]
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="go")
    frames = await c.turn(session, timeout=30)
    await c.close()
    return session, frames


async def test_lone_surrogates_are_replaced_and_take_no_seq_gap(
    daemon_factory: Any, project: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    drop_in(home, "halves.py", ADAPTER)
    d: DaemonProcess = daemon_factory(home=home, config='[server]\nunix_socket = "off"\n')
    d.start()
    session, frames = await _turn(d, project)
    texts = [f["block"].get("text") for f in frames if f["block"]["type"] == "text"]
    assert "cut \ufffd here, whole \U0001f600" in texts, texts
    tools = [f["block"] for f in frames if f["block"]["type"] == "tool_call"]
    assert tools and tools[0]["input"] == {"k\ufffd": "v"}
    assert frames[-1]["block"]["reason"] == "completed"

    c = await Client.open(d.url, d.token)
    last = int((await c.request("session.subscribe", session=session))["last_seq"])
    history: list[dict[str, Any]] = []
    while len(history) < last:
        frame = await c.next_push(timeout=30)
        if frame["t"] == "event":
            history.append(frame)
    await c.close()
    assert [f["seq"] for f in history] == list(range(1, last + 1)), "a gap in the numbering"
    tail = {f["seq"]: f for f in frames}
    assert all(tail[f["seq"]] == f for f in history if f["seq"] in tail)


async def test_a_sent_text_with_a_lone_surrogate_is_stored_and_its_sender_always_answered(
    tmp_path: Path,
) -> None:
    """No client can send a lone surrogate (its JSON is refused: bad_request), but the hub does
    not rely on it: ``hub.send`` stores such a text with U+FFFD in place, and a message the
    store cannot save (a client_msg_id UTF-8 cannot carry) is answered ``internal`` rather
    than leaving its sender waiting for ever (the relay's work queue waits for that answer)."""
    import asyncio

    import pytest

    from bridge.hub import HubError
    from bridge.store.store import SqliteStore
    from tests.hubkit import make_hub, subscribed_session, until

    store = SqliteStore(tmp_path / "state" / "bridge.sqlite3")
    hub, _ = await make_hub(store)  # type: ignore[arg-type]
    try:
        session, sub = await subscribed_session(hub, tmp_path, "demo")

        async def turn(text: str, msg_id: str, ends: int) -> None:
            await asyncio.wait_for(hub.send(session, text, [], msg_id), 10)
            await until(lambda: len(sub.blocks("session_end")) >= ends, what="the turn's end")

        await turn("echo cut \ud83d here", "m-1", 1)
        assert [b["text"] for b in sub.blocks("user")] == ["echo cut \ufffd here"]
        with pytest.raises(HubError) as refused:
            await asyncio.wait_for(hub.send(session, "echo x", [], "m-\udc80"), 10)
        assert refused.value.code == "internal"
        await turn("echo after", "m-2", 2)  # the session goes on
    finally:
        await hub.shutdown()
        await store.close()


async def test_a_queued_message_the_store_cannot_save_is_answered_and_not_kept(
    tmp_path: Path,
) -> None:
    """The same message while a turn runs (it would wait in the queue): answered ``internal``,
    and nothing of it stays queued; the next message queues as usual."""
    import asyncio

    import pytest

    from bridge.hub import HubError
    from bridge.store.store import SqliteStore
    from tests.hubkit import make_hub, subscribed_session, until

    store = SqliteStore(tmp_path / "state" / "bridge.sqlite3")
    hub, _ = await make_hub(store)  # type: ignore[arg-type]
    try:
        session, sub = await subscribed_session(hub, tmp_path, "demo")
        # the demo's turn waits at its permission request: it runs while the next ones arrive
        assert await asyncio.wait_for(hub.send(session, "one", [], "m-1"), 10) is False
        await until(lambda: bool(sub.blocks("permission_request")), what="the permission")
        with pytest.raises(HubError) as refused:
            await asyncio.wait_for(hub.send(session, "echo x", [], "m-\udc80"), 10)
        assert refused.value.code == "internal"
        assert [m.client_msg_id for m in hub.get(session).queue] == []
        assert await asyncio.wait_for(hub.send(session, "echo two", [], "m-2"), 10) is True
    finally:
        await hub.shutdown()
        await store.close()
