"""The daemon as a user starts it, driven by a real WebSocket client with the demo adapter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.daemon import DaemonProcess
from tests.daemonkit import text_attachment
from tests.rawws import RawWebSocket
from tests.wsclient import Client, RequestFailed, blocks, text_of

ALL_TYPES = {
    "agent_info",
    "user",
    "text",
    "thinking",
    "tool_call",
    "tool_result",
    "plan",
    "diff",
    "permission_request",
    "usage",
    "system",
    "session_end",
}


def assert_gapless(frames: list[dict[str, Any]], start: int = 1) -> None:
    seqs = [f["seq"] for f in frames if f["t"] == "event"]
    assert seqs == list(range(start, start + len(seqs))), seqs


async def open_client(d: DaemonProcess, **kw: Any) -> Client:
    return await Client.open(d.url, d.token, **kw)


async def create_demo(c: Client, cwd: Path) -> str:
    result = await c.request("session.create", agent="demo", cwd=str(cwd))
    assert result["info"]["type"] == "agent_info"
    assert any(cmd["name"] == "/status" for cmd in result["info"]["commands"])
    return str(result["session"]["session"])


async def subscribed_demo(d: DaemonProcess, cwd: Path) -> tuple[Client, str]:
    """A new client, and a new demo session it is subscribed to."""
    c = await open_client(d)
    session = await create_demo(c, cwd)
    await c.request("session.subscribe", session=session)
    return c, session


async def send_until(
    c: Client, session: str, text: str, pred: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Send ``text``; the events up to the first block ``pred`` accepts."""
    await c.request("session.send", session=session, text=text)
    return await c.events_until(pred, session=session)


async def answer_permission(
    c: Client, session: str, frames: list[dict[str, Any]], option: str = "allow"
) -> None:
    req = blocks(frames, "permission_request")[-1]
    await c.request("session.permission", session=session, request_id=req["id"], option_id=option)


async def full_turn(
    c: Client, session: str, text: str, option: str = "allow", **send: Any
) -> list[dict[str, Any]]:
    await c.request("session.send", session=session, text=text, **send)
    frames = await c.events_until(lambda b: b["type"] == "permission_request", session=session)
    await answer_permission(c, session, frames, option)
    return frames + await c.turn(session)


async def test_full_tour_every_block_type_in_order(daemon: DaemonProcess, project: Path) -> None:
    c = await open_client(daemon)
    agents = (await c.request("agents.list"))["agents"]
    demo = next(a for a in agents if a["agent"] == "demo")
    assert demo["available"] and demo["capabilities"]["permissions"]
    session = await create_demo(c, project)
    sub = await c.request("session.subscribe", session=session)
    assert sub["state"] == "idle"
    frames = await full_turn(c, session, "hello there")
    assert_gapless(frames)
    kinds = {b["type"] for b in blocks(frames)}
    assert kinds >= ALL_TYPES, ALL_TYPES - kinds
    user = blocks(frames, "user")[0]
    assert user["text"] == "hello there" and user["source"] == "bridge"
    assert "You said: hello there" in text_of(frames)
    # every tool call starts running, ends done/error, and has its result
    calls: dict[str, list[str]] = {}
    for b in blocks(frames, "tool_call"):
        calls.setdefault(b["id"], []).append(b["status"])
    results = {b["tool_call_id"] for b in blocks(frames, "tool_result")}
    for tool_id, statuses in calls.items():
        assert statuses[0] == "running" and statuses[-1] in ("done", "error")
        assert tool_id in results
    assert blocks(frames)[-1] == {
        **blocks(frames)[-1],
        "type": "session_end",
        "reason": "completed",
    }
    # the state went running then idle, pushed as frames and logged as system blocks
    frames += await c.events_until(lambda b: b.get("code") == "state", session=session)
    states = [b["data"]["state"] for b in blocks(frames, "system") if b["code"] == "state"]
    assert states == ["running", "idle"]
    for _ in range(100):  # the idle state frame follows its event; let the reader get it
        state_frames = [f for f in c.all_frames if f["t"] == "state"]
        if len(state_frames) >= 2:
            break
        await asyncio.sleep(0.05)
    assert [f["state"] for f in state_frames] == ["running", "idle"]
    # each state frame comes right after the system event that records the change
    for frame in state_frames:
        before = c.all_frames[c.all_frames.index(frame) - 1]
        assert before["t"] == "event" and before["block"].get("code") == "state"
        assert before["block"]["data"]["state"] == frame["state"]
    await c.close()


