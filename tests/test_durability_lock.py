"""One daemon per state directory: a real second ``serve`` exits 1 and touches nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, unix_hello
from tests.wsclient import Client


def _snapshot(d: DaemonProcess) -> dict[str, Any]:
    run = d.home / "run" / "agent-bridge"
    files = {}
    for path in sorted([*d.state_dir.iterdir(), *run.iterdir()]):
        if path.name == "daemon.lock":
            continue
        st = path.lstat()
        files[str(path)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return files


async def _settled_snapshot(d: DaemonProcess, quiet_s: float = 1.5) -> dict[str, Any]:
    """The files once the daemon has stopped writing: its store checkpoints the WAL into the
    database up to a second after the last write (later on a loaded machine)."""
    snapshot = _snapshot(d)
    for _ in range(40):
        await asyncio.sleep(quiet_s)
        again = _snapshot(d)
        if again == snapshot:
            return snapshot
        snapshot = again
    raise AssertionError("the daemon kept writing its files while idle")


async def test_second_serve_on_the_same_state_dir_exits_1_and_touches_nothing(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory().start()
    c = await Client.open(d.url, d.token)
    created = await c.request("session.create", agent="demo", cwd=str(project))
    await c.close()
    before = await _settled_snapshot(d)
    info = json.loads((d.state_dir / "daemon.json").read_text())
    assert d.proc is not None and info["pid"] == d.proc.pid

    second = run_bridge("serve", "--port", "0", env=d.env, timeout=30)
    assert second.returncode == 1, (second.returncode, second.stdout, second.stderr)
    assert "listening" not in second.stdout
    assert "already running" in second.stderr
    assert str(d.proc.pid) in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr

    # Nothing of the first daemon's was touched: socket, runtime file, database.
    assert _snapshot(d) == before
    assert json.loads((d.state_dir / "daemon.json").read_text()) == info
    c = await Client.open(d.url, d.token)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    assert [s["session"] for s in listed] == [created["session"]["session"]]
    await c.close()
    await unix_hello(d)


async def test_the_lock_is_released_when_the_holder_is_killed(daemon_factory: Any) -> None:
    d: DaemonProcess = daemon_factory().start()
    d.kill9()
    d.start()  # a kill -9 leaves the lock file behind, not the lock
    assert d.healthz()["ok"] is True
