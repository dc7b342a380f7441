"""The daemon is ready before its drop-in adapters are: they load in the background.

Each drop-in file is import-checked in a subprocess before the daemon imports it, which takes
seconds for many files, so readiness cannot wait for them (docs/benchmarks.md, T6). What a
client sees in the meantime: the files are listed as loading, and a request or a recovered
session that names one of them waits for it instead of failing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.loaderkit import adapter_source, drop_in, new_session, say
from tests.wsclient import Client, RequestFailed, text_of

#: Sleeps at import, in the probe and again in the daemon: loading it takes seconds.
SLOW = "import time\ntime.sleep(%s)\n" + adapter_source("slow_one", "slow", cls="Slow")

DELAY_S = 2.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "home")
    folder = d.config_dir / "adapters"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "slow.py").write_text(SLOW % DELAY_S)
    yield d
    d.stop()


async def test_ready_before_a_slow_file_and_a_create_waits_for_it(
    daemon: DaemonProcess, project: Path
) -> None:
    t0 = time.monotonic()
    daemon.start(wait_adapters=False)
    # Ready while the file still loads (its import sleeps twice: probe, daemon). Asked of the
    # daemon, not measured: a slow start on a busy machine is no failure.
    assert daemon.healthz()["adapters"] == "loading"
    c = await Client.open(daemon.url, daemon.token)
    try:
        # Listed from the first request on, as on its way, with the reason a client can show:
        # the daemon looks at its drop-in folder before it listens (a listing that came
        # before the background load's first step once missed it).
        listed = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        assert listed["slow_one"]["available"] is False
        assert "(loading)" in listed["slow_one"]["display_name"]
        assert "still loading" in listed["slow_one"]["error"]
        session = await new_session(c, "slow_one", project)
        assert time.monotonic() - t0 >= 2 * DELAY_S  # it waited for the load, then worked
        assert "slow: hi" in text_of(await say(c, session, "hi"))
        listed = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        assert listed["slow_one"]["display_name"] == "Slow agent"
        assert daemon.healthz()["adapters"] == "ready"
    finally:
        await c.close()


async def test_a_session_of_a_drop_in_agent_runs_right_after_a_restart(
    daemon: DaemonProcess, project: Path
) -> None:
    daemon.start()
    c = await Client.open(daemon.url, daemon.token)
    result = await c.request("session.create", agent="slow_one", cwd=str(project))
    session = result["session"]["session"]
    await c.close()
    daemon.stop()

    daemon.start(wait_adapters=False)
    c = await Client.open(daemon.url, daemon.token)
    try:
        # Sent while the file is still loading: it runs once it loaded, not "not loaded".
        await c.request("session.subscribe", session=session)
        blocks = await say(c, session, "again")
        assert "slow: again" in text_of(blocks), blocks
    finally:
        await c.close()


async def test_an_unknown_agent_asked_for_during_the_load_is_refused_once_it_ends(
    daemon: DaemonProcess, project: Path
) -> None:
    t0 = time.monotonic()
    daemon.start(wait_adapters=False)
    c = await Client.open(daemon.url, daemon.token)
    try:
        # A built-in agent never waits for the load: answered while it still runs.
        await c.request("models.list", agent="demo")
        assert daemon.healthz()["adapters"] == "loading"
        # A drop-in file could still bring `nobody`: the answer waits for the load.
        with pytest.raises(RequestFailed, match="no agent `nobody`"):
            await c.request("session.create", agent="nobody", cwd=str(project))
        assert time.monotonic() - t0 >= 2 * DELAY_S
    finally:
        await c.close()


async def test_a_file_dropped_in_during_the_first_load_is_picked_up(
    daemon: DaemonProcess, project: Path
) -> None:
    """The folder is read before the daemon listens and the watch begins after the (slow)
    first load: a file written in between must not wait for some later change."""
    daemon.start(wait_adapters=False)
    drop_in(daemon.home, "late.py", adapter_source("late_one", "late", cls="Late"))
    assert daemon.healthz()["adapters"] == "loading"  # written during the first load
    c = await Client.open(daemon.url, daemon.token)
    try:
        daemon.wait_adapters(60)
        for _ in range(300):
            listed = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
            if listed.get("late_one", {}).get("available"):
                break
            await asyncio.sleep(0.1)
        assert listed.get("late_one", {}).get("available"), sorted(listed)
        session = await new_session(c, "late_one", project)
        assert "late: hi" in text_of(await say(c, session, "hi"))
    finally:
        await c.close()


def test_loading_timeout_is_bounded() -> None:
    """A lookup gives up after its timeout when the load never ends."""
    from bridge.config import Config
    from bridge.loading.registry import Registry

    async def go() -> None:
        registry = Registry(Config())
        registry.begin_loading()
        t0 = time.monotonic()
        assert await registry.lookup("later", 0.2) is None
        assert 0.15 < time.monotonic() - t0 < 5
        registry.end_loading()
        assert await registry.lookup("later", 10) is None
        registry.cancel_detection()

    asyncio.run(go())