async def test_permission_denied_and_interrupt(daemon: DaemonProcess, project: Path) -> None:
    c, session = await subscribed_demo(daemon, project)
    frames = await full_turn(c, session, "please", option="deny")
    errors = [b for b in blocks(frames, "tool_result") if b["is_error"]]
    assert errors and "denied" in errors[0]["content"]
    assert not blocks(frames, "diff")
    # an option the request does not offer is refused
    frames = await send_until(c, session, "again", lambda b: b["type"] == "permission_request")
    req = blocks(frames, "permission_request")[-1]
    bad = await c.call(
        "session.permission", session=session, request_id=req["id"], option_id="nope"
    )
    assert bad["t"] == "err" and bad["code"] == "bad_request"
    await c.request("session.interrupt", session=session)
    rest = await c.turn(session)
    assert blocks(rest, "session_end")[-1]["reason"] == "interrupted"
    unknown = await c.call(
        "session.permission", session=session, request_id=req["id"], option_id="allow"
    )
    assert unknown["code"] == "not_found"
    await c.close()


async def test_reconnect_replays_exactly_the_missed_events(
    daemon: DaemonProcess, project: Path
) -> None:
    c, session = await subscribed_demo(daemon, project)
    await c.request("session.send", session=session, text="slow tour", client_msg_id="m1")
    seen = await c.events_until(lambda b: b["type"] == "thinking", session=session)
    last = seen[-1]["seq"]
    await c.close()
    await asyncio.sleep(1.0)  # events keep coming while we are away
    c2 = await open_client(daemon)
    await c2.request("session.subscribe", session=session, after_seq=last)
    frames = await c2.events_until(lambda b: b["type"] == "permission_request", session=session)
    assert frames[0]["seq"] == last + 1
    assert_gapless(frames, start=last + 1)
    # a retransmit of the same message is answered the same and starts no second turn
    again = await c2.request("session.send", session=session, text="slow tour", client_msg_id="m1")
    assert again == {"queued": False}
    await answer_permission(c2, session, frames)
    rest = await c2.turn(session)
    assert_gapless(frames + rest, start=last + 1)
    listed = (await c2.request("sessions.list", include_external=False))["sessions"]
    mine = next(s for s in listed if s["session"] == session)
    assert mine["queued"] == 0 and mine["state"] == "idle"
    users = [b for b in blocks(frames + rest, "user")]
    assert users == []  # the only user block was before `last`
    # a full replay has exactly one user block for m1
    c3 = await open_client(daemon)
    await c3.request("session.subscribe", session=session)
    everything = await c3.turn(session)
    assert [b["id"] for b in blocks(everything, "user")] == ["m1"]
    await c2.close()
    await c3.close()


async def test_queued_messages_run_in_order(daemon: DaemonProcess, project: Path) -> None:
    c, session = await subscribed_demo(daemon, project)
    # the first turn waits at its permission request until the test answers it: it is still
    # running when the second message arrives, however slow the machine
    first = await c.request("session.send", session=session, text="one")
    frames = await c.events_until(lambda b: b["type"] == "permission_request", session=session)
    second = await c.request("session.send", session=session, text="echo two")
    assert first == {"queued": False} and second == {"queued": True}
    await answer_permission(c, session, frames)
    frames += await c.turn(session)
    frames += await c.turn(session)
    assert [b["text"] for b in blocks(frames, "user")] == ["one", "echo two"]
    assert text_of(frames).index("one") < text_of(frames).index("two")
    await c.close()


async def test_slash_commands_are_handled_by_the_bridge(
    daemon: DaemonProcess, project: Path
) -> None:
    c, session = await subscribed_demo(daemon, project)
    frames = await send_until(c, session, "/status", lambda b: b["type"] == "usage")
    status = next(b for b in blocks(frames, "system") if b["code"] == "status")
    assert "state: idle" in status["text"]
    frames = await send_until(c, session, "/help", lambda b: b.get("code") == "help")
    assert "/terminal" in blocks(frames, "system")[-1]["text"]
    frames = await send_until(c, session, "/model demo-slow", lambda b: b.get("code") == "model")
    frames = await send_until(c, session, "/terminal", lambda b: b.get("code") == "terminal")
    assert "bridge.adapters.demo_terminal" in blocks(frames, "system")[-1]["text"]
    assert not blocks(frames, "session_end")
    # no turn ran for any of these; /terminal handed the session off (no terminal holds it yet)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    listed_session = next(s for s in listed if s["session"] == session)
    assert (listed_session["state"], listed_session["writer"]) == ("parked", "none")
    await c.close()


