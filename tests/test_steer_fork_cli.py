"""Steer and fork from the command line, against a real daemon with the demo agent: `send
--steer`, the `s` key of `watch` on a pseudo-terminal, and `fork`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.test_cli_first_run import Terminal, open_terminal, run, session_state
from tests.wsclient import Client


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for t in opened:
        t.close()


async def _events(d: DaemonProcess, session: str) -> list[dict[str, object]]:
    c = await Client.open(d.url, d.token)
    try:
        result = await c.request("session.subscribe", session=session, after_seq=0)
        last = result["last_seq"]
        frames = await c.events_until(lambda b: True, session=session) if last else []
        while frames and frames[-1]["seq"] < last:
            frames += await c.events_until(lambda b: True, session=session)
        return [f["block"] for f in frames]
    finally:
        await c.close()


def test_watch_steers_with_a_key_and_send_steer_and_fork(
    daemon: DaemonProcess, project: Path, terminals: list[Terminal]
) -> None:
    sid = run(daemon, "new", "demo", cwd=project).stdout.strip()
    term = open_terminal(terminals, daemon, "watch", sid, cwd=project)
    term.read_until(f"-- {sid}: idle")
    assert run(daemon, "send", sid, "slow tour please").returncode == 0
    term.read_until("thinking")
    term.type("s")
    term.read_until("steer> ")
    term.type("in French\r")
    term.read_until("steered into the turn")
    term.read_until("> you (bridge, into the turn): in French")
    # another one from `send --steer`, still before the answer begins
    sent = run(daemon, "send", sid, "and short", "--steer")
    assert sent.returncode == 0 and sent.stdout.strip() == "steered", sent.stderr
    term.read_until("[3] Deny")
    term.type("3")
    shown = term.read_until("turn ended: completed")
    assert "(and then: in French; and short)" in term.plain(), shown
    assert term.plain().count("── turn ended") == 1

    # with no turn running, --steer sends it as any message: a new turn
    again = run(daemon, "send", sid, "echo later", "--steer")
    assert again.stdout.strip() == "sent"
    deadline = time.monotonic() + 30
    while asyncio.run(session_state(daemon, sid))["state"] != "idle":
        assert time.monotonic() < deadline
        time.sleep(0.2)

    forked = run(daemon, "fork", sid, "--at", "2")
    assert forked.returncode == 0, forked.stderr
    fork = forked.stdout.strip()
    assert fork.startswith("s_") and f"forked from {sid}" in forked.stderr
    blocks = asyncio.run(_events(daemon, fork))
    assert blocks[0]["type"] == "system" and blocks[0]["code"] == "forked"
    texts = [b["text"] for b in blocks if b["type"] == "user"]
    assert texts == ["slow tour please", "in French", "and short"]
    beyond = run(daemon, "fork", sid, "--at", "100000")
    assert beyond.returncode == 1 and "at_seq" in beyond.stderr
