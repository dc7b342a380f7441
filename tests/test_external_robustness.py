"""A drop-in adapter that raises or hangs in any coroutine cannot take the daemon down or wedge
a session: the turn ends with an ``error`` block (carrying the adapter's own words) and one
``session_end``, the configured timeouts apply, and the next turn starts a fresh adapter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.loaderkit import QUEUE_ADAPTER, drop_in, new_session, say
from tests.wsclient import Client, RequestFailed, blocks, text_of

BAD_ACTORS = (
    QUEUE_ADAPTER
    + """
import sys

from bridge.blocks import ToolCallBlock

FOREVER = 3600


class Base(QueueAdapter, abstract=True):
    display_name = "Bad actor"

    async def stream(self):
        text = await self.q.get()
        yield TextBlock(id="m1", text="ok: " + text, done=True)
        yield SessionEndBlock(reason="completed")


class InitRaises(Base):
    agent_id = "init_raises"

    def __init__(self):
        raise OSError("init exploded: no config file")


class StartRaises(Base):
    agent_id = "start_raises"

    async def start(self, session_id):
        raise RuntimeError("start exploded: missing API key")


class StartExits(Base):
    agent_id = "start_exits"

    async def start(self, session_id):
        sys.exit("start called sys.exit")


class StartHangs(Base):
    agent_id = "start_hangs"

    async def start(self, session_id):
        await asyncio.sleep(FOREVER)


class SendRaises(Base):
    agent_id = "send_raises"

    async def send(self, text, attachments=None):
        if text == "boom":
            raise ValueError("send exploded: the pipe is gone")
        await super().send(text, attachments)


class SendHangs(Base):
    agent_id = "send_hangs"

    async def send(self, text, attachments=None):
        await asyncio.sleep(FOREVER)


class SendExits(Base):
    agent_id = "send_exits"

    async def send(self, text, attachments=None):
        sys.exit("the adapter called sys.exit")


class StreamRaises(Base):
    agent_id = "stream_raises"

    async def stream(self):
        await self.q.get()
        yield ToolCallBlock(id="t1", name="Bash", input={"command": "ls"})
        yield TextBlock(id="m1", text="partial answer")
        raise RuntimeError("stream exploded mid-turn")


class StreamHangs(Base):
    agent_id = "stream_hangs"

    async def stream(self):
        await self.q.get()
        yield TextBlock(id="m1", text="thinking it over")
        await asyncio.sleep(FOREVER)
        yield SessionEndBlock(reason="completed")


class StopHangs(Base):
    agent_id = "stop_hangs"

    async def stream(self):
        text = await self.q.get()
        if text == "boom":
            raise RuntimeError("stream failed, so the daemon stops the adapter")
        yield TextBlock(id="m1", text="ok: " + text, done=True)
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        await asyncio.sleep(FOREVER)


class InterruptHangs(StreamHangs):
    agent_id = "interrupt_hangs"
    cap_interrupt = True

    async def interrupt(self):
        await asyncio.sleep(FOREVER)


class NotABlock(Base):
    agent_id = "not_a_block"

    async def stream(self):
        await self.q.get()
        yield "plain string"
        yield SessionEndBlock(reason="completed")