async def test_kill9_mid_turn_then_restart_keeps_history_and_numbering(
    daemon_factory: Any, project: Path
) -> None:
    d = daemon_factory().start()
    c, session = await subscribed_demo(d, project)
    await full_turn(c, session, "first")
    seen = await send_until(c, session, "slow second", lambda b: b["type"] == "thinking")
    last_seen = seen[-1]["seq"]
    d.kill9()
    await c.close()
    d.start()
    c2 = await open_client(d)
    listed = (await c2.request("sessions.list", include_external=False))["sessions"]
    mine = next(s for s in listed if s["session"] == session)
    assert mine["state"] == "idle" and mine["last_seq"] > last_seen
    await c2.request("session.subscribe", session=session)
    history = await c2.events_until(
        lambda b: b["type"] == "session_end" and b["reason"] == "error", session=session
    )
    assert_gapless(history)
    assert history[last_seen - 1]["seq"] == last_seen
    assert any(b["code"] == "daemon_restarted" for b in blocks(history, "error"))
    # numbering continues and the session still works
    more = await c2.request("session.send", session=session, text="echo after restart")
    assert more == {"queued": False}
    after = await c2.turn(session)
    assert after[0]["seq"] == history[-1]["seq"] + 1 or after[0]["seq"] > history[-1]["seq"]
    all_frames = history + after
    # everything after the recovery is gapless too (state events may sit in between)
    seqs = [f["seq"] for f in all_frames]
    assert seqs == sorted(set(seqs))
    assert "after restart" in text_of(after)
    await c2.close()


async def test_slow_reader_is_cut_off_while_another_keeps_receiving(
    daemon_factory: Any, project: Path
) -> None:
    d = daemon_factory(
        config="[limits]\nsend_queue_frames = 200\n"
        "[agents.demo]\noptions = { delay = 0, chunk = 1000000 }\n"
    ).start()
    fast = await open_client(d)
    session = await create_demo(fast, project)
    await fast.request("session.subscribe", session=session)
    slow = RawWebSocket(d.port)
    slow.send_json({"t": "hello", "id": 1, "protocol": 1, "token": d.token})
    assert slow.recv_json()["t"] == "ok"
    slow.send_json({"t": "session.subscribe", "id": 2, "session": session})
    assert slow.recv_json()["t"] == "ok"
    # ... and the slow client stops reading: its buffers fill, then the daemon's queue.
    frames: list[dict[str, Any]] = []
    reader = None
    for i in range(60):  # 60 x 600 kB: more than the socket buffers hold
        await fast.request("session.send", session=session, text="echo " + "x" * 300_000 + str(i))
        frames += await fast.turn(session)
        if reader is None and "client_too_slow" in d.log_text():
            # Cut off: reading again drains what was sent, then the close frame.
            reader = asyncio.create_task(asyncio.to_thread(slow.close_code))
    assert len(blocks(frames, "session_end")) == 60
    assert text_of(frames).endswith("59")
    assert reader is not None, "the slow client was never cut off"
    assert await reader == 4408
    slow.close()
    await fast.close()


async def test_authentication(daemon: DaemonProcess) -> None:
    # header token
    c = await Client.open(daemon.url, daemon.token, header=True)
    assert (await c.request("ping")) == {}
    await c.close()
    # wrong token in hello: 4401 and no other frame
    bad = await Client.open(daemon.url, "wrong", hello=False)
    await bad.send_raw(json.dumps({"t": "hello", "id": 1, "protocol": 1, "token": "nope"}))
    await asyncio.wait_for(bad.ws.wait_closed(), 10)
    assert bad.ws.close_code == 4401
    assert bad.all_frames == []
    # wrong token in the header
    hdr = await Client.open(daemon.url, "wrong", header=True, hello=False)
    await asyncio.wait_for(hdr.ws.wait_closed(), 10)
    assert hdr.ws.close_code == 4401
    # a first frame that is not hello
    other = await Client.open(daemon.url, daemon.token, hello=False)
    await other.send_raw(json.dumps({"t": "ping", "id": 7}))
    await asyncio.wait_for(other.ws.wait_closed(), 10)
    assert other.ws.close_code == 4400
    assert other.all_frames[0]["t"] == "err" and other.all_frames[0]["code"] == "bad_request"
    # another protocol number
    v2 = await Client.open(daemon.url, daemon.token, hello=False)
    await v2.send_raw(json.dumps({"t": "hello", "id": 1, "protocol": 2, "token": daemon.token}))
    await asyncio.wait_for(v2.ws.wait_closed(), 10)
    assert v2.ws.close_code == 4400 and v2.all_frames[0]["code"] == "bad_request"


