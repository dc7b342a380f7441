"""Every task has an owner whose lifetime bounds it (bridge/process.py ``TaskOwner``, anyio task
groups): once the hub has shut down, the relay link has closed or the daemon has stopped, not one
task it started is left, not even one still finishing its cancellation; a connection that
vanishes mid-turn takes its own tasks with it at once. (A task garbage-collected while pending
fails any test: tests/conftest.py.)"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from bridge.config import RelayConfig, load_config
from bridge.daemon import Daemon, ServeOptions
from bridge.process import TaskOwner
from bridge.relay import account
from bridge.relay.clients import ClientRegistry
from bridge.relay.link import RelayLink
from bridge.relay.sealing import b64
from bridge.util import logthrottle, redact
from tests.hubkit import Sub, make_hub, project_dir, subscribed_session, until
from tests.relaykit import Relay, RelayClient, echo, until_connected

BRIDGE = str(Path(__file__).resolve().parent.parent / "bridge")


def _in_bridge(task: asyncio.Task[object]) -> bool:
    return any(f.f_code.co_filename.startswith(BRIDGE) for f in task.get_stack())


def left_over(before: set[asyncio.Task[object]], *, only_bridge: bool = True) -> list[str]:
    """The tasks started since ``before`` that have not ended (by default, those running the
    bridge's code), with their names and where they wait."""
    current = asyncio.current_task()
    return sorted(
        f"{t.get_name()}: {t.get_coro()!r}"
        for t in asyncio.all_tasks()
        if t not in before and t is not current and not t.done()
        if not only_bridge or _in_bridge(t)
    )


async def nothing_left(before: set[asyncio.Task[object]]) -> None:
    """Nothing of the bridge's left now; after a moment, nothing at all (a library's own task
    included), and no task was destroyed pending (tests/conftest.py fails the test if so)."""
    assert left_over(before) == []
    await asyncio.sleep(0.2)
    gc.collect()
    assert left_over(before, only_bridge=False) == []


async def test_the_hub_leaves_no_task_once_shut_down(tmp_path: Path) -> None:
    before = asyncio.all_tasks()
    hub, _ = await make_hub()
    sid, sub = await subscribed_session(hub, tmp_path, "demo")
    await hub.send(sid, "echo one", [], None)
    await until(lambda: len(sub.blocks("session_end")) == 1, what="the first turn")
    late = Sub()  # a replay, then live
    _, begin = await hub.subscribe(sid, late, 0)
    begin()
    await hub.send(sid, "slow two", [], None)  # running when the hub shuts down
    await hub.send(sid, "echo three", [], None)  # queued behind it
    await until(lambda: hub.get(sid).rec.state == "running", what="the slow turn")
    await hub.shutdown()
    await nothing_left(before)


@pytest.fixture
def daemon_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The environment of a daemon run in this process (as tests/daemon.py sets it for one in
    its own); its loop errors reach the asyncio logger, as the suite's check expects."""
    home = tmp_path / "home"
    for var, sub in (
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_RUNTIME_DIR", "run"),
        ("XDG_DATA_HOME", "data"),
    ):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENT_BRIDGE_ADAPTERS_RETRY_MAX", "0")
    monkeypatch.setattr(logthrottle, "install", lambda loop: None)
    # what the daemon sets for its whole process is this process's: put back afterwards
    monkeypatch.setattr(redact, "_known", set(redact._known))
    monkeypatch.setattr(redact, "_fragments", set(redact._fragments))
    switch = sys.getswitchinterval()
    yield home
    sys.setswitchinterval(switch)


async def test_a_daemon_and_a_connection_dropped_mid_turn_leave_no_task(
    daemon_home: Path, tmp_path: Path
) -> None:
    before = asyncio.all_tasks()
    daemon = Daemon(load_config(), ServeOptions(host="127.0.0.1", port=0))
    running = asyncio.create_task(daemon.run())
    await until(lambda: daemon.server.tcp_address is not None or running.done(), 30, "listening")
    assert daemon.server.tcp_address is not None
    token = daemon.server.token
    idle = set(asyncio.all_tasks())

    ws = await connect(daemon.server.url, subprotocols=["bridge.v1.json"])  # type: ignore[list-item]

    async def ask(rid: int, method: str, **fields: object) -> dict[str, object]:
        await ws.send(json.dumps({"t": method, "id": rid, **fields}))
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("id") == rid:
                assert frame["t"] == "ok", frame
                return frame["result"]  # type: ignore[no-any-return]

    await ask(1, "hello", protocol=1, token=token, client={"name": "tests", "version": "0"})
    created = await ask(2, "session.create", agent="demo", cwd=project_dir(tmp_path))
    session = created["session"]["session"]  # type: ignore[index]
    await ask(3, "session.subscribe", session=session)
    await ask(4, "session.send", session=session, text="slow a long tour")
    while json.loads(await ws.recv()).get("t") != "event":
        pass
    # the client vanishes mid-turn: no close frame, the socket just goes
    ws.transport.abort()
    await until(lambda: not daemon.server.connections, 10, "the connection dropped")
    # the connection's own tasks (its sender, its close) ended with it; the turn runs on
    assert [t for t in left_over(idle) if "Connection" in t] == []
    assert daemon.hub.get(session).rec.state == "running"

    daemon.request_stop()
    await asyncio.wait_for(running, 60)
    await nothing_left(before)


async def test_a_relay_link_cut_then_closed_leaves_no_task(relay: Relay, tmp_path: Path) -> None:
    before = asyncio.all_tasks()
    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    lk = RelayLink(settings, ClientRegistry(tmp_path / "relay"), echo, max_frame=1 << 20)
    lk.start()
    await until_connected(lk, tries=200)
    nc = await relay.connect("ws-a")
    client = RelayClient(nc, "ws-a", lk.keys.public)
    assert (await client.pair(b64(lk.registry.new_pairing_secret())))["ok"]
    vc = await client.open()
    assert (await vc.request("ping", n=1))["n"] == 1
    relay.kill9()  # the link is cut under an open virtual connection
    await until(lambda: lk.status != "connected", 20, "the link noticing the cut")
    await lk.close()
    assert left_over(before) == []
    await nc.close()
    await nothing_left(before)


async def test_an_owner_cancelled_while_closing_still_reaps_its_tasks() -> None:
    owner = TaskOwner("test")
    cleaned = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # its clean-up takes a moment
            cleaned.set()
            raise

    task = owner.spawn(slow_to_stop())
    await asyncio.sleep(0)
    closing = asyncio.create_task(owner.close())
    await asyncio.sleep(0.05)
    closing.cancel()  # the owner's own shutdown is cancelled halfway
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert task.done() and cleaned.is_set()
