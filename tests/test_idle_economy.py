"""An idle daemon sleeps: no thread of it wakes while nothing happens (counted from /proc, not
timed), and the inotify watches it sleeps on still see every change."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from bench.wakeups import thread_switches
from bridge.util.dirwatch import DirWatch, nearest_existing
from tests.daemon import DaemonProcess
from tests.wsclient import Client


def _switches(pid: int) -> int:
    return sum(thread_switches(pid).values())


async def test_an_idle_daemon_with_an_adapters_dir_does_not_wake(
    daemon_factory,  # type: ignore[no-untyped-def]
) -> None:
    d: DaemonProcess = daemon_factory()
    d.start()
    assert d.proc is not None
    # a client comes and goes (the token watch, the sweep, the store all had work)
    c = await Client.open(d.url, d.token)
    await c.request("agents.list")
    await c.close()
    await asyncio.sleep(2.0)  # let the loader and the closing connection settle
    before = _switches(d.proc.pid)
    await asyncio.sleep(4.0)
    woke = _switches(d.proc.pid) - before
    # Before: about 23 wakeups a second (a 50 ms watch thread, a 1 s token poll, a 1 s
    # checkpoint thread, a 3 s sweep). A stray one or two is tolerated.
    assert woke <= 3, thread_switches(d.proc.pid)

    # The adapters directory is still watched: a file dropped in is loaded.
    (d.config_dir / "adapters" / "late.py").write_text(LATE)
    os.chmod(d.config_dir / "adapters" / "late.py", 0o600)
    c = await Client.open(d.url, d.token)
    try:
        deadline = time.monotonic() + 30
        while True:
            agents = {a["agent"] for a in (await c.request("agents.list"))["agents"]}
            if "late" in agents:
                break
            assert time.monotonic() < deadline, agents
            await asyncio.sleep(0.1)
    finally:
        await c.close()


LATE = """
from bridge.adapters.base import BaseAdapter


class Late(BaseAdapter):
    agent_id = "late"
    display_name = "Late"
    provides_models = False
    provides_usage = False

    async def start(self, session_id):
        return self.make_agent_info()

    async def send(self, text, attachments=None):
        pass

    async def stream(self):
        if False:
            yield None

    async def stop(self):
        pass
"""


async def test_dirwatch_sees_changes_times_out_and_notices_its_directory_going(
    tmp_path: Path,
) -> None:
    where = tmp_path / "watched"
    where.mkdir()
    with DirWatch(where) as watch:
        assert await watch.changed(0.05) is False
        (where / "a.txt").write_text("x")
        assert await asyncio.wait_for(watch.changed(), 5) is True
        with (where / "a.txt").open("a") as fh:
            fh.write("more")
        assert await asyncio.wait_for(watch.changed(), 5) is True
        (where / "a.txt").unlink()
        where.rmdir()
        await asyncio.wait_for(watch.changed(), 5)
        assert watch.gone
    assert nearest_existing(where / "deeper" / "still") == tmp_path


async def test_an_adapters_dir_removed_then_made_again_is_watched_again(
    daemon_factory,  # type: ignore[no-untyped-def]
) -> None:
    d: DaemonProcess = daemon_factory()
    d.start()
    adapters = d.config_dir / "adapters"
    assert adapters.is_dir()  # the daemon makes it
    adapters.rmdir()
    await asyncio.sleep(0.5)  # the loader moves its watch to the parent
    adapters.mkdir(mode=0o700)
    (adapters / "late.py").write_text(LATE)
    os.chmod(adapters / "late.py", 0o600)
    c = await Client.open(d.url, d.token)
    try:
        deadline = time.monotonic() + 30
        while "late" not in {a["agent"] for a in (await c.request("agents.list"))["agents"]}:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    finally:
        await c.close()
