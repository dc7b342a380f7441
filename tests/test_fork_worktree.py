"""`session.fork` with `worktree`, against a real daemon and a real git repository: the fork
runs in a new worktree of its own on a new branch, as `session.create` makes one, with the
parent's history, and the agent is given it by replay (another directory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.workspace import git as bgit
from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.shipkit import clone_with_origin, ship_daemon
from tests.wsclient import Client, blocks

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from running(ship_daemon(tmp_path))


async def test_a_fork_into_a_new_worktree(daemon: DaemonProcess, tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    c = await Client.open(daemon.url, daemon.token)
    try:
        made = await c.request("session.create", agent="demo", cwd=str(repo))
        parent = made["session"]["session"]
        await c.request("session.subscribe", session=parent)
        await c.request("session.send", session=parent, text="echo in the main tree")
        await c.turn(parent)

        forked = await c.request(
            "session.fork", session=parent, worktree={"branch": "try/other-way"}
        )
        fork = forked["session"]
        tree = Path(fork["worktree"]["path"])
        assert fork["cwd"] == str(tree) and tree.is_dir() and tree != repo
        assert fork["worktree"]["branch"] == "try/other-way"
        assert fork["forked_from"]["session"] == parent
        await c.request("session.subscribe", session=fork["session"], after_seq=0)
        await c.request("session.send", session=fork["session"], text="echo in the fork")
        ends: list[int] = []  # the copied turn's end, then the fork's own
        frames = await c.events_until(
            lambda b: b["type"] == "session_end" and (ends.append(1) or len(ends) == 2),
            session=fork["session"],
        )
        said = [b for b in blocks(frames, "system") if b["code"] == "forked"]
        assert said and said[0]["data"]["fork"] == "replay"
        texts = [b["text"] for b in blocks(frames, "user")]
        assert texts == ["echo in the main tree", "echo in the fork"]
        answer = "".join(b.get("text", "") for b in blocks(frames, "text"))
        assert "I was given the earlier conversation" in answer

        taken = await c.call("session.fork", session=parent, worktree={"branch": "try/other-way"})
        assert taken["t"] == "err"  # the branch exists: as session.create, refused
    finally:
        await c.close()
