"""Acknowledged means durable: a real ``kill -9`` the moment the ``ok`` arrives loses nothing.

Each trial kills the daemon as soon as the ``ok`` of a ``session.create`` arrives, restarts it
and finds the session; then the same for a ``session.send``: after the restart the message is
in the history as its ``user`` block (or still queued), and a retransmit with the same
``client_msg_id`` is answered as the first one was. ``DURABILITY_TRIALS`` sets the number of
trials (the figures in the closing note of the issue used 20).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.wsclient import Client

TRIALS = int(os.environ.get("DURABILITY_TRIALS", "3"))
CONFIG = '[agents.demo]\noptions = { delay = 0.001 }\n[server]\nunix_socket = "off"\n'


async def _sessions(d: DaemonProcess) -> dict[str, dict[str, Any]]:
    c = await Client.open(d.url, d.token)
    try:
        listed = (await c.request("sessions.list", include_external=False))["sessions"]
        return {s["session"]: s for s in listed}
    finally:
        await c.close()


async def _user_block_ids(d: DaemonProcess, session: str) -> set[str]:
    c = await Client.open(d.url, d.token)
    try:
        last = int((await c.request("session.subscribe", session=session))["last_seq"])
        ids: set[str] = set()
        seen = 0
        while seen < last:
            frame = await c.next_push(timeout=30)
            assert frame["t"] != "_closed"
            if frame["t"] == "event":
                seen = frame["seq"]
                if frame["block"]["type"] == "user":
                    ids.add(frame["block"]["id"])
        return ids
    finally:
        await c.close()


async def test_kill9_on_receipt_of_the_ok_loses_nothing_acknowledged(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config=CONFIG).start()
    lost_creates: list[int] = []
    lost_sends: list[int] = []
    changed_answers: list[int] = []
    for trial in range(TRIALS):
        c = await Client.open(d.url, d.token)
        created = await c.request("session.create", agent="demo", cwd=str(project))
        d.kill9()  # on receipt of the ok
        await c.close()
        session = created["session"]["session"]
        d.start()
        if session not in await _sessions(d):
            lost_creates.append(trial)
            continue

        c = await Client.open(d.url, d.token)
        msg_id = f"m-{trial}"
        first = await c.request(
            "session.send", session=session, text=f"echo trial {trial}", client_msg_id=msg_id
        )
        d.kill9()  # on receipt of the ok
        await c.close()
        d.start()
        # Stored as its user block, or still queued (then it runs now and becomes one).
        queued = (await _sessions(d))[session]["queued"]
        for _ in range(100):
            if msg_id in await _user_block_ids(d, session):
                break
            if not queued:
                lost_sends.append(trial)
                break
            await asyncio.sleep(0.1)
        c = await Client.open(d.url, d.token)
        again = await c.request(
            "session.send", session=session, text=f"echo trial {trial}", client_msg_id=msg_id
        )
        await c.close()
        if again != first:
            changed_answers.append(trial)
    assert (lost_creates, lost_sends, changed_answers) == ([], [], []), (
        f"of {TRIALS} trials: creates lost {lost_creates}, sends lost {lost_sends}, "
        f"retransmits answered differently {changed_answers}"
    )