async def test_no_hello_in_time(daemon_factory: Any) -> None:
    d = daemon_factory(config="[server]\nhello_timeout = 0.5\n").start()
    silent = await Client.open(d.url, None, hello=False)
    await asyncio.wait_for(silent.ws.wait_closed(), 10)
    assert silent.ws.close_code == 4401
    authed = await Client.open(d.url, d.token, hello=False, header=True)
    await asyncio.wait_for(authed.ws.wait_closed(), 10)
    assert authed.ws.close_code == 4400


async def test_origin_allow_list_and_healthz(daemon: DaemonProcess) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/healthz") as resp:
        body = json.loads(resp.read())
    assert body["ok"] is True and body["version"]
    with pytest.raises(InvalidStatus) as info:
        await Client.open(daemon.url, daemon.token, origin="http://evil.example")
    refused = info.value.response
    assert refused.status_code == 403
    # a page can read why (fetch with CORS), and the answer says what to do
    assert refused.headers["Access-Control-Allow-Origin"] == "*"
    body = json.loads(refused.body)
    assert body["error"] == "origin not allowed"
    assert "add http://evil.example to server.allowed_origins" in body["hint"]
    same = await Client.open(daemon.url, daemon.token, origin=f"http://127.0.0.1:{daemon.port}")
    await same.close()


async def test_bad_input_gets_the_spec_error(daemon: DaemonProcess, project: Path) -> None:
    c = await open_client(daemon)
    cases: list[tuple[str | bytes, str, Any]] = [
        ("{not json", "bad_request", None),
        (json.dumps({"id": 5}), "bad_request", 5),
        (json.dumps([1, 2]), "bad_request", None),
        (json.dumps({"t": "nope.nope", "id": 6}), "unknown_method", 6),
        (json.dumps({"t": "session.send", "id": 8, "session": 3, "text": "x"}), "bad_request", 8),
        (json.dumps({"t": "session.create", "id": 9}), "bad_request", 9),
    ]
    for raw, code, rid in cases:
        await c.send_raw(raw)
        frame = await c.next_push()
        assert frame["t"] == "err" and frame["code"] == code and frame["id"] == rid, frame

    async def err(method: str, **fields: Any) -> str:
        with pytest.raises(RequestFailed) as info:
            await c.request(method, **fields)
        return str(info.value.code)

    assert await err("session.subscribe", session="s_missing") == "not_found"
    assert await err("session.send", session="s_missing", text="hi") == "not_found"
    assert await err("session.create", agent="nobody", cwd=str(project)) == "not_found"
    assert await err("session.create", agent="demo", cwd="relative/path") == "bad_request"
    assert await err("session.create", agent="demo", cwd=str(project / "nope")) == "bad_request"
    assert await err("agents.check", agent="nobody") == "not_found"
    assert await err("models.list", agent="nobody") == "not_found"
    # the connection survived all of it
    assert (await c.request("ping")) == {}
    models = await c.request("models.list", agent="demo")
    assert {m["id"] for m in models["models"]} >= {"demo-fast"}
    check = await c.request("agents.check", agent="demo")
    assert check["status"] == "pass"
    await c.close()


async def test_oversize_frame_closes_with_1009(daemon_factory: Any) -> None:
    d = daemon_factory(config="[limits]\nmax_frame_bytes = 10000\n").start()
    c = await open_client(d)
    await c.send_raw(json.dumps({"t": "ping", "id": 1, "pad": "x" * 20_000}))
    with pytest.raises((ConnectionClosed, ConnectionError)):
        for _ in range(3):
            await c.request("ping")
    await asyncio.wait_for(c.ws.wait_closed(), 10)
    assert c.ws.close_code == 1009


