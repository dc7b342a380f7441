"""The store's files are the owner's alone: 0600 files, a 0700 state directory."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.wsclient import Client


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def _use(d: DaemonProcess, project: Path) -> None:
    c = await Client.open(d.url, d.token)
    await c.request("session.create", agent="demo", cwd=str(project))
    await c.close()


@pytest.mark.parametrize("custom_path", [False, True])
async def test_store_files_are_0600_and_the_state_dir_0700(
    daemon_factory: Any, project: Path, tmp_path: Path, custom_path: bool
) -> None:
    home = tmp_path / "home"
    state = home / "state" / "agent-bridge"
    state.mkdir(parents=True)
    state.chmod(0o755)  # left by an older version, or made by hand
    config = '[server]\nunix_socket = "off"\n'
    db = state / "bridge.sqlite3"
    if custom_path:
        shared = tmp_path / "shared-home"
        shared.mkdir()
        shared.chmod(0o755)
        db = shared / "bridge.sqlite3"
        config += f'[store]\npath = "{db}"\n'
    d: DaemonProcess = daemon_factory(home=home, config=config).start()
    await _use(d, project)
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert all(f.exists() for f in files)
    assert {str(f): oct(_mode(f)) for f in files} == {str(f): "0o600" for f in files}
    assert _mode(state) == 0o700
    d.stop()
    # Files an older version left readable are tightened at the next start.
    for f in files:
        if f.exists():
            f.chmod(0o644)
    d.start()
    await _use(d, project)
    assert all(_mode(f) == 0o600 for f in files if f.exists())
