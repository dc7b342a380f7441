"""Stored before shown, also under faults: a store that cannot write pushes nothing.

Real faults on a real daemon: a second SQLite connection holding the write lock past the
busy timeout (``BEGIN IMMEDIATE``), and a full disk (a small tmpfs, which needs root; CI runs
as root). While writes fail, clients get the ``daemon`` frame and ``/healthz`` answers 503;
nothing of the failing writes is pushed; when the store recovers everything is written, in
order, and after a restart the history is exactly what the client saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import subscribed_session
from tests.wsclient import Client

Frames = list[dict[str, Any]]
CONFIG = (
    "[agents.demo]\noptions = {{ delay = {delay}, chunk = 1 }}\n"
    '[server]\nunix_socket = "off"\n[store]\nfail_after_s = {fail_after}\n{extra}'
)


def _healthz(d: DaemonProcess) -> tuple[int, dict[str, Any]]:
    import json

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def _history(d: DaemonProcess, session: str) -> dict[int, dict[str, Any]]:
    c = await Client.open(d.url, d.token)
    try:
        last = int((await c.request("session.subscribe", session=session))["last_seq"])
        out: dict[int, dict[str, Any]] = {}
        while len(out) < last:
            frame = await c.next_push(timeout=30)
            assert frame["t"] != "_closed"
            if frame["t"] == "event":
                out[frame["seq"]] = frame
        return out
    finally:
        await c.close()


async def _pushes_until(
    c: Client, predicate: Any, timeout: float, into: list[dict[str, Any]]
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        frame = await c.next_push(max(0.01, deadline - loop.time()))
        into.append(frame)
        if frame["t"] == "_closed":
            raise ConnectionError(f"closed: {frame}")
        if predicate(frame):
            return frame


@contextlib.contextmanager
def _write_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Another process's view: a connection holding SQLite's write lock."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=0.1)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        conn.close()


async def _fault_round(
    d: DaemonProcess, project: Path, hold: Any, release: Any, text: str
) -> tuple[Frames, Frames, Frames, str]:
    """Make the store fail in the middle of a streaming turn. Returns what the client got
    before the ``failing`` frame, between it and the ``ok`` frame, after it, and the session."""
    c = await Client.open(d.url, d.token)
    session = await subscribed_session(c, project)
    seen: list[dict[str, Any]] = []
    await c.request("session.send", session=session, text=text)
    await _pushes_until(  # the turn streams
        c, lambda f: f["t"] == "event" and f["block"]["type"] == "text", 30, seen
    )
    hold()
    during: list[dict[str, Any]] = []
    # Events committed before the fault may still arrive; after the `failing` frame, none.
    failing = await _pushes_until(c, lambda f: f["t"] == "daemon", 30, seen)
    # A message sent now is not acknowledged until it is stored.
    send = asyncio.create_task(c.call("session.send", session=session, text="echo later"))
    assert failing == {"t": "daemon", "store": "failing", "message": failing["message"]}
    assert failing["message"]
    status, body = _healthz(d)
    assert status == 503 and body["store"] == "failing", body
    # A connection opened during the failure is told at once.
    late = await Client.open(d.url, d.token)
    told = await late.next_push(timeout=5)
    assert told["t"] == "daemon" and told["store"] == "failing"
    await late.close()
    await asyncio.sleep(1.5)  # the turn runs on, the store keeps failing
    while not c.pushes.empty():
        during.append(c.pushes.get_nowait())
    assert not send.done(), "session.send answered ok before its message was stored"
    release()
    after: list[dict[str, Any]] = []
    ok = await _pushes_until(c, lambda f: f["t"] == "daemon", 60, during)
    during.pop()
    assert ok == {"t": "daemon", "store": "ok"}
    answer = await asyncio.wait_for(send, 30)
    assert answer["t"] == "ok", answer
    for _ in range(2):  # the turn under the fault, then the message sent during it
        await _pushes_until(
            c, lambda f: f["t"] == "event" and f["block"]["type"] == "session_end", 60, after
        )
    assert _healthz(d)[0] == 200
    await c.close()
    return seen, during, after, session


async def _assert_stored_as_seen(
    d: DaemonProcess, rounds: tuple[Frames, Frames, Frames, str], fault: str
) -> None:
    """Nothing of a fault round was pushed during the fault, the client saw every seq once, and
    after a restart the stored history is exactly what it saw."""
    before, during, after, session = rounds
    events_before = [f for f in before if f["t"] == "event"]
    pushed_during = [f for f in during if f["t"] == "event"]
    assert pushed_during == [], f"{len(pushed_during)} events pushed while {fault}"
    seen = {f["seq"]: f for f in [*events_before, *after] if f["t"] == "event"}
    assert sorted(seen) == list(range(1, max(seen) + 1)), "a gap or a repeat in the seqs"
    assert d.stop() == 0
    d.start()
    stored = await _history(d, session)
    for seq, frame in seen.items():
        assert stored.get(seq) == frame, f"seq {seq} differs after a restart"


class _HeldLock:
    """``hold()`` takes the write lock of ``d``'s database as another process would;
    ``release()`` lets it go."""

    def __init__(self, d: DaemonProcess) -> None:
        self.db = d.state_dir / "bridge.sqlite3"
        self.stack = contextlib.ExitStack()

    def hold(self) -> None:
        self.stack.enter_context(_write_lock(self.db))

    def release(self) -> None:
        self.stack.close()


def _start(daemon_factory: Any, delay: float, fail_after: float, extra: str = "") -> DaemonProcess:
    config = CONFIG.format(delay=delay, fail_after=fail_after, extra=extra)
    d: DaemonProcess = daemon_factory(config=config)
    return d.start()


async def test_locked_database_pushes_nothing_until_stored_and_keeps_every_seq(
    daemon_factory: Any, project: Path
) -> None:
    d = _start(daemon_factory, delay=0.01, fail_after=600)
    lock = _HeldLock(d)
    rounds = await _fault_round(d, project, lock.hold, lock.release, "echo " + "x" * 300)
    await _assert_stored_as_seen(d, rounds, "the store failed")


async def test_writes_failing_past_fail_after_s_interrupt_the_turn(
    daemon_factory: Any, project: Path
) -> None:
    d = _start(daemon_factory, delay=0.05, fail_after=1)
    lock = _HeldLock(d)
    loop = asyncio.get_running_loop()

    def release_later() -> None:
        # Past the busy timeout (5 s) and fail_after_s (1 s): the turn is interrupted.
        loop.call_later(3.0, lock.release)

    _, _, after, _ = await _fault_round(
        d,
        project,
        lock.hold,
        release_later,
        "echo " + "y" * 1000,  # 1000 blocks, 25 s at this pace
    )
    end = [f for f in after if f["t"] == "event" and f["block"]["type"] == "session_end"]
    assert end[0]["block"]["reason"] == "interrupted"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root (CI is root)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def test_full_disk_pushes_nothing_until_stored(
    daemon_factory: Any, project: Path, small_disk: Path
) -> None:
    db = small_disk / "bridge.sqlite3"
    d = _start(daemon_factory, delay=0.002, fail_after=600, extra=f'path = "{db}"\n')
    filler = small_disk / "filler"

    def fill() -> None:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)

    rounds = await _fault_round(d, project, fill, filler.unlink, "echo " + "z" * 400)
    await _assert_stored_as_seen(d, rounds, "the disk was full")