async def test_attachments_and_limits(daemon_factory: Any, project: Path) -> None:
    d = daemon_factory(
        config="[limits]\nmax_attachment_bytes = 100\nmax_queued_messages = 2\n"
    ).start()
    c, session = await subscribed_demo(d, project)
    small = text_attachment("../../etc/passwd", b"hi")
    await c.request("session.send", session=session, text="echo att", attachments=[small])
    frames = await c.turn(session)
    user = blocks(frames, "user")[0]
    assert user["attachments"][0]["name"] == "passwd"
    big = text_attachment("../../etc/passwd", b"x" * 500)
    frame = await c.call("session.send", session=session, text="x", attachments=[big])
    assert frame["code"] == "too_large"
    await c.request("session.send", session=session, text="slow a")
    # until its turn has taken it off the queue, "slow a" still counts as waiting
    await c.events_until(lambda b: b["type"] == "thinking", session=session)
    await c.request("session.send", session=session, text="slow b")
    await c.request("session.send", session=session, text="slow c")
    frame = await c.call("session.send", session=session, text="slow d")
    assert frame["code"] == "rate_limited"
    await c.request("session.close", session=session)
    closed = await c.call("session.send", session=session, text="late")
    assert closed["code"] == "conflict"


async def test_graceful_shutdown_closes_clients_with_1001(
    daemon: DaemonProcess, project: Path
) -> None:
    c, session = await subscribed_demo(daemon, project)
    await c.request("session.send", session=session, text="slow tour")
    await c.events_until(lambda b: b["type"] == "thinking", session=session)
    assert await asyncio.to_thread(daemon.stop) == 0
    frames = await c.turn(session)
    assert blocks(frames, "session_end")[-1]["reason"] == "interrupted"
    await asyncio.wait_for(c.ws.wait_closed(), 10)
    assert c.ws.close_code == 1001


async def test_msgpack_subprotocol(daemon: DaemonProcess, project: Path) -> None:
    import msgspec
    from websockets.asyncio.client import connect

    async with connect(daemon.url, subprotocols=["bridge.v1.msgpack"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "bridge.v1.msgpack"
        enc = msgspec.msgpack.encode
        dec = msgspec.msgpack.decode
        await ws.send(enc({"t": "hello", "id": 1, "protocol": 1, "token": daemon.token}))
        assert dec(await ws.recv())["t"] == "ok"
        await ws.send(enc({"t": "session.create", "id": 2, "agent": "demo", "cwd": str(project)}))
        created = dec(await ws.recv())
        session = created["result"]["session"]["session"]
        await ws.send(enc({"t": "session.subscribe", "id": 3, "session": session}))
        assert dec(await ws.recv())["t"] == "ok"
        first = dec(await ws.recv())
        assert first["t"] == "event" and first["seq"] == 1
        assert first["block"]["type"] == "agent_info"


async def test_subscribe_beyond_the_last_seq_streams_live_events(
    daemon: DaemonProcess, project: Path
) -> None:
    c = await open_client(daemon)
    session = await create_demo(c, project)
    result = await c.request("session.subscribe", session=session, after_seq=10**9)
    assert result["last_seq"] == 1
    await c.request("session.send", session=session, text="echo live")
    frames = await c.turn(session)
    assert frames[0]["seq"] == 2 and "You said: live" in text_of(frames)
    await c.close()


async def test_the_sessions_usage_counts_the_turns_before_a_daemon_restart(
    daemon_factory: Any, project: Path
) -> None:
    """The demo agent counts its tokens since it was started; a daemon restart starts a new one,
    and the session's usage still counts every turn it had (each `usage` block, `usage.get`,
    `/status`)."""
    d = daemon_factory().start()
    c, session = await subscribed_demo(d, project)
    first = await send_until(c, session, "echo one", lambda b: b["type"] == "usage")
    await c.turn(session)
    await c.close()
    d.stop()
    d.start()
    c = await open_client(d)
    await c.request("session.subscribe", session=session, after_seq=10**9)
    turns = [
        blocks(await send_until(c, session, text, lambda b: b["type"] == "usage"), "usage")[-1]
        for text in ("echo two", "echo three")
    ]
    one = blocks(first, "usage")[-1]
    per_turn = (one["input_tokens"], one["output_tokens"])  # the demo's: 10 + 1 word, 20 + 1
    assert per_turn == (11, 21)
    assert [(u["input_tokens"], u["output_tokens"]) for u in turns] == [(22, 42), (33, 63)]
    assert turns[-1]["cost_usd"] == pytest.approx(0.0003)
    got = (await c.request("usage.get", session=session))["usage"]
    assert (got["input_tokens"], got["output_tokens"]) == (33, 63)
    status = blocks(
        await send_until(c, session, "/status", lambda b: b["type"] == "usage"), "usage"
    )
    assert (status[-1]["input_tokens"], status[-1]["output_tokens"]) == (33, 63)
    await c.close()
