"""Crash consistency: ``kill -9`` the daemon at random moments while a client streams.

Whatever a client received before the kill is, after a restart, in the replay with the same
seq and the same content; nothing is duplicated or missing, and numbering continues. Events
are pushed only after the store committed them, so this must hold at any kill moment.
Set ``HARDENING_SEED`` to replay a failing sequence of kill moments.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.wsclient import Client

ROUNDS = 5
PIECES = 3000
#: Roughly the events of one turn: the echoed text in chunks of 7 characters.
TURN_EVENTS = PIECES * 9 // 7
CONFIG = '[agents.demo]\noptions = { delay = 0.0003, chunk = 7 }\n[server]\nunix_socket = "off"\n'


async def _collect(c: Client, into: dict[int, dict[str, Any]], stop: asyncio.Event) -> None:
    """Record every event frame until the connection drops."""
    while not stop.is_set():
        frame = await c.next_push(timeout=60)
        if frame["t"] == "_closed":
            return
        if frame["t"] == "event":
            seq = frame["seq"]
            assert seq not in into or into[seq] == frame, f"seq {seq} delivered twice, differently"
            into[seq] = frame


async def _history(d: DaemonProcess, session: str, after: int) -> tuple[int, list[dict[str, Any]]]:
    """Subscribe with ``after_seq`` and read until the last stored event."""
    c = await Client.open(d.url, d.token)
    try:
        result = await c.request("session.subscribe", session=session, after_seq=after)
        last = int(result["last_seq"])
        frames: list[dict[str, Any]] = []
        while last > after and (not frames or frames[-1]["seq"] < last):
            frame = await c.next_push(timeout=30)
            assert frame["t"] != "_closed", "closed during the replay"
            if frame["t"] == "event":
                frames.append(frame)
        return last, frames
    finally:
        await c.close()


async def _settle(d: DaemonProcess, session: str) -> None:
    """Wait until a message queued before the kill, if any, has run after the restart."""
    c = await Client.open(d.url, d.token)
    try:
        calm = 0
        for _ in range(300):
            listed = (await c.request("sessions.list", include_external=False))["sessions"]
            mine = next((s for s in listed if s["session"] == session), None)
            assert mine is not None, "the session is gone after the restart"
            calm = calm + 1 if mine["state"] == "idle" and mine["queued"] == 0 else 0
            if calm >= 3:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the session never settled: {mine}")
    finally:
        await c.close()


def _unique_text(round_no: int) -> str:
    # Every chunk of the echoed text is different, so a block out of place shows.
    return "echo " + "".join(f"<{round_no}:{i:05d}>" for i in range(PIECES))


async def test_kill9_at_random_moments_keeps_every_seen_event(
    daemon_factory: Any, project: Path
) -> None:
    seed = int(os.environ.get("HARDENING_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    c = await Client.open(d.url, d.token)
    session = (await c.request("session.create", agent="demo", cwd=str(project)))["session"][
        "session"
    ]
    await c.close()
    seen: dict[int, dict[str, Any]] = {}
    kills: list[tuple[float, int]] = []
    for round_no in range(ROUNDS):
        last_seen = max(seen, default=0)
        c = await Client.open(d.url, d.token)
        await c.request("session.subscribe", session=session, after_seq=last_seen)
        received: dict[int, dict[str, Any]] = {}
        stop = asyncio.Event()
        reader = asyncio.create_task(_collect(c, received, stop))
        await c.request("session.send", session=session, text=_unique_text(round_no))
        # Kill once the client has seen a random number of this turn's events (in the first
        # round, as soon as the message is accepted).
        moment = rng.randrange(1, TURN_EVENTS * 3 // 4) if round_no else 0
        while len(received) < moment and not reader.done():
            await asyncio.sleep(0.001)
        d.kill9()
        await asyncio.wait_for(reader, 30)
        await c.close()
        kills.append((moment, len(received)))
        why = f"seed {seed}, round {round_no}, kills (at event, events seen) {kills}"
        # The reconnect picked up exactly where the previous round's history ended.
        if received:
            assert min(received) == last_seen + 1, why
        seen.update(received)

        d.start()
        await _settle(d, session)
        top = max(seen, default=0)
        # The spec's reconnect: after_seq = the last seq seen, and nothing before it comes back.
        last, tail = await _history(d, session, top)
        assert last >= top, why
        assert [f["seq"] for f in tail] == list(range(top + 1, last + 1)), why
        # Everything the client ever saw is stored with the same seq and content.
        last_all, history = await _history(d, session, 0)
        assert last_all == last, why
        assert [f["seq"] for f in history] == list(range(1, last + 1)), why
        by_seq = {f["seq"]: f for f in history}
        for seq, frame in seen.items():
            assert by_seq[seq]["block"] == frame["block"], f"{why}: seq {seq} changed"
            assert by_seq[seq]["ts"] == frame["ts"], f"{why}: seq {seq} ts changed"
        ends = [f for f in history if f["block"]["type"] == "session_end"]
        users = [f for f in history if f["block"]["type"] == "user"]
        assert len(ends) == len(users), f"{why}: every started turn ended exactly once"
        if round_no:
            restarted = [f for f in history[top:] if f["block"].get("code") == "daemon_restarted"]
            assert restarted, f"{why}: the kill did not land mid-turn"
        seen = by_seq

    # After all that, the session still works and numbering continues.
    c = await Client.open(d.url, d.token)
    top = max(seen)
    await c.request("session.subscribe", session=session, after_seq=top)
    await c.request("session.send", session=session, text="echo still here")
    frames = await c.turn(session)
    seqs = [f["seq"] for f in frames]
    assert seqs[0] == top + 1 and seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    assert "still here" in "".join(f["block"].get("text", "") for f in frames)
    await c.close()