"""
)

IDLE_S = 1.5
STOP_GRACE_S = 0.5
START_S = 1.5


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("bad")
    drop_in(home, "bad_actors.py", BAD_ACTORS)
    config = (
        "[adapters]\n"
        f"turn_timeout = 30\nidle_timeout = {IDLE_S}\nstop_grace = {STOP_GRACE_S}\n"
        f"start_timeout = {START_S}\n"
    )
    d = DaemonProcess(home, config=config).start()
    yield d
    d.stop()


async def turn(c: Client, session: str, text: str) -> list[dict[str, Any]]:
    return await say(c, session, text, timeout=30)


async def first_turn(
    d: DaemonProcess, agent: str, cwd: Path, text: str
) -> tuple[Client, str, list[dict[str, Any]]]:
    """Connect, open a session on ``agent`` and run one turn: client, session and frames."""
    c = await Client.open(d.url, d.token)
    session = await new_session(c, agent, cwd)
    return c, session, await turn(c, session, text)


def ends_once(frames: list[dict[str, Any]], reason: str) -> dict[str, Any]:
    ends = blocks(frames, "session_end")
    assert len(ends) == 1 and ends[0]["reason"] == reason, ends
    assert blocks(frames)[-1]["type"] == "session_end"
    return ends[0]


async def still_serving(d: DaemonProcess, cwd: Path) -> None:
    c = await Client.open(d.url, d.token)
    demo = await new_session(c, "demo", cwd)
    assert "You said: alive" in text_of(await turn(c, demo, "echo alive"))
    await c.close()


async def test_all_bad_actors_load(bad: DaemonProcess) -> None:
    c = await Client.open(bad.url, bad.token)
    found = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
    for agent in ("start_raises", "send_hangs", "stream_raises", "stop_hangs", "not_a_block"):
        assert found[agent]["available"] and found[agent]["error"] is None, found[agent]
    assert "Base" not in str(found)  # an abstract base is not an adapter
    await c.close()


@pytest.mark.parametrize(
    ("agent", "words"),
    [
        ("init_raises", "init exploded: no config file"),
        ("start_raises", "start exploded: missing API key"),
        ("start_hangs", "did not start in time"),
        ("start_exits", "start called sys.exit"),
    ],
)
async def test_a_start_that_fails_is_agent_unavailable(
    bad: DaemonProcess, project: Path, agent: str, words: str
) -> None:
    c = await Client.open(bad.url, bad.token)
    started = time.monotonic()
    with pytest.raises(RequestFailed) as err:
        await c.request("session.create", agent=agent, cwd=str(project))
    assert err.value.code == "agent_unavailable"
    assert words in err.value.frame["message"]
    assert time.monotonic() - started < START_S + 10
    await c.close()
    await still_serving(bad, project)


async def test_a_raising_send_ends_the_turn_with_its_message(
    bad: DaemonProcess, project: Path
) -> None:
    c, session, frames = await first_turn(bad, "send_raises", project, "boom")
    errors = blocks(frames, "error")
    assert errors[0]["code"] == "adapter_error"
    assert errors[0]["message"] == "ValueError: send exploded: the pipe is gone"
    ends_once(frames, "error")
    # The session is not wedged: the next turn gets a fresh adapter and works.
    assert text_of(await turn(c, session, "again")) == "ok: again"
    await c.close()


async def test_a_raising_stream_is_repaired_and_ended(bad: DaemonProcess, project: Path) -> None:
    c, _, frames = await first_turn(bad, "stream_raises", project, "go")
    errors = blocks(frames, "error")
    assert any(e["message"] == "RuntimeError: stream exploded mid-turn" for e in errors)
    # What the adapter left open is closed before the end.
    calls = [b for b in blocks(frames, "tool_call") if b["id"] == "t1"]
    assert calls[0]["status"] == "running" and calls[-1]["status"] == "error"
    assert any(b["tool_call_id"] == "t1" for b in blocks(frames, "tool_result"))
    assert any(b["id"] == "m1" and b["done"] for b in blocks(frames, "text"))
    ends_once(frames, "error")
    await c.close()


@pytest.mark.parametrize("agent", ["send_hangs", "stream_hangs"])
async def test_a_hanging_adapter_times_out(bad: DaemonProcess, project: Path, agent: str) -> None:
    c = await Client.open(bad.url, bad.token)
    session = await new_session(c, agent, project)
    started = time.monotonic()
    frames = await turn(c, session, "anything")
    assert time.monotonic() - started < IDLE_S + 15
    errors = blocks(frames, "error")
    assert errors and errors[0]["code"] == "timeout", errors
    assert errors[0]["detail"] == "idle_timeout" and errors[0]["hint"]
    assert f"{IDLE_S:g}s" in errors[0]["message"]  # the idle timeout, not the turn's 30 s
    ends_once(frames, "timeout")
    await c.close()
    await still_serving(bad, project)


async def test_a_hanging_stop_does_not_wedge_the_session(bad: DaemonProcess, project: Path) -> None:
    c, session, frames = await first_turn(bad, "stop_hangs", project, "boom")
    ends_once(frames, "error")
    # After the failed turn the daemon gives stop() its grace, then moves on.
    frames += await c.events_until(
        lambda b: b.get("code") == "state" and b["data"]["state"] == "idle",
        session=session,
        timeout=STOP_GRACE_S + 15,
    )
    assert text_of(await turn(c, session, "next")) == "ok: next"
    started = time.monotonic()
    await c.request("session.close", session=session)
    assert time.monotonic() - started < STOP_GRACE_S + 15
    await c.close()
    await still_serving(bad, project)


async def test_an_interrupt_that_hangs_is_forced(bad: DaemonProcess, project: Path) -> None:
    c = await Client.open(bad.url, bad.token)
    session = await new_session(c, "interrupt_hangs", project)
    await c.request("session.send", session=session, text="work")
    await c.events_until(lambda b: b["type"] == "text", session=session)
    await asyncio.wait_for(c.request("session.interrupt", session=session), 15)
    frames = await c.turn(session, timeout=30)
    assert any(e["code"] == "interrupt_forced" for e in blocks(frames, "error"))
    ends_once(frames, "interrupted")
    await c.close()


async def test_a_non_block_is_reported_not_forwarded(bad: DaemonProcess, project: Path) -> None:
    c, _, frames = await first_turn(bad, "not_a_block", project, "x")
    contract = [e for e in blocks(frames, "error") if e["code"] == "adapter_contract"]
    assert contract and "str" in contract[0]["message"]
    ends_once(frames, "completed")
    await c.close()


async def test_sys_exit_in_an_adapter_does_not_stop_the_daemon(
    bad: DaemonProcess, project: Path
) -> None:
    c, _, frames = await first_turn(bad, "send_exits", project, "x")
    errors = blocks(frames, "error")
    assert errors and "the adapter called sys.exit" in errors[0]["message"]
    ends_once(frames, "error")
    await c.close()
    assert bad.proc is not None and bad.proc.poll() is None
    await still_serving(bad, project)
